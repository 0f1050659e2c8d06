"""Two real processes (Gloo over loopback) training a Python model with weft's
strategies end where one process trained on the combined batch ends, and where
PyTorch DDP ends on the same data (docs/python.md)."""

import os

import pytest
import torch

import models
from jobs import check, free_ports, run_job

SSGD = ["ssgd", "wfbp", "ddp", "mgwfbp", "bytescheduler", "dcredit"]
LOCAL_SGD = ["flsgd", "plsgd", "dreamddp", "dreamddp-opt"]


def final(out, strategy, ranks):
    return [torch.load(os.path.join(out, f"{strategy}.rank{r}.pt")) for r in range(ranks)]


def test_ssgd_strategies_equal_one_process_on_the_combined_batch_and_torch_ddp(tmp_path):
    names = SSGD + ["torch-ddp"]
    specs = [f"{s}:{p}" for s, p in zip(names, free_ports(len(names)))]
    check(run_job("rank_worker.py", [tmp_path, *specs], nproc=2, timeout=300))
    expected = models.reference(workers=2)
    ddp = final(tmp_path, "torch-ddp", 2)
    assert models.max_difference(ddp[0], expected) < 1e-5  # the reference itself is right
    for strategy in SSGD:
        for rank, params in enumerate(final(tmp_path, strategy, 2)):
            assert models.max_difference(params, expected) < 1e-5, (strategy, rank)
            assert models.max_difference(params, ddp[rank]) < 1e-5, (strategy, rank)


def test_local_sgd_with_H_1_and_plain_sgd_equals_wfbp(tmp_path):
    names = LOCAL_SGD + ["wfbp"]
    specs = [f"{s}:{p}:H=1" if s != "wfbp" else f"{s}:{p}" for s, p in zip(names, free_ports(len(names)))]
    check(run_job("rank_worker.py", [tmp_path, *specs], nproc=2, timeout=300))
    wfbp = final(tmp_path, "wfbp", 2)
    for strategy in LOCAL_SGD:
        for rank, params in enumerate(final(tmp_path, strategy, 2)):
            assert models.max_difference(params, wfbp[rank]) < 1e-5, (strategy, rank)


def test_ps_with_two_workers_and_one_server_equals_wfbp(tmp_path):
    [port] = free_ports(1)
    spec = f"ps:{port}:servers=1,steps={models.STEPS}"
    check(run_job("rank_worker.py", [tmp_path, spec], nproc=3, timeout=300))
    expected = models.reference(workers=2)
    for rank, params in enumerate(final(tmp_path, "ps", 2)):
        assert models.max_difference(params, expected) < 1e-5, rank
    assert not os.path.exists(os.path.join(tmp_path, "ps.rank2.pt"))  # the server never returned
