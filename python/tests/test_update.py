"""The update modes (docs/python.md, "Update modes"), in one process: every habit of a
user's loop gives torch's own numbers (DDP over one worker is the plain loop), or
the overlapped update refuses it at its first occurrence, naming it. The same
habits on two processes against DDP: test_parity.py."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import models
import weft

STEPS = 12


def sgd(net):
    return torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)


def adamw(net):
    return torch.optim.AdamW(net.parameters(), lr=1e-2, weight_decay=0.05)


def loop(model, opt, x, y, t, habit):
    """One iteration of a user's loop with `habit`."""
    opt.zero_grad()
    if habit == "accumulate":
        for k in range(2):
            F.cross_entropy(model(x[t][k::2]), y[t][k::2]).div(2).backward()
    else:
        F.cross_entropy(model(x[t]), y[t]).backward()
    if habit == "clip":
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    opt.step()


def train(habit, update, make=sgd, steps=STEPS):
    """(parameters, optimizer state_dict) after `steps` of the habit, plain torch when update is None."""
    net = models.make_net()
    opt = make(net)
    model = net if update is None else weft.DataParallel(net, opt, update=update, verbose=False)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=steps) if habit == "onecycle" \
        else None
    x, y = models.data(workers=1, steps=steps)
    for t in range(steps):
        loop(model, opt, x, y, t, habit)
        if scheduler is not None:
            scheduler.step()
    if update is not None:
        model.finish()
    return [p.detach().clone() for p in net.parameters()], opt.state_dict()


@pytest.mark.parametrize("make", [sgd, adamw], ids=["sgd", "adamw"])
@pytest.mark.parametrize("habit", ["plain", "clip", "accumulate", "onecycle"])
@pytest.mark.parametrize("update", ["auto", "ddp"])
def test_every_habit_gives_torch_numbers(habit, update, make):
    expected, expected_state = train(habit, None, make)
    params, state = train(habit, update, make)
    assert models.max_difference(params, expected) < 1e-6
    assert len(state["state"]) == len(expected_state["state"])  # the optimizer's state is the user's
    for k, s in expected_state["state"].items():
        for name, value in s.items():
            assert torch.allclose(torch.as_tensor(state["state"][k][name]), torch.as_tensor(value), atol=1e-6), name


@pytest.mark.parametrize("make", [sgd, adamw], ids=["sgd", "adamw"])
def test_overlap_honours_schedulers_of_every_option(make):
    expected, _ = train("onecycle", None, make)
    params, _ = train("onecycle", "overlap", make)
    assert models.max_difference(params, expected) < 1e-6


def test_auto_overlaps_a_plain_loop_and_keeps_ddp_for_a_clipping_one(capfd):
    net = models.make_net()
    opt = sgd(net)
    model = weft.DataParallel(net, opt)
    x, y = models.data(workers=1, steps=2)
    for t in range(2):
        loop(model, opt, x, y, t, "plain")
    assert "update: overlapped from the second iteration" in capfd.readouterr().err
    model.finish()
    net = models.make_net()
    opt = sgd(net)
    model = weft.DataParallel(net, opt)
    for t in range(2):
        loop(model, opt, x, y, t, "clip")
    assert "update: DDP semantics" in capfd.readouterr().err
    model.finish()


def overlapped(make=sgd):
    net = models.make_net()
    opt = make(net)
    return net, opt, weft.DataParallel(net, opt, update="overlap", verbose=False)


def backward(model, t=0):
    x, y = models.data(workers=1, steps=t + 1)
    F.cross_entropy(model(x[t]), y[t]).backward()


REFUSED = {
    "clip": (lambda net, opt, model: (backward(model), torch.nn.utils.clip_grad_norm_(net.parameters(), 0.1),
                                      opt.step()),
             r"\.grad was changed between backward\(\) and optimizer.step\(\).*update='ddp'"),
    "clip_value": (lambda net, opt, model: (backward(model), torch.nn.utils.clip_grad_value_(net.parameters(), 0.1),
                                            opt.step()),
                   r"\.grad was changed between backward\(\) and optimizer.step\(\)"),
    "two backwards": (lambda net, opt, model: (backward(model), backward(model)),
                      r"a second backward\(\) before optimizer.step\(\).*no_sync"),
    "step without backward": (lambda net, opt, model: (backward(model), opt.step(), opt.zero_grad(), opt.step()),
                              r"optimizer.step\(\) without a synchronised backward\(\)"),
    "no zero_grad": (lambda net, opt, model: (backward(model), opt.step(), backward(model, 1)),
                     r"no optimizer.zero_grad\(\) or model.zero_grad\(\) since the last step"),
    "manual zero": (lambda net, opt, model: (backward(model), opt.step(),
                                             [p.grad.zero_() for p in net.parameters()], opt.zero_grad(),
                                             backward(model, 1)),
                    r"\.grad was changed or replaced between optimizer.step\(\) and the next backward\(\)"),
    "lr before step": (lambda net, opt, model: (backward(model), opt.param_groups[0].update(lr=0.5), opt.step()),
                       r"an optimizer option changed between backward\(\) and optimizer.step\(\) \(lr 0.05 -> 0.5\)"),
    "closure": (lambda net, opt, model: (backward(model), opt.step(lambda: 0.0)),
                r"optimizer.step\(closure\)"),
    "group added": (lambda net, opt, model: (backward(model), opt.step(), opt.zero_grad(),
                                             opt.add_param_group({"params": [nn.Parameter(torch.zeros(1))]}),
                                             backward(model, 1)),
                    r"a param group was added"),
}


