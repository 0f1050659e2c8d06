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


def test_outer_optimizer_with_lr_1_and_momentum_0_equals_the_plain_average(tmp_path):
    ports = free_ports(2)
    specs = [f"flsgd:{ports[0]}:H=2,as=plain",
             f"flsgd:{ports[1]}:H=2,as=outer,outer_optimizer=nesterov,outer_lr=1.0,outer_momentum=0.0"]
    check(run_job("rank_worker.py", [tmp_path, *specs], nproc=2, timeout=300))
    plain, outer = final(tmp_path, "plain", 2), final(tmp_path, "outer", 2)
    for rank in range(2):
        assert models.max_difference(outer[rank], plain[rank]) < 1e-5, rank


@pytest.mark.parametrize("codec,bound", [("fp16", 1e-3), ("int8", 1e-2), ("powersgd:1", 0.2)])
def test_compressed_wfbp_is_identical_on_every_rank_and_near_float32(tmp_path, codec, bound):
    [port] = free_ports(1)
    check(run_job("rank_worker.py", [tmp_path, f"wfbp:{port}:compression={codec},as=c"], nproc=2, timeout=300))
    ranks = final(tmp_path, "c", 2)
    expected = models.reference(workers=2)
    assert models.max_difference(ranks[0], ranks[1]) == 0  # bit-identical means on every rank
    difference = models.max_difference(ranks[0], expected)
    assert 0 < difference < bound, difference  # lossy (the codec ran), yet near float32


@pytest.mark.parametrize("codec,bound", [("fp16", 3e-3), ("int8", 2e-2), ("powersgd:1", 0.2)])
def test_compressed_local_sgd_is_identical_on_every_rank_and_near_the_plain_average(tmp_path, codec, bound):
    ports = free_ports(2)
    specs = [f"flsgd:{ports[0]}:H=2,as=plain", f"flsgd:{ports[1]}:H=2,compression={codec},as=c"]
    check(run_job("rank_worker.py", [tmp_path, *specs], nproc=2, timeout=300))
    plain, ranks = final(tmp_path, "plain", 2), final(tmp_path, "c", 2)
    assert models.max_difference(ranks[0], ranks[1]) == 0  # the averages are bit-identical on every rank
    difference = models.max_difference(ranks[0], plain[0])
    assert 0 < difference < bound, difference  # lossy (the codec ran on the changes), yet near float32
