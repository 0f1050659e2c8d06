#!/usr/bin/python3
"""Times the Python package against what a user would otherwise run, side by side
(BENCHMARKS.md, "The Python package"). Debian's /usr/bin/python3 (python3-torch).

    # weft.DataParallel on examples/cnn.py against `weft train --model cnn`, same strategy:
    tools/python_bench.py overhead --weft build/weft --strategies wfbp,ssgd --nproc 4
    # examples/cnn.py under PyTorch DDP and under weft in each update mode, per link
    # (loopback, or emulated: root):
    tools/python_bench.py update --strategies mgwfbp --bandwidths loopback,100Mbit,20Mbit --nproc 4
    # examples/resnet18_fashion_mnist.py with weft's strategies and with PyTorch DDP,
    # each rank behind an emulated link (root):
    tools/python_bench.py resnet18 --weft build/weft --runs torch-ddp,ssgd,wfbp --bandwidths 100Mbit
    # the same for examples/vit_fashion_mnist.py (a small vision transformer, AdamW)
    # and examples/transformer_lm.py (lm: a character language model, AdamW, clipping):
    tools/python_bench.py vit --runs torch-ddp,wfbp,ssgd+powersgd:2 --bandwidths 100Mbit
    # a race of one family's example under PyTorch's remedies and weft, to a target
    # accuracy (vit, resnet18) or held-out loss (lm), per link and seed:
    tools/python_bench.py race vit --run "ddp=--strategy torch-ddp" \
        --run "fp16=--strategy torch-ddp --compression fp16" \
        --run "powersgd=--strategy torch-ddp --compression powersgd:2" \
        --run "postlocalsgd=--strategy torch-postlocalsgd --H 8" \
        --run "weft-auto=--strategy auto --allow ssgd,local_sgd,lossy" \
        --bandwidths 20Mbit,100Mbit --seeds 0,1,2 --steps 800 --eval-every 50 --target 0.82 \
        --host 20Mbit=host-20Mbit.json --host 100Mbit=host-100Mbit.json  # weft's runs plan with them

Runs go in rounds (every run once, then every run again; in a race, every run on
every link, seed after seed) so that drift on a shared machine falls on all of them
alike. A run's figure is the mean iteration time of the iterations after --warmup,
averaged over the ranks, from the metrics JSON lines every run writes
(docs/formats.md), leaving out the iterations an evaluation paused; each round's
figure and their median are printed, and written with the commands to
OUT/python-bench.json (a race: OUT/race.json, rewritten after every run).
"""

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = "/usr/bin/python3"
# The examples of the modes resnet18, vit, lm and of races: the same flags (examples/
# resnet18_fashion_mnist.py's add_options), PyTorch's remedies or weft.
EXAMPLES = {"resnet18": "resnet18_fashion_mnist.py", "vit": "vit_fashion_mnist.py", "lm": "transformer_lm.py"}
# A race's target, per family: the eval's figure, and whether it must reach it from below (>=) or above (<=).
TARGETS = {"resnet18": ("accuracy", ">="), "vit": ("accuracy", ">="), "lm": ("loss", "<=")}
# The flags of the example a race sets itself, per run.
RACE_FLAGS = ("--steps", "--seed", "--metrics", "--eval-every")


def read_rows(metrics):
    with open(metrics) as f:
        return [json.loads(line) for line in f if line.strip()]


def mean_iteration(metrics, warmup, skip=()):
    """Mean iteration_s over iterations >= warmup and not in `skip`, averaged over the ranks."""
    by_rank = {}
    for row in read_rows(metrics):
        if "iteration_s" in row and row["iter"] >= warmup and row["iter"] not in skip:
            by_rank.setdefault(row["rank"], []).append(row["iteration_s"])
    if not by_rank:
        raise SystemExit(f"{metrics}: no iterations after the first {warmup}")
    return statistics.mean(statistics.mean(v) for v in by_rank.values())