@pytest.mark.parametrize("habit", sorted(REFUSED))
def test_overlap_refuses_what_it_cannot_honour_at_its_first_occurrence(habit):
    act, message = REFUSED[habit]
    net, opt, model = overlapped()
    with pytest.raises(RuntimeError, match=message):
        act(net, opt, model)


def test_no_sync_accumulates_and_communicates_the_sum_once():
    x, y = models.data(workers=1, steps=STEPS)
    results = []
    for update in (None, "overlap", "ddp"):
        net = models.make_net()
        opt = sgd(net)
        model = net if update is None else weft.DataParallel(net, opt, update=update, verbose=False)
        for t in range(STEPS):
            opt.zero_grad()
            for k in range(3):
                if update is None or k == 2:
                    F.cross_entropy(model(x[t][k::3]), y[t][k::3]).backward()
                else:
                    with model.no_sync():
                        F.cross_entropy(model(x[t][k::3]), y[t][k::3]).backward()
            opt.step()
        if update is not None:
            model.finish()
        results.append([p.detach().clone() for p in net.parameters()])
    assert models.max_difference(results[0], results[1]) < 1e-6
    assert models.max_difference(results[0], results[2]) < 1e-6


@pytest.mark.parametrize("make", [sgd, adamw], ids=["sgd", "adamw"])
def test_optimizer_checkpoint_resumes_bit_identically_in_the_overlapped_update(make, tmp_path):
    x, y = models.data(workers=1, steps=STEPS)

    def run(net, opt, first, last, update):
        model = weft.DataParallel(net, opt, update=update, verbose=False)
        for t in range(first, last):
            loop(model, opt, x, y, t, "plain")
        return model

    expected, _ = train("plain", None, make)
    net = models.make_net()
    opt = make(net)
    model = run(net, opt, 0, STEPS // 2, "overlap")
    torch.save({"model": model.module.state_dict(), "opt": opt.state_dict()}, tmp_path / "ckpt.pt")
    assert len(opt.state_dict()["state"]) == len(list(net.parameters()))
    model.finish()
    saved = torch.load(tmp_path / "ckpt.pt")
    net = models.make_net(seed=1)
    net.load_state_dict(saved["model"])
    opt = make(net)
    opt.load_state_dict(saved["opt"])
    model = run(net, opt, STEPS // 2, STEPS, "overlap")
    model.finish()
    assert models.max_difference([p.detach() for p in net.parameters()], expected) == 0


def test_module_state_is_that_of_the_last_step():
    net, opt, model = overlapped()
    backward(model)
    opt.step()
    first = {k: v.clone() for k, v in model.module.state_dict().items()}
    reference = models.make_net()
    ref_opt = sgd(reference)
    backward(reference)
    ref_opt.step()
    assert models.max_difference(list(first.values())[:2], [p.detach() for p in reference.parameters()][:2]) < 1e-6
    model.finish()


def test_misuse_is_named(tmp_path):
    net = models.make_net()
    opt = sgd(net)
    model = weft.DataParallel(net, opt, verbose=False)
    with pytest.raises(ValueError, match=r"module: it is a weft.DataParallel already"):
        weft.DataParallel(model, opt)
    with pytest.raises(ValueError, match=r"optimizer: another weft.DataParallel already steps it"):
        weft.DataParallel(models.make_net(), opt)
    with pytest.raises(ValueError, match=r"already wrapped by a weft.DataParallel"):
        weft.DataParallel(net, sgd(net))
    with pytest.raises(ValueError, match=r"update='sometimes': expected one of auto, ddp, overlap"):
        weft.DataParallel(models.make_net(), sgd(net), update="sometimes")
    with pytest.raises(ValueError, match=r"update='overlap' steps each layer.*RMSprop"):
        other = models.make_net()
        weft.DataParallel(other, torch.optim.RMSprop(other.parameters()), strategy="flsgd", update="overlap")
    with pytest.raises(ValueError, match=r"update='overlap' steps each layer.*RMSprop"):
        other = models.make_net()
        weft.DataParallel(other, torch.optim.RMSprop(other.parameters()), update="overlap")
    model.finish()
    weft.DataParallel(net, opt, verbose=False).finish()  # finished: it may be wrapped again


@pytest.mark.parametrize("strategy", ["wfbp", "flsgd"])
def test_any_optimizer_steps_with_ddp_semantics(strategy):
    x, y = models.data(workers=1, steps=STEPS)
    results = []
    for wrap in (False, True):
        net = models.make_net()
        opt = torch.optim.RMSprop(net.parameters(), lr=1e-3)
        model = weft.DataParallel(net, opt, strategy=strategy, verbose=False) if wrap else net
        for t in range(STEPS):
            loop(model, opt, x, y, t, "clip")
        if wrap:
            model.finish()
        results.append([p.detach().clone() for p in net.parameters()])
    assert models.max_difference(*results) < 1e-6
