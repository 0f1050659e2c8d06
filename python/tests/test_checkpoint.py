"""weft.DataParallel's state_dict() and load_state_dict() checkpoint a user's own
loop: two real processes stopped after half the iterations and resumed from their
state dicts end bit-identical to two never stopped, the codecs' error feedback,
PowerSGD's factors and the momentum included (docs/checkpoints.md), and trace what
they train after the checkpoint."""

import os

import pytest
import torch
import torch.nn.functional as F

import models
import weft
from jobs import check, free_ports, run_job
from test_trace import events_by_rank

HALF = models.STEPS // 2
SPECS = [("wfbp", "compression=powersgd:1,as=wfbp"), ("flsgd", "H=3,compression=int8,as=flsgd")]


def test_a_resumed_job_ends_bit_identical_to_one_never_stopped(tmp_path):
    def job(name, first, last, wfbp_options=""):
        specs = [f"{s}:{p}:{o}" for (s, o), p in zip(SPECS, free_ports(len(SPECS)))]
        specs[0] += wfbp_options
        check(run_job("resume_worker.py", [tmp_path, name, first, last, *specs], nproc=2, timeout=300))

    job("straight", 0, models.STEPS)
    job("half", 0, HALF)
    trace = tmp_path / "resumed.json"
    job("half", HALF, models.STEPS, f",trace={trace}")
    # The resumed wrapper traces the iterations it trains, from the checkpoint's on.
    for rank, events in events_by_rank(trace).items():
        assert {e[4] for e in events} == set(range(HALF, models.STEPS)), rank
    for tag in ("wfbp", "flsgd"):
        for r in range(2):
            straight = torch.load(tmp_path / f"straight-{tag}.rank{r}.pt")
            resumed = torch.load(tmp_path / f"half-{tag}.rank{r}.pt")
            assert all(torch.equal(a, b) for a, b in zip(straight, resumed)), (tag, r)
        state = torch.load(tmp_path / f"half-{tag}.state.rank0.pt")
        assert state["weft.iteration"].item() == HALF
        assert any(k.startswith("weft.state.codec/") for k in state), sorted(state)  # the codec's state is in it


def trained(strategy="wfbp", steps=2, **options):
    net = models.make_net()
    opt = torch.optim.SGD(net.parameters(), lr=models.LR, momentum=0.9)
    model = weft.DataParallel(net, opt, strategy=strategy, verbose=False, **options)
    x, y = models.data(1)
    for t in range(steps):
        opt.zero_grad()
        F.cross_entropy(model(x[t]), y[t]).backward()
        opt.step()
    return model


def test_a_state_of_another_job_is_refused_naming_what_differs():
    state = trained().state_dict()
    assert state["weft.iteration"].item() == 2
    assert "weft.state.opt/steps" in state
    other = trained("ssgd", steps=0)
    with pytest.raises(ValueError, match=r"another job: its strategy is 'wfbp', this job's is 'ssgd'"):
        other.load_state_dict(state)
    other = trained("flsgd", steps=0, H=2)
    with pytest.raises(ValueError, match=r"another job: its strategy is 'wfbp'"):
        other.load_state_dict(state)


def test_loading_after_training_started_or_a_bad_entry_is_refused():
    model = trained()
    state = model.state_dict()
    with pytest.raises(ValueError, match=r"already trained 2 iterations; load weft's state into a new one"):
        model.load_state_dict(state)
    fresh = trained(steps=0)
    with pytest.raises(TypeError, match=r"weft.iteration is str"):
        fresh.load_state_dict(dict(state, **{"weft.iteration": "2"}))
    with pytest.raises(TypeError, match=r"weft.job is int"):
        fresh.load_state_dict(dict(state, **{"weft.job": 3}))
    # An entry the engine does not keep is named when training starts.
    fresh.load_state_dict(dict(state, **{"weft.state.codec/average-gradients/int8/feedback/0": torch.zeros(3)}))
    x, y = models.data(1)
    with pytest.raises(ValueError, match=r"codec/average-gradients/int8|average-gradients.*int8"):
        fresh(x[0])


def test_a_state_dict_before_training_loads_as_a_fresh_start():
    state = trained(steps=0).state_dict()
    assert state["weft.iteration"].item() == 0
    model = trained(steps=0)
    model.load_state_dict(state)
    x, y = models.data(1)
    F.cross_entropy(model(x[0]), y[0]).backward()
