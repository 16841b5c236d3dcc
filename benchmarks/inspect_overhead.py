"""Cost of monitoring per-layer reports during training (layerlab.inspect + loop.fit).

    python -m benchmarks.inspect_overhead [--steps 1000] [--eval-every 100] [--repeats 7] [--record]

The quickstart CNN (flax linen, two convolutions + two dense layers, Adam, batch 64) on
scikit-learn's digits is trained for ``--steps`` steps through ``layerlab.loop.fit`` twice per
round, in the same process, same data order and same chunking (``chunk_size = eval_every``):

* ``plain``: no ``eval_fn``;
* ``monitored``: ``eval_fn = inspect.monitor(...).eval_fn`` every ``eval_every`` steps, with
  the quickstart's config (every diagnostic, probe batch of 128, NTK on 8 samples).

Both are compiled first (a warm-up run each); then ``--repeats`` interleaved rounds are timed
and the overhead ``median(monitored) / median(plain) - 1`` is reported (target <= 10 %),
with the min/min and paired-median ratios and the prediction ``evaluations x report cost``
(on a shared, noisy machine the run-to-run spread is larger than the effect).  The
cost of each diagnostic alone (``jit`` of ``layer_report`` with only that diagnostic, median
of repeated calls) and of the whole report is reported beside the cost of ``eval_every``
training steps.  ``OPENBLAS_NUM_THREADS`` is set to 1 (``--blas-threads``) before jax is
imported: on a shared 2-core machine the spinning threads of the BLAS behind jaxlib's LAPACK
calls made the n = 128 Cholesky of ``dgl_nngp`` swing between 2 and 60 ms.  Writes
``results/inspect_overhead/overhead.json`` (and a PNG) with
``--record``, otherwise ``scratch/inspect_overhead/``.
"""
from __future__ import annotations

import argparse
import pathlib

REPO = pathlib.Path(__file__).resolve().parents[1]


def build_parser() -> argparse.ArgumentParser:
    from benchmarks._common import arg_parser  # stdlib only: --help stays light

    p = arg_parser(__doc__)  # shows every flag's default, as the other benchmarks do
    p.add_argument("--steps", type=int, default=1000, help="training steps per run")
    p.add_argument("--eval-every", type=int, default=100, help="monitoring period in steps")
    p.add_argument("--repeats", type=int, default=7, help="interleaved timed rounds")
    p.add_argument("--n-probe", type=int, default=128, help="probe batch size of the reports")
    p.add_argument("--blas-threads", type=int, default=1,
                   help="OPENBLAS_NUM_THREADS for jaxlib's LAPACK calls (Cholesky, SVD), set "
                        "before importing jax unless already set; 0 leaves it unset. Spinning "
                        "BLAS threads make small factorisations 10-20x slower on a shared CPU")
    p.add_argument("--record", action="store_true",
                   help="write to results/inspect_overhead/ (tracked) instead of scratch/")
    p.add_argument("--out", default=None, help="output directory (overrides --record)")
    return p


