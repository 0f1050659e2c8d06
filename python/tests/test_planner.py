"""weft.profile writes the profile JSON of `weft profile`; weft.plan returns `weft plan --json`;
strategy="auto" runs the planner's recommendation and says so."""

import json

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


def test_auto_runs_the_recommended_strategy(capsys):
    net = models.make_net()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    model = weft.DataParallel(net, opt, strategy="auto", bandwidth="100Mbit")
    model(torch.randn(4, 1, 8, 8)).sum().backward()
    opt.step()
    model.finish()
    assert weft.strategies()[model.strategy] == "ssgd"
    assert f"strategy=auto chose {model.strategy}" in capsys.readouterr().err


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
    of 2, 4, 8, 16 and says it; over momentum SGD it keeps the plain average; the state records both."""
    results = run_job("one_job_worker.py", [tmp_path, 2, "strategy=auto", "allow=local_sgd", "bandwidth=1Mbit",
                                            "verbose=1"], nproc=2, timeout=300)
    check(results)
    said = [line for line in results[0][1].splitlines() if "strategy=auto chose" in line]
    assert len(said) == 1, results[0][1]
    job = json.loads(torch.load(tmp_path / "state.rank0.pt")["weft.job"])
    assert weft.strategies()[job["strategy"]] == "local_sgd", job
    assert job["H"] in (2, 4, 8, 16) and f"with H={job['H']} (the shortest period" in said[0], (job, said[0])
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
