"""Overhead of ``layerlab.loop.fit`` against hand-written training loops (same run, same batches).

    python -m benchmarks.loop_overhead [--steps 2000] [--repeats 15] [--cases 64x128,128x256]

A ReLU MLP (64-H-10, Adam) on scikit-learn's digits (1438 x 64, standardised), trained for
``--steps`` minibatch steps four ways, all with the same step function, keys and batches:

* ``fit``: ``layerlab.loop.fit`` with its defaults (on-device shuffling and gathering inside
  ``lax.scan`` chunks, one host sync per chunk, history, no progress bar);
* ``scan_shuffle``: the hand-written equivalent, ``jit`` of a ``lax.scan`` over epochs (each
  drawing its permutation on device) of a ``lax.scan`` over batches - the reference for the
  loop's *overhead* (target: ``fit`` within 5%);
* ``scan_pregathered``: a hand-written ``jit(lax.scan(step))`` over the batches gathered
  beforehand (``[T, B, 64]``) - the lower bound, doing no shuffling work at all;
* ``scan_gather``: the same scan over precomputed batch indices ``[T, B]``, gathering inside;
* ``python_loop``: a Python loop calling a jitted step per (pre-gathered, on-device) batch,
  async dispatch, one sync at the end; ``python_loop_logging`` also reads the loss each step.

Compile time (first call) is reported apart; steady state is the median of ``--repeats``
interleaved rounds.  Writes ``loop_overhead.json`` and a bar chart to ``scratch/loop_overhead/``
(``results/loop_overhead/`` with ``--record``).
"""
from __future__ import annotations

import statistics
import time

from benchmarks._common import add_output_flags, arg_parser


def _imports():
    """The heavy imports, after the flags are parsed (``--help`` stays instant)."""
    global jax, jnp, np, optax, lax, out_dir, write_json, data, loop, nets
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    from jax import lax

    from benchmarks._common import out_dir, write_json
    from layerlab import data, loop, nets


def _block(tree):
    return jax.tree_util.tree_map(lambda a: a.block_until_ready(), tree)


