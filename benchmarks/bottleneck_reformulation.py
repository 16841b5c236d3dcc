"""Optimising L^r over representations vs L_lambda over weights (paper A, Prop. 1).

    python -m benchmarks.bottleneck_reformulation            # CPU default (a minute or two)
    python -m benchmarks.bottleneck_reformulation --n 200 --width 256 --steps 20000

Same problem, same initialisation (``Z_0 = Phi(W_0)``), Adam in both spaces over a small grid
of learning rates.  Representation space: projected steps ``Z <- Phi(Psi_rho(Z - u))`` with
Tikhonov pseudo-inverses; the reported loss is always the true ``L_lambda`` of the network
(``W = Psi_rho(Z)`` for the representation runs), plotted against wall time.

Writes ``results/bottleneck_reformulation/reformulation.json`` and ``reformulation.png``.
"""
from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import matplotlib
import numpy as np
import optax

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from benchmarks._common import results_dir, write_json  # noqa: E402
from layerlab import bottleneck as bn  # noqa: E402
from layerlab import data  # noqa: E402


def run_chunks(step, state, n_chunks, chunk):
    """Jitted scan of `chunk` steps; returns (loss after each chunk, wall time of each)."""
    @jax.jit
    def many(s):
        def body(s, _):
            s, m = step(s, None, None)
            return s, m
        s, m = jax.lax.scan(body, s, None, length=chunk)
        return s, m

    s_c = many(state)  # compile + first chunk (not timed)
    jax.block_until_ready(s_c)
    state = s_c[0]
    times, losses = [], []
    for _ in range(n_chunks):
        t0 = time.perf_counter()
        state, m = many(state)
        jax.block_until_ready(m)
        times.append(time.perf_counter() - t0)
        losses.append(m)
    return state, times, losses


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=60)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--lam", type=float, default=1e-3)
    p.add_argument("--ridge", type=float, default=1e-4)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--chunk", type=int, default=100)
    p.add_argument("--lrs", type=float, nargs="+", default=[1e-3, 3e-3, 1e-2])
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    out = results_dir("bottleneck_reformulation", args.out)
    ds = data.teacher(jax.random.key(0), args.n, (10, 10, 10, 3))
    x, y = jnp.asarray(ds.x), jnp.asarray(ds.y)
    X = x.T
    cost = lambda Z: bn.mse_cost(Z, y)  # noqa: E731
    sizes = [x.shape[1]] + [args.width] * (args.depth - 1) + [y.shape[1]]
    W0 = bn.init_weights(jax.random.key(1), sizes)
    Z0 = bn.representations(W0, X)
    wloss = lambda W: bn.weight_loss(W, X, cost=cost, lam=args.lam)  # noqa: E731
    n_chunks = args.steps // args.chunk
    res = {"config": vars(args), "weight_space": {}, "representation_space": {},
           "initial_loss": float(wloss(W0))}
    for lr in args.lrs:
        wstep = bn.sweep_step(bn.mse_cost, optax.adam(lr))
        hp = {"masks": jnp.ones((args.depth - 1, args.width)), "lam": jnp.asarray(args.lam)}
        st = wstep.init(W0, hp)

        def ws(s, b, k, _step=wstep.step):
            return _step(s, (x, y), k)

        _, t, m = run_chunks(ws, st, n_chunks, args.chunk)
        res["weight_space"][f"{lr:g}"] = {
            "time_s": np.cumsum(t), "loss": [float(mm["loss"][-1]) for mm in m],
            "per_step_s": float(np.median(t)) / args.chunk}
        rstep = bn.representation_step(X, cost, optax.adam(lr), lam=args.lam, ridge=args.ridge)
        _, t, m = run_chunks(rstep.step, rstep.init(Z0), n_chunks, args.chunk)
        res["representation_space"][f"{lr:g}"] = {
            "time_s": np.cumsum(t), "loss": [float(mm["weight_loss"][-1]) for mm in m],
            "per_step_s": float(np.median(t)) / args.chunk}
        print(f"lr={lr:g}: weight-space final {res['weight_space'][f'{lr:g}']['loss'][-1]:.5f}, "
              f"representation-space final "
              f"{res['representation_space'][f'{lr:g}']['loss'][-1]:.5f}", flush=True)
    best = {sp: min(res[sp].values(), key=lambda r: r["loss"][-1])
            for sp in ("weight_space", "representation_space")}
    res["best_final_loss"] = {sp: b["loss"][-1] for sp, b in best.items()}
    res["per_step_ratio_repr_over_weight"] = (best["representation_space"]["per_step_s"]
                                              / best["weight_space"]["per_step_s"])
    write_json(out / "reformulation.json", res)
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    for sp, ls in [("weight_space", "-"), ("representation_space", "--")]:
        for lr, r in res[sp].items():
            ax[0].semilogy(r["time_s"], r["loss"], ls, label=f"{sp} lr={lr}")
            ax[1].semilogy(np.arange(1, n_chunks + 1) * args.chunk, r["loss"], ls,
                           label=f"{sp} lr={lr}")
    ax[0].set(xlabel="wall time (s, after compile)", ylabel="L_lambda of the network",
              title=f"teacher N={args.n}, L={args.depth}, width={args.width}, lam={args.lam:g}")
    ax[1].set(xlabel="steps")
    ax[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "reformulation.png", dpi=100)
    print("best final losses:", res["best_final_loss"], "per-step time ratio (repr/weight):",
          f"{res['per_step_ratio_repr_over_weight']:.2f}")
    print("written:", out)


if __name__ == "__main__":
    main()
