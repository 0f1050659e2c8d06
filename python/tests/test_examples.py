"""The examples a race runs (tools/python_bench.py race): their shared flags are checked,
and transformer_lm.py trains a few steps on two processes under PyTorch's PostLocalSGD
and PowerSGD hook (compressing from its third step) and under weft's local SGD and auto,
writing the held-out evaluation's line."""

import json
import os
import subprocess
import sys

import pytest

from jobs import check, run_job

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples")
LM = os.path.join(EXAMPLES, "transformer_lm.py")
# A short text of its own, so the test needs no fortunes package.
TEXT = ("The quick brown fox jumps over the lazy dog. " * 400).encode()


@pytest.mark.parametrize("example", ["transformer_lm.py", "vit_fashion_mnist.py", "resnet18_fashion_mnist.py"])
@pytest.mark.parametrize("flags, says", [
    (["--strategy", "torch-postlocalsgd"], "needs --H"),
    (["--strategy", "torch-ddp", "--H", "4"], "torch-postlocalsgd"),
    (["--strategy", "torch-ddp", "--outer-optimizer", "nesterov"], "--outer-optimizer"),
    (["--strategy", "torch-ddp", "--host", "host.json"], "--host"),
    (["--strategy", "torch-postlocalsgd", "--H", "4", "--compression", "fp16"], "uncompressed"),
    (["--H", "0"], "--H 0"),
])
def test_examples_refuse_what_they_cannot_do(example, flags, says):
    run = subprocess.run([sys.executable, os.path.join(EXAMPLES, example), *flags], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 2 and says in run.stderr, run.stderr


@pytest.mark.parametrize("flags", [["--strategy", "torch-postlocalsgd", "--H", "2"],
                                   ["--strategy", "torch-ddp", "--compression", "powersgd:2"],
                                   ["--strategy", "flsgd", "--H", "2", "--outer-optimizer", "nesterov"],
                                   ["--strategy", "auto", "--allow", "ssgd,local_sgd,lossy"]],
                         ids=["torch-postlocalsgd", "torch-powersgd-hook", "weft-flsgd", "weft-auto"])
def test_lm_trains_and_evaluates_the_agreed_parameters(tmp_path, flags):
    text, metrics = tmp_path / "text", tmp_path / "m.jsonl"
    text.write_bytes(TEXT)
    check(run_job(LM, ["--text", text, "--context", 16, "--batch", 4, "--steps", 5, "--eval-every", 2,
                       "--eval-samples", 8, "--seed", 1, "--metrics", metrics, *flags], nproc=2, timeout=120))
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert sorted(r["iter"] for r in rows if "iteration_s" in r) == sorted(list(range(5)) * 2)
    evals = [r for r in rows if "eval" in r]
    assert [r["iter"] for r in evals] == [1, 3, 4] and all(r["rank"] == 0 for r in evals)
    assert all(r["eval"]["loss"] > 0 and r["eval"]["bits_per_char"] > 0 for r in evals)
