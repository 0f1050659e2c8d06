"""The user's optimizer, mirrored per layer in C++ (docs/python.md, "Update modes").

torch.optim.SGD, Adam and AdamW (exactly those classes, without amsgrad or
maximize) can be mirrored: weft.DataParallel gives the engine one C++
LayerOptimizer (src/runtime/model/optimizer.h) with each parameter's options from its
param group, so that in the overlapped update the engine steps layer l the moment
its gradient is averaged. Every option of every group (lr, momentum, dampening,
nesterov, betas, eps, weight_decay) is read again before each backward, so any
lr_scheduler — one that cycles momentum or betas too — gives torch's numbers.

The optimizer's state has one owner at a time: torch's `optimizer.state` while
the user's step() runs (DDP semantics), the C++ optimizer while the engine steps
(overlapped). `cpp_state` and `put_torch_state` carry it across in both
directions, in torch 1.13's layout ("momentum_buffer"; "step", "exp_avg",
"exp_avg_sq"), so that `optimizer.state_dict()` is torch's in either mode.
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


def inner_kind(optimizer):
    """The C++ kind of `optimizer` (sgd, momentum, adam, adamw) that the outer optimizer's
    measured defaults are for (src/runtime/model/outer_options.h); "other" for one weft
    does not mirror."""
    if mirror_reason(optimizer) is not None:
        return "other"
    return group_options(optimizer, optimizer.param_groups[0])["kind"]


# The engine neither steps nor zeroes the parameter: the user's step() does, or
# nobody (a parameter of the module that the optimizer does not hold, as torch).
NOT_STEPPED = {"kind": "none"}


class Mirror:
    """Where each of the optimizer's parameters is in the engine's layers, and the
    options last given to the C++ optimizer."""

    def __init__(self, optimizer, layers):
        self.optimizer = optimizer
        self.layers = layers
        self.where = {}  # id(param) -> (layer, index)
        for l, params in enumerate(layers):
            for i, p in enumerate(params):
                self.where[id(p)] = (l, i)
        self.groups = len(optimizer.param_groups)
        self.given = {}  # (layer, index) -> options dict last given to C++

    def options(self, stepped):
        """options[l][i] for the C++ optimizer's constructor: the groups' when `stepped`."""
        out = [[dict(NOT_STEPPED) for _ in params] for params in self.layers]
        if stepped:
            for place, o in self.current().items():
                out[place[0]][place[1]] = o
        self.given = {(l, i): out[l][i] for l in range(len(out)) for i in range(len(out[l]))}
        return out

    def current(self):
        """{(layer, index): options} of every parameter the optimizer holds, as its groups say now."""
        out = {}
        for group in self.optimizer.param_groups:
            o = group_options(self.optimizer, group)
            for p in group["params"]:
                if id(p) in self.where:
                    out[self.where[id(p)]] = o
        return out

    def sync(self, cpp_optimizer):
        """Gives the C++ optimizer every option changed since the last call."""
        for place, o in self.current().items():
            if self.given.get(place) != o:
                cpp_optimizer.set_options(place[0], place[1], o)
                self.given[place] = o

    def stop_stepping(self, cpp_optimizer):
        """Every parameter back to "none": the user's step() steps from now on."""
        for place, o in self.given.items():
            if o != NOT_STEPPED:
                cpp_optimizer.set_options(place[0], place[1], NOT_STEPPED)
                self.given[place] = dict(NOT_STEPPED)

    def changed_since_sync(self):
        """A phrase naming an option changed since the last sync, or None."""
        for place, o in self.current().items():
            given = self.given.get(place)
            if given is not None and given != o:
                field = next((k for k in o if o[k] != given.get(k)), "kind")
                return f"{field} {given.get(field)} -> {o[field]}"
        return None

    # -- the state, in both directions ---------------------------------------

    def _adam(self):
        return isinstance(self.optimizer, (torch.optim.Adam, torch.optim.AdamW))

    def cpp_state(self):
        """torch's optimizer.state as the C++ optimizer's state() names it.

        RAISES ValueError if the parameters of one layer have different step counts
        (the C++ optimizer counts steps per layer).
        """
        steps = [0] * len(self.layers)
        out = {}
        for p, s in self.optimizer.state.items():
            if id(p) not in self.where or not s:
                continue
            l, i = self.where[id(p)]
            if self._adam():
                count = int(s["step"].item() if torch.is_tensor(s["step"]) else s["step"])
                if steps[l] not in (0, count):
                    raise ValueError(f"optimizer state: the parameters of layer {l} have taken {steps[l]} and "
                                     f"{count} steps; weft's overlapped update steps a layer's parameters together")
                steps[l] = count
                out[f"m/{l}/{i}"] = s["exp_avg"].detach().clone()
                out[f"v/{l}/{i}"] = s["exp_avg_sq"].detach().clone()
            else:
                steps[l] = max(steps[l], 1)
                if s.get("momentum_buffer") is not None:
                    out[f"m/{l}/{i}"] = s["momentum_buffer"].detach().clone()
        out["steps"] = torch.tensor(steps, dtype=torch.int64)
        return out

    def put_torch_state(self, state):
        """Sets torch's optimizer.state from the C++ optimizer's state() (torch 1.13's layout)."""
        steps = state["steps"].tolist()
        for group in self.optimizer.param_groups:
            for p in group["params"]:
                if id(p) not in self.where:
                    continue
                l, i = self.where[id(p)]
                self.optimizer.state.pop(p, None)
                if steps[l] == 0:
                    continue
                if self._adam():
                    if f"m/{l}/{i}" not in state:
                        continue
                    self.optimizer.state[p] = {"step": torch.tensor(float(steps[l])),
                                               "exp_avg": state[f"m/{l}/{i}"],
                                               "exp_avg_sq": state[f"v/{l}/{i}"]}
                elif p.grad is not None or f"m/{l}/{i}" in state:
                    self.optimizer.state[p] = {"momentum_buffer": state.get(f"m/{l}/{i}")}
