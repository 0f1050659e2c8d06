"""weft.profile writes the profile JSON of `weft profile`; weft.plan returns `weft plan --json`;
strategy="auto" runs the planner's recommendation and says so."""

import json
import os
import time

import pytest
import torch
import torch.nn.functional as F

import models
import weft
from jobs import check, run_job


def test_profile_and_plan(tmp_path):
    net = models.make_net()
    x, y = torch.randn(8, 1, 8, 8), torch.randint(0, 10, (8,))
    text = weft.profile(net, (x, y), F.cross_entropy, out=tmp_path / "p.json")
    profile = json.loads(text)
    assert [l["name"] for l in profile["layers"]] == ["conv", "norm", "fc"]
    assert [l["params"] for l in profile["layers"]] == [40, 512, 2570]
    assert [l["shapes"] for l in profile["layers"]] == [[[4, 1, 3, 3], [4]], [[4, 8, 8], [4, 8, 8]],
                                                        [[10, 256], [10]]]  # PowerSGD is costed from them
    assert all(l["fp_s"] >= 0 and l["bp_s"] >= 0 for l in profile["layers"])
    assert json.loads((tmp_path / "p.json").read_text()) == profile
    plan = weft.plan(tmp_path / "p.json", workers=4, bandwidth="100Mbit")
    assert plan["recommended"] in weft.strategies()
    with pytest.raises(TypeError, match="accepted"):
        weft.plan(text, credits=3)
    shapeless = dict(profile, layers=[{k: v for k, v in l.items() if k != "shapes"} for l in profile["layers"]])
    assert weft.plan(profile, workers=4, strategies=["wfbp"], compression="powersgd:1")["strategies"]
    with pytest.raises(ValueError, match=r"cannot plan wfbp\+powersgd:1: the profile gives no tensor shapes"):
        weft.plan(shapeless, workers=4, strategies=["wfbp"], compression="powersgd:1")


def test_plan_prices_the_update_mode():
    """update="ddp": your step after the backward (Note [The workers' own step]): layer-wise
    averages leave later, S-SGD's next forward overlaps no message; servers step themselves."""
    net = models.make_net()
    text = weft.profile(net, (torch.randn(8, 1, 8, 8), torch.randint(0, 10, (8,))), F.cross_entropy)

    def iteration(strategy, update, **options):
        plan = weft.plan(text, workers=4, bandwidth="10Mbit", strategies=[strategy], update=update, **options)
        return next(s["iteration_s"] for s in plan["strategies"] if s["name"] == strategy)
    assert iteration("dreamddp", "ddp") > iteration("dreamddp", "overlap")
    assert iteration("bytescheduler", "ddp") >= iteration("bytescheduler", "overlap")
    assert iteration("ps", "ddp", arch="ps") == iteration("ps", "overlap", arch="ps")
    with pytest.raises(ValueError, match=r"^update='step': expected one of auto, ddp, overlap"):
        weft.plan(text, update="step")


def test_auto_runs_the_recommended_strategy(capsys):
    net = models.make_net()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    model = weft.DataParallel(net, opt, strategy="auto", bandwidth="100Mbit")
    model(torch.randn(4, 1, 8, 8)).sum().backward()
    opt.step()
    model.finish()
    assert weft.strategies()[model.strategy] == "ssgd"
    assert f"strategy=auto chose {model.strategy}" in capsys.readouterr().err


def test_auto_says_when_it_plans_shared_cores_without_a_host(tmp_path, monkeypatch, capsys):
    """Note [Auto without a host]: more workers on this machine than cores and no host
    description: auto's line says so; with one it does not."""
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(len(os.sched_getaffinity(0)) + 1))
    host = tmp_path / "host.json"
    host.write_text(json.dumps({"format": "weft-host/1", "processes": 4, "cores": 2, "comm_cores": 0.02}))
    for given, hinted in ((None, True), (str(host), False)):
        net = models.make_net()
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        model = weft.DataParallel(net, opt, strategy="auto", bandwidth="100Mbit", host=given)
        model(torch.randn(4, 1, 8, 8)).sum().backward()
        opt.step()
        model.finish()
        said = [line for line in capsys.readouterr().err.splitlines() if "strategy=auto chose" in line]
        assert len(said) == 1 and ("planned without a host description" in said[0]) == hinted, said


