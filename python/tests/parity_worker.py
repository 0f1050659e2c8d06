"""One rank of the DDP parity jobs (test_parity.py, test_local_parity.py): a user's
training loop with one habit, run under PyTorch DDP or PostLocalSGD or under
weft.DataParallel, each run a job on its own port(s); saves
OUT/<habit>.<run>.rank<r>.pt: the final parameters, or {"error": text}.

    parity_worker.py OUT HABIT:RUN:PORT[,PORT] ...

RUN is "ddp", "postlocalsgd" (DDP's local steps, the parameters averaged after every
LOCAL_H-th step) or STRATEGY/UPDATE (e.g. "wfbp/overlap"; a local SGD strategy with
H = LOCAL_H).
"""

import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

import models
import weft

torch.set_num_threads(1)
STEPS = 30
CHECKPOINT_AT = 15
LOCAL_H = 3  # CHECKPOINT_AT a multiple: every rank holds the average when rank 0 saves


def make_optimizer(habit, params):
    if habit.endswith("adamw"):
        return torch.optim.AdamW(params, lr=1e-2, weight_decay=0.05)
    if habit == "plain_adam":
        return torch.optim.Adam(params, lr=1e-2)
    return torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=1e-4)


def make_scheduler(habit, opt):
    if habit.startswith("onecycle"):
        return torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=STEPS)
    if habit == "cycliclr":
        return torch.optim.lr_scheduler.CyclicLR(opt, base_lr=0.01, max_lr=0.1, step_size_up=5)
    if habit == "plateau":
        return torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=1)
    return None


class Run:
    """The model and optimizer of one run, under DDP or weft."""

    def __init__(self, run, habit, rank, workers, port, net=None, opt_state=None):
        os.environ["MASTER_PORT"] = str(port)
        self.run, self.habit = run, habit
        self.net = net or models.make_net()
        params = list(self.net.parameters())
        self.opt = make_optimizer(habit, params[:-2] if habit == "add_group" else params)
        if opt_state is not None:
            self.opt.load_state_dict(opt_state)
        if run in ("ddp", "postlocalsgd"):
            dist.init_process_group("gloo", rank=rank, world_size=workers)
            self.model = torch.nn.parallel.DistributedDataParallel(self.net)
            if run == "postlocalsgd":
                self._post_local_sgd()
        else:
            strategy, update = run.split("/")
            local = {"H": LOCAL_H} if weft.strategies()[strategy] == "local_sgd" else {}
            self.model = weft.DataParallel(self.net, self.opt, strategy=strategy, update=update,
                                           failure_timeout=30, verbose=False, **local)
        self.scheduler = make_scheduler(habit, self.opt)

    def _post_local_sgd(self):
        """PyTorch's PostLocalSGD as examples/resnet18_fashion_mnist.py runs it: every backward
        local, the averager after every step(); warmup_steps puts its averages after steps
        LOCAL_H - 1, 2 LOCAL_H - 1, ..., where weft's local SGD makes them."""
        from torch.distributed.algorithms.model_averaging import averagers
        self.model.require_backward_grad_sync = False
        averager = averagers.PeriodicModelAverager(period=LOCAL_H, warmup_steps=LOCAL_H - 1)
        step, net = self.opt.step, self.net

        def step_and_average(_optimizer, *a, **k):
            result = step(*a, **k)
            averager.average_parameters(net.parameters())
            return result

        self.opt.step = step_and_average.__get__(self.opt)  # a method, as an lr_scheduler wraps it

    def no_sync(self):
        return self.model.no_sync()

    def close(self):
        if self.run == "postlocalsgd":  # ends on the workers' average, as weft's finish() does
            from torch.distributed.algorithms.model_averaging import utils
            utils.average_parameters(iter(self.net.parameters()), dist.group.WORLD)
        if self.run in ("ddp", "postlocalsgd"):
            dist.destroy_process_group()
        else:
            self.model.finish()


def iteration(r, x, y, t):
    habit, model, opt = r.habit, r.model, r.opt
    if habit == "step_no_backward" and t == 5:
        opt.zero_grad()
        opt.step()  # torch applies momentum and weight decay to zero gradients
    if habit != "every_other" or t % 2 == 0:
        opt.zero_grad()
    if habit in ("accumulate", "no_sync"):
        for k in range(4):
            part = (x[t][k::4], y[t][k::4])
            if habit == "no_sync" and k < 3:
                with r.no_sync():
                    F.cross_entropy(model(part[0]), part[1]).div(4).backward()
            else:
                F.cross_entropy(model(part[0]), part[1]).div(4).backward()
    else:
        F.cross_entropy(model(x[t]), y[t]).backward()
    if habit.startswith("clip_") and habit != "clip_value":
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    if habit == "clip_value":
        torch.nn.utils.clip_grad_value_(model.parameters(), 0.05)
    if habit == "add_group" and t == 10:
        opt.add_param_group({"params": list(r.net.parameters())[-2:], "lr": 0.02})
    if habit != "every_other" or t % 2 == 1:
        opt.step()
    if r.scheduler is not None:
        r.scheduler.step(1.0) if habit == "plateau" else r.scheduler.step()


def wait_for(path):
    deadline = time.monotonic() + 60
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(path)
        time.sleep(0.05)


def agreed(run, port, rank, workers):
    """Local SGD: the agreed model after 10 steps and this rank's own, then the final parameters."""
    x, y = models.shard(*models.data(workers, steps=STEPS), rank)
    r = Run(run, "agreed", rank, workers, port)
    for t in range(STEPS - 8):  # 22: not a multiple of H = LOCAL_H
        iteration(r, x, y, t)
        if t == 9:  # 10 iterations: 1 since the last average
            mid = {"agreed": [v.clone() for v in r.model.agreed_state_dict().values()],  # Net has no buffers
                   "own": [p.detach().clone() for p in r.net.parameters()]}
    r.close()
    return {**mid, "final": [p.detach().clone() for p in r.net.parameters()]}


def train(habit, run, ports, rank, workers, out):
    if habit == "agreed":
        return agreed(run, ports[0], rank, workers)
    x, y = models.shard(*models.data(workers, steps=STEPS), rank)
    r = Run(run, habit, rank, workers, ports[0])
    try:
        last = CHECKPOINT_AT if habit == "checkpoint" else STEPS
        for t in range(last):
            iteration(r, x, y, t)
        if habit == "checkpoint":
            # DDP's habit: rank 0 saves the module's and the optimizer's state; a new job loads both.
            saved = os.path.join(out, f"checkpoint.{run.replace('/', '-')}.pt")
            if rank == 0:
                torch.save({"model": r.net.state_dict(), "opt": r.opt.state_dict()}, saved + ".tmp")
                os.rename(saved + ".tmp", saved)
            r.close()
            wait_for(saved)
            state = torch.load(saved)
            net = models.make_net(seed=7)
            net.load_state_dict(state["model"])
            r = Run(run, habit, rank, workers, ports[1], net=net, opt_state=state["opt"])
            for t in range(CHECKPOINT_AT, STEPS):
                iteration(r, x, y, t)
    except RuntimeError as e:
        r.close()
        return {"error": str(e)}
    r.close()
    return [p.detach().clone() for p in r.net.parameters()]


def main():
    out, specs = sys.argv[1], sys.argv[2:]
    rank, workers = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    for spec in specs:
        habit, run, ports = spec.split(":")
        result = train(habit, run, [int(p) for p in ports.split(",")], rank, workers, out)
        torch.save(result, os.path.join(out, f"{habit}.{run.replace('/', '-')}.rank{rank}.pt"))


if __name__ == "__main__":
    main()