def run(command, log):
    """Runs `command` with its output in `log`; its exit status."""
    print("  $", shlex.join(command), flush=True)
    with open(log, "w") as out:
        return subprocess.run(command, stdout=out, stderr=subprocess.STDOUT).returncode


def run_or_exit(command, log):
    status = run(command, log)
    if status != 0:
        raise SystemExit(f"exit {status}: {shlex.join(command)} (log: {log})")


def overhead_runs(a):
    """(name, command(metrics)) pairs: weft train and the Python cnn per strategy, and
    the same Python cnn under PyTorch DDP (what the Python model costs by itself)."""
    runs = []
    common = ["--steps", str(a.steps), "--batch", str(a.batch)]
    python = lambda s: lambda m: [a.weft, "run", "--nproc", str(a.nproc), "--", PYTHON,
                                  os.path.join(ROOT, "examples", "cnn.py"), "--strategy", s, "--metrics", m, *common]
    for s in a.strategies.split(","):
        runs.append((f"weft train {s}", lambda m, s=s: [a.weft, "train", "--model", "cnn", "--nproc", str(a.nproc),
                                                         "--strategy", s, "--no-progress", "--metrics", m, *common]))
        runs.append((f"python weft {s}", python(s)))
    runs.append(("python torch-ddp", python("torch-ddp")))
    return [("", runs)]


def update_runs(a):
    """Per link, (name, command(metrics)) pairs: the Python cnn under PyTorch DDP, and
    under weft with each strategy in DDP's semantics and overlapped (docs/python.md)."""
    links = []
    for link in a.bandwidths.split(","):
        shaped = [] if link == "loopback" else ["--bandwidth", link]
        def command(strategy, update, link=link, shaped=shaped):
            return lambda m: [a.weft, "run", "--nproc", str(a.nproc), *shaped, "--", PYTHON,
                              os.path.join(ROOT, "examples", "cnn.py"), "--strategy", strategy, "--update", update,
                              "--bandwidth", "1Gbit" if link == "loopback" else link, "--steps", str(a.steps),
                              "--batch", str(a.batch), "--metrics", m]
        runs = [("torch-ddp", command("torch-ddp", "ddp"))]
        for s in a.strategies.split(","):
            runs += [(f"{s} ddp", command(s, "ddp")), (f"{s} overlap", command(s, "overlap"))]
        links.append((link, runs))
    return links


def example_runs(a):
    """Per link, (name, command(metrics)) pairs: the example EXAMPLES[a.what] under each
    --runs entry (torch-ddp, a weft strategy, or STRATEGY+CODEC for weft with compression)."""
    links = []
    for link in a.bandwidths.split(","):
        runs = []
        for r in a.runs.split(","):
            strategy, _, codec = r.partition("+")
            runs.append((r, lambda m, link=link, strategy=strategy, codec=codec: [
                a.weft, "run", "--nproc", str(a.nproc), "--bandwidth", link, "--", PYTHON,
                os.path.join(ROOT, "examples", EXAMPLES[a.what]), "--strategy", strategy,
                "--compression", codec or "none", "--bandwidth", link, "--steps", str(a.steps),
                "--batch", str(a.batch), "--eval-samples", "0", "--metrics", m]
                + (["--host", a.hosts[link]] if link in a.hosts and not strategy.startswith("torch") else [])))
        links.append((link, runs))
    return links


def parse_runs(parser, specs):
    """[(name, flags)] from --run NAME=FLAGS, the flags split as a shell would."""
    runs = []
    for spec in specs:
        name, sep, flags = spec.partition("=")
        if not sep or not name or any(c in name for c in "/ "):
            parser.error(f"--run {spec!r}: expected NAME=FLAGS, a name without spaces or '/' (e.g. "
                         "\"fp16=--strategy torch-ddp --compression fp16\")")
        split = shlex.split(flags)
        taken = [f for f in split if f.split("=")[0] in RACE_FLAGS]
        if taken:
            parser.error(f"--run {spec!r}: {taken[0]} is the race's to set (--steps, --seeds, --eval-every)")
        if name in (n for n, _ in runs):
            parser.error(f"--run {spec!r}: a second run named {name}")
        runs.append((name, split))
    return runs