def make_case(batch_size: int, hidden: int, steps: int, seed: int = 0):
    ds = data.load("digits", "train")
    x, _, _ = data.standardize(data.flatten(ds.x))
    x, y = jnp.asarray(x), jnp.asarray(ds.y)
    n = x.shape[0]
    spe = n // batch_size
    steps = max(spe, steps // spe * spe)  # whole epochs, so the nested-scan baseline matches

    def loss_fn(params, batch):
        xb, yb = batch
        logits = nets.mlp_apply(params, xb)
        return optax.softmax_cross_entropy_with_integer_labels(logits, yb).mean()

    ts = loop.optax_step(loss_fn, optax.adam(1e-3))
    key = jax.random.key(seed)
    state0 = ts.init(nets.mlp_init(jax.random.key(seed + 1), [64, hidden, 10], init="he"))

    # the batches fit draws (documented rule: permutation per epoch from fold_in(k_data, e))
    k_data, k_step = jax.random.split(key)
    idx = np.stack([
        np.asarray(jax.random.permutation(jax.random.fold_in(k_data, t // spe), n))[
            (t % spe) * batch_size:(t % spe + 1) * batch_size]
        for t in range(steps)
    ]).astype(np.int32)
    idx_d = jnp.asarray(idx)
    xb_all, yb_all = x[idx_d], y[idx_d]  # [T, B, 64], [T, B]
    batches = [(xb_all[t], yb_all[t]) for t in range(steps)]

    def run_fit():
        s, h = loop.fit(ts.step, state0, (x, y), steps=steps, batch_size=batch_size, key=key,
                        progress=False)
        return s

    @jax.jit
    def scan_pre(state, xs, ys):
        def body(s, inp):
            xb, yb, t = inp
            s, m = ts.step(s, (xb, yb), jax.random.fold_in(k_step, t))
            return s, m
        return lax.scan(body, state, (xs, ys, jnp.arange(steps, dtype=jnp.int32)))

    @jax.jit
    def scan_gather(state, xd, yd, ids):
        def body(s, inp):
            i, t = inp
            s, m = ts.step(s, (xd[i], yd[i]), jax.random.fold_in(k_step, t))
            return s, m
        return lax.scan(body, state, (ids, jnp.arange(steps, dtype=jnp.int32)))

    @jax.jit
    def scan_shuffle(state):
        # what one would write by hand: per-epoch permutation on device, nested scans
        def epoch(s, e):
            perm = jax.random.permutation(jax.random.fold_in(k_data, e), n)

            def inner(s, p):
                i = lax.dynamic_slice_in_dim(perm, p * batch_size, batch_size)
                return ts.step(s, (x[i], y[i]), jax.random.fold_in(k_step, e * spe + p))

            return lax.scan(inner, s, jnp.arange(spe, dtype=jnp.int32))

        return lax.scan(epoch, state, jnp.arange(steps // spe, dtype=jnp.int32))

    jstep = jax.jit(ts.step)
    step_keys = [jax.random.fold_in(k_step, t) for t in range(steps)]

    def python_loop():
        s = state0
        for t in range(steps):
            s, _ = jstep(s, batches[t], step_keys[t])
        return s

    def python_loop_logging():
        s = state0
        losses = []
        for t in range(steps):
            s, m = jstep(s, batches[t], step_keys[t])
            losses.append(float(m["loss"]))
        return s

    methods = {
        "fit": run_fit,
        "scan_shuffle": lambda: scan_shuffle(state0)[0],
        "scan_pregathered": lambda: scan_pre(state0, xb_all, yb_all)[0],
        "scan_gather": lambda: scan_gather(state0, x, y, idx_d)[0],
        "python_loop": python_loop,
        "python_loop_logging": python_loop_logging,
    }
    return methods, n, steps


def measure(methods, repeats):
    compile_s, finals, times = {}, {}, {k: [] for k in methods}
    for name, fn in methods.items():
        t0 = time.perf_counter()
        finals[name] = _block(fn())
        compile_s[name] = time.perf_counter() - t0
    names = list(methods)
    for r in range(repeats):  # interleaved rounds: machine noise hits every method alike,
        for name in names[r % len(names):] + names[:r % len(names)]:  # no method always first
            fn = methods[name]
            t0 = time.perf_counter()
            _block(fn())
            times[name].append(time.perf_counter() - t0)
    return compile_s, finals, times


def build_parser():
    p = arg_parser(__doc__)
    p.add_argument("--steps", type=int, default=1980,
                   help="rounded down to whole epochs (1980 = 90 epochs at B=64, 180 at B=128)")
    p.add_argument("--repeats", type=int, default=15,
                   help="timed runs per method (median reported)")
    p.add_argument("--cases", default="64x128,128x256", help="comma list of BATCHxHIDDEN")
    add_output_flags(p, "loop_overhead")
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    _imports()
    out = out_dir("loop_overhead", args.out, args.record)
    records = []
    for case in args.cases.split(","):
        b, h = (int(v) for v in case.lower().split("x"))
        print(f"case batch={b} hidden={h}", flush=True)
        methods, n, steps = make_case(b, h, args.steps)
        compile_s, finals, times = measure(methods, args.repeats)
        ref = jax.tree_util.tree_leaves(finals["scan_pregathered"].params)
        med = {k: statistics.median(v) for k, v in times.items()}
        rec = {
            "what": "loop overhead: MLP 64-H-10 Adam on digits",
            "batch_size": b, "hidden": h, "steps": steps, "n_train": n, "dtype": "float32",
            "repeats": args.repeats,
            "median_s": med,
            "min_s": {k: min(v) for k, v in times.items()},
            "iqr_s": {k: float(np.subtract(*np.percentile(v, [75, 25]))) for k, v in times.items()},
            "compile_s": compile_s,
            "us_per_step": {k: 1e6 * v / steps for k, v in med.items()},
            "fit_over_scan_shuffle": med["fit"] / med["scan_shuffle"],
            "fit_over_scan_shuffle_min": min(times["fit"]) / min(times["scan_shuffle"]),
            "fit_over_scan_pregathered": med["fit"] / med["scan_pregathered"],
            "fit_over_scan_gather": med["fit"] / med["scan_gather"],
            "python_loop_over_fit": med["python_loop"] / med["fit"],
            "python_loop_logging_over_fit": med["python_loop_logging"] / med["fit"],
            "fit_over_scan_pregathered_min": min(times["fit"]) / min(times["scan_pregathered"]),
            "python_loop_over_fit_min": min(times["python_loop"]) / min(times["fit"]),
            "max_abs_param_diff_vs_scan": {
                k: float(max(np.max(np.abs(np.asarray(a) - np.asarray(r)))
                             for a, r in zip(jax.tree_util.tree_leaves(f.params), ref)))
                for k, f in finals.items()
            },
        }
        records.append(rec)
        print("  median s:", {k: round(v, 4) for k, v in med.items()})
        print(f"  {steps} steps; fit / hand scan with on-device shuffling = "
              f"{rec['fit_over_scan_shuffle']:.3f} "
              f"(min-based {rec['fit_over_scan_shuffle_min']:.3f}), "
              f"fit / hand scan (pre-gathered) = {rec['fit_over_scan_pregathered']:.3f}, "
              f"fit / hand scan (gather) = {rec['fit_over_scan_gather']:.3f}, "
              f"python loop / fit = {rec['python_loop_over_fit']:.2f}x, "
              "python loop with per-step logging / fit = "
              f"{rec['python_loop_logging_over_fit']:.2f}x",
              flush=True)
    path = write_json(out / "loop_overhead.json", {"records": records})
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        names = list(records[0]["median_s"])
        fig, ax = plt.subplots(figsize=(7, 3.4))
        w = 0.8 / len(records)
        for i, r in enumerate(records):
            vals = [r["us_per_step"][k] for k in names]
            ax.bar(np.arange(len(names)) + i * w, vals, w,
                   label=f"batch {r['batch_size']}, hidden {r['hidden']}")
        ax.set_xticks(np.arange(len(names)) + w * (len(records) - 1) / 2, names, rotation=15)
        ax.set_ylabel("µs per step (median)")
        ax.set_title("layerlab.loop.fit vs hand-written loops (CPU, digits MLP)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / "loop_overhead.png", dpi=110)
        plt.close(fig)
    except Exception as e:  # the JSON is the result; the figure is a convenience
        print("plot skipped:", e)
    print("written:", path)


if __name__ == "__main__":
    main()
