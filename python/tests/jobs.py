"""Runs a Python script as the ranks of a job on this machine (the torchrun variables,
a free port), bounded by a timeout; every process is gone when it returns."""

import os
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def free_ports(n):
    """n distinct ports free at the moment of the call."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def free_port():
    return free_ports(1)[0]


def run_job(script, args, nproc, timeout=120, env=None):
    """Starts `nproc` ranks of /usr/bin/python3 script args...; returns [(returncode, output)].

    A rank still running after `timeout` seconds is killed, and the job fails the test.
    """
    port = free_port()
    procs = []
    for rank in range(nproc):
        e = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                 WORLD_SIZE=str(nproc), LOCAL_RANK=str(rank), OMP_NUM_THREADS="1", **(env or {}))
        procs.append(subprocess.Popen([sys.executable, os.path.join(HERE, script), *map(str, args)], env=e,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      start_new_session=True))
    deadline = time.monotonic() + timeout
    results = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=max(deadline - time.monotonic(), 0.1))
            results.append((p.returncode, out))
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{script} {args}: still running after {timeout} s") from None
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    return results


def check(results):
    for rank, (code, out) in enumerate(results):
        assert code == 0, f"rank {rank} exited with {code}:\n{out}"
