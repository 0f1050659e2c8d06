"""weft.DataParallel: a user's nn.Module trained with one of weft's schedules.

The schedule is built by the C++ schedulers and executed by the C++ engine
(src/runtime/comm/engine.h); this file only connects them to the module: it finds the
layers, measures them on rank 0, gives every parameter to the engine, and calls
the engine where `weft train`'s loop does (docs/python.md).
"""

import contextlib
import copy
import json
import os
import re
import sys
import warnings
import weakref

import torch
from torch import nn

from . import _C
from ._buffers import Buffers, forward_changed_buffers
from ._layers import assign, first_calls, measure, surrogate_loss, tensors_in
from ._optim import Mirror, inner_kind, mirror_reason
from ._update import Update, steps_outside

# Options with the command line's names and defaults (`weft train --help`); None:
# the command line's default (partition and credit: tuned, as `weft plan` does).
SCHEDULE_OPTIONS = {
    "H": 5,
    "T": 3,
    "partition": None,
    "credit": None,
    "easgd_alpha": None,
    "easgd_beta": 0.9,
    "bandwidth": "1Gbit",
    "server_bandwidth": None,
    "latency": "50us",
    "network": None,
    "host": None,                    # a host description (`weft profile --host FILE`)
    "compression": "none",           # the wire encoding of gradient messages (docs/compression.md)
    "sites": None,                   # "AxB": A sites of B ranks, ranks in order (docs/strategies.md, Sites)
    "topology": None,                # a topology file (docs/formats.md, Topology), instead of sites
    "wan_bandwidth": None,           # with sites: the links between sites
    "wan_latency": None,
    "hierarchical": False,           # average across sites by sites
    "site_every": 0,                 # local SGD: each site also averages every N iterations
}
# Options of the wrapper itself.
WRAPPER_OPTIONS = {
    "profile": None,                 # a profile file (`weft profile`); None = the workers measure
    "layers": None,                  # the layers, as modules, in forward order; None = found
    "servers": None,                 # parameter servers among the ranks; None = $WEFT_SERVERS or 0
    "steps": None,                   # iterations the job trains (parameter servers need it)
    "find_unused_parameters": False, # a parameter without gradient: error (False) or zero gradient (True)
    "broadcast_buffers": True,       # rank 0's buffers at every training forward; "always": DDP's own
    "failure_timeout": 60.0,         # seconds; as `weft train --failure-timeout`
    "allow": ("ssgd",),              # strategy="auto": the families it may choose from, and "lossy" (codecs)
    "verbose": True,                 # rank 0 says what it runs, on stderr
    "update": "auto",                # where the optimizer steps: auto, ddp, overlap (_update.py)
    "outer_optimizer": None,         # local SGD, EASGD: none or nesterov (docs/local-sgd.md); None: none,
                                     # or strategy="auto"'s choice
    "outer_lr": None,                # None: the measured default for the optimizer (docs/local-sgd.md)
    "outer_momentum": None,
    "trace": None,                   # a file: every worker's measured timeline, written by finish()
    "trace_iterations": _C.TRACE_ITERATIONS,  # the first iterations recorded in trace (weft train's default)
}
ACCEPTED = sorted(SCHEDULE_OPTIONS) + sorted(WRAPPER_OPTIONS)
FAMILIES = ("ssgd", "local_sgd", "ps")
LOSSY = "lossy"  # in `allow`: strategy="auto" may choose a lossy codec too
# The jobs this process joined, as (MASTER_ADDR, MASTER_PORT); the modules and
# optimizers a weft.DataParallel trains until its finish() (not marked on them:
# a deep copy of either is free to be wrapped).
_JOINED = set()
_WRAPPED = weakref.WeakSet()


def strategies():
    """{name: family} of every strategy weft runs ("ssgd", "local_sgd" or "ps")."""
    return dict(_C.strategies())


def _servers_of(value):
    if value is None:
        value = os.environ.get("WEFT_SERVERS", "0")
        try:
            value = int(value)
        except ValueError:
            raise ValueError(f"WEFT_SERVERS={os.environ['WEFT_SERVERS']!r}: expected an integer >= 0") from None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"servers={value!r}: expected an integer >= 0")
    return value


def _job_shape():
    """(rank, world) from the torchrun variables, without connecting."""
    return int(os.environ.get("RANK", "0") or 0), int(os.environ.get("WORLD_SIZE", "1") or 1)


