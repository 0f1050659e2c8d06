"""weft.DataParallel(trace=FILE) writes the measured timeline of every worker, as
`weft train --trace` does (Note [Python's timeline] in src/python/module.cc), and
tracing changes nothing of what is trained."""

import json
import os

import pytest
import torch

import models
import weft
from jobs import check, free_port, run_job

LAYERS = ["conv", "norm", "fc"]


def events_by_rank(trace_file, source="measured"):
    """{rank: [(lane, name, start_s, end_s, iteration)]} of `source` (measured, or the
    simulated prediction beside it) from the Chrome trace."""
    trace = json.load(open(trace_file))["traceEvents"]
    lanes, ranks = {}, {}
    for e in trace:
        if e["ph"] == "M" and e["name"] == "thread_name":
            lanes[(e["pid"], e["tid"])] = e["args"]["name"]
        if e["ph"] == "M" and e["name"] == "process_name" and e["args"]["name"].startswith(source):
            ranks[e["pid"]] = int(e["args"]["name"].rsplit(" ", 1)[1])
    out = {}
    for e in trace:
        if e["ph"] == "X" and e["pid"] in ranks:
            start = e["ts"] * 1e-6
            out.setdefault(ranks[e["pid"]], []).append(
                (lanes[(e["pid"], e["tid"])], e["name"], start, start + e["dur"] * 1e-6, e["args"]["iteration"]))
    return out


def test_two_workers_trace_every_layer_and_message_and_train_the_same(tmp_path):
    trace = tmp_path / "trace.json"
    recorded = 5  # of models.STEPS
    spec = f"wfbp:{free_port()}:trace={trace},trace_iterations={recorded}"
    check(run_job("rank_worker.py", [tmp_path, spec], nproc=2, timeout=120))
    expected = models.reference(workers=2)
    for rank in range(2):
        params = torch.load(os.path.join(tmp_path, f"wfbp.rank{rank}.pt"))
        assert models.max_difference(params, expected) < 1e-5, rank

    by_rank = events_by_rank(trace)
    assert sorted(by_rank) == [0, 1]
    for rank, events in by_rank.items():
        assert {e[4] for e in events} == set(range(recorded)), rank
        for t in range(recorded):
            names = [name for lane, name, *_, it in events if lane == "compute" and it == t]
            forward = [n for n in names if n.startswith("fp ")]
            assert forward == [f"fp {layer}" for layer in LAYERS], (rank, t, names)  # in order, once each
            assert sorted(n for n in names if n.startswith("bp ")) == sorted(f"bp {layer}" for layer in LAYERS)
            assert any(lane == "comm" and it == t for lane, *_, it in events), (rank, t)
        fp = sorted((s, e) for lane, name, s, e, _ in events if name.startswith("fp "))
        assert all(s <= e for s, e in fp) and all(a[1] <= b[0] + 1e-6 for a, b in zip(fp, fp[1:])), rank
    # Beside it, the simulator's prediction of the same schedule, layer by layer.
    predicted = events_by_rank(trace, "simulated")
    assert sorted(predicted) == [0, 1]
    assert {name for _, name, *_ in predicted[0]} >= {f"fp {layer}" for layer in LAYERS}


def test_rank_0_keeps_the_summary(tmp_path):
    net = models.make_net()
    opt = torch.optim.SGD(net.parameters(), lr=models.LR)
    trace = tmp_path / "one.json"
    model = weft.DataParallel(net, opt, strategy="ssgd", trace=trace, trace_iterations=4, verbose=False)
    x, y = models.shard(*models.data(1), 0)
    for t in range(models.STEPS):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x[t]), y[t]).backward()
        opt.step()
        with torch.no_grad():
            model(x[t])  # an evaluation forward: not timed
    assert model.trace_summary is None
    model.finish()
    summary = model.trace_summary
    assert summary["iterations"] == 2 and 0 < summary["compute_s"] <= summary["iteration_s"], summary
    assert summary["predicted_iteration_s"] > 0, summary
    assert trace.exists()


@pytest.mark.parametrize("options, error, message", [
    (dict(trace="/no/such/dir/t.json"), ValueError, r"^trace=/no/such/dir/t.json: cannot write it \("),
    (dict(trace="t.json", trace_iterations=0), ValueError, r"^trace_iterations=0: expected an integer in \[1, "),
    (dict(trace="t.json", trace_iterations="5"), TypeError, r"^trace_iterations='5': expected an integer"),
    (dict(trace=5), TypeError, r"^trace=5: expected a file name"),
])
def test_bad_trace_options_are_refused_before_training(tmp_path, monkeypatch, options, error, message):
    monkeypatch.chdir(tmp_path)
    net = models.make_net()
    with pytest.raises(error, match=message):
        weft.DataParallel(net, torch.optim.SGD(net.parameters(), lr=0.1), **options)
    assert list(tmp_path.iterdir()) == []
