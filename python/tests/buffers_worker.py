"""One rank of the buffer jobs (test_buffers.py): a model with BatchNorm and a constant
buffer, trained under PyTorch DDP or weft.DataParallel; saves OUT/<run>.rank<r>.pt: the
final parameters and buffers, or {"error": text}.

    buffers_worker.py OUT RUN:PORT ...

RUN is "ddp" or BROADCAST (True or always), with "+tamper" where rank 1 changes the
constant buffer before step 5, as a user's code outside the forward may, or "+accumulate"
where each step is two half batches, the first inside no_sync(), and every third step
ends with an evaluation forward.
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

import models
import weft

torch.set_num_threads(1)
STEPS = 10


class Net(nn.Module):
    """BatchNorm, whose statistics every training forward changes, and a constant scale."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.norm = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 8 * 8, 10)
        self.register_buffer("scale", torch.full((4, 1, 1), 0.5))

    def forward(self, x):
        return self.fc((torch.relu(self.norm(self.conv(x))) * self.scale).flatten(1))


def train(run, port, rank, workers):
    os.environ["MASTER_PORT"] = str(port)
    torch.manual_seed(0)
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    broadcast, _, habit = run.partition("+")
    if broadcast == "ddp":
        dist.init_process_group("gloo", rank=rank, world_size=workers)
        model = nn.parallel.DistributedDataParallel(net)
    else:
        model = weft.DataParallel(net, opt, strategy="wfbp", update="ddp", failure_timeout=10, verbose=False,
                                  broadcast_buffers=True if broadcast == "True" else broadcast)
    x, y = models.shard(*models.data(workers, steps=STEPS), rank)
    try:
        for t in range(STEPS):
            if habit == "tamper" and t == 5 and rank == 1:
                with torch.no_grad():
                    net.scale.fill_(2.0)
            opt.zero_grad()
            if habit == "accumulate":
                with model.no_sync():
                    F.cross_entropy(model(x[t][::2]), y[t][::2]).div(2).backward()
                F.cross_entropy(model(x[t][1::2]), y[t][1::2]).div(2).backward()
            else:
                F.cross_entropy(model(x[t]), y[t]).backward()
            opt.step()
            if habit == "accumulate" and t % 3 == 2:
                net.eval()
                with torch.no_grad():
                    model(x[t])
                net.train()
        result = [p.detach().clone() for p in net.parameters()] + [b.clone() for b in net.buffers()]
    except (ValueError, RuntimeError) as e:
        result = {"error": str(e)}
    if broadcast == "ddp":
        dist.destroy_process_group()
    elif "error" not in result:
        model.finish()
    return result


def main():
    out, specs = sys.argv[1], sys.argv[2:]
    rank, workers = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    for spec in specs:
        run, port = spec.split(":")
        result = train(run, int(port), rank, workers)
        torch.save(result, os.path.join(out, f"{run}.rank{rank}.pt"))
        if isinstance(result, dict):
            break  # a failed job leaves its group behind: run no other in this process


if __name__ == "__main__":
    main()