def is_server(servers=None):
    """True on a parameter-server rank: one of the last `servers` ranks of the job."""
    rank, world = _job_shape()
    return rank >= world - _servers_of(servers)


def _float_or_none(value):
    return None if value is None else float(value)


def _say(text):
    print(f"weft: {text}", file=sys.stderr, flush=True)


class DataParallel(nn.Module):
    """Trains `module` data-parallel, its messages scheduled by `strategy`.

    Use it as torch.nn.parallel.DistributedDataParallel: call it, backward the
    loss, call optimizer.step(); call finish() after the last iteration. See
    docs/python.md for the options, the layer, buffer and unused-parameter rules
    and parameter servers.
    """

    def __init__(self, module, optimizer, strategy="wfbp", **options):
        super().__init__()
        unknown = sorted(set(options) - set(ACCEPTED))
        if unknown:
            raise TypeError(f"weft.DataParallel: unknown option{'s' if len(unknown) > 1 else ''} "
                            f"{', '.join(unknown)}; accepted: {', '.join(ACCEPTED)}")
        if not isinstance(module, nn.Module):
            raise TypeError(f"module: expected a torch.nn.Module, got {type(module).__name__}")
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"optimizer: expected a torch.optim.Optimizer, got {type(optimizer).__name__}")
        _check_not_wrapped(module, optimizer)
        steps_outside(options.get("update", "auto"))  # ValueError for an unknown mode, before anything starts
        known = strategies()
        if strategy != "auto" and strategy not in known:
            raise ValueError(f"strategy={strategy!r} is not a weft strategy; accepted: auto, {', '.join(known)}")
        schedule_options = {k: options.get(k, v) for k, v in SCHEDULE_OPTIONS.items()}
        o = {k: options.get(k, v) for k, v in WRAPPER_OPTIONS.items()}
        # Types here; every value is checked by the C++ job (runtime/train/job.h), as
        # weft train checks its flags, and named as these keywords.
        for name in ("H", "T", "site_every"):
            _expect(name, schedule_options[name], int, "an integer")
        if not isinstance(schedule_options["hierarchical"], bool):
            raise TypeError(f"hierarchical={schedule_options['hierarchical']!r}: expected True or False")
        for name in ("sites", "topology", "wan_bandwidth", "wan_latency"):
            if schedule_options[name] is not None:
                _expect(name, schedule_options[name], (str, os.PathLike) if name == "topology" else str, "a string")
        if schedule_options["topology"] is not None:
            schedule_options["topology"] = os.fspath(schedule_options["topology"])
        _expect("failure_timeout", o["failure_timeout"], (int, float), "a number of seconds")
        if o["steps"] is not None:
            _expect("steps", o["steps"], int, "an integer")
        for name in ("outer_lr", "outer_momentum"):
            if o[name] is not None:
                _expect(name, o[name], (int, float), "a number")
        if o["outer_optimizer"] is not None:
            _expect("outer_optimizer", o["outer_optimizer"], str, "a string")
        _expect("trace_iterations", o["trace_iterations"], int, "an integer")
        if not (isinstance(o["broadcast_buffers"], bool) or o["broadcast_buffers"] == "always"):
            raise (ValueError if isinstance(o["broadcast_buffers"], str) else TypeError)(
                f"broadcast_buffers={o['broadcast_buffers']!r}: expected True, False or 'always'")
        if o["trace"] is not None:
            _expect("trace", o["trace"], (str, os.PathLike), "a file name")
            o["trace"] = os.fspath(o["trace"])
            if _job_shape()[0] == 0:  # rank 0 writes it: a typo costs nothing yet
                _C.check_trace(o["trace"], o["trace_iterations"])
        allow = (o["allow"],) if isinstance(o["allow"], str) else tuple(o["allow"])
        if not set(allow) <= set(FAMILIES + (LOSSY,)) or not set(allow) - {LOSSY}:
            raise ValueError(f"allow={o['allow']!r}: expected families among {', '.join(FAMILIES)}, and "
                             f"{LOSSY!r} to let strategy='auto' choose a lossy codec")
        self._servers = _servers_of(o["servers"])
        self._job_options = _C.job_options(strategy, schedule_options, self._servers, o["steps"],
                                           float(o["failure_timeout"]), o["outer_optimizer"] or "",
                                           _float_or_none(o["outer_lr"]), _float_or_none(o["outer_momentum"]),
                                           inner_kind(optimizer), "H" not in options, list(dict.fromkeys(allow)),
                                           steps_outside=steps_outside(o["update"]))

        trainable = [p for p in module.parameters() if p.requires_grad]
        if not trainable:
            raise ValueError(f"module: {type(module).__name__} has no parameters that require a gradient; "
                             "weft trains a module with at least one")
        for name, p in module.named_parameters():
            if p.device.type != "cpu" or p.dtype != torch.float32:
                raise ValueError(f"module: parameter {name} is {p.dtype} on {p.device}; weft trains float32 "
                                 "parameters on the CPU (call module.float())")
        in_module = {id(p) for p in module.parameters()}
        foreign = sum(1 for g in optimizer.param_groups for p in g["params"] if id(p) not in in_module)
        if foreign:
            raise ValueError(f"optimizer: {foreign} of its parameters are not parameters of the module; "
                             "give weft.DataParallel the optimizer over module.parameters()")
        user_layers = None
        if o["layers"] is not None:
            names = {id(m): n for n, m in module.named_modules()}
            user_layers = []
            for m in o["layers"]:
                if id(m) not in names:
                    raise ValueError(f"layers: {type(m).__name__} is not a submodule of the module; "
                                     "accepted: submodules of it, in forward order")
                user_layers.append(names[id(m)])

        self.module = module
        self._optimizer = optimizer
        self._requested = strategy
        self.strategy = strategy
        self._schedule_options = schedule_options
        self._options = o
        self._allow = allow
        self._user_layers = user_layers
        self._engine = None
        self._loaded = None  # weft's state from load_state_dict, applied when the engine starts
        self._finished = False
        self._in_backward = False
        self._handles = []
        self.trace_summary = None  # rank 0, after finish() with trace=FILE: the timeline's summary

        where = (os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT"))
        if where[1] is not None and where in _JOINED:
            raise ValueError(f"weft.DataParallel: this process already joined the job at {where[0]}:{where[1]} "
                             "with another weft.DataParallel; a job has one per process (give the next job "
                             "another MASTER_PORT)")
        self._job = _C.connect(float(o["failure_timeout"]))
        if where[1] is not None:
            _JOINED.add(where)
        self.rank = self._job.rank
        self.world = self._job.world
        self._job_options = self._job_options.with_world(schedule_options, self.world)  # the sites, if any
        self.workers = _C.workers_of(self._job_options, self.world)
        if strategy != "auto":
            self._check_family(strategy)
        elif bool(self._servers) != ("ps" in allow) or (self._servers and o["steps"] is None):
            raise ValueError(f"strategy='auto' with servers={self._servers} and allow={allow!r}: parameter "
                             "servers need 'ps' among the allowed families and steps=N, and 'ps' needs servers")
        # Every rank starts from rank 0's parameters and buffers, as with DDP.
        self._job.broadcast(list(module.parameters()) + list(module.buffers()))
        self._module_buffers = [b for b in module.buffers()]
        if self._servers and self._module_buffers and o["broadcast_buffers"] and self.rank == 0:
            warnings.warn("weft.DataParallel: with parameter servers each worker keeps its own buffers "
                          "(broadcast_buffers needs every rank in each forward; servers are serving)")
        if self.rank >= self.workers:
            self._serve()  # never returns
        self._sync = True  # False inside no_sync()
        self._said = set()
        self._update = None  # _update.py, from the first forward
        self._buffer_sync = None  # _buffers.py, from the first forward where they are broadcast
        self._diverging = None  # rank 0's DivergenceWatch, from the first forward
        _WRAPPED.add(module)
        _WRAPPED.add(optimizer)

    # -- the job -----------------------------------------------------------

    def _check_family(self, strategy):
        """What the strategy's family asks of the optimizer and the update mode (Python objects)."""
        family = strategies()[strategy]
        if family == "ps" and not self._mirrored_optimizer():
            raise ValueError(f"strategy={strategy!r} steps the optimizer on the servers: use torch.optim.SGD, "
                             f"Adam or AdamW ({mirror_reason(self._optimizer)})")
        update = self._options["update"]
        if family == "ps" and update == "ddp":
            raise ValueError(f"update='ddp' with strategy={strategy!r}: parameter servers step the optimizer "
                             "on the servers; DDP's semantics are those of the S-SGD and local SGD strategies")
        if update == "overlap" and not self._mirrored_optimizer():
            raise ValueError(f"update='overlap' steps each layer with weft's mirror of the optimizer: use "
                             f"torch.optim.SGD, Adam or AdamW ({mirror_reason(self._optimizer)}), or "
                             "update='ddp'")

    def _mirrored_optimizer(self):
        return mirror_reason(self._optimizer) is None

    def _setup(self, args, kwargs):
        """The workers measure the layers, rank 0 plans from their median; every rank builds the same schedule."""
        job = self._job
        profile_text, error, extra, recipe = None, "", "", None
        if job.rank < self.workers and (job.rank == 0 or self._options["profile"] is None):
            try:
                # Every worker measures; rank 0 plans from their median (Note [Profiled as trained]).
                together = _C.ProfilingTogether(job, self.workers, "weft/python/profiled")
                # The profiling passes draw from torch's RNG (dropout, a random op in the
                # forward) as often as the other workers keep them computing; forked, the
                # user's first forward draws what it would under DDP.
                try:
                    with torch.random.fork_rng(devices=[]):
                        profile_text, called, changed, why = self._measure(args, kwargs, together)
                    if self._options["profile"] is None:
                        profile_text = together.median(profile_text)
                finally:
                    together.leave()  # where this worker failed, the others go on without it
                if job.rank == 0 and self._requested == "auto":
                    recipe = self._choose(profile_text, why)
                extra = json.dumps({"called": called, "changed_buffers": changed})
            except (ValueError, TypeError, RuntimeError) as e:
                if job.rank != 0:
                    raise
                error = f"{type(e).__name__}: {e}"
        if self._requested == "auto":
            # The recipe rank 0 chose travels beside its plan: every rank trains that one.
            key = "weft/python/auto"
            if job.rank == 0:
                job.set(key, json.dumps({"recipe": recipe, "error": error}))
            chosen = json.loads(job.get(key))
            if chosen["error"] and job.rank != 0:
                raise ValueError(f"rank 0 could not build the schedule: {chosen['error']}")
            if not error:
                self._job_options = self._job_options.with_recipe(chosen["recipe"])
                self._check_family(self._job_options.strategy)
        plan = _C.shared_schedule(job, self._job_options, self.workers, profile_text, extra, error)
        self.strategy = self._job_options.strategy
        shared = json.loads(plan.extra)
        layers = assign(self.module, shared["called"], self._user_layers)
        self._check_profile(plan.profile_json, layers)
        return plan, layers, shared["changed_buffers"]

    def _measure(self, args, kwargs, together):
        """(this worker's profile JSON, module names in first-call order, the buffers a training
        forward changes, what was measured), every worker measuring beside the others (Note
        [Profiled as trained])."""
        o = self._options
        try:
            twin = copy.deepcopy(self.module)  # profiling must leave the trained module untouched
        except Exception as e:
            raise ValueError(f"module: cannot copy it to profile it ({e}); give profile=FILE") from None
        twin.train(self.module.training)
        run = lambda: twin(*args, **kwargs)
        with torch.enable_grad():
            called = first_calls(twin, run)
            layers = assign(twin, called, self._user_layers)
            changed = forward_changed_buffers(twin, run)  # Note [Buffers no forward changes]
            if o["profile"] is not None:
                try:
                    with open(o["profile"]) as f:
                        text = f.read()
                except OSError as e:
                    raise ValueError(f"profile={o['profile']!r}: {e.strerror}") from None
                return text, called, changed, f"the profile {o['profile']}"
            fp, bp = measure(twin, layers, run, surrogate_loss, together=together)
        batch = next((t.shape[0] for t in tensors_in((args, kwargs)) if t.dim() > 0), 1)
        rows = [(name or "(root)", sum(p.numel() for p in params), 4, f, b, [list(p.shape) for p in params])
                for (name, params), f, b in zip(layers, fp, bp)]
        why = (f"the median of the {self.workers} workers' first batches, measured together" if self.workers > 1
               else "its first batch")
        return _C.profile_json(type(self.module).__name__, int(batch), rows), called, changed, why

    def _choose(self, profile_text, why):
        """strategy="auto", rank 0: the recipe (JSON text for JobOptions.with_recipe) — the C++
        choice (plan/auto.h) among the allowed families, or the loaded state's recipe."""
        if self._loaded is not None:
            # As weft train: a resumed auto job trains the recipe its state records, not a new
            # choice from a new measurement (Note [Auto resumes its recipe], runtime/train/trainer.cc).
            recipe = json.dumps(self._loaded["job"])
            if self._options["verbose"]:
                _say(f"strategy=auto resumes the recipe its state records: "
                     f"{self._job_options.with_recipe(recipe).recipe}")
            return recipe
        recipe, reason = self._job_options.choose(profile_text, self.workers, why)
        if self._options["verbose"]:
            _say(reason)
        return recipe

    def _check_profile(self, profile_text, layers):
        profile = json.loads(profile_text)
        given = [layer["params"] for layer in profile["layers"]]
        have = [sum(p.numel() for p in params) for _, params in layers]
        if given != have:
            raise ValueError(f"profile: its layers hold {given} parameters, but the module's layers "
                             f"({', '.join(n or '(root)' for n, _ in layers)}) hold {have}; profile the same "
                             "module with the same layers (weft.profile)")

    def _start(self, args, kwargs):
        plan, layers, changed_buffers = self._setup(args, kwargs)
        self._layers = layers
        params = [ps for _, ps in layers]
        family = strategies()[self.strategy]
        self._update = Update(self, self._options["update"], self._optimizer,
                              [p for ps in params for p in ps], family)
        self._mirror = Mirror(self._optimizer, params)
        stepped = self._update.mode == "overlap"
        self._cpp_optimizer = _C.LayerOptimizer(params, self._mirror.options(stepped))
        self._plan = plan
        self._diverging = _C.DivergenceWatch(self._job_options) if self.rank == 0 else None
        if self._job_options.outer_warning is not None:  # Note [Outer defaults, measured]
            self._say_once(self._job_options.outer_warning)
        first = 0
        if self._loaded is not None:
            self._check_job(self._loaded["job"], check_strategy=True)
            first = self._loaded["iteration"]
        self._engine = _C.Engine(self._job, plan, self._job_options, params, [n or "(root)" for n, _ in layers],
                                 self._cpp_optimizer, self.workers,
                                 bool(self._options["find_unused_parameters"]), first,
                                 self._options["trace_iterations"] if self._options["trace"] else 0)
        if self._loaded is not None:
            self._engine.load_state(self._loaded["tensors"])
            if not stepped and self._mirrored_optimizer() and any(k.startswith("opt/") for k in self._loaded["tensors"]):
                self._mirror.put_torch_state(self._cpp_optimizer.state())  # the user's step() steps first
            self._loaded = None
        if stepped and self._optimizer.state:
            self._state_from_torch()  # optimizer.load_state_dict() before wrapping
        modules = dict(self.module.named_modules())
        for l, (name, _) in enumerate(layers):
            def wait(_m, _args, l=l):
                self._engine.wait_for_forward(l)
            self._handles.append(modules[name].register_forward_pre_hook(wait))
        # Note [Parameters as of the last step]
        # --------------------------------------
        # In the overlapped update a step() returns while layers are still being
        # averaged and stepped. Every module's state_dict() (the user's checkpoint,
        # an EMA, a copy for evaluation) first waits for every update started so
        # far, so it never returns parameters older than the last step(); a hook
        # per submodule, since the user may save any of them. Parameters read
        # directly (p.data) are not seen: model.drain() is for those.
        for sub in modules.values():
            self._handles.append(sub._register_state_dict_hook(lambda *_: self.drain()))
        broadcast = self._options["broadcast_buffers"]
        if broadcast and self._module_buffers and self.world > 1 and not self._servers:
            self._buffer_sync = Buffers(self._job, self.module,
                                        None if broadcast == "always" else changed_buffers, self.rank)
            self._job.open_buffer_group()
        if self.rank == 0 and self._options["verbose"]:
            extra = "" if plan.options_json == "{}" else " " + plan.options_json
            _say(f"{self.strategy}{extra} on {self.workers} worker{'s' if self.workers > 1 else ''}"
                 + (f" and {self._servers} server{'s' if self._servers > 1 else ''}" if self._servers else "")
                 + f", {len(layers)} layers, {plan.messages_per_iteration} messages per iteration, update "
                 + ("overlapped" if stepped else "with DDP's semantics"
                    + (" (watching the first iteration)" if self._update.watching else "")))

    # -- the optimizer's state (_optim.py) -------------------------------------

    def _state_from_torch(self):
        """The C++ optimizer takes torch's optimizer.state (which is then left empty)."""
        self.drain()
        self._cpp_optimizer.load_state(self._mirror.cpp_state())
        self._optimizer.state.clear()

    def _state_to_torch(self):
        self.drain()
        self._mirror.put_torch_state(self._cpp_optimizer.state())

    def _overlap_from_now(self):
        """auto: the engine steps from the next backward on, from the state torch's step left."""
        self._state_from_torch()
        self._update.mode = "overlap"
        self._mirror.sync(self._cpp_optimizer)
        with torch.no_grad():
            for _, params in self._layers:  # the user's next zero_grad() no longer zeroes
                for p in params:
                    if p.grad is not None:
                        p.grad.zero_()

    def _observe_loss(self, loss):
        """weft.Metrics.step's loss on rank 0: says once if the run diverges (Note [A diverging run])."""
        said = self._diverging.add(float(loss)) if self._diverging is not None else None
        if said:
            _say(f"warning: {said}")

    def _say_once(self, text):
        if self.rank == 0 and self._options["verbose"] and text not in self._said:
            self._said.add(text)
            _say(text)

    def _serve(self):
        """A parameter-server rank: serves `steps` iterations, then ends the process (status 0)."""
        plan, layers, _ = self._setup(None, None)
        params = [ps for _, ps in layers]
        optimizer = _C.LayerOptimizer(params, Mirror(self._optimizer, params).options(stepped=True))
        _C.serve(self._job, plan, self._job_options, params, optimizer, self.workers)
        sys.exit(0)

    # -- checkpoints (docs/checkpoints.md) ----------------------------------

    def _identity(self):
        """What a checkpoint of this worker must match to be resumed here: the job's
        identity as weft train records it (runtime/train/job.h), and the rank. Before
        strategy='auto' has chosen, only what does not depend on the strategy."""
        if self.strategy == "auto":
            return {"workers": self.workers, "servers": self._servers, "rank": self.rank}
        return dict(json.loads(self._job_options.identity(self.workers)), rank=self.rank)

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        """state_dict(): the module's tensors ("module.*") and weft's state ("weft.*").

        Drains the engine first: call it between iterations (or after finish()).
        """
        super()._save_to_state_dict(destination, prefix, keep_vars)
        tensors, iteration = {}, 0
        if self._engine is not None:
            self._engine.drain()
            tensors, iteration = self._engine.state(), self._engine.iterations_done
            if self._update.mode == "ddp":  # the optimizer's state is torch's
                tensors = {k: v for k, v in tensors.items() if not k.startswith("opt/")}
                if self._mirrored_optimizer():
                    tensors.update({"opt/" + k: v for k, v in self._mirror.cpp_state().items()})
        elif self._loaded is not None:  # loaded, not trained yet: the same state again
            tensors, iteration = self._loaded["tensors"], self._loaded["iteration"]
        destination[prefix + "weft.job"] = json.dumps(self._identity(), sort_keys=True)
        destination[prefix + "weft.iteration"] = torch.tensor(iteration, dtype=torch.int64)
        for name, t in tensors.items():
            destination[prefix + "weft.state." + name] = t

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        """load_state_dict(): the module's tensors at once; weft's state when training starts."""
        ours = {k[len(prefix) + len("weft."):]: v for k, v in state_dict.items() if k.startswith(prefix + "weft.")}
        rest = {k: v for k, v in state_dict.items() if not k.startswith(prefix + "weft.")}
        if ours:
            loaded = self._parse_state(ours)
            if self._engine is not None:
                raise ValueError(f"load_state_dict: this weft.DataParallel has already trained "
                                 f"{self._engine.iterations_done} iterations; load weft's state into a new one "
                                 "before its first forward")
            if self._servers:
                raise ValueError("load_state_dict: parameter servers hold part of a ps job's state, and "
                                 "weft.DataParallel does not checkpoint them; use `weft train --checkpoint` "
                                 "(docs/checkpoints.md)")
            self._check_job(loaded["job"], check_strategy=self._requested != "auto")
        super()._load_from_state_dict(rest, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)
        if ours:
            self._loaded = loaded

    @staticmethod
    def _parse_state(ours):
        job, iteration = ours.get("job"), ours.get("iteration")
        if not isinstance(job, str):
            raise TypeError(f"load_state_dict: weft.job is {type(job).__name__}; expected the JSON text "
                            "state_dict() wrote")
        try:
            job = json.loads(job)
        except ValueError:
            raise ValueError("load_state_dict: weft.job is not JSON; expected what state_dict() wrote") from None
        if not isinstance(job, dict):
            raise ValueError("load_state_dict: weft.job is not an object; expected what state_dict() wrote")
        if not (isinstance(iteration, torch.Tensor) and iteration.dtype == torch.int64 and iteration.dim() == 0):
            raise TypeError(f"load_state_dict: weft.iteration is {type(iteration).__name__}; expected a 0-d "
                            "int64 tensor")
        if iteration.item() < 0:
            raise ValueError(f"load_state_dict: weft.iteration {iteration.item()} is negative")
        tensors = {}
        for key, value in ours.items():
            if key in ("job", "iteration"):
                continue
            if not key.startswith("state.") or not isinstance(value, torch.Tensor):
                raise TypeError(f"load_state_dict: weft.{key} is not weft state (a tensor named weft.state.*)")
            tensors[key[len("state."):]] = value
        return {"job": job, "iteration": int(iteration.item()), "tensors": tensors}

    def _check_job(self, job, check_strategy):
        here = self._identity()
        # The strategy first: the other fields follow from it.
        for key in sorted(here, key=lambda k: (k != "strategy", k)):
            value = here[key]
            if key == "strategy" and not check_strategy:
                continue
            if job.get(key) != value:
                raise ValueError(f"load_state_dict: the state is of another job: its {key} is "
                                 f"{job.get(key)!r}, this job's is {value!r}")

    # -- training ----------------------------------------------------------

    def forward(self, *args, **kwargs):
        if self._finished:
            raise RuntimeError("weft.DataParallel: finish() was called; the job's messages are closed")
        if self._engine is None:
            self._start(args, kwargs)
        training = self.module.training and torch.is_grad_enabled()
        if self._buffer_sync is not None:
            self._buffer_sync.before_forward(training)
        if training:
            self._engine.begin_forward()  # Note [Python's timeline] (src/python/module.cc)
        try:
            output = self.module(*args, **kwargs)
        finally:
            if training:
                self._engine.end_forward()  # a forward that raised times nothing after it
        if self._buffer_sync is not None:
            self._buffer_sync.after_forward(torch.is_grad_enabled() and self._sync)
        if training:
            synced = self._sync
            for t in tensors_in(output):
                if t.requires_grad:
                    t.register_hook(lambda grad: self._on_output_gradient(grad, synced))
        return output

    @contextlib.contextmanager
    def no_sync(self):
        """As DDP's: backwards inside accumulate their gradients locally; the next backward
        outside communicates the sum once."""
        before, self._sync = self._sync, False
        try:
            yield
        finally:
            self._sync = before

    def _on_output_gradient(self, grad, synced):
        # The backward reached the module's output: it has not touched a parameter yet.
        if not self._in_backward:
            self._update.before_backward(synced)
            self._in_backward = True
            engaged = synced and self._update.engine_sees_backward()
            if engaged:
                self._engine.start_backward()
            torch.autograd.Variable._execution_engine.queue_callback(lambda: self._end_backward(synced, engaged))
        return grad

    def _end_backward(self, synced, engaged):
        self._in_backward = False
        if engaged:
            try:
                self._engine.end_backward()
            except RuntimeError as e:
                found = re.search(r"parameters of layer (\d+) got no gradient", str(e))
                if not found:
                    raise
                name, params = self._layers[int(found.group(1))]
                names = {id(p): n for n, p in self.module.named_parameters()}
                raise RuntimeError(f"weft.DataParallel: parameters of layer {name or '(root)'} got no gradient "
                                   f"in this backward ({', '.join(names[id(p)] for p in params)}); pass "
                                   "find_unused_parameters=True to count them as zero gradients") from None
            if self._update.mode == "ddp":
                self._engine.drain()  # DDP's semantics: .grad is averaged when backward() returns
        self._update.after_backward(synced)

    def zero_grad(self, set_to_none=False):
        """As DDP's module.zero_grad(); with the overlapped update the engine zeroes."""
        if self._engine is None:
            self.module.zero_grad(set_to_none=set_to_none)
        else:
            self._update.zero_grad(set_to_none)

    def drain(self):
        """Blocks until every message so far is done and every layer updated (e.g. before evaluating)."""
        if self._engine is not None and not self._in_backward:
            self._engine.drain()

    def agreed_state_dict(self):
        """The module's state_dict with the parameters every worker agrees on.

        S-SGD: this rank's own (every rank holds them). Local SGD: the workers' mean
        of their parameters; parameter servers (EASGD): the servers' centre as last
        answered. Collective for local SGD: every worker calls it at the same
        iteration. The module's own parameters are left as they are.
        """
        state = self.module.state_dict()  # drains
        if self._engine is None or self.workers == 1:
            return state
        names = {}  # a shared (tied) parameter has every name it is found under in the state
        for prefix, m in self.module.named_modules(remove_duplicate=False):
            for n, p in m._parameters.items():
                if p is not None:
                    names.setdefault(id(p), []).append(f"{prefix}.{n}" if prefix else n)
        params = [p for _, ps in self._layers for p in ps]
        agreed = self._agreed(params)
        if agreed is None:
            return state
        for p, value in zip(params, agreed):
            for n in names[id(p)]:
                state[n] = value
        return state

    def _agreed(self, params):
        """Copies of `params` as the workers agree on them, or None where they already do."""
        family = strategies()[self.strategy]
        if family == "ssgd":
            return None
        if family == "ps":
            flat = self._engine.agreed_parameters()
            if flat is None:
                return None
            out, offset = [], 0
            for p in params:
                out.append(flat[offset:offset + p.numel()].view_as(p).clone())
                offset += p.numel()
            return out
        copies = [p.detach().clone() for p in params]
        self._job.average(copies)
        return copies

    def finish(self):
        """Waits for the last messages and ends the job's messages; call once, after training.

        Every rank then holds the same parameters: S-SGD's, local SGD's average of
        the workers' (whatever steps % H), the servers' centre (EASGD).
        """
        if self._finished:
            return
        self._finished = True
        _WRAPPED.discard(self.module)
        _WRAPPED.discard(self._optimizer)
        if self._update is not None:
            self._update.release()
        if self._engine is not None:
            self._engine.finish()
            if self._options["trace"]:
                summary = self._engine.write_trace(self._options["trace"], steps_outside(self._update.mode))
                if summary is not None:
                    self.trace_summary = json.loads(summary)
                    if self._options["verbose"]:
                        _say(f"measured timeline written to {self._options['trace']} beside the prediction "
                             f"({summary})")
            for h in self._handles:
                h.remove()
            self._handles = []
            if self._update.mode == "overlap":
                self._state_to_torch()  # the optimizer is the user's again, state and all
            if self.workers > 1:
                params = [p for _, ps in self._layers for p in ps]
                agreed = self._agreed(params)
                if agreed is not None:
                    with torch.no_grad():
                        for p, value in zip(params, agreed):
                            p.copy_(value)


def _expect(name, value, types, what):
    """TypeError unless `value` is of `types` (a bool is not a number here)."""
    if isinstance(value, bool) or not isinstance(value, types):
        raise TypeError(f"{name}={value!r}: expected {what}")


def _check_not_wrapped(module, optimizer):
    """Misuse that would otherwise fail deep inside (docs/python.md): ValueError naming it."""
    if isinstance(module, DataParallel):
        raise ValueError("module: it is a weft.DataParallel already; wrap the plain module once")
    if isinstance(module, nn.parallel.DistributedDataParallel):
        raise ValueError("module: it is a torch DistributedDataParallel; give weft.DataParallel the module "
                         "itself (ddp.module), not both")
    if optimizer in _WRAPPED:
        raise ValueError("optimizer: another weft.DataParallel already steps it; give each wrapper an optimizer "
                         "of its own")
    for sub in module.modules():
        if sub in _WRAPPED:
            raise ValueError("module: it (or a submodule) is already wrapped by a weft.DataParallel")
