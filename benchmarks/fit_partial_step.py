"""``loop.fit`` with a step that binds fixed arrays: closure vs ``jax.tree_util.Partial``.

    python -m benchmarks.fit_partial_step              # ~3 min on 2 cores
    python -m benchmarks.fit_partial_step --record     # results/fit_partial_step/

A step that closes over fixed arrays (a reversible net's bottlenecks, a readout) is a static
argument of ``fit``'s compiled chunk: every new closure compiles anew and its arrays are
embedded in the program as constants.  Bound to a ``jax.tree_util.Partial`` they are inputs of
the program: nets of the same shapes (the seeds of a study) share one compile.  Measured on
the paper's training loop for exact Gauss-Newton and Adam (``gnrev.gn_step``,
``gnrev.revmlp_optax_step``, the latter with one optimizer object): for each route, a fresh
subprocess trains ``--seeds`` nets (own bottlenecks and readout each) for ``--steps`` full-batch
steps in one chunk and times each ``fit`` call (compile included); the rounds alternate the
routes, ``--repeats`` times.  Reported per route and optimizer: the first net's time (both
routes compile) and the median time of the later nets (the Partial route reuses the program),
medians over the repeats, and the closure/Partial ratio of each (same run).
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys

from benchmarks._common import add_output_flags, arg_parser

ROUTES = ("closure", "partial")


def build_parser():
    ap = arg_parser(__doc__)
    ap.add_argument("--n", type=int, default=256, help="full-batch size")
    ap.add_argument("--dim", type=int, default=784, help="input width d")
    ap.add_argument("--bottleneck", type=int, default=2048, help="inverted bottleneck d'")
    ap.add_argument("--depth", type=int, default=2, help="reversible blocks")
    ap.add_argument("--steps", type=int, default=2, help="full-batch steps per fit call")
    ap.add_argument("--seeds", type=int, default=3, help="nets per subprocess")
    ap.add_argument("--repeats", type=int, default=2,
                    help="rounds of one fresh subprocess per route, interleaved")
    ap.add_argument("--worker", default=None,
                    help="internal: run one route in this process and print JSON")
    add_output_flags(ap, "fit_partial_step")
    return ap


def _work(args) -> dict:
    import time

    import jax
    import optax

    from layerlab import gnrev, loop
    from layerlab.gnrev._steps import _gn_update, _optax_closure_step

    x = jax.random.normal(jax.random.key(0), (args.n, args.dim))
    y = jax.random.randint(jax.random.key(1), (args.n,), 0, 10)
    adam = optax.adam(1e-3)
    opts = ("ce", "gradient", None, "average", True, False)
    out = {"gn": [], "adam": []}
    for s in range(args.seeds):
        params, frozen = gnrev.revmlp_init(jax.random.key(10 + s), args.dim, args.depth,
                                           bottleneck=args.bottleneck)
        P = gnrev.readout_init(jax.random.key(100 + s), args.dim, 10)
        steps = {"gn": gnrev.gn_step(frozen, P, learning_rate=0.5),
                 "adam": gnrev.revmlp_optax_step(frozen, P, adam)}
        if args.worker == "closure":
            steps = {"gn": loop.TrainStep(steps["gn"].init,
                                          lambda st, b, k, f=frozen, P=P: _gn_update(
                                              f, P, opts, st, b, k)),
                     "adam": _optax_closure_step(frozen, P, adam, "ce", False)}
        for name, ts in steps.items():
            t0 = time.perf_counter()
            st, _ = loop.fit(ts.step, ts.init(params), (x, y), key=jax.random.key(2),
                             steps=args.steps, chunk_size=args.steps, progress=False)
            jax.block_until_ready(st)
            out[name].append(time.perf_counter() - t0)
    return out


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.worker is not None:
        print("RESULT " + json.dumps(_work(args)), flush=True)
        return 0
    from benchmarks._common import out_dir, uncached_env, write_json

    keep = ["--n", str(args.n), "--dim", str(args.dim), "--bottleneck", str(args.bottleneck),
            "--depth", str(args.depth), "--steps", str(args.steps), "--seeds", str(args.seeds)]
    runs: dict[str, list[dict]] = {r: [] for r in ROUTES}
    env, cache = uncached_env()  # compile time is measured: no persistent compilation cache
    for rep in range(args.repeats):
        for route in ROUTES:
            proc = subprocess.run(
                [sys.executable, "-m", "benchmarks.fit_partial_step", "--worker", route, *keep],
                capture_output=True, text=True, env=env, check=True)
            line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
            runs[route].append(json.loads(line[7:]))
            print(f"round {rep + 1}/{args.repeats} {route}: {runs[route][-1]}", flush=True)
    summary = {}
    for opt in ("gn", "adam"):
        row = {}
        for route in ROUTES:
            first = statistics.median(r[opt][0] for r in runs[route])
            later = statistics.median(statistics.median(r[opt][1:]) for r in runs[route])
            row[route] = {"first_net_s": round(first, 3), "later_nets_s": round(later, 3)}
        row["closure_over_partial_first"] = round(
            row["closure"]["first_net_s"] / row["partial"]["first_net_s"], 2)
        row["closure_over_partial_later"] = round(
            row["closure"]["later_nets_s"] / row["partial"]["later_nets_s"], 2)
        summary[opt] = row
        print(f"{opt}: {row}", flush=True)
    path = write_json(out_dir("fit_partial_step", args.out, args.record) / "fit_partial_step.json",
                      {"what": "loop.fit per net, compile included: closure step vs Partial "
                               "step binding the net's fixed arrays (gnrev GN and Adam)",
                       "config": {k: getattr(args, k) for k in ("n", "dim", "bottleneck",
                                                                 "depth", "steps", "seeds",
                                                                 "repeats")},
                       **cache, "summary": summary, "runs": runs})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
