"""A rank of test_failure.py's job: trains models.Net with wfbp until killed.

Rank 1 kills itself (SIGKILL) at iteration 20, as a worker that dies mid-run; the
others must raise, naming it, within the failure timeout.
"""

import os
import signal
import sys

import torch
import torch.nn.functional as F

import models
import weft

torch.set_num_threads(1)

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
net = models.make_net()
opt = torch.optim.SGD(net.parameters(), lr=models.LR)
model = weft.DataParallel(net, opt, strategy="wfbp", failure_timeout=5, verbose=False)
x, y = models.shard(*models.data(world, steps=1), rank)
for t in range(100000):
    if rank == 1 and t == 20:
        os.kill(os.getpid(), signal.SIGKILL)
    opt.zero_grad()
    F.cross_entropy(model(x[0]), y[0]).backward()
    opt.step()
model.finish()
print("finished without noticing the dead rank", file=sys.stderr)
sys.exit(3)
