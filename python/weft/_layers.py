"""A module's layers and their measured times (docs/python.md, "Layers").

A layer is a submodule whose forward is where its parameters are used: before it
runs, weft.DataParallel waits until the schedule says its parameters are final
(Engine::wait_for_forward). By default the layers are the submodules that own
parameters directly, in the order of their first call in the first forward; a
parameter owned by two of them (tied weights) belongs to the first one called; a
parameterised submodule that the forward never calls (its parameters used by an
ancestor, as nn.MultiheadAttention uses out_proj's) joins its nearest called
ancestor. With layers=[m1, m2, ...] the user gives the layers in forward order,
each owning every parameter under it not owned by an earlier one.
"""

import statistics
import time

import torch


def first_calls(module, run):
    """Names of module's submodules (itself "") in the order of their first call in run()."""
    order, seen, handles = [], set(), []
    for name, sub in module.named_modules():
        def hook(_m, _args, name=name):
            if name not in seen:
                seen.add(name)
                order.append(name)
        handles.append(sub.register_forward_pre_hook(hook))
    try:
        run()
    finally:
        for h in handles:
            h.remove()
    return order


def trainable(params):
    return [p for p in params if p.requires_grad]


def assign(module, called, user_layers=None):
    """[(name, [params])] of the layers, in forward order.

    called: module names in first-call order (first_calls); user_layers: module
    names the user gave as layers, in order, or None. THROWS ValueError naming the
    parameters no layer holds (user layers only).
    """
    modules = dict(module.named_modules())
    taken = set()
    layers = []
    if user_layers is not None:
        for name in user_layers:
            params = [p for p in trainable(modules[name].parameters()) if id(p) not in taken]
            taken.update(id(p) for p in params)
            layers.append((name, params))
        names = {id(p): n for n, p in module.named_parameters()}
        missing = [names[id(p)] for p in trainable(module.parameters()) if id(p) not in taken]
        if missing:
            raise ValueError(f"layers: parameters {', '.join(missing)} are in none of the given layers; "
                             "give layers that hold every parameter that requires a gradient")
        return [(n, ps) for n, ps in layers if ps]
    rank = {name: i for i, name in enumerate(called)}
    owners = {}  # layer name -> params
    for name in called:
        params = [p for p in trainable(modules[name].parameters(recurse=False)) if id(p) not in taken]
        if params:
            taken.update(id(p) for p in params)
            owners[name] = params
    # Parameterised submodules never called: their parameters join the nearest
    # called ancestor (the root is always called).
    for name, sub in module.named_modules():
        params = [p for p in trainable(sub.parameters(recurse=False)) if id(p) not in taken]
        if not params:
            continue
        ancestor = name
        while ancestor not in rank:
            ancestor = ancestor.rpartition(".")[0]
        taken.update(id(p) for p in params)
        owners.setdefault(ancestor, []).extend(params)
    return sorted(owners.items(), key=lambda item: rank[item[0]])


def tensors_in(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from tensors_in(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from tensors_in(v)


def surrogate_loss(output):
    """A scalar whose backward reaches every output: the sum of the float outputs."""
    parts = [t.float().sum() for t in tensors_in(output) if t.requires_grad]
    if not parts:
        raise ValueError("the module's output has no tensor that requires a gradient; nothing to train")
    return sum(parts)


def measure(module, layers, run, loss_of, warmup=1, iterations=3, together=None):
    """Per-layer forward and backward seconds, medians over `iterations` runs after `warmup`.

    layers: [(module name, [params])] of `module` in forward order; run() calls
    the module and returns its output; loss_of(output) is the scalar to
    differentiate. The forward is cut at each layer's first call, the backward at
    the moment each layer's last gradient is computed (layers finish L-1 down to
    0, as the profile's model has them). together: a _C.ProfilingTogether that the
    other workers measure beside (Note [Profiled as trained],
    runtime/measure/layer_profiler.h): met before the timed runs, and untimed runs
    follow until every worker is done.
    """
    modules = dict(module.named_modules())
    count = len(layers)
    fp_runs, bp_runs = [], []
    for repetition in range(warmup + iterations):
        if repetition == warmup and together is not None:
            together.arrive()
        starts = [None] * count
        ready = [None] * count
        handles = []
        for l, (name, params) in enumerate(layers):
            def pre(_m, _args, l=l):
                if starts[l] is None:
                    starts[l] = time.perf_counter()
            handles.append(modules[name].register_forward_pre_hook(pre))
            for p in params:
                def grad_hook(grad, l=l):
                    ready[l] = time.perf_counter()
                    return grad
                handles.append(p.register_hook(grad_hook))
        try:
            begin = time.perf_counter()
            output = run()
            loss = loss_of(output)
            forward_end = time.perf_counter()
            loss.backward()
            backward_end = time.perf_counter()
        finally:
            for h in handles:
                h.remove()
        module.zero_grad(set_to_none=True)
        if repetition < warmup:
            continue
        # Forward: from each layer's first call to the next one's (the last to the loss).
        marks = [s if s is not None else begin for s in starts]
        fp = []
        for l in range(count):
            following = [m for m in marks[l + 1:] if m >= marks[l]]
            end = min(following) if following else forward_end
            fp.append(max(end - marks[l], 0.0))
        # Backward: layer l's share ends when its last gradient is computed.
        bp, previous = [0.0] * count, forward_end
        for l in reversed(range(count)):
            at = ready[l] if ready[l] is not None else previous
            at = min(max(at, previous), backward_end)
            bp[l] = at - previous
            previous = at
        bp[0] += max(backward_end - previous, 0.0)
        fp_runs.append(fp)
        bp_runs.append(bp)
    while together is not None and together.keep_computing():
        loss_of(run()).backward()
        module.zero_grad(set_to_none=True)
    fp = [statistics.median(run[l] for run in fp_runs) for l in range(count)]
    bp = [statistics.median(run[l] for run in bp_runs) for l in range(count)]
    # Note [Time slices] (runtime/measure/layer_profiler.h): scaled to add up to the median run.
    medians = sum(fp) + sum(bp)
    scale = statistics.median(sum(f) + sum(b) for f, b in zip(fp_runs, bp_runs)) / medians if medians > 0 else 1.0
    return [t * scale for t in fp], [t * scale for t in bp]
