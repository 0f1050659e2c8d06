"""One rank of the tests' jobs: trains models.Net with each strategy given, each job
on its own port, and saves the final parameters to OUT/<strategy>.rank<r>.pt.

    rank_worker.py OUT STRATEGY:PORT[:H=1,servers=1,as=NAME,...] ...

`as` names the output (default: the strategy), for two jobs of one strategy.
"""

import os
import sys

import torch
import torch.nn.functional as F

import models
import weft

torch.set_num_threads(1)


def parse(spec):
    strategy, port, *rest = spec.split(":", 2)
    options = {}
    for item in (rest[0].split(",") if rest else []):
        key, value = item.split("=")
        try:
            options[key] = int(value)
        except ValueError:
            try:
                options[key] = float(value)
            except ValueError:
                options[key] = value
    return strategy, port, options


def train_weft(strategy, options, rank, workers):
    net = models.make_net()
    opt = torch.optim.SGD(net.parameters(), lr=models.LR)
    model = weft.DataParallel(net, opt, strategy=strategy, failure_timeout=30, verbose=False, **options)
    x, y = models.shard(*models.data(workers), rank)
    for t in range(models.STEPS):
        opt.zero_grad()
        F.cross_entropy(model(x[t]), y[t]).backward()
        opt.step()
    model.finish()
    return [p.detach().clone() for p in net.parameters()]


def train_torch_ddp(rank, workers):
    import torch.distributed as dist
    dist.init_process_group("gloo", rank=rank, world_size=workers)
    net = models.make_net()
    model = torch.nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.SGD(model.parameters(), lr=models.LR)
    x, y = models.shard(*models.data(workers), rank)
    for t in range(models.STEPS):
        opt.zero_grad()
        F.cross_entropy(model(x[t]), y[t]).backward()
        opt.step()
    dist.destroy_process_group()
    return [p.detach().clone() for p in net.parameters()]


def main():
    out, specs = sys.argv[1], sys.argv[2:]
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    for spec in specs:
        strategy, port, options = parse(spec)
        os.environ["MASTER_PORT"] = port
        workers = world - int(options.get("servers", 0))
        name = options.pop("as", strategy)
        if strategy == "torch-ddp":
            params = train_torch_ddp(rank, workers)
        else:
            params = train_weft(strategy, options, rank, workers)
        torch.save(params, os.path.join(out, f"{name}.rank{rank}.pt"))


if __name__ == "__main__":
    main()
