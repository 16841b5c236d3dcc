"""Performance: vectorised width x seed sweeps and the cost of L^r (paper A tools).

    python -m benchmarks.bottleneck_sweep                      # CPU default (~1-2 min)
    python -m benchmarks.bottleneck_sweep --n 1000 --widths 2 4 8 16 32 64 128 --steps 2000

1. The same width x seed runs (masked neurons of one maximal width) trained (a) in one
   program, ``loop.fit(runs=True)`` (the step vmapped over the runs axis), and (b) one after
   another with ``loop.fit(runs=False)``; both warmed up (compiled) first, then timed in
   ``--repeats`` interleaved rounds (``benchmarks._common.timeit_interleaved``: each round
   calls both, the order rotated, so a drift of the machine's speed hits both alike); medians
   and the median of the per-round ratios; the final losses are compared (same runs, same
   numbers).
2. ``value_and_grad`` of L^r (pseudo-inverses, exact and Tikhonov) against a plain
   forward + backward pass of ``L_lambda`` on the same network (interleaved rounds, medians).

Writes ``sweep.json`` to ``scratch/bottleneck_sweep/`` (``results/bottleneck_sweep/`` with
``--record``).
"""
from __future__ import annotations

from benchmarks._common import add_output_flags, arg_parser


def _imports():
    """The heavy imports, after the flags are parsed (``--help`` stays instant)."""
    global jax, jnp, np, optax, out_dir, timeit_interleaved, write_json, bn, data, loop, nets
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    from benchmarks._common import out_dir, timeit_interleaved, write_json
    from layerlab import bottleneck as bn
    from layerlab import data, loop, nets


