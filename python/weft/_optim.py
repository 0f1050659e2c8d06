"""The user's optimizer, mirrored per layer in C++ (docs/python.md, "Optimizer").

torch.optim.SGD, Adam and AdamW (exactly those classes, without amsgrad or
maximize) are mirrored: weft.DataParallel gives the engine one C++ LayerOptimizer
(src/runtime/optimizer.h) with each parameter's options from its param group, so
the engine updates layer l the moment its gradient is averaged. The optimizer's
own step() then only marks the iteration, and zero_grad() does nothing (the engine
zeroes each layer's gradient after its update). Learning rates are read again at
the start of every backward, so an lr_scheduler works as with torch.

Any other optimizer is stepped whole by its own step(), once every message of the
iteration is done (no overlap with the next forward); weft warns once.
"""

import torch

MIRRORED = (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW)


def mirror_reason(optimizer):
    """None when `optimizer` can be mirrored, else why not (one phrase)."""
    if type(optimizer) not in MIRRORED:
        return f"{type(optimizer).__module__}.{type(optimizer).__qualname__} is not one weft mirrors"
    for group in optimizer.param_groups:
        if group.get("maximize", False):
            return "maximize=True is not mirrored"
        if group.get("amsgrad", False):
            return "amsgrad=True is not mirrored"
    return None


def group_options(optimizer, group):
    """The C++ OptimizerOptions (as a dict) of one param group."""
    if isinstance(optimizer, torch.optim.SGD):
        momentum = float(group["momentum"])
        return {
            "kind": "momentum" if momentum != 0 else "sgd",
            "lr": float(group["lr"]),
            "momentum": momentum,
            "dampening": float(group["dampening"]),
            "nesterov": bool(group["nesterov"]),
            "weight_decay": float(group["weight_decay"]),
        }
    beta1, beta2 = group["betas"]
    return {
        "kind": "adamw" if isinstance(optimizer, torch.optim.AdamW) else "adam",
        "lr": float(group["lr"]),
        "beta1": float(beta1),
        "beta2": float(beta2),
        "eps": float(group["eps"]),
        "weight_decay": float(group["weight_decay"]),
    }


# A parameter of the module the optimizer does not hold: torch would leave it as it
# is. lr 0 keeps it so while the engine still zeroes its gradient after each update.
UNOPTIMIZED = {"kind": "sgd", "lr": 0.0}
# The optimizer is not mirrored: the engine neither steps nor zeroes (kind "none").
NOT_MIRRORED = {"kind": "none"}


class Mirror:
    """Per-parameter options for the C++ optimizer, and the learning-rate sync."""

    def __init__(self, optimizer, layers):
        self.optimizer = optimizer
        self.mirrored = mirror_reason(optimizer) is None
        where = {}  # id(param) -> (layer, index)
        for l, params in enumerate(layers):
            for i, p in enumerate(params):
                where[id(p)] = (l, i)
        self.options = [[dict(NOT_MIRRORED if not self.mirrored else UNOPTIMIZED) for _ in params]
                        for params in layers]
        self.groups = []  # (group, [(layer, index)], lr last given to C++)
        if not self.mirrored:
            return
        for group in optimizer.param_groups:
            options = group_options(optimizer, group)
            places = [where[id(p)] for p in group["params"] if id(p) in where]
            for l, i in places:
                self.options[l][i] = dict(options)
            self.groups.append([group, places, float(group["lr"])])

    def sync_lr(self, cpp_optimizer):
        """Gives the C++ optimizer every learning rate changed since the last call."""
        for entry in self.groups:
            group, places, last = entry
            lr = float(group["lr"])
            if lr != last:
                for l, i in places:
                    cpp_optimizer.set_lr(l, i, lr)
                entry[2] = lr
