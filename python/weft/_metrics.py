"""weft's metrics JSON lines from a Python training loop (the format of `weft train --metrics`).

Every rank appends {"rank", "iter", "time_s", "iteration_s", "loss", "strategy"}
per iteration to the same file, one write(2) per line on an O_APPEND file so that
lines of several processes never interleave; eval(...) adds {"rank", "iter",
"time_s", "eval": {...}}. "time_s" counts from the Metrics' creation.
"""

import json
import os
import time


class Metrics:
    def __init__(self, path, model=None, strategy=None):
        """Opens `path` for appending; rank 0 of `model` (a weft.DataParallel) empties it first.

        Create it on every rank after weft.DataParallel and before the first
        iteration: no rank ends an iteration before rank 0 has started its first.
        """
        self.rank = getattr(model, "rank", 0)
        self.model = model
        self.strategy = strategy
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | (os.O_TRUNC if self.rank == 0 else 0)
        self.fd = os.open(path, flags, 0o644)
        self.start = self.previous = time.perf_counter()

    def _write(self, line):
        os.write(self.fd, (json.dumps(line) + "\n").encode())

    def step(self, iteration, loss):
        """One iteration's line; `loss` a float or a scalar tensor. With a weft model, rank 0
        also watches it and says on stderr, once, if the run diverges."""
        now = time.perf_counter()
        strategy = self.strategy or getattr(self.model, "strategy", None)
        self._write({"rank": self.rank, "iter": iteration, "time_s": now - self.start,
                     "iteration_s": now - self.previous, "loss": float(loss), "strategy": strategy})
        self.previous = now
        observe = getattr(self.model, "_observe_loss", None)
        if observe is not None and self.rank == 0:
            observe(loss)  # says once if the run diverges

    def eval(self, iteration, **results):
        """An evaluation's line, e.g. eval(t, accuracy=0.91, loss=0.3)."""
        self._write({"rank": self.rank, "iter": iteration, "time_s": time.perf_counter() - self.start,
                     "eval": {k: float(v) for k, v in results.items()}})

    def close(self):
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __del__(self):
        self.close()
