"""Buffers (docs/python.md, "Buffers"): rank 0's buffers at every training forward, as
DDP's broadcast_buffers, with a meeting only for those a forward changes (Note [Buffers
no forward changes] in python/weft/_buffers.py). Under DDP and weft, on two processes
with their own data, a model with BatchNorm and a constant buffer ends with DDP's
parameters and buffers, with no_sync() and evaluation forwards too (DDP broadcasts at a
forward only after one outside no_sync() with gradients); a constant buffer changed on one rank is DDP's with
broadcast_buffers="always", and raises naming it otherwise."""

import os

import torch
from torch import nn

import models
from buffers_worker import Net
from jobs import check, free_ports, run_job
from weft._buffers import forward_changed_buffers


def test_a_training_forward_changes_the_statistics_and_not_the_constant():
    net = Net().eval()
    x = torch.randn(8, 1, 8, 8)
    # BatchNorm's kernel changes its statistics without bumping their version counters.
    assert forward_changed_buffers(net, lambda: net(x)) == ["norm.num_batches_tracked", "norm.running_mean",
                                                            "norm.running_var"]
    assert not net.training  # left as it was
    assert forward_changed_buffers(nn.Linear(2, 2), lambda: None) == []


def test_buffers_are_ddps_or_a_changed_constant_is_named(tmp_path):
    runs = ["ddp", "True", "always", "ddp+tamper", "always+tamper", "ddp+accumulate", "True+accumulate",
            "always+accumulate"]
    ports = free_ports(len(runs) + 1)
    check(run_job("buffers_worker.py", [tmp_path, *[f"{r}:{p}" for r, p in zip(runs, ports)]], nproc=2,
                  timeout=300))
    # Alone: rank 1 fails, and rank 0 with it.
    outcomes = run_job("buffers_worker.py", [tmp_path, f"True+tamper:{ports[-1]}"], nproc=2, timeout=120)
    assert all(code == 0 for code, _ in outcomes), outcomes

    def load(run, rank):
        return torch.load(os.path.join(tmp_path, f"{run}.rank{rank}.pt"))

    for rank in range(2):
        for run, like in [("True", "ddp"), ("always", "ddp"), ("always+tamper", "ddp+tamper"),
                          ("True+accumulate", "ddp+accumulate"), ("always+accumulate", "ddp+accumulate")]:
            got, ddp = load(run, rank), load(like, rank)
            assert not isinstance(got, dict), (run, rank, got)
            assert models.max_difference(got, ddp) < 1e-5, (run, rank, models.max_difference(got, ddp))
    # The ranks' own batches leave their statistics apart after the last forward.
    assert models.max_difference(load("ddp", 0), load("ddp", 1)) > 1e-4
    # DDP put rank 0's constant back over rank 1's change at the next forward.
    assert models.max_difference(load("ddp+tamper", 1), load("ddp", 1)) == 0
    error = load("True+tamper", 1)["error"]
    assert "buffer 'scale' changed on rank 1" in error and "broadcast_buffers='always'" in error, error
    assert "error" in load("True+tamper", 0)