@pytest.mark.parametrize("allow, lossy", [("ssgd", False), ("ssgd+lossy", True)])
def test_auto_chooses_a_codec_only_where_lossy_is_allowed(tmp_path, allow, lossy):
    """At 1Mbit the planner finds a codec far faster; auto takes it only when allowed, says so,
    and the job (its identity, its messages) is that codec's."""
    results = run_job("one_job_worker.py", [tmp_path, 2, "strategy=auto", f"allow={allow}", "bandwidth=1Mbit",
                                            "verbose=1"], nproc=2, timeout=300)
    check(results)
    said = [line for line in results[0][1].splitlines() if "strategy=auto chose" in line]
    assert len(said) == 1, results[0][1]
    job = json.loads(torch.load(tmp_path / "state.rank0.pt")["weft.job"])
    assert ("compression" in job) == lossy, job
    if lossy:
        assert f"+ {job['compression']}:" in said[0] and "the fastest exact recipe" in said[0], said[0]
        assert "allow without lossy keeps it exact" in said[0], said[0]


def test_auto_chooses_local_sgds_period_and_keeps_the_plain_average_over_momentum_sgd(tmp_path):
    """Note [How auto chooses H] and Note [Auto's outer optimizer]: no H given, so auto picks one
    of 2, 4, 8 and says it; over momentum SGD it keeps the plain average; the state records both."""
    results = run_job("one_job_worker.py", [tmp_path, 2, "strategy=auto", "allow=local_sgd", "bandwidth=1Mbit",
                                            "verbose=1"], nproc=2, timeout=300)
    check(results)
    said = [line for line in results[0][1].splitlines() if "strategy=auto chose" in line]
    assert len(said) == 1, results[0][1]
    job = json.loads(torch.load(tmp_path / "state.rank0.pt")["weft.job"])
    assert weft.strategies()[job["strategy"]] == "local_sgd", job
    assert job["H"] in (2, 4, 8) and f"with H={job['H']} (the shortest period" in said[0], (job, said[0])
    assert job["outer_optimizer"] == "none", job


def test_auto_applies_a_hierarchical_recipe_over_a_slow_wan(tmp_path):
    """2 sites of 2 over a 20Mbit WAN: auto chooses by sites, every rank trains it (site groups
    and all), and the state records it."""
    results = run_job("one_job_worker.py", [tmp_path, 2, "strategy=auto", "sites=2x2", "wan_bandwidth=20Mbit",
                                            "wan_latency=20ms", "verbose=1"], nproc=4, timeout=300)
    check(results)
    said = [line for line in results[0][1].splitlines() if "strategy=auto chose" in line]
    assert len(said) == 1 and " by sites" in said[0], results[0][1]
    jobs = [json.loads(torch.load(tmp_path / f"state.rank{r}.pt")["weft.job"]) for r in range(4)]
    assert all(j["hierarchical"] is True and j["strategy"] == jobs[0]["strategy"] for j in jobs), jobs
    assert weft.strategies()[jobs[0]["strategy"]] == "ssgd", jobs[0]


class Stalls(torch.nn.Module):
    """A layer that stalls 50 ms in its forward on the calls it is told to, as one preempted would."""

    def __init__(self, stall_on):
        super().__init__()
        self.fc, self.stall_on, self.calls = torch.nn.Linear(4, 4), stall_on, 0

    def forward(self, x):
        self.calls += 1
        if self.calls in self.stall_on:
            time.sleep(0.05)
        return self.fc(x)


class FakeMeeting:
    """A unit test's stand-in for _C.ProfilingTogether: records when it is called."""

    def __init__(self, net, others_busy_for):
        self.net, self.others_busy_for, self.arrived_at = net, others_busy_for, None

    def arrive(self):
        self.arrived_at = self.net[0].calls

    def keep_computing(self):
        self.others_busy_for -= 1
        return self.others_busy_for >= 0


def test_layers_are_timed_beside_the_other_workers_and_add_up_to_the_median_run():
    # Note [Profiled as trained] and Note [Time slices] (src/runtime/measure/layer_profiler.h).
    from weft._layers import measure
    net = torch.nn.Sequential(Stalls({2}), Stalls({3}))  # call 1 is the warm-up; each stalls in one timed run
    meeting = FakeMeeting(net, others_busy_for=2)
    x = torch.randn(2, 4)
    fp, bp = measure(net, [("0", list(net[0].parameters())), ("1", list(net[1].parameters()))], lambda: net(x),
                     lambda out: out.sum(), warmup=1, iterations=3, together=meeting)
    assert meeting.arrived_at == 1  # met after the warm-up, before the first timed run
    assert net[0].calls == net[1].calls == 1 + 3 + 2  # untimed runs while the others computed
    # Each layer's median misses its one stall, but two of the three runs stalled: the
    # layers are scaled up to the median run, as a stall beside other workers is real.
    assert sum(fp) + sum(bp) >= 0.045
