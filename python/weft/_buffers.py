"""Rank 0's buffers at every training forward, as DDP's broadcast_buffers, with a meeting
only for the buffers a forward changes (Note [Buffers no forward changes])."""

import torch

# Note [Buffers no forward changes]
# ---------------------------------
# Rule: with broadcast_buffers=True, the buffers a training forward of the module
# changes in place (BatchNorm's statistics) are broadcast from rank 0 at the start of
# every training forward, as DDP does; every buffer at the first; the others (a causal
# mask, a table of positions) are not broadcast again, but each is compared at every
# training forward with its value after the last (the same tensor, the same values:
# BatchNorm's kernel changes its statistics without bumping their version counters)
# and one that changed raises ValueError on the rank that changed it. Which buffers a
# forward changes is rank 0's training forward of its profiling copy
# (forward_changed_buffers), so every rank agrees. Invariant: every rank starts every
# training forward with rank 0's buffers, as under DDP, or one of them fails naming the
# buffer. Why: a broadcast is a meeting of every rank at every forward, a wait for the
# slowest; the language model's constant mask cost its local SGD 8% of each step.
# broadcast_buffers="always" is DDP's own: every buffer at every training forward.
#
# Note [When DDP broadcasts buffers]
# ----------------------------------
# Rule: as DDP, a forward broadcasts where the forward before it ran with gradients
# and outside no_sync() (the first always); one that is not a training forward (rank 0
# may evaluate alone) leaves its broadcast to the next training forward. Invariant:
# gradient accumulation in no_sync() and evaluations between steps keep each rank's
# buffers as DDP keeps them. Why: DDP broadcasts only after a synchronised forward, so
# inside no_sync() every rank's BatchNorm accumulates its own statistics; broadcasting
# at every training forward gave another model (test_buffers, "+accumulate").


def _same(tensor, value):
    """Whether `tensor` still holds `value` (NaN where it held NaN)."""
    if tensor.shape != value.shape or tensor.dtype != value.dtype:
        return False
    if tensor.is_floating_point() or tensor.is_complex():
        return bool(((tensor == value) | (tensor.isnan() & value.isnan())).all())
    return torch.equal(tensor, value)


def forward_changed_buffers(module, run):
    """The names of the buffers that a training forward of `module` (run()) replaces or
    changes. Leaves the module in the mode it was in."""
    before = {name: (b, b.detach().clone()) for name, b in module.named_buffers()}
    training = module.training
    module.train(True)
    try:
        with torch.enable_grad():
            run()
    finally:
        module.train(training)
    after = dict(module.named_buffers())
    return sorted(name for name, (b, value) in before.items() if after.get(name) is not b or not _same(b, value))


class Buffers:
    """What one rank broadcasts before each training forward of `module` (Note [Buffers
    no forward changes]): `changed` names the buffers a forward changes, or is None for
    broadcast_buffers="always"."""

    def __init__(self, job, module, changed, rank):
        self._job, self._module, self._rank = job, module, rank
        named = list(module.named_buffers())
        self._all = [b for _, b in named]
        self._every_forward = self._all if changed is None else [b for n, b in named if n in changed]
        self._watched = [] if changed is None else [(n, b) for n, b in named if n not in changed]
        self._values = None  # the watched buffers' values after the first training forward's broadcast
        self._due = True  # Note [When DDP broadcasts buffers]

    def before_forward(self, training):
        """Before each forward of the wrapper; `training`: in training mode with gradients."""
        if not training:
            return  # a broadcast due stays due for the next training forward
        if self._values is None:
            self._job.broadcast_buffers(self._all)
            self._values = [b.detach().clone() for _, b in self._watched]
        else:
            self._check()
            if self._due and self._every_forward:
                self._job.broadcast_buffers(self._every_forward)
        self._due = False

    def after_forward(self, synced):
        """After each forward; `synced`: it ran with gradients, outside no_sync()."""
        self._due = self._due or synced

    def _check(self):
        if not self._watched:
            return
        now = dict(self._module.named_buffers())
        for (name, b), value in zip(self._watched, self._values):
            if now.get(name) is not b or not _same(b, value):
                raise ValueError(
                    f"buffer {name!r} changed on rank {self._rank} outside a training forward, or in one that "
                    "did not change it while weft profiled the module: weft broadcasts rank 0's buffers at "
                    "each training forward only where a forward changes them, and keeps the others as they "
                    "were (docs/python.md, \"Buffers\"); pass broadcast_buffers='always' to broadcast every "
                    "buffer at every training forward, as DDP does")
