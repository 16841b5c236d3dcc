"""Probe and data-loading costs: linear CKA in feature vs Gram form, minibatch CKA, RBF CKA,
and cold vs cached dataset loads.

    python -m benchmarks.probes_cka            # small CPU defaults (about a minute)
    python -m benchmarks.probes_cka --p 2048 --ns 256 512 1024 2048 4096 8192 --repeats 11

Writes ``probes_cka.json`` and ``crossover.png`` to ``scratch/probes_cka/`` (``results/`` with
``--record``) (time of both linear-CKA
forms against n at fixed width, with the point where ``method="auto"`` switches).

The compared functions are warmed up (compiled) first, then timed in ``--repeats`` interleaved
rounds (``benchmarks._common.timeit_interleaved``: each round calls each once, the order
rotated, so a drift of the shared machine's speed hits all alike): feature vs Gram form per n,
and full, minibatch and RBF CKA together; each timing keeps its ``times_s``.  The cold vs
cached ``data.load`` times are single calls (a cold load happens once per cache clear).
"""

from __future__ import annotations

import time

from benchmarks._common import add_output_flags, arg_parser


def _imports():
    """The heavy imports, after the flags are parsed (``--help`` stays instant)."""
    global jax, jnp, np, tqdm, out_dir, timeit_interleaved, write_json, data, probes
    import jax
    import jax.numpy as jnp
    import numpy as np
    from tqdm import tqdm

    from benchmarks._common import out_dir, timeit_interleaved, write_json
    from layerlab import data, probes


def _reps(key, n, p, q):
    k1, k2 = jax.random.split(key)
    x = jax.random.normal(k1, (n, p))
    y = jnp.tanh(x[:, :q] + 0.5 * jax.random.normal(k2, (n, q)))
    return x, y


def cka_crossover(ns, p, repeats):
    feat = jax.jit(lambda x, y: probes.linear_cka(x, y, method="features"))
    gram = jax.jit(lambda x, y: probes.linear_cka(x, y, method="gram"))
    rows = []
    for n in tqdm(ns, desc=f"linear CKA, p=q={p}"):
        x, y = _reps(jax.random.key(n), n, p, p)
        t = timeit_interleaved({"features": (feat, (x, y)), "gram": (gram, (x, y))},
                               repeats=repeats)
        tf, tg = t["features"], t["gram"]
        auto = "gram" if n * 2 * p < 3 * p * p else "features"
        rows.append(
            dict(
                what="linear_cka features vs gram",
                n=n,
                p=p,
                q=p,
                dtype="float32",
                features=tf,
                gram=tg,
                ratio_features_over_gram=tf["median_s"] / tg["median_s"],
                ratio_paired_median=float(np.median(
                    np.asarray(tf["times_s"]) / np.asarray(tg["times_s"]))),
                interleaved=True,
                auto_choice=auto,
                value_abs_diff=abs(float(feat(x, y)) - float(gram(x, y))),
            )
        )
    return rows


