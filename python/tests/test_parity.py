"""DDP parity (docs/python.md, "Update modes"): a user's loop with each habit of real
training scripts, on two processes, under PyTorch DDP and under weft.DataParallel
with S-SGD strategies in each update mode, on the same script and data. Each run
ends within 1e-5 of DDP's parameters after 30 steps, or raises an error naming the
habit: never a silently different model."""

import os

import pytest
import torch

import models
from jobs import check, free_ports, run_job

HABITS = ["plain_adam", "clip_sgd", "clip_adamw", "clip_value", "accumulate", "no_sync", "every_other",
          "onecycle_sgd", "onecycle_adamw", "cycliclr", "plateau", "add_group", "step_no_backward", "checkpoint"]
# What the overlapped update refuses (Note [What the overlapped update refuses]), by the
# words of its error; "auto" watches only the first iteration, so a habit that starts
# later is refused there too.
REFUSED = {
    "clip_sgd": "changed between backward() and optimizer.step()",
    "clip_adamw": "changed between backward() and optimizer.step()",
    "clip_value": "changed between backward() and optimizer.step()",
    "accumulate": "a second backward() before optimizer.step()",
    "every_other": "a second backward() before optimizer.step()",
    "add_group": "a param group was added",
    "step_no_backward": "optimizer.step() without a synchronised backward()",
}
LATE = {"add_group", "step_no_backward"}
RUNS = {"wfbp": ["auto", "ddp", "overlap"], "dcredit": ["ddp", "overlap"], "ssgd": ["ddp", "overlap"],
        "mgwfbp": ["auto", "ddp", "overlap"]}


def expected_error(habit, update):
    if update == "overlap" or (update == "auto" and habit in LATE):
        return REFUSED.get(habit)
    return None


def check_against(tmp_path, reference, runs):
    """Runs every habit under `reference` (a parity_worker RUN) and each of `runs`
    (STRATEGY/UPDATE), in one job of two processes; fails naming every run that is
    neither within 1e-5 of the reference's parameters nor refused as expected."""
    jobs = [(habit, run) for habit in HABITS for run in [reference] + runs]
    ports = iter(free_ports(sum(2 if habit == "checkpoint" else 1 for habit, _ in jobs)))  # all distinct
    specs = [f"{habit}:{run}:{next(ports)}" + (f",{next(ports)}" if habit == "checkpoint" else "")
             for habit, run in jobs]
    check(run_job("parity_worker.py", [tmp_path, *specs], nproc=2, timeout=500))
    failures = []
    for habit in HABITS:
        expected = [torch.load(os.path.join(tmp_path, f"{habit}.{reference}.rank{r}.pt")) for r in range(2)]
        assert not isinstance(expected[0], dict), (habit, expected[0])
        for run in runs:
            update = run.split("/")[1]
            for rank in range(2):
                got = torch.load(os.path.join(tmp_path, f"{habit}.{run.replace('/', '-')}.rank{rank}.pt"))
                error = expected_error(habit, update)
                if error is not None:
                    if not (isinstance(got, dict) and error in got["error"]):
                        failures.append(f"{habit} {run} rank {rank}: expected the error '{error}', got "
                                        f"{got['error'] if isinstance(got, dict) else 'parameters'}")
                elif isinstance(got, dict):
                    failures.append(f"{habit} {run} rank {rank}: {got['error']}")
                elif models.max_difference(got, expected[rank]) > 1e-5:
                    failures.append(f"{habit} {run} rank {rank}: "
                                    f"{models.max_difference(got, expected[rank]):.3g} from {reference}")
    assert not failures, "\n".join(failures)


def test_every_habit_matches_ddp_or_is_refused_by_name(tmp_path):
    check_against(tmp_path, "ddp", [f"{s}/{u}" for s, updates in RUNS.items() for u in updates])


def test_local_sgd_ends_agreed_and_gives_the_agreed_model_mid_training(tmp_path):
    [port] = free_ports(1)
    check(run_job("parity_worker.py", [tmp_path, f"agreed:flsgd/auto:{port}"], nproc=2, timeout=120))
    ranks = [torch.load(os.path.join(tmp_path, f"agreed.flsgd-auto.rank{r}.pt")) for r in range(2)]
    assert models.max_difference(ranks[0]["own"], ranks[1]["own"]) > 1e-4  # mid-period: the ranks differ
    mean = [(a + b) / 2 for a, b in zip(ranks[0]["own"], ranks[1]["own"])]
    for r in range(2):
        assert models.max_difference(ranks[r]["agreed"], mean) < 1e-6
    assert models.max_difference(ranks[0]["final"], ranks[1]["final"]) == 0  # 22 steps, H = 3: agreed by finish()


def test_profiling_leaves_the_random_numbers_of_the_first_forward_as_ddp_would():
    """The first forward profiles a copy of the module (several passes, as many as the other
    workers keep computing); a dropout in the user's first training forward must still draw
    the mask it draws unwrapped, as under DDP."""
    import copy
    import weft
    net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 2))
    unwrapped = copy.deepcopy(net)
    x = torch.randn(4, 8)
    torch.manual_seed(7)
    wrapped = weft.DataParallel(net, torch.optim.SGD(net.parameters(), lr=0.1), strategy="wfbp", verbose=False)(x)
    torch.manual_seed(7)
    assert torch.equal(wrapped, unwrapped(x))
