"""weft: communication scheduling for data-parallel training of your own torch model.

    model = weft.DataParallel(MyNet(), opt, strategy="dcredit", bandwidth="100Mbit")
    for x, y in loader:
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
    model.finish()

The schedules, the engine that executes them and the planner are weft's C++ code
(weft._C); see docs/python.md. Use Debian's /usr/bin/python3, whose torch is the
libtorch weft is built against.
"""

import json as _json

import torch as _torch  # loads libtorch before weft._C needs it

from . import _C
from ._layers import assign as _assign, first_calls as _first_calls, measure as _measure
from ._layers import surrogate_loss as _surrogate_loss, tensors_in as _tensors_in
from ._metrics import Metrics
from ._parallel import DataParallel, is_server, strategies
from ._update import guard_clipping as _guard_clipping, steps_outside as _steps_outside

_guard_clipping()

__all__ = ["DataParallel", "Metrics", "is_server", "plan", "profile", "strategies"]


def profile(module, example_batch, loss_fn=None, *, out=None, layers=None, warmup=1, iterations=3):
    """Measures `module`'s layers on one batch; returns the profile JSON text of `weft profile`.

    example_batch: the input of module's forward (a tensor, or a tuple of its
    arguments), or (input, target) when loss_fn is given: the loss is then
    loss_fn(module(input), target); without loss_fn, the sum of the outputs.
    layers: as weft.DataParallel's. out: a file to write the profile to (for
    `weft plan --profile FILE`). The module is measured as it is (its gradients
    are left at None).
    """
    if not isinstance(module, _torch.nn.Module):
        raise TypeError(f"module: expected a torch.nn.Module, got {type(module).__name__}")
    if loss_fn is not None:
        if not (isinstance(example_batch, (tuple, list)) and len(example_batch) == 2):
            raise ValueError("example_batch: with loss_fn, expected (input, target)")
        inputs, target = example_batch
        loss_of = lambda output: loss_fn(output, target)
    else:
        inputs, loss_of = example_batch, _surrogate_loss
    args = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup={warmup!r}: expected an integer >= 0")
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        raise ValueError(f"iterations={iterations!r}: expected an integer >= 1")
    names = {id(m): n for n, m in module.named_modules()}
    user = None if layers is None else [names[id(m)] for m in layers]
    run = lambda: module(*args)
    called = _first_calls(module, run)
    found = _assign(module, called, user)
    if not found:
        raise ValueError(f"module: {type(module).__name__} has no parameters that require a gradient")
    fp, bp = _measure(module, found, run, loss_of, warmup=warmup, iterations=iterations)
    batch = next((t.shape[0] for t in _tensors_in(args) if t.dim() > 0), 1)
    rows = [(name or "(root)", sum(p.numel() for p in params), 4, f, b, [list(p.shape) for p in params])
            for (name, params), f, b in zip(found, fp, bp)]
    text = _C.profile_json(type(module).__name__, int(batch), rows)
    if out is not None:
        with open(out, "w") as f:
            f.write(text)
    return text


def plan(profile, workers=16, bandwidth="1Gbit", *, latency="50us", strategies=None, arch="allreduce",
         servers=1, server_bandwidth=None, network=None, host=None, update="overlap", **strategy_options):
    """`weft plan --json` as a dict: every strategy's predicted iteration, and the recommended one.

    profile: the JSON text weft.profile returns, a dict of it, or a file name.
    update: where weft.DataParallel's optimizer steps; "ddp" prices your own step after
    each backward, "overlap" (and "auto", which plans it) the engine's per layer.
    strategy_options: H, T, partition, credit, easgd_alpha, easgd_beta, compression
    (unset: the command line's defaults; partition and credit tuned).
    """
    accepted = {"H", "T", "partition", "credit", "easgd_alpha", "easgd_beta", "compression"}
    unknown = sorted(set(strategy_options) - accepted)
    if unknown:
        raise TypeError(f"weft.plan: unknown option {', '.join(unknown)}; accepted: workers, bandwidth, latency, "
                        f"strategies, arch, servers, server_bandwidth, network, host, update, "
                        f"{', '.join(sorted(accepted))}")
    if isinstance(profile, dict):
        text = _json.dumps(profile)
    elif isinstance(profile, str) and profile.lstrip().startswith("{"):
        text = profile
    else:
        try:
            with open(profile) as f:
                text = f.read()
        except (OSError, TypeError) as e:
            raise ValueError(f"profile={profile!r}: expected profile JSON, a dict of it or a file ({e})") from None
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers={workers!r}: expected an integer >= 1")
    options = dict(strategy_options, bandwidth=bandwidth, latency=latency, server_bandwidth=server_bandwidth,
                   network=network, host=host)
    return _json.loads(_C.plan_json(text, workers, options, list(strategies or []), arch, servers,
                                    steps_outside=_steps_outside(update)))