def build_parser():
    p = arg_parser(__doc__)
    p.add_argument("--n", type=int, default=200, help="samples of the teacher task")
    p.add_argument("--widths", type=int, nargs="+", default=[2, 4, 8, 16, 32],
                   help="hidden widths of the sweep")
    p.add_argument("--seeds", type=int, default=3, help="runs per width")
    p.add_argument("--depth", type=int, default=3, help="weight matrices L")
    p.add_argument("--steps", type=int, default=500, help="Adam steps per run")
    p.add_argument("--lam", type=float, default=1e-4, help="L2 regularisation lambda")
    p.add_argument("--repeats", type=int, default=7,
                   help="interleaved timed rounds, each calling both routes (median)")
    add_output_flags(p, "bottleneck_sweep")
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    _imports()
    out = out_dir("bottleneck_sweep", args.out, args.record)
    ds = data.teacher(jax.random.key(0), args.n, (50, 10, 10, 10))
    x, y = jnp.asarray(ds.x), jnp.asarray(ds.y)
    W = max(args.widths)
    sizes = [x.shape[1]] + [W] * (args.depth - 1) + [y.shape[1]]
    run_widths = np.repeat(args.widths, args.seeds)
    R = len(run_widths)
    hp = {"masks": bn.width_masks(run_widths, W, args.depth - 1),
          "lam": jnp.full((R,), args.lam)}
    W0 = jax.vmap(lambda k: nets.mlp_init(k, sizes, init="he"))(
        jax.random.split(jax.random.key(1), R))
    ts = bn.sweep_step(bn.mse_cost, optax.adam(1e-3))
    state0 = jax.vmap(ts.init)(W0, hp)
    key = jax.random.key(2)

    last = {}

    def vectorised():
        s, _ = loop.fit(ts.step, state0, (x, y), key=key, steps=args.steps, runs=True,
                        progress=False, chunk_size=args.steps)
        last["vectorised"] = s
        return s

    def sequential():
        outs = []
        for r in range(R):
            s_r = jax.tree.map(lambda a, r=r: a[r], state0)
            s, _ = loop.fit(ts.step, s_r, (x, y), key=key, steps=args.steps, progress=False,
                            chunk_size=args.steps)
            outs.append(s)
        last["sequential"] = outs
        return outs

    t = timeit_interleaved({"vectorised": (vectorised, ()), "sequential": (sequential, ())},
                           repeats=args.repeats)
    sv, ss = last["vectorised"], last["sequential"]
    v_first, v_med, v_all = (t["vectorised"][k] for k in ("compile_s", "median_s", "times_s"))
    s_first, s_med, s_all = (t["sequential"][k] for k in ("compile_s", "median_s", "times_s"))

    def final_loss(params, h):
        return bn.masked_loss(params, (x, y), hparams=h, cost=bn.mse_cost)[0]

    lv = np.asarray(jax.vmap(final_loss)(sv.params, hp))
    ls = np.array([float(final_loss(s.params, jax.tree.map(lambda a, r=r: a[r], hp)))
                   for r, s in enumerate(ss)])
    sweep = {"runs": R, "widths": args.widths, "seeds": args.seeds, "steps": args.steps,
             "n": args.n, "max_width": W, "depth": args.depth,
             "vectorised_first_call_s": v_first, "vectorised_median_s": v_med,
             "vectorised_all_s": v_all,
             "sequential_first_call_s": s_first, "sequential_median_s": s_med,
             "sequential_all_s": s_all,
             "speedup_steady_state": s_med / v_med,
             "speedup_paired_median": float(np.median(np.asarray(s_all) / np.asarray(v_all))),
             "interleaved": True,
             "speedup_including_compile": s_first / v_first,
             "final_loss_max_rel_diff": float(np.max(np.abs(lv - ls) / np.abs(ls)))}
    print(f"width x seed sweep ({R} runs x {args.steps} steps): vectorised {v_med:.2f}s, "
          f"sequential {s_med:.2f}s, speed-up {sweep['speedup_steady_state']:.1f}x; "
          f"final losses agree to {sweep['final_loss_max_rel_diff']:.1e}", flush=True)

    # 2. cost of L^r vs a forward+backward pass on the same network
    cost = lambda Z: bn.mse_cost(Z, y)  # noqa: E731
    Wt = nets.mlp_init(jax.random.key(3), [x.shape[1], 64, 64, y.shape[1]], init="he")
    Zs = bn.representations(Wt, x)
    fwd_bwd = jax.jit(jax.value_and_grad(lambda w: bn.weight_loss(w, x, cost=cost,
                                                                  lam=args.lam)))
    lr_exact = jax.jit(jax.value_and_grad(lambda z: bn.representation_loss(
        z, x, cost=cost, lam=args.lam)))
    lr_ridge = jax.jit(jax.value_and_grad(lambda z: bn.representation_loss(
        z, x, cost=cost, lam=args.lam, ridge=1e-4)))
    tc = timeit_interleaved({"w": (fwd_bwd, (Wt,)), "e": (lr_exact, (Zs,)),
                             "r": (lr_ridge, (Zs,))}, repeats=11)
    t_w, t_e, t_r = tc["w"], tc["e"], tc["r"]
    cost_rec = {"shapes": {"N": args.n, "widths": [x.shape[1], 64, 64, y.shape[1]]},
                "dtype": "float32", "weight_fwd_bwd": t_w, "Lr_pinv_fwd_bwd": t_e,
                "Lr_tikhonov_fwd_bwd": t_r,
                "ratio_Lr_pinv_over_fwd_bwd": t_e["median_s"] / t_w["median_s"],
                "ratio_Lr_tikhonov_over_fwd_bwd": t_r["median_s"] / t_w["median_s"]}
    print(f"L^r value+grad: pinv {cost_rec['ratio_Lr_pinv_over_fwd_bwd']:.1f}x, Tikhonov "
          f"{cost_rec['ratio_Lr_tikhonov_over_fwd_bwd']:.1f}x a weight-space forward+backward")
    write_json(out / "sweep.json", {"width_seed_sweep": sweep, "Lr_cost": cost_rec})
    print("written:", out)


if __name__ == "__main__":
    main()