def race_command(a, link, flags, seed, metrics):
    """`weft run` of the family's example with a run's flags, behind `link` unless loopback."""
    shaped = [] if link == "loopback" else ["--bandwidth", link]
    given = [f.split("=")[0] for f in flags]
    weft_run = not any(f.split("=")[-1].startswith("torch-") for f in flags)  # PyTorch's runs plan nothing
    planned = [] if link == "loopback" or "--bandwidth" in given \
        else ["--bandwidth", link]  # weft's planner plans for the link it runs on
    if weft_run and link in a.hosts and "--host" not in given:
        planned += ["--host", a.hosts[link]]
    extra = []
    for flag, value in (("--batch", a.batch_given), ("--eval-samples", a.eval_samples)):
        if value is not None:
            extra += [flag, str(value)]
    return [a.weft, "run", "--nproc", str(a.nproc), *shaped, "--", PYTHON,
            os.path.join(ROOT, "examples", EXAMPLES[a.family]), *flags, *planned, *extra,
            "--steps", str(a.steps), "--eval-every", str(a.eval_every), "--seed", str(seed), "--metrics", metrics]


def race_figures(metrics, a):
    """One run's figures from its metrics: mean iteration time after the warm-up (leaving out
    the iterations an evaluation paused), the evaluations, the first to reach the target (its
    wall time, and that time less the evaluations' pauses before it) and the last."""
    rows = read_rows(metrics)
    ended = {r["iter"]: r["time_s"] for r in rows if r["rank"] == 0 and "iteration_s" in r}
    evals = sorted((r for r in rows if r["rank"] == 0 and "eval" in r), key=lambda r: r["iter"])
    if not evals:
        raise ValueError("no evaluation in the metrics")
    key, better = TARGETS[a.family]
    figures = {"mean_iteration_s": mean_iteration(metrics, a.warmup, skip={e["iter"] + 1 for e in evals}),
               "evals": [{"step": e["iter"] + 1, "time_s": e["time_s"], **e["eval"]} for e in evals],
               "final": {"step": evals[-1]["iter"] + 1, **evals[-1]["eval"]},
               "target_step": None, "target_time_s": None, "target_train_s": None}
    paused = 0.0
    for e in evals:
        paused += e["time_s"] - ended.get(e["iter"], e["time_s"])  # the evaluation after step iter
        value = e["eval"][key]
        if a.target is not None and (value >= a.target if better == ">=" else value <= a.target):
            figures.update(target_step=e["iter"] + 1, target_time_s=e["time_s"], target_train_s=e["time_s"] - paused)
            break
    return figures


