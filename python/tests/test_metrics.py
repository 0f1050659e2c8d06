"""weft.Metrics writes weft's metrics lines and, with a weft model, rank 0 says once
on stderr when the run diverges (Note [A diverging run], src/runtime/train/divergence.h)."""

import json

import torch
import torch.nn.functional as F

import models
import weft


def train(tmp_path, lr, steps=40):
    torch.manual_seed(0)
    net = models.make_net()
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    model = weft.DataParallel(net, opt, strategy="wfbp", verbose=False)
    metrics = weft.Metrics(tmp_path / "m.jsonl", model)
    x, y = models.data(1, steps=steps)
    for t in range(steps):
        opt.zero_grad()
        loss = F.cross_entropy(model(x[t]), y[t])
        loss.backward()
        opt.step()
        metrics.step(t, loss)
    model.finish()
    metrics.close()
    return [json.loads(line) for line in open(tmp_path / "m.jsonl")]


def test_a_learning_run_writes_its_lines_and_no_warning(tmp_path, capfd):
    lines = train(tmp_path, lr=models.LR)
    assert [l["iter"] for l in lines] == list(range(40))
    assert all(l["strategy"] == "wfbp" for l in lines)
    assert "diverg" not in capfd.readouterr().err


def test_a_diverging_run_is_said_once_with_the_setting_to_change(tmp_path, capfd):
    train(tmp_path, lr=500.0)
    err = capfd.readouterr().err
    assert err.count("weft: warning:") == 1, err
    assert "diverg" in err and "lower learning rate" in err, err
