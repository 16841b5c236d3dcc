"""Bottleneck structure of deep L2-regularised nets (paper B, Thms. 3, 6, 7; Sec. 5, App. E).

    python -m benchmarks.bottleneck_structure                 # CPU defaults (a few minutes)
    python -m benchmarks.bottleneck_structure --depths 4 8 12 16 20 24 --n 1000 --steps 30000 \
        --width 100                                           # paper-like scale (GPU)

Two tasks of bottleneck rank k = 2: (i) ``layerlab.data.latent`` (x = g(z), y = h(z),
z in R^2); (ii) the symmetry task (predict the next T log-losses of GD on
||w w^T - e e^T - E||^2 from w_0).  For a depth sweep (and an Adam learning-rate sweep at one
depth, all rates in one program via ``loop.fit(runs=True)``) we record, per layer, the weight
singular values and the count within ``tol`` of 1, the effective and numerical rank of each
representation, the rank and log pseudo-determinant of the input-output Jacobian, and the
empirical NTK trace.  Paper B predicts, for large depth, ~k singular values near 1 in almost
all layers, ~k-dimensional hidden representations, Jacobian rank k, NTK trace growing with L.

Writes ``results/bottleneck_structure/structure.json`` and ``structure.png``.
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
from layerlab import data, loop  # noqa: E402


def make_task(name, key, n):
    if name == "latent2":
        ds = data.latent(key, n, k=2, d_in=10, d_out=10)
    else:
        ds = bn.symmetry_task(key, n, d=10, steps=10)
    x, y = jnp.asarray(ds.x), jnp.asarray(ds.y)
    y = (y - y.mean(0)) / y.std()  # comparable output scale across tasks
    return x, y


def train(x, y, depth, args, lrs, key):
    """Train len(lrs) runs (one per Adam rate) of a depth-`depth` net in one program."""
    R = len(lrs)
    sizes = [x.shape[1]] + [args.width] * (depth - 1) + [y.shape[1]]
    W0 = jax.vmap(lambda k: bn.init_weights(k, sizes))(jax.random.split(key, R))
    hp = {"masks": jnp.ones((R, depth - 1, args.width)), "lam": jnp.full((R,), args.lam)}
    opt = optax.chain(optax.scale_by_adam(),
                      optax.scale_by_schedule(optax.cosine_decay_schedule(1.0, args.steps, 1e-2)),
                      optax.inject_hyperparams(optax.scale)(step_size=-1.0))
    ts = bn.sweep_step(bn.mse_cost, opt)
    state = jax.vmap(ts.init)(W0, hp)
    inj = state.opt_state[2]
    inj.hyperparams["step_size"] = -jnp.asarray(lrs, jnp.float32)
    state = state._replace(opt_state=(state.opt_state[0], state.opt_state[1], inj))
    state, hist = loop.fit(ts.step, state, (x, y), key=jax.random.fold_in(key, 1),
                           steps=args.steps, runs=True, desc=f"L={depth}")
    diag = jax.jit(jax.vmap(lambda W: bn.bottleneck_diagnostics(
        W, x[: args.n_diag], tol=args.tol, rel_tol=args.rel_tol)))(state.params)
    return {"lrs": list(lrs), "cost": hist["train"]["cost"][-1], "reg": hist["train"]["reg"][-1],
            "count_near_one": diag["count_near_one"],
            "effective_rank": diag["effective_rank"], "numerical_rank": diag["numerical_rank"],
            "jacobian_rank": diag["jacobian_rank"], "jacobian_log_pdet": diag["jacobian_log_pdet"],
            "ntk_trace": diag["ntk_trace"],
            "singular_values": [s[:, :8] for s in diag["singular_values"]],
            "reg_per_depth": hist["train"]["reg"][-1] / depth}


def summarise(r, i=0):
    c = np.asarray(r["count_near_one"])[i]
    e = np.asarray(r["effective_rank"])[i]
    mid = slice(1, len(c) - 1)
    return {"median_count_near_one_inner": float(np.median(c[mid])),
            "median_effective_rank_hidden": float(np.median(e[:-1][mid])),
            "jacobian_rank": float(np.asarray(r["jacobian_rank"])[i]),
            "jacobian_log_pdet": float(np.asarray(r["jacobian_log_pdet"])[i]),
            "ntk_trace": float(np.asarray(r["ntk_trace"])[i]),
            "train_cost": float(np.asarray(r["cost"])[i]),
            "reg_over_L": float(np.asarray(r["reg_per_depth"])[i])}


def plot(res, args, path):
    tasks = list(res["tasks"])
    fig, ax = plt.subplots(len(tasks), 5, figsize=(24, 4.5 * len(tasks)), squeeze=False)
    for row, t in enumerate(tasks):
        dep = res["tasks"][t]["depth_sweep"]
        Lmax = str(max(args.depths))
        sv = dep[Lmax]["singular_values"]
        for l, s in enumerate(sv):  # noqa: E741
            ax[row, 0].scatter(np.full(len(s[0]), l + 1), s[0], s=10, c="k")
        ax[row, 0].axhline(1, ls=":", c="r")
        ax[row, 0].set(title=f"{t}: weight singular values, L={Lmax}", xlabel="layer",
                       ylabel="s_i(W_l)")
        for L in args.depths:
            r = dep[str(L)]
            c = np.asarray(r["count_near_one"])[0]
            e = np.asarray(r["effective_rank"])[0]
            ax[row, 1].plot(np.arange(1, L + 1) / L, c, "o-", ms=3, label=f"L={L}")
            ax[row, 2].plot(np.arange(1, L + 1) / L, e, "o-", ms=3, label=f"L={L}")
        ax[row, 1].axhline(2, ls=":", c="k")
        ax[row, 1].set(title=f"# singular values within {args.tol} of 1", xlabel="l / L")
        ax[row, 2].axhline(2, ls=":", c="k")
        ax[row, 2].set(title="effective rank of Z_l", xlabel="l / L")
        ax[row, 1].legend(fontsize=7)
        Ls = np.array(args.depths)
        ntk = [summarise(dep[str(L)])["ntk_trace"] for L in Ls]
        jr = [summarise(dep[str(L)])["jacobian_rank"] for L in Ls]
        ax[row, 3].plot(Ls, ntk, "o-", label="NTK trace")
        ax[row, 3].set(title="empirical NTK trace vs depth", xlabel="L")
        a2 = ax[row, 3].twinx()
        a2.plot(Ls, jr, "s--", c="tab:red")
        a2.set_ylabel("Jacobian rank", color="tab:red")
        lr = res["tasks"][t]["lr_sweep"]
        c = np.asarray(lr["count_near_one"])
        for i, rate in enumerate(lr["lrs"]):
            ax[row, 4].plot(np.arange(1, c.shape[1] + 1), np.asarray(lr["effective_rank"])[i],
                            "o-", ms=3, label=f"lr={rate:g}, NTK tr="
                            f"{float(np.asarray(lr['ntk_trace'])[i]):.0f}")
        ax[row, 4].axhline(2, ls=":", c="k")
        ax[row, 4].set(title=f"lr sweep (L={args.lr_depth}): effective rank of Z_l",
                       xlabel="layer")
        ax[row, 4].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--depths", type=int, nargs="+", default=[4, 6, 8, 12])
    p.add_argument("--lrs", type=float, nargs="+", default=[1e-3, 3e-3, 1e-2])
    p.add_argument("--lr-depth", type=int, default=8)
    p.add_argument("--n", type=int, default=200)
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--lam", type=float, default=3e-3)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--tol", type=float, default=0.25)
    p.add_argument("--rel-tol", type=float, default=1e-2)
    p.add_argument("--n-diag", type=int, default=64)
    p.add_argument("--tasks", nargs="+", default=["latent2", "symmetry"])
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    out = results_dir("bottleneck_structure", args.out)
    res = {"config": vars(args), "tasks": {}}
    t0 = time.perf_counter()
    for ti, t in enumerate(args.tasks):
        x, y = make_task(t, jax.random.key(10 + ti), args.n)
        dep = {}
        for L in args.depths:
            dep[str(L)] = train(x, y, L, args, [3e-3], jax.random.key(L))
            print(t, L, summarise(dep[str(L)]), flush=True)
        lr = train(x, y, args.lr_depth, args, args.lrs, jax.random.key(100))
        res["tasks"][t] = {"depth_sweep": dep, "lr_sweep": lr,
                           "summary": {str(L): summarise(dep[str(L)]) for L in args.depths},
                           "lr_summary": {f"{r:g}": summarise(lr, i)
                                          for i, r in enumerate(args.lrs)}}
    res["wall_s"] = time.perf_counter() - t0
    res["paper"] = {"k": 2, "claim": "for large L: ~k singular values of W_l near 1 in almost all "
                    "layers (Thm. 6), hidden representations ~k-dimensional and NTK trace of "
                    "order L at large learning rates (Thm. 7, Cor. 8), Jacobian rank k (Thm. 3)"}
    write_json(out / "structure.json", res)
    plot(res, args, out / "structure.png")
    print("written:", out)


if __name__ == "__main__":
    main()
