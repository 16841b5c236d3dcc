"""Performance: ``bottleneck.ntk_trace`` (per-sample Jacobians, O(B)) against the trace of the
dense ``[B, B]`` empirical NTK (``kernels.empirical_ntk``, O(B^2)), the route it replaced.

    python -m benchmarks.bottleneck_ntk_trace                  # CPU default (~1 min)
    python -m benchmarks.bottleneck_ntk_trace --batches 50 100 200 400 800 --record

For each batch size B both routes are jitted, warmed up and timed in interleaved rounds
(``benchmarks._common.timeit_interleaved``: every round calls both, so a drift of a shared
machine's speed hits both alike); the JSON holds the medians, their ratio and the two values
(the mean NTK trace, ``(1/B) sum_i Tr Theta(x_i, x_i)``; they agree to float32 rounding).
Writes ``ntk_trace.json`` to ``scratch/bottleneck_ntk_trace/``
(``results/bottleneck_ntk_trace/`` with ``--record``).
"""
from __future__ import annotations

from benchmarks._common import add_output_flags, arg_parser


def build_parser():
    p = arg_parser(__doc__)
    p.add_argument("--batches", type=int, nargs="+", default=[50, 100, 200, 400],
                   help="batch sizes B (samples the trace sums over)")
    p.add_argument("--sizes", type=int, nargs="+", default=[5, 32, 32, 32, 3],
                   help="MLP layer widths, input to output")
    p.add_argument("--repeats", type=int, default=7, help="interleaved rounds (median)")
    p.add_argument("--dense-max", type=int, default=800,
                   help="largest B timed on the dense route (its memory grows as B^2)")
    add_output_flags(p, "bottleneck_ntk_trace")
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    import jax
    import jax.numpy as jnp

    from benchmarks._common import machine_info, out_dir, timeit_interleaved, write_json
    from layerlab import bottleneck as bn
    from layerlab import kernels, nets

    out = out_dir("bottleneck_ntk_trace", args.out, args.record)
    params = nets.mlp_init(jax.random.key(0), args.sizes)

    per_sample = jax.jit(lambda p, x: bn.ntk_trace(p, x))

    @jax.jit
    def dense(p, x):  # the replaced route: the whole [B, B] NTK, then its mean diagonal
        return jnp.trace(kernels.empirical_ntk(lambda q, z: nets.mlp_apply(q, z), p, x)
                         ) / x.shape[0]

    rows = []
    for b in args.batches:
        x = jax.random.normal(jax.random.key(b), (b, args.sizes[0]))
        cases = {"per_sample": (per_sample, (params, x))}
        if b <= args.dense_max:
            cases["dense"] = (dense, (params, x))
        t = timeit_interleaved(cases, repeats=args.repeats)
        row = {"B": b, "per_sample": t["per_sample"],
               "value_per_sample": float(per_sample(params, x))}
        if "dense" in t:
            row.update(dense=t["dense"], value_dense=float(dense(params, x)),
                       speedup=t["dense"]["median_s"] / t["per_sample"]["median_s"])
        rows.append(row)
        print(f"B={b:5d}  per-sample {t['per_sample']['median_s'] * 1e3:8.2f} ms"
              + (f"  dense {t['dense']['median_s'] * 1e3:8.2f} ms  x{row['speedup']:.1f}"
                 if "dense" in t else "  dense not timed (B > --dense-max)"))
    path = write_json(out / "ntk_trace.json", {
        "machine": machine_info(), "sizes": args.sizes, "repeats": args.repeats,
        "rows": rows})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    main()
