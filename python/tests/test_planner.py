"""weft.profile writes the profile JSON of `weft profile`; weft.plan returns `weft plan --json`;
strategy="auto" runs the planner's recommendation and says so."""

import json

import pytest
import torch
import torch.nn.functional as F

import models
import weft


def test_profile_and_plan(tmp_path):
    net = models.make_net()
    x, y = torch.randn(8, 1, 8, 8), torch.randint(0, 10, (8,))
    text = weft.profile(net, (x, y), F.cross_entropy, out=tmp_path / "p.json")
    profile = json.loads(text)
    assert [l["name"] for l in profile["layers"]] == ["conv", "norm", "fc"]
    assert [l["params"] for l in profile["layers"]] == [40, 512, 2570]
    assert all(l["fp_s"] >= 0 and l["bp_s"] >= 0 for l in profile["layers"])
    assert json.loads((tmp_path / "p.json").read_text()) == profile
    plan = weft.plan(tmp_path / "p.json", workers=4, bandwidth="100Mbit")
    assert plan["recommended"] in weft.strategies()
    with pytest.raises(TypeError, match="accepted"):
        weft.plan(text, credits=3)


def test_auto_runs_the_recommended_strategy(capsys):
    net = models.make_net()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    model = weft.DataParallel(net, opt, strategy="auto", bandwidth="100Mbit")
    model(torch.randn(4, 1, 8, 8)).sum().backward()
    opt.step()
    model.finish()
    assert weft.strategies()[model.strategy] == "ssgd"
    assert f"strategy=auto chose {model.strategy}" in capsys.readouterr().err
