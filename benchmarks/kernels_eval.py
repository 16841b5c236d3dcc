"""Kernel evaluation time: native closed forms vs neural-tangents, side by side.

    python -m benchmarks.kernels_eval                       # N = 500, 1000, 2000 (CPU minutes)
    python -m benchmarks.kernels_eval --sizes 2000,5000,10000 --repeats 3   # paper scale

For each N, ``x`` is ``[N, d]`` (d = 784, MNIST-sized, standard normal) and both
routes compute the ``[N, N]`` NNGP (and, with ``--ntk``, NTK) of a depth-``L`` ReLU
network: ``layerlab.kernels.relu_nngp`` and neural-tangents' ``kernel_fn`` of
``stax.serial(Dense, Relu, ..., Dense)`` with the same variances, each under one
``jax.jit``.  The largest absolute difference between the two is recorded as a
check.  A second table times the empirical NTK of a small MLP: ``empirical_ntk``
(NTK-vector products and dense Jacobian) against neural-tangents'
``empirical_ntk_fn`` implementations 1 and 2.

The routes compared are warmed up (compiled) first, then timed in ``--repeats`` interleaved
rounds (``benchmarks._common.timeit_interleaved``: each round calls each route once, the
order rotated, so a drift of the shared machine's speed hits all alike): native and
neural-tangents per (N, kernel), the four empirical-NTK routes together.  Each timing keeps
its ``times_s``; ``speedup_paired_median`` is the median of the per-round ratios.

Writes ``kernels_eval.json`` and ``kernels_eval.png`` to ``scratch/kernels_eval/``
(``results/kernels_eval/`` with ``--record``).
"""
from __future__ import annotations

from benchmarks._common import add_output_flags, arg_parser


def _imports():
    """The heavy imports, after the flags are parsed (``--help`` stays instant)."""
    global jax, jnp, np, tqdm, out_dir, timeit_interleaved, write_json
    global empirical_ntk, empirical_ntk_fn, relu_nngp, relu_ntk, stax
    import jax
    import jax.numpy as jnp
    import numpy as np
    from tqdm import tqdm

    from benchmarks._common import out_dir, timeit_interleaved, write_json
    from layerlab.kernels import empirical_ntk, empirical_ntk_fn, relu_nngp, relu_ntk, stax


def _nt_relu(depth, w_var, b_var):
    layers = []
    for _ in range(depth):
        layers += [stax.Dense(1, W_std=w_var**0.5, b_std=b_var**0.5), stax.Relu()]
    layers.append(stax.Dense(1, W_std=w_var**0.5, b_std=b_var**0.5))
    return stax.serial(*layers)[2]


def bench_closed_forms(sizes, d, depth, w_var, b_var, repeats, ntk):
    kernel_fn = _nt_relu(depth, w_var, b_var)
    gets = ["nngp", "ntk"] if ntk else ["nngp"]
    records = []
    for n in tqdm(sizes, desc="closed forms"):
        x = jax.random.normal(jax.random.key(n), (n, d), jnp.float32)
        for get in gets:
            native = relu_nngp if get == "nngp" else relu_ntk
            f_native = jax.jit(lambda x, native=native: native(x, depth=depth, w_var=w_var,
                                                                b_var=b_var))
            f_nt = jax.jit(lambda x, get=get: kernel_fn(x, None, get))
            t = timeit_interleaved({"native": (f_native, (x,)), "neural_tangents": (f_nt, (x,))},
                                   repeats=repeats)
            t_native, t_nt = t["native"], t["neural_tangents"]
            diff = float(jnp.max(jnp.abs(f_native(x) - f_nt(x))))
            scale = float(jnp.max(jnp.abs(f_native(x))))
            records.append({
                "what": f"relu {get} [N, N], depth {depth}", "kernel": get, "N": n, "d": d,
                "depth": depth, "w_var": w_var, "b_var": b_var, "dtype": "float32",
                "native": t_native, "neural_tangents": t_nt,
                "speedup_native_over_nt": t_nt["median_s"] / t_native["median_s"],
                "speedup_paired_median": float(np.median(
                    np.asarray(t_nt["times_s"]) / np.asarray(t_native["times_s"]))),
                "interleaved": True,
                "max_abs_diff": diff, "max_abs_kernel": scale,
            })
            tqdm.write(f"N={n:6d} {get}: native {t_native['median_s']:.3f}s  "
                       f"neural-tangents {t_nt['median_s']:.3f}s  "
                       f"ratio {records[-1]['speedup_native_over_nt']:.2f}  "
                       f"max|diff| {diff:.1e}")
    return records


