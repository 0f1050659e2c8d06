"""Bad arguments raise ValueError/TypeError naming the argument and what is accepted,
before anything starts; a parameter without gradient is named, not a hang."""

import pytest
import torch
from torch import nn
import torch.nn.functional as F

import models
import weft


def sgd(net):
    return torch.optim.SGD(net.parameters(), lr=0.1)


def test_unknown_strategy():
    net = models.make_net()
    with pytest.raises(ValueError, match=r"strategy='fast'.*accepted: auto, ssgd, wfbp"):
        weft.DataParallel(net, sgd(net), strategy="fast")


@pytest.mark.parametrize("value", [0, -1])
def test_H_below_one(value):
    net = models.make_net()
    with pytest.raises(ValueError, match=rf"^H={value}: expected an integer in \[1, "):
        weft.DataParallel(net, sgd(net), strategy="flsgd", H=value)


@pytest.mark.parametrize("value", [1.5, True, "5"])
def test_H_not_an_integer(value):
    net = models.make_net()
    with pytest.raises(TypeError, match=r"^H=.*: expected an integer"):
        weft.DataParallel(net, sgd(net), strategy="flsgd", H=value)


@pytest.mark.parametrize("options, message", [
    (dict(failure_timeout=0), r"^failure_timeout=0: expected a duration in \(0, "),
    (dict(failure_timeout=float("inf")), r"^failure_timeout=inf: expected"),
    (dict(steps=0), r"^steps=0: expected an integer in \[1, "),
    (dict(partition=16), r"^partition=16B: expected a size in \[1KiB, "),
    (dict(bandwidth="1e-300Gbit"), r"^bandwidth=1e-300Gbit: expected a rate in"),
    (dict(outer_lr=1e308), r"^outer_lr=1e\+308: expected"),
])
def test_values_are_checked_by_the_command_lines_ranges(options, message):
    """The same check and the same words as weft train's flags, named as keywords (units/ranges.h)."""
    net = models.make_net()
    with pytest.raises(ValueError, match=message):
        weft.DataParallel(net, sgd(net), strategy="flsgd", **options)


def test_module_without_parameters():
    with pytest.raises(ValueError, match=r"module: ReLU has no parameters"):
        weft.DataParallel(nn.ReLU(), torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1))


def test_optimizer_over_other_parameters():
    net = models.make_net()
    with pytest.raises(ValueError, match=r"optimizer: 6 of its parameters are not parameters of the module"):
        weft.DataParallel(net, sgd(models.make_net()))


def test_unknown_option_names_the_accepted_ones():
    net = models.make_net()
    with pytest.raises(TypeError, match=r"unknown option bandwith; accepted: .*bandwidth"):
        weft.DataParallel(net, sgd(net), bandwith="1Gbit")


def test_bad_option_value_names_it():
    net = models.make_net()
    with pytest.raises(ValueError, match=r"^bandwidth: .*'fast' is not understood"):
        weft.DataParallel(net, sgd(net), bandwidth="fast")


def test_bad_compression_names_the_accepted_encodings():
    net = models.make_net()
    with pytest.raises(ValueError, match=r"^compression=zip: .*none, fp16, bf16, int8, powersgd:R"):
        weft.DataParallel(net, sgd(net), compression="zip")
    for low_rank in ("powersgd:2", "acpsgd:2"):
        with pytest.raises(ValueError, match=rf"^compression={low_rank}: .*accepted with ps: none, fp16, bf16, int8"):
            weft.DataParallel(net, sgd(net), strategy="ps", compression=low_rank, servers=1)


def test_outer_optimizer_only_for_local_sgd_and_checked():
    net = models.make_net()
    with pytest.raises(ValueError,
                       match=r"^outer_optimizer=nesterov: .*\(flsgd, .*ps-interleaved\); strategy=wfbp has none"):
        weft.DataParallel(net, sgd(net), strategy="wfbp", outer_optimizer="nesterov")
    with pytest.raises(ValueError, match=r"^outer_optimizer=adam"):
        weft.DataParallel(net, sgd(net), strategy="flsgd", outer_optimizer="adam")
    with pytest.raises(ValueError, match=r"^outer_momentum=1.5: expected"):
        weft.DataParallel(net, sgd(net), strategy="flsgd", outer_optimizer="nesterov", outer_momentum=1.5)