def race(a, parser):
    """Every --run of the family's example on every link and seed, in rounds (a seed: every
    link, every run), into OUT/race.json; a failed run is recorded with its log and the race
    goes on. Then a table per link."""
    runs = parse_runs(parser, a.run)
    links = a.bandwidths.split(",")
    seeds = [int(s) for s in a.seeds.split(",")]
    key, better = TARGETS[a.family]
    results = []
    for seed in seeds:
        for link in links:
            for name, flags in runs:
                slug = f"{link}-{name}-s{seed}".replace(":", "").replace("+", "-")
                metrics, log = os.path.join(a.out, slug + ".jsonl"), os.path.join(a.out, slug + ".log")
                command = race_command(a, link, flags, seed, metrics)
                row = {"link": link, "run": name, "seed": seed, "command": command, "metrics": metrics, "log": log}
                status = run(command, log)
                try:
                    if status != 0:
                        raise ValueError(f"exit status {status}")
                    row.update(ok=True, **race_figures(metrics, a))
                    reached = f"{key} {a.target} at step {row['target_step']}, {row['target_time_s']:.1f} s" \
                        if row["target_step"] else f"{key} {a.target} not reached"
                    print(f"{link} {name} seed {seed}: {row['mean_iteration_s'] * 1e3:.1f} ms/step; "
                          f"{reached}; final {key} {row['final'][key]:.4f}", flush=True)
                except (OSError, ValueError, KeyError, SystemExit) as e:
                    row.update(ok=False, error=str(e))
                    print(f"{link} {name} seed {seed}: FAILED ({e}); log: {log}", flush=True)
                results.append(row)
                with open(os.path.join(a.out, "race.json"), "w") as f:
                    json.dump({"what": "race", "family": a.family, "argv": sys.argv, "metric": key,
                               "better": better, "target": a.target, "steps": a.steps, "nproc": a.nproc,
                               "results": results}, f, indent=1)

    target = f"{key} {better} {a.target}" if a.target is not None else "no target"
    for link in links:
        print(f"\n{a.family}, {link}, {a.nproc} workers, {len(seeds)} seeds ({', '.join(map(str, seeds))}), "
              f"target: {target}")
        print(f"| run | ms/step (median) | time to target, s (mean; per seed) | steps to target | final {key} |")
        print("|---|---:|---|---|---|")
        for name, _ in runs:
            mine = [r for r in results if r["link"] == link and r["run"] == name]
            done = [r for r in mine if r["ok"]]
            failed = [f"seed {r['seed']} failed ({r['log']})" for r in mine if not r["ok"]]
            ms = f"{statistics.median(r['mean_iteration_s'] for r in done) * 1e3:.1f}" if done else "-"
            reached = [r for r in done if r["target_step"]]
            each = ", ".join(f"{r['target_time_s']:.1f}" if r["target_step"] else f"not within {a.steps} steps"
                             for r in done)
            times = (f"{statistics.mean(r['target_time_s'] for r in reached):.1f}"
                     + ("" if len(reached) == len(done) else f" ({len(reached)} of {len(done)})")
                     + f"; {each}") if reached else (each or "-")
            steps = ", ".join(str(r["target_step"] or "-") for r in done) or "-"
            final = (f"{statistics.mean(r['final'][key] for r in done):.4f}; "
                     + ", ".join(f"{r['final'][key]:.4f}" for r in done)) if done else "-"
            final = "; ".join([final] * bool(done) + failed)
            print(f"| {name} | {ms} | {times} | {steps} | {final} |")
    print(f"\n{os.path.join(a.out, 'race.json')}")