def bench_empirical(n, d, width, k, repeats):
    init_fn, apply_fn, _ = stax.serial(stax.Dense(width), stax.Relu(), stax.Dense(width),
                                       stax.Relu(), stax.Dense(k))
    _, params = init_fn(jax.random.key(0), (-1, d))
    x = jax.random.normal(jax.random.key(1), (n, d), jnp.float32)
    routes = {
        "layerlab ntk_vp": jax.jit(lambda p, x: empirical_ntk(apply_fn, p, x)),
        "layerlab jacobian": jax.jit(lambda p, x: empirical_ntk(apply_fn, p, x,
                                                                method="jacobian")),
        "nt implementation 1": jax.jit(lambda p, x: k * empirical_ntk_fn(
            apply_fn, trace_axes=(-1,), implementation=1)(x, None, p)),
        "nt implementation 2": jax.jit(lambda p, x: k * empirical_ntk_fn(
            apply_fn, trace_axes=(-1,), implementation=2)(x, None, p)),
    }
    ref = routes["layerlab jacobian"](params, x)
    records = []
    times = timeit_interleaved({name: (f, (params, x)) for name, f in routes.items()},
                               repeats=repeats)
    for name, f in routes.items():
        t = times[name]
        records.append({"what": f"empirical NTK, traced [n, n], MLP {d}-{width}-{width}-{k}",
                         "route": name, "n": n, "params": int(sum(
                             p.size for p in jax.tree_util.tree_leaves(params))),
                         "time": t, "interleaved": True, "max_abs_diff_vs_jacobian": float(
                             jnp.max(jnp.abs(f(params, x) - ref)))})
        tqdm.write(f"{name:22s} {t['median_s']:.4f}s")
    return records


def _plot(records, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for get in sorted({r["kernel"] for r in records}):
        rs = [r for r in records if r["kernel"] == get]
        ns = [r["N"] for r in rs]
        ax.loglog(ns, [r["native"]["median_s"] for r in rs], "o-", label=f"native {get}")
        ax.loglog(ns, [r["neural_tangents"]["median_s"] for r in rs], "s--",
                  label=f"neural-tangents {get}")
    ax.set_xlabel("N (kernel is N x N)")
    ax.set_ylabel("median time [s]")
    ax.set_title(f"ReLU kernel, depth {records[0]['depth']}, d = {records[0]['d']}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def build_parser():
    p = arg_parser(__doc__)
    p.add_argument("--sizes", default="500,1000,2000", help="comma-separated N")
    p.add_argument("--d", type=int, default=784, help="input dimension")
    p.add_argument("--depth", type=int, default=3, help="ReLU layers of the kernel's network")
    p.add_argument("--w-var", type=float, default=2.0, help="weight variance sigma_w^2")
    p.add_argument("--b-var", type=float, default=0.1, help="bias variance sigma_b^2")
    p.add_argument("--repeats", type=int, default=5,
                   help="interleaved timed rounds, each calling every compared route (median)")
    p.add_argument("--no-ntk", dest="ntk", action="store_false", help="NNGP only")
    p.add_argument("--emp-n", type=int, default=64, help="samples for the empirical NTK")
    p.add_argument("--emp-width", type=int, default=256,
                   help="hidden width of the MLP for the empirical NTK")
    add_output_flags(p, "kernels_eval")
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    _imports()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    closed = bench_closed_forms(sizes, args.d, args.depth, args.w_var, args.b_var,
                                args.repeats, args.ntk)
    emp = bench_empirical(args.emp_n, 32, args.emp_width, 10, args.repeats)
    out = out_dir("kernels_eval", args.out, args.record)
    path = write_json(out / "kernels_eval.json", {
        "benchmark": "kernels_eval", "args": vars(args),
        "closed_forms": closed, "empirical_ntk": emp,
        "summary": {f"speedup_{r['kernel']}_N{r['N']}": round(r["speedup_native_over_nt"], 3)
                    for r in closed},
    })
    _plot(closed, out / "kernels_eval.png")
    print(f"written: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
