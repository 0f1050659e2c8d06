"""Where the optimizer step happens: weft.DataParallel's update modes (docs/python.md, "Update modes").

- "ddp": PyTorch DDP's semantics. backward() returns with every .grad holding the
  averaged gradient (the engine runs the schedule's messages, then waits for the
  last), and the user's own optimizer.step() runs: any optimizer, clipping,
  accumulation, any scheduler, optimizer.state_dict(). Under local SGD, PyTorch
  PostLocalSGD's: every backward is local, the user's step() steps, and the
  averages the schedule makes in that iteration start after it.
- "overlap": the engine steps each layer with weft's C++ mirror of the optimizer
  as soon as the layer's gradient is averaged, inside backward(), so that the
  next forward overlaps the messages; optimizer.step() marks the iteration. What
  it cannot honour it refuses at the first occurrence (Note [What the overlapped
  update refuses]).
- "auto" (the default): "ddp" for the first iteration, watched; "overlap" from the
  second when that iteration did nothing the overlapped update refuses, the
  optimizer is mirrored and every rank agrees; "ddp" for good otherwise.

Note [What the overlapped update refuses]
-----------------------------------------
The overlapped update has applied an iteration's gradients before the user's code
after backward() runs, so anything that code would change in the update is a
different model, and raises RuntimeError naming the habit and the fix:
  - a .grad changed between backward() and step() (clip_grad_norm_, scaling):
    tensor version counters show it, because the engine's own zeroing and writes
    do not move them (Note [Zeroing unseen], runtime/model/optimizer.cc). A write
    through `.data` moves no counter (torch 1.13's clip_grad_value_ writes so):
    torch.nn.utils' two clipping functions are wrapped to say so themselves
    (guard_clipping), and the iteration "auto" watches compares the gradients'
    values too. A `p.grad.data` write of the user's own is the one blind spot;
  - a .grad changed between step() and the next backward() other than by
    optimizer.zero_grad()/model.zero_grad() (which wait for nothing: the engine
    zeroes), or not zeroed at all (DDP would add the next gradient to it);
  - a second backward() before step() outside no_sync(), a step() without a
    backward(), a step(closure);
  - an optimizer option changed between backward() and step() (the update used the
    value of before), a param group added, amsgrad or maximize switched on.
Options changed between step() and the next backward() (any lr_scheduler) are
honoured: the mirror reads them all before each backward.
"""

import functools

import torch

from ._optim import mirror_reason

UPDATES = ("auto", "ddp", "overlap")


def steps_outside(update):
    """Whether the planner prices the user's own step after each backward for this mode
    (Note [The workers' own step], src/sim/simulator.cc): "ddp"; "auto" plans the
    overlapped update it hopes to keep. ValueError for a mode that is not one of UPDATES."""
    if update not in UPDATES:
        raise ValueError(f"update={update!r}: expected one of {', '.join(UPDATES)}")
    return update == "ddp"


DDP_HINT = "pass update='ddp' to weft.DataParallel for DDP's semantics (your optimizer steps after the messages)"


# id(parameter) -> the Update of the wrapper that trains it (guard_clipping).
_UPDATES_OF = {}


def guard_clipping():
    """Wraps torch.nn.utils.clip_grad_norm_ and clip_grad_value_ so that, given a
    parameter of a weft.DataParallel, they tell its Update (Note [What the
    overlapped update refuses]). Called once, when weft is imported."""
    from torch.nn.utils import clip_grad

    def guarded(clip):
        @functools.wraps(clip)
        def call(parameters, *args, **kwargs):
            parameters = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
            for update in {id(u): u for u in (_UPDATES_OF.get(id(p)) for p in parameters) if u}.values():
                update.clipped(clip.__name__)
            return clip(parameters, *args, **kwargs)
        call._weft_guarded = True
        return call

    for owner in (torch.nn.utils, clip_grad):
        for name in ("clip_grad_norm_", "clip_grad_value_"):
            clip = getattr(owner, name)
            if not getattr(clip, "_weft_guarded", False):
                setattr(owner, name, guarded(getattr(clip_grad, name) if owner is not clip_grad else clip))


def _marks(params):
    """What each gradient is now: (storage, version), or None without one."""
    return [None if p.grad is None else (p.grad.data_ptr(), p.grad._version) for p in params]


