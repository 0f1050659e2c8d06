"""The same job through both front ends — `weft train --model cnn` and
weft.DataParallel on examples/cnn.py's model — is one job by construction
(runtime/train/job.h, runtime/train/worker.h): its checkpoints name the worker's state alike
and record the same identity."""

import json
import os
import subprocess

import pytest
import torch

from jobs import check, run_job

WEFT = os.environ.get("WEFT_BINARY", os.path.join(os.path.dirname(__file__), "..", "..", "build", "weft"))
STEPS = 3
# (weft train's flags, weft.DataParallel's keywords): local SGD with a codec and
# an outer optimizer, whose state has every kind of entry (opt/, outer/, codec/).
JOBS = [
    (["--strategy", "flsgd", "--H", "2", "--compression", "powersgd:1", "--outer-optimizer", "nesterov",
      "--outer-lr", "0.7", "--outer-momentum", "0.9"],
     ["strategy=flsgd", "H=2", "compression=powersgd:1", "outer_optimizer=nesterov", "outer_lr=0.7",
      "outer_momentum=0.9"]),
    (["--strategy", "wfbp", "--compression", "int8"], ["strategy=wfbp", "compression=int8", "update=overlap"]),
]


def command_line_checkpoint(tmp_path, flags):
    directory = tmp_path / "cli"
    subprocess.run([WEFT, "train", "--model", "cnn", "--synthetic", "--nproc", "2", "--batch", "8", "--steps",
                    str(STEPS), "--optimizer", "momentum", "--no-progress", "--checkpoint", str(directory),
                    *flags], check=True, timeout=300, capture_output=True)
    manifest = json.loads((directory / "latest.json").read_text())
    with open(directory / f"rank0-iter{manifest['iteration']}.ckpt", "rb") as f:
        assert f.readline() == b"weft-checkpoint\n"
        header = json.loads(f.readline())
    return manifest["job"], {t["name"] for t in header["tensors"]}


@pytest.mark.parametrize("flags, keywords", JOBS)
def test_both_front_ends_name_the_state_and_the_job_alike(tmp_path, flags, keywords):
    job, names = command_line_checkpoint(tmp_path, flags)
    check(run_job("one_job_worker.py", [tmp_path, STEPS, *keywords], nproc=2, timeout=300))
    state = torch.load(tmp_path / "state.rank0.pt")
    python_job = json.loads(state["weft.job"])
    python_names = {k[len("weft.state."):] for k in state if k.startswith("weft.state.")}

    # The worker's state (Note [A worker's state]): weft train's file adds the
    # parameters and the generator, the module's state_dict holds those itself.
    assert python_names == {n for n in names if not n.startswith(("param/", "rng/"))}
    assert any(n.startswith("codec/") for n in python_names)
    # The identity: weft train adds what only it knows (model, batch, optimizer,
    # lr, seed, data), the Python package the rank.
    ours = {"model", "batch", "optimizer", "lr", "seed", "synthetic"}
    assert {k: v for k, v in job.items() if k not in ours} == {k: v for k, v in python_job.items() if k != "rank"}
