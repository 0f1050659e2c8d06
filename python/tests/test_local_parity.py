"""Local SGD parity (docs/python.md, "Update modes"): a user's loop with each habit of
real training scripts, on two processes, under PyTorch's PostLocalSGD (DDP's local
steps, the parameters averaged after every H-th step) and under weft's flsgd with
the same H in each update mode. Each run ends within 1e-5 of PostLocalSGD's
parameters after 30 steps, or raises an error naming the habit (Note [Local SGD
under the user's step] in src/runtime/comm/engine.h)."""

import os

import torch

import models
from jobs import check, free_ports, run_job
from test_parity import HABITS, expected_error

RUNS = ["flsgd/auto", "flsgd/ddp", "flsgd/overlap"]


def test_every_habit_matches_post_local_sgd_or_is_refused_by_name(tmp_path):
    runs = ["postlocalsgd"] + RUNS
    jobs = [(habit, run) for habit in HABITS for run in runs]
    ports = iter(free_ports(sum(2 if habit == "checkpoint" else 1 for habit, _ in jobs)))
    specs = [f"{habit}:{run}:{next(ports)}" + (f",{next(ports)}" if habit == "checkpoint" else "")
             for habit, run in jobs]
    check(run_job("parity_worker.py", [tmp_path, *specs], nproc=2, timeout=500))
    failures = []
    for habit in HABITS:
        reference = [torch.load(os.path.join(tmp_path, f"{habit}.postlocalsgd.rank{r}.pt")) for r in range(2)]
        assert not isinstance(reference[0], dict), (habit, reference[0])
        for run in RUNS:
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
                elif models.max_difference(got, reference[rank]) > 1e-5:
                    failures.append(f"{habit} {run} rank {rank}: "
                                    f"{models.max_difference(got, reference[rank]):.3g} from PostLocalSGD")
    assert not failures, "\n".join(failures)