def test_outer_defaults_are_measured_for_the_optimizer_and_a_riskier_setting_is_warned_about():
    # Note [Outer defaults, measured] (src/runtime/model/outer_options.h)
    net = models.make_net()
    adamw = weft.DataParallel(net, torch.optim.AdamW(net.parameters()), strategy="flsgd", H=4,
                              outer_optimizer="nesterov")
    identity = adamw._job_options.identity(4)
    assert '"outer_momentum":0.5' in identity and '"outer_lr":0.7' in identity, identity
    assert adamw._job_options.outer_warning is None
    net = models.make_net()
    risky = weft.DataParallel(net, torch.optim.AdamW(net.parameters()), strategy="flsgd", H=4,
                              outer_optimizer="nesterov", outer_momentum=0.9)
    assert "carries each averaged change 7x" in risky._job_options.outer_warning
    assert "outer_momentum=0.5" in risky._job_options.outer_warning
    net = models.make_net()
    plain = weft.DataParallel(net, sgd(net), strategy="flsgd", H=4, outer_optimizer="nesterov")
    assert '"outer_momentum":0.9' in plain._job_options.identity(4)


def test_not_a_module_or_optimizer():
    net = models.make_net()
    with pytest.raises(TypeError, match=r"module: expected a torch.nn.Module"):
        weft.DataParallel(lambda x: x, sgd(net))
    with pytest.raises(TypeError, match=r"optimizer: expected a torch.optim.Optimizer"):
        weft.DataParallel(net, None)


def test_ps_without_servers():
    net = models.make_net()
    with pytest.raises(ValueError, match=r"^strategy=ps: a parameter-server strategy needs parameter servers: servers=S >= 1"):
        weft.DataParallel(net, sgd(net), strategy="ps")


class Unused(nn.Module):
    def __init__(self):
        super().__init__()
        self.used = nn.Linear(4, 2)
        self.spare = nn.Linear(4, 2)

    def forward(self, x):
        return self.used(x)


def test_parameter_without_gradient_is_named():
    torch.manual_seed(0)
    net = Unused()
    opt = sgd(net)
    model = weft.DataParallel(net, opt, verbose=False)
    with pytest.raises(RuntimeError, match=r"spare.weight, spare.bias.*find_unused_parameters=True"):
        model(torch.randn(3, 4)).sum().backward()


def test_find_unused_parameters_counts_them_as_zero_gradients():
    torch.manual_seed(0)
    net = Unused()
    spare = [p.detach().clone() for p in net.spare.parameters()]
    opt = sgd(net)
    model = weft.DataParallel(net, opt, find_unused_parameters=True, verbose=False)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(3, 4)).sum().backward()
        opt.step()
    model.finish()
    assert all(torch.equal(a, b) for a, b in zip(spare, net.spare.parameters()))


@pytest.mark.parametrize("options, error, message", [
    (dict(sites="3x3"), ValueError, r"^sites=3x3: 3 sites of 3 ranks make 9 ranks, but the job has 1"),
    (dict(sites="2by2"), ValueError, r"^sites=2by2: expected AxB"),
    (dict(topology="/no/such/topology.json"), ValueError, r"^topology=/no/such/topology.json: cannot read"),
    (dict(wan_bandwidth="1Mbit"), ValueError, r"^wan_bandwidth: only with"),
    (dict(hierarchical=True), ValueError, r"^hierarchical=True: needs sites: give sites=AxB or topology=FILE"),
    (dict(strategy="flsgd", site_every=2), ValueError, r"^site_every=2: needs sites"),
    (dict(strategy="ps", servers=1, steps=2, sites="1x1"), ValueError, r"^sites: sites group the workers"),
    (dict(hierarchical="yes"), TypeError, r"^hierarchical='yes': expected True or False"),
    (dict(sites=4), TypeError, r"^sites=4: expected a string"),
    (dict(site_every=1.5), TypeError, r"^site_every=1.5: expected an integer"),
])
def test_sites_keywords(options, error, message):
    net = models.make_net()
    with pytest.raises(error, match=message):
        weft.DataParallel(net, sgd(net), **options)


def test_one_site_trains_as_the_flat_job():
    net = models.make_net()
    model = weft.DataParallel(net, sgd(net), sites="1x1", strategy="auto", verbose=False)
    model(torch.randn(4, 1, 8, 8)).sum().backward()
    model.finish()
    assert weft.strategies()[model.strategy] == "ssgd"


@pytest.mark.parametrize("value, error", [("sometimes", ValueError), (1, TypeError), (None, TypeError)])
def test_broadcast_buffers_is_true_false_or_always(value, error):
    net = models.make_net()
    with pytest.raises(error, match=rf"^broadcast_buffers={value!r}: expected True, False or 'always'"):
        weft.DataParallel(net, sgd(net), broadcast_buffers=value)
