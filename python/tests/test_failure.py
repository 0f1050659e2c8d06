"""A worker killed mid-run, through the `weft run` launcher: the others raise naming
the dead rank within the failure timeout, `weft run` exits non-zero, and no
process of the job is left (docs/failures.md)."""

import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def job_processes(marker):
    """Processes whose command line names `marker` (this test's script)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


def test_a_killed_worker_ends_the_job_naming_it():
    script = os.path.join(HERE, "dying_worker.py")
    start = time.monotonic()
    run = subprocess.run([os.environ["WEFT_BINARY"], "run", "--nproc", "3", "--failure-timeout", "10", "--",
                          sys.executable, script],
                         env=dict(os.environ, PYTHONPATH=os.pathsep.join([os.environ.get("PYTHONPATH", ""), HERE])),
                         capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - start
    out = run.stdout + run.stderr
    assert run.returncode != 0, out
    assert "rank 1" in out, out                       # the launcher names the dead rank
    assert "finished without noticing" not in out, out
    assert "Traceback" not in out or "RuntimeError" in out, out
    assert elapsed < 100, (elapsed, out)                # ended by the failure, not by the test's timeout
    assert job_processes(script) == [], out             # nothing left behind