def _plot(res: dict, path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    costs = res["per_diagnostic_ms"]
    names = list(costs) + ["full report", f"{res['eval_every']} train steps"]
    vals = [costs[k] for k in costs] + [res["full_report_ms"], res["train_ms_per_eval_period"]]
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    colors = ["C0"] * len(costs) + ["C1", "C2"]
    ax.barh(names, vals, color=colors)
    ax.set_xlabel("ms (median)")
    ax.set_title(f"monitoring overhead {100 * res['overhead']:.1f}% at eval_every="
                 f"{res['eval_every']} (linen CNN, digits, {res['machine']['device_kind']})",
                 fontsize=9)
    ax.invert_yaxis()
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    import os

    if args.blas_threads > 0:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", str(args.blas_threads))
    import statistics

    import jax

    from benchmarks import _quickstart_inspect as qs
    from benchmarks._common import timeit, timeit_interleaved, write_json
    from layerlab import inspect, loop

    model, insp, params0, (x, y), (xp, yp), ts = qs.build("digits", n_probe=args.n_probe)
    cfg = qs.config()
    ref = jax.jit(lambda p: inspect.make_reference(insp, p, xp, config=cfg))(params0)
    mon = inspect.monitor(insp, xp, yp, reference=ref, config=cfg)
    state0 = ts.init(params0)

    last = {}

    def train(monitored: bool):
        kw = dict(eval_fn=mon.eval_fn, eval_every=args.eval_every) if monitored else {}
        state, hist = loop.fit(ts.step, state0, (x, y), key=jax.random.key(0), steps=args.steps,
                               batch_size=64, chunk_size=args.eval_every, progress=False, **kw)
        last[monitored] = (state, hist)
        return state

    # warm-up (compile the chunks and the eval), then rounds with the order rotated each
    # round, so that neither case always runs first
    t = timeit_interleaved({"plain": (train, (False,)), "monitored": (train, (True,))},
                           repeats=args.repeats)
    t_compile = {k: v["compile_s"] for k, v in t.items()}
    times = {k: v["times_s"] for k, v in t.items()}
    state, hist = last[True]
    med = {k: statistics.median(v) for k, v in times.items()}
    overhead = med["monitored"] / med["plain"] - 1.0
    overhead_min = min(times["monitored"]) / min(times["plain"]) - 1.0
    overhead_paired = statistics.median(
        m / p - 1.0 for m, p in zip(times["monitored"], times["plain"]))
    n_evals = len(hist["eval_step"])

    params = state.params
    per_diag = {}
    for d in cfg.diagnostics:
        c = qs.config(diagnostics=(d,))
        r = ref if d in ("cka", "ntk_alignment") else None
        f = jax.jit(lambda p, c=c, r=r: inspect.layer_report(insp, p, xp, yp, reference=r,
                                                             config=c))
        per_diag[d] = timeit(f, params, repeats=15)
    full = timeit(jax.jit(mon.report), params, repeats=15)
    train_period_ms = 1e3 * med["plain"] * args.eval_every / args.steps
    predicted = n_evals * full["median_s"] / med["plain"]
    res = {
        "what": "training time of the quickstart CNN with and without layerlab.inspect "
                "monitoring (same run, medians of interleaved rounds, the order rotated each "
                "round)",
        "model": "flax linen CNN conv(8,3x3)-relu-conv(16,3x3,s2)-relu-dense(32)-relu-dense(10), "
                 "Adam 3e-3, batch 64",
        "data": f"sklearn digits train split {tuple(x.shape)} float32",
        "steps": args.steps, "eval_every": args.eval_every, "evaluations": n_evals,
        "n_probe": int(xp.shape[0]), "config": {k: str(v) for k, v in vars(cfg).items()},
        "repeats": args.repeats,
        "openblas_num_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
        "plain_s": times["plain"], "monitored_s": times["monitored"],
        "median_plain_s": med["plain"], "median_monitored_s": med["monitored"],
        "overhead": overhead, "target_overhead": 0.10, "meets_target": overhead <= 0.10,
        "overhead_min_over_min": overhead_min, "overhead_paired_median": overhead_paired,
        "overhead_predicted": predicted,
        "warmup_s_incl_compile": t_compile,
        "train_ms_per_eval_period": train_period_ms,
        "full_report_ms": 1e3 * full["median_s"],
        "full_report_compile_s": full["compile_s"],
        "per_diagnostic_ms": {d: 1e3 * v["median_s"] for d, v in per_diag.items()},
        "per_diagnostic_compile_s": {d: v["compile_s"] for d, v in per_diag.items()},
        "note_overhead": "overhead = median(monitored)/median(plain) - 1 over interleaved rounds; "
                         "also min/min, the median of paired ratios, and the prediction "
                         "evaluations x (one compiled report) / median(plain)",
        "note": "per-diagnostic times are each diagnostic alone in its own jit (including the "
                "shared forward pass to the representations), so they do not add up to the "
                "full report, which shares that work",
    }
    if args.out:
        out = pathlib.Path(args.out)
    elif args.record:
        out = REPO / "results" / "inspect_overhead"
    else:
        out = REPO / "scratch" / "inspect_overhead"
    out.mkdir(parents=True, exist_ok=True)
    path = write_json(out / "overhead.json", res)
    res["machine"] = __import__("json").loads(path.read_text())["machine"]
    _plot(res, out / "overhead.png")
    print(f"plain {med['plain']:.3f}s  monitored {med['monitored']:.3f}s  overhead "
          f"{100 * overhead:.1f}% (min/min {100 * overhead_min:.1f}%, paired "
          f"{100 * overhead_paired:.1f}%, predicted {100 * predicted:.1f}%; {n_evals} reports); "
          f"full report {res['full_report_ms']:.2f} ms "
          f"vs {train_period_ms:.1f} ms for {args.eval_every} steps")
    for d, v in res["per_diagnostic_ms"].items():
        print(f"  {d:22s} {v:8.2f} ms")
    print(f"written: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
