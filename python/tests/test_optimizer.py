"""The optimizer mirrored in C++ per layer takes torch's own steps (docs/python.md,
"Optimizer"): SGD with momentum, dampening, Nesterov and weight decay, Adam and
AdamW, over param groups and with an lr scheduler, within 1e-6 over 100 steps."""

import copy

import pytest
import torch
import torch.nn.functional as F

import models
import weft

STEPS = 100


def groups(net):
    """Two param groups: the conv with its own lr and weight decay, the rest."""
    conv = list(net.conv.parameters())
    rest = [p for n, p in net.named_parameters() if not n.startswith("conv.")]
    return conv, rest


OPTIMIZERS = {
    "sgd-momentum-weight-decay": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, dampening=0.1,
                                                           weight_decay=1e-3),
    "sgd-nesterov": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4),
    "adam": lambda ps: torch.optim.Adam(ps, lr=1e-3, betas=(0.8, 0.99), eps=1e-7, weight_decay=1e-3),
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-3, weight_decay=0.05),
}


def run(net, opt, scheduler, wrap):
    model = weft.DataParallel(net, opt, strategy="wfbp", verbose=False) if wrap else net
    x, y = models.data(workers=1, steps=STEPS)
    for t in range(STEPS):
        opt.zero_grad()
        F.cross_entropy(model(x[t]), y[t]).backward()
        opt.step()
        scheduler.step()
    if wrap:
        model.finish()
    return [p.detach().clone() for p in net.parameters()]


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_mirrored_optimizer_equals_torch_step(name):
    results = []
    for wrap in (False, True):
        net = models.make_net()
        conv, rest = groups(net)
        make = OPTIMIZERS[name]
        opt = make([{"params": conv, "lr": make(conv).defaults["lr"] * 2, "weight_decay": 0.0},
                    {"params": rest}])
        scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=30, gamma=0.5)
        results.append(run(net, opt, scheduler, wrap))
    assert models.max_difference(*results) < 1e-6


def test_another_optimizer_steps_whole_after_the_messages():
    results = []
    for wrap in (False, True):
        net = models.make_net()
        opt = torch.optim.RMSprop(net.parameters(), lr=1e-3)
        scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=30, gamma=0.5)
        results.append(run(net, opt, scheduler, wrap))
    assert models.max_difference(*results) < 1e-6
