"""One rank of test_checkpoint's jobs: trains models.Net with weft.DataParallel and
momentum SGD over iterations [FROM, TO), and saves its state_dict or its final
parameters (docs/checkpoints.md, "Python").

    resume_worker.py OUT NAME FROM TO STRATEGY:PORT[:H=3,compression=int8,...] ...

FROM > 0: the rank first loads OUT/<NAME>-<as>.state.rank<r>.pt (the state_dict a job
of TO = FROM saved). TO < STEPS: it saves its state_dict there after TO
iterations; else its final parameters to OUT/<NAME>-<as>.rank<r>.pt. Each batch is a
function of the iteration alone, so the resumed job sees the same data.
"""

import os
import sys

import torch
import torch.nn.functional as F

import models
import weft
from rank_worker import parse

torch.set_num_threads(1)


def main():
    out, name, first, last, specs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:]
    rank, workers = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    for spec in specs:
        strategy, port, options = parse(spec)
        os.environ["MASTER_PORT"] = port
        tag = options.pop("as", strategy)
        net = models.make_net()
        opt = torch.optim.SGD(net.parameters(), lr=models.LR, momentum=0.9)
        model = weft.DataParallel(net, opt, strategy=strategy, failure_timeout=30, verbose=False, **options)
        state = os.path.join(out, f"{name}-{tag}.state.rank{rank}.pt")
        if first > 0:
            model.load_state_dict(torch.load(state))
        x, y = models.shard(*models.data(workers, steps=models.STEPS), rank)
        for t in range(first, last):
            opt.zero_grad()
            F.cross_entropy(model(x[t]), y[t]).backward()
            opt.step()
        if last < models.STEPS:
            torch.save(model.state_dict(), state)
            model.finish()
        else:
            model.finish()
            torch.save([p.detach().clone() for p in net.parameters()], os.path.join(out, f"{name}-{tag}.rank{rank}.pt"))


if __name__ == "__main__":
    main()