def outside_git(path):
    """False where `path` lies in this repository and git does not ignore it."""
    inside = os.path.commonpath([os.path.abspath(path), ROOT]) == ROOT
    if not inside:
        return True
    try:
        return subprocess.run(["git", "-C", ROOT, "check-ignore", "-q", os.path.abspath(path)]).returncode == 0
    except OSError:
        return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=["overhead", "update", *EXAMPLES, "race"])
    parser.add_argument("family", nargs="?", choices=list(EXAMPLES), help="race: the example to race")
    parser.add_argument("--weft", default=os.path.join(ROOT, "build", "weft"))
    parser.add_argument("--strategies", default="wfbp", help="overhead: weft strategies")
    parser.add_argument("--runs", default="torch-ddp,ssgd,wfbp",
                        help="resnet18, vit, lm: torch-ddp, weft strategies, STRATEGY+CODEC (e.g. wfbp+powersgd:2)")
    parser.add_argument("--run", action="append", default=[], metavar="NAME=FLAGS",
                        help="race: a run, the example's own flags (e.g. \"fp16=--strategy torch-ddp --compression "
                             "fp16\"); repeat for each")
    parser.add_argument("--bandwidths", default="100Mbit",
                        help="update, resnet18, vit, lm, race: emulated links (root); update and race also take "
                             "loopback")
    parser.add_argument("--seeds", default="0", help="race: the examples' --seed, one round each")
    parser.add_argument("--host", action="append", default=[], metavar="LINK=FILE",
                        help="the host description weft's runs on LINK plan for (weft profile --host FILE "
                             "--interference, measured behind that link); repeat per link")
    parser.add_argument("--eval-every", type=int, default=50, help="race: steps between evaluations")
    parser.add_argument("--eval-samples", type=int, help="race: the example's --eval-samples (its default if not given)")
    parser.add_argument("--target", type=float,
                        help="race: the test accuracy to reach (resnet18, vit) or held-out loss to get to (lm)")
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--batch", type=int, help="samples per worker per iteration (default 32; race: the example's)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", help="default: build/python-bench, race: build/race-FAMILY")
    a = parser.parse_args()
    a.batch_given = a.batch
    a.batch = 32 if a.batch is None else a.batch
    if not a.steps > a.warmup >= 0:
        parser.error(f"--steps {a.steps} --warmup {a.warmup}: expected steps > warmup >= 0")
    if not os.access(a.weft, os.X_OK):
        parser.error(f"--weft {a.weft}: not an executable; build weft first (make build)")
    if a.host and a.what in ("overhead", "update"):
        parser.error(f"--host: {a.what} plans no run for a link; the example modes and race take it")
    a.hosts = {}
    for spec in a.host:
        link, _, path = spec.partition("=")
        if not path or link not in a.bandwidths.split(","):
            parser.error(f"--host {spec}: expected LINK=FILE with LINK one of --bandwidths {a.bandwidths}")
        if not os.path.isfile(path):
            parser.error(f"--host {spec}: {path} is not a file; measure one with weft profile --host")
        a.hosts[link] = os.path.abspath(path)
    if a.what == "race":
        if a.family is None or not a.run:
            parser.error("race: expected a family (" + ", ".join(EXAMPLES) + ") and at least one --run NAME=FLAGS")
        if a.eval_every < 1:
            parser.error(f"--eval-every {a.eval_every}: expected an integer >= 1")
        try:
            [int(s) for s in a.seeds.split(",")]
        except ValueError:
            parser.error(f"--seeds {a.seeds}: expected integers, comma-separated")
        if os.geteuid() != 0 and any(link != "loopback" for link in a.bandwidths.split(",")):
            parser.error(f"--bandwidths {a.bandwidths}: emulated links need root (or race over loopback)")
    elif a.family is not None:
        parser.error(f"{a.what} {a.family}: only race takes a family")
    a.out = a.out or os.path.join(ROOT, "build", f"race-{a.family}" if a.what == "race" else "python-bench")
    if not outside_git(a.out):
        parser.error(f"--out {a.out}: inside the repository and not ignored by git; give a folder under build/")
    os.makedirs(a.out, exist_ok=True)
    if a.what == "race":
        return race(a, parser)

    groups = {"overhead": overhead_runs, "update": update_runs}.get(a.what, example_runs)(a)
    results = []
    for link, runs in groups:
        times = {name: [] for name, _ in runs}
        for r in range(a.rounds):
            for name, command in runs:
                slug = f"{link}-{name}-{r}".strip("-").replace(" ", "-").replace(":", "").replace("+", "-")
                metrics = os.path.join(a.out, slug + ".jsonl")
                run_or_exit(command(metrics), os.path.join(a.out, slug + ".log"))
                times[name].append(mean_iteration(metrics, a.warmup))
                print(f"{link} {name}: {times[name][-1] * 1e3:.1f} ms", flush=True)
        for name, command in runs:
            results.append({"link": link, "run": name, "mean_iteration_s": times[name],
                            "median_s": statistics.median(times[name]), "command": command("METRICS")})

    base = {}
    print(f"\n| link | run | ms/iteration (median of {a.rounds}) | rounds | vs first |")
    print("|---|---|---:|---|---:|")
    for row in results:
        first = base.setdefault(row["link"], row["median_s"])
        rounds = ", ".join(f"{t * 1e3:.1f}" for t in row["mean_iteration_s"])
        print(f"| {row['link'] or 'loopback'} | {row['run']} | {row['median_s'] * 1e3:.1f} | {rounds} | "
              f"{first / row['median_s']:.2f}× |")
    with open(os.path.join(a.out, "python-bench.json"), "w") as f:
        json.dump({"what": a.what, "argv": sys.argv, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