def minibatch_vs_full(n, p, batches, repeats):
    x, y = _reps(jax.random.key(1), n, p, p // 2)
    full = jax.jit(probes.linear_cka)
    mb = jax.jit(probes.minibatch_cka)
    xs, ys = x.reshape(batches, n // batches, p), y.reshape(batches, n // batches, p // 2)
    rbf = jax.jit(probes.rbf_cka)
    x1k, y1k = x[:1024], y[:1024]
    t = timeit_interleaved({"full": (full, (x, y)), "minibatch": (mb, (xs, ys)),
                            "rbf_1024": (rbf, (x1k, y1k))}, repeats=repeats)
    t_full, t_mb, t_rbf = t["full"], t["minibatch"], t["rbf_1024"]
    return dict(
        what="minibatch CKA vs full linear CKA (and RBF CKA on 1024 samples)",
        n=n,
        p=p,
        q=p // 2,
        batches=batches,
        full=t_full,
        minibatch=t_mb,
        rbf_1024=t_rbf,
        interleaved=True,
        cka_full=float(full(x, y)),
        cka_minibatch=float(mb(xs, ys)),
        cka_rbf_1024=float(rbf(x1k, y1k)),
    )


def load_times(names):
    rows = []
    # the first call of a name also pays its imports (scikit-learn for digits)
    for name, kw in tqdm(names, desc="data.load"):
        data.clear_cache()
        t0 = time.perf_counter()
        try:
            ds = data.load(name, **kw)
        except data.DatasetNotFoundError as e:
            rows.append(
                dict(what="data.load", name=name, kwargs=kw, skipped=str(e).splitlines()[0])
            )
            continue
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        data.load(name, **kw)
        warm = time.perf_counter() - t0
        rows.append(
            dict(
                what="data.load cold (files read) vs warm (raw arrays cached)",
                name=name,
                kwargs=kw,
                shape=list(ds.x.shape),
                cold_s=cold,
                warm_s=warm,
                ratio_cold_over_warm=cold / warm,
            )
        )
    data.clear_cache()
    return rows


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = [r["n"] for r in rows]
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.loglog(ns, [r["features"]["median_s"] for r in rows], "o-", label="feature form")
    ax.loglog(ns, [r["gram"]["median_s"] for r in rows], "s-", label="Gram form")
    switch = [r["n"] for r in rows if r["auto_choice"] == "features"]
    if switch:
        ax.axvline(min(switch), color="gray", ls=":", label='auto → "features"')
    ax.set_xlabel("n (samples)")
    ax.set_ylabel("median time [s]")
    ax.set_title(f"linear CKA, p = q = {rows[0]['p']} (CPU, jit)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def build_parser():
    ap = arg_parser(__doc__)
    ap.add_argument("--p", type=int, default=256, help="representation width for the crossover")
    ap.add_argument("--ns", type=int, nargs="+", default=[64, 128, 256, 512, 1024, 2048],
                    help="sample counts n of the feature-vs-Gram crossover")
    ap.add_argument("--mb-n", type=int, default=4096, help="samples for minibatch vs full CKA")
    ap.add_argument("--mb-batches", type=int, default=16, help="minibatches for minibatch CKA")
    ap.add_argument("--repeats", type=int, default=7,
                    help="interleaved timed rounds, each calling every compared case (median)")
    ap.add_argument("--no-data", action="store_true", help="skip the dataset load timings")
    add_output_flags(ap, "probes_cka")
    return ap


def main(argv=None):
    args = build_parser().parse_args(argv)
    _imports()
    out = out_dir("probes_cka", args.out, args.record)
    crossover = cka_crossover(args.ns, args.p, args.repeats)
    mb = minibatch_vs_full(args.mb_n, 128, args.mb_batches, args.repeats)
    loads = (
        []
        if args.no_data
        else load_times(
            [
                ("digits", {}),
                ("mnist", {}),
                ("cifar10", {"split": "test"}),
                ("cifar10", {"n": 10_000}),
            ]
        )
    )
    write_json(
        out / "probes_cka.json",
        dict(crossover=crossover, minibatch=mb, loads=loads, args=vars(args)),
    )
    plot(crossover, out / "crossover.png")
    for r in crossover:
        print(
            f"n={r['n']:6d} p={r['p']}: features {r['features']['median_s'] * 1e3:8.2f} ms, "
            f"gram {r['gram']['median_s'] * 1e3:8.2f} ms, "
            f"ratio {r['ratio_features_over_gram']:.2f}, "
            f"auto -> {r['auto_choice']}"
        )
    print(
        f"minibatch CKA {mb['cka_minibatch']:.4f} vs full {mb['cka_full']:.4f}; "
        f"times {mb['minibatch']['median_s'] * 1e3:.2f} / {mb['full']['median_s'] * 1e3:.2f} ms"
    )
    for r in loads:
        if "cold_s" in r:
            print(
                f"load {r['name']} {r['kwargs']}: "
                f"cold {r['cold_s']:.2f} s, warm {r['warm_s']:.3f} s"
            )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