class Update:
    """One wrapper's update mode, and the checks of its user's loop."""

    def __init__(self, wrapper, requested, optimizer, params, family):
        self.w = wrapper
        self.optimizer = optimizer
        self.params = params  # the module's trainable parameters
        self.requested = requested
        # Local SGD under "ddp": the user steps, then weft averages (Note [Local SGD
        # under the user's step], src/runtime/comm/engine.h). Servers always step.
        self.local = family == "local_sgd"
        if family == "ps" or requested == "overlap":
            self.mode = "overlap"
        else:
            self.mode = "ddp"
        self.watching = requested == "auto" and self.mode == "ddp"
        self.steps = 0
        self.backwards = 0        # synchronised backwards since the last step
        self.local_backwards = 0  # no_sync() backwards since the last step
        self.zeroed = False       # optimizer.zero_grad() or model.zero_grad() since the last step
        self.marks = None
        self.seen = None          # auto: a habit of the watched iteration that overlap refuses
        self.values = None        # auto: the watched iteration's averaged gradients
        self._patch(optimizer)
        for p in params:
            _UPDATES_OF[id(p)] = self

    # -- the user's calls ----------------------------------------------------

    def before_backward(self, synced):
        """The backward reached the module's output; nothing is communicated yet."""
        if self.backwards:
            self._habit(f"a second backward() before optimizer.step(){'' if synced else ' (inside no_sync())'}",
                        "the first one's update is applied; accumulate gradients with `with model.no_sync():` "
                        "around every backward but the last")
        if self.mode == "overlap" and self.steps and not self.local_backwards:
            if self.marks is not None and _marks(self.params) != self.marks:
                self._refuse("a .grad was changed or replaced between optimizer.step() and the next backward() "
                             "other than by optimizer.zero_grad() or model.zero_grad()",
                             "zero gradients with optimizer.zero_grad(); the engine owns .grad until its update")
            if not self.zeroed:
                self._refuse("no optimizer.zero_grad() or model.zero_grad() since the last step(): DDP would add "
                             "this backward's gradient to the last one's", "call optimizer.zero_grad() each iteration")
        if self.mode == "overlap" and synced:
            reason = mirror_reason(self.optimizer)
            if reason is not None:
                self._refuse(f"the optimizer changed: {reason}", DDP_HINT)
            if len(self.optimizer.param_groups) != self.w._mirror.groups:
                self._refuse("a param group was added to the optimizer after wrapping", DDP_HINT)
            self.w._mirror.sync(self.w._cpp_optimizer)

    def after_backward(self, synced):
        if synced:
            self.backwards += 1
        else:
            self.local_backwards += 1
        self.marks = _marks(self.params)
        if self.watching:
            self.values = [None if p.grad is None else p.grad.detach().clone() for p in self.params]

    def clipped(self, name):
        """torch.nn.utils.NAME was given this wrapper's parameters (guard_clipping)."""
        self._habit(f"a .grad was changed between backward() and optimizer.step() ({name})", DDP_HINT)

    def engine_sees_backward(self):
        """Whether a synchronised backward drives the engine; under local SGD with DDP's
        semantics the user's step() does (stepped_outside), once per step."""
        return not (self.local and self.mode == "ddp")

    def step(self, original, closure):
        if self.mode == "ddp":
            if self.watching:
                self._watch(closure)
            result = original(closure) if closure is not None else original()
            if self.local:
                self.w._engine.stepped_outside()
            self._stepped()
            if self.watching:
                self._decide()
            return result
        if closure is not None:
            self._refuse("optimizer.step(closure)", DDP_HINT)
        if not self.backwards:
            self._refuse("optimizer.step() without a synchronised backward() since the last step"
                         + (" (only backwards inside no_sync())" if self.local_backwards else ""),
                         "torch would step on the gradients as they are; " + DDP_HINT)
        if self.marks is not None and _marks(self.params) != self.marks:
            self._refuse("a .grad was changed between backward() and optimizer.step() (clip_grad_norm_, "
                         "clip_grad_value_, scaling)", DDP_HINT)
        if len(self.optimizer.param_groups) != self.w._mirror.groups:
            self._refuse("a param group was added to the optimizer after wrapping", DDP_HINT)
        changed = self.w._mirror.changed_since_sync()
        if changed is not None:
            self._refuse(f"an optimizer option changed between backward() and optimizer.step() ({changed}); "
                         "the update used the value before it", "step the scheduler after optimizer.step(), or "
                         + DDP_HINT)
        self._stepped()
        return None

    def zero_grad(self, set_to_none):
        """optimizer.zero_grad() and model.zero_grad(): the engine zeroes when it steps."""
        if self.mode == "ddp":
            self.w.module.zero_grad(set_to_none=set_to_none)
        self.zeroed = True

    # -- internals -----------------------------------------------------------

    def _stepped(self):
        self.steps += 1
        self.backwards = self.local_backwards = 0
        self.zeroed = False

    def _habit(self, what, fix):
        if self.mode == "overlap":
            self._refuse(what, fix)
        if self.watching and self.seen is None:
            self.seen = what

    def _refuse(self, what, fix):
        raise RuntimeError(f"weft.DataParallel (update='overlap'): {what}: the overlapped update cannot honour "
                           f"it, and the model would silently differ from DDP's. Fix: {fix}")

    def _watch(self, closure):
        """auto, at the watched iteration's step(): what the overlapped update would refuse."""
        if self.seen is not None:
            return
        reason = mirror_reason(self.optimizer)
        if reason is not None:
            self.seen = reason
        elif closure is not None:
            self.seen = "optimizer.step(closure)"
        elif self.backwards != 1 or self.local_backwards:
            self.seen = f"{self.backwards + self.local_backwards} backward() calls before optimizer.step()"
        elif self.marks is not None and _marks(self.params) != self.marks or any(
                (v is None) != (p.grad is None) or (v is not None and not torch.equal(v, p.grad))
                for v, p in zip(self.values or [], self.params)):
            self.seen = "a .grad changed between backward() and optimizer.step() (e.g. clip_grad_norm_)"
        self.values = None

    def _decide(self):
        """Every rank overlaps from the next iteration, or none does."""
        self.watching = False
        job = self.w._job
        verdict = "" if self.seen is None else self.seen
        job.set(f"weft/python/update/{job.rank}", verdict)
        seen = [job.get(f"weft/python/update/{r}").decode() for r in range(self.w.workers)]
        why = next((s for s in seen if s), None)
        if why is not None:
            semantics = ("PostLocalSGD's semantics (your optimizer steps, then the averages start)" if self.local
                         else "DDP semantics (your optimizer steps after the messages)")
            self.w._say_once(f"update: {semantics}: the first iteration had {why}, which the overlapped update "
                             "cannot honour")
            return
        self.w._overlap_from_now()
        self.marks = _marks(self.params)
        self.w._say_once("update: overlapped from the second iteration (each layer stepped by weft's mirror of "
                         "the optimizer as soon as it is averaged; pass update='ddp' to keep DDP's semantics)")

    def _patch(self, opt):
        """optimizer.step/zero_grad/state_dict/load_state_dict dispatch on the mode."""
        update, w = self, self.w
        step, zero_grad = opt.step, opt.zero_grad
        state_dict, load_state_dict = opt.state_dict, opt.load_state_dict

        def patched_step(optimizer, closure=None):
            result = update.step(step, closure)
            optimizer._step_count = getattr(optimizer, "_step_count", 0) + 1
            return result
        patched_step._with_counter = True  # counts _step_count itself, as lr_scheduler's wrapper would

        def patched_zero_grad(optimizer, set_to_none=False):
            if update.mode == "ddp":
                zero_grad(set_to_none=set_to_none)
            update.zeroed = True

        def patched_state_dict(optimizer):
            if update.mode == "overlap" and w._engine is not None:
                w._state_to_torch()
                try:
                    return state_dict()
                finally:
                    optimizer.state.clear()
            return state_dict()

        def patched_load_state_dict(optimizer, state):
            load_state_dict(state)
            if update.mode == "overlap" and w._engine is not None:
                w._state_from_torch()

        self._originals = {"step": step, "zero_grad": zero_grad, "state_dict": state_dict,
                           "load_state_dict": load_state_dict}
        opt.step = patched_step.__get__(opt)
        opt.zero_grad = patched_zero_grad.__get__(opt)
        opt.state_dict = patched_state_dict.__get__(opt)
        opt.load_state_dict = patched_load_state_dict.__get__(opt)

    def release(self):
        """finish(): the optimizer's own methods again."""
        for name, method in self._originals.items():
            setattr(self.optimizer, name, method)
        for p in self.params:
            _UPDATES_OF.pop(id(p), None)
