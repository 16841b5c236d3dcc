"""Attraction/repulsion forces on the hidden representations (paper A, Sec. 3.1, Fig. 1).

    python -m benchmarks.bottleneck_forces          # CPU default: a minute or two
    python -m benchmarks.bottleneck_forces --steps 50000   # longer training

Digits 7, 8, 9 (scikit-learn ``digits``), N = 42 (14 per class), depth L = 3, width 50, ReLU,
MSE on one-hot targets.  The network is trained in weight space with ``layerlab.loop.fit``;
at checkpoints along training the forces

    F_att_l = -lam d/dZ_l ||Z_l (Z_{l-1}^s)^+||^2,  F_rep_l = -lam d/dZ_l ||Z_{l+1} (Z_l^s)^+||^2

(Tikhonov pseudo-inverses) are computed on the hidden representations; at a minimum they
cancel (``||F_att + F_rep|| / ||F_att|| -> 0``).  The figure shows each hidden layer's data
points (top-2 principal components of Z_l) with the two forces as arrows.

Writes ``results/bottleneck_forces/forces.json`` and ``forces.png``.
"""
from __future__ import annotations

import argparse

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


def load_digits(n: int, seed: int = 0):
    ds = data.select_classes(data.load("digits"), [7, 8, 9])
    ds = data.balanced_subset(ds, n, seed=seed)
    x = data.flatten(ds.x)
    x, _, _ = data.standardize(x)
    y = data.one_hot(ds.y, 3, zero_mean=True)
    return jnp.asarray(x), jnp.asarray(y), np.asarray(ds.y)


def force_stats(Ws, X, lam, ridge):
    Zs = bn.representations(Ws, X)
    F = bn.forces(Zs, X, lam=lam, ridge=ridge)
    out = []
    As = [bn.augment(X, 1.0)] + [bn.augment(jax.nn.relu(Z), 1.0) for Z in Zs[:-1]]
    for l in range(len(Zs) - 1):  # noqa: E741
        a, r = F.attraction[l], F.repulsion[l]
        # variations of Z_l realisable by W_l: the row space of Z_{l-1}^sigma
        _, s, vt = jnp.linalg.svd(As[l], full_matrices=False)
        keep = (s > 1e-6 * s[0]).astype(s.dtype)
        P = (vt.T * keep[None, :]) @ vt
        _, s_next, _ = jnp.linalg.svd(As[l + 1], full_matrices=False)
        out.append({"att": jnp.linalg.norm(a), "rep": jnp.linalg.norm(r),
                    "imbalance_row_space": jnp.linalg.norm((a + r) @ P) / jnp.linalg.norm(a @ P),
                    # the net force mapped through Z_{l-1}^sigma (damps the 1/s_min directions);
                    # a diagnostic only: F_rep is not the backprop force, so this is not the
                    # weight-space gradient
                    "imbalance_weight_metric": jnp.linalg.norm((a + r) @ As[l].T)
                    / jnp.linalg.norm(a @ As[l].T),
                    "rank_input_sigma": jnp.sum(keep),
                    "rank_output_sigma": jnp.sum(s_next > 1e-6 * s_next[0]),
                    "imbalance": jnp.linalg.norm(a + r) / jnp.linalg.norm(a),
                    "cos_att_minus_rep": jnp.sum(a * -r) / (jnp.linalg.norm(a) *
                                                           jnp.linalg.norm(r))})
    return Zs, F, out


def polish_lbfgs(params, x, y, hp, maxiter):
    import scipy.optimize
    from jax.flatten_util import ravel_pytree

    with jax.enable_x64(True):
        p64 = [w.astype(jnp.float64) for w in params]
        flat, unravel = ravel_pytree(p64)
        x64, y64 = x.astype(jnp.float64), y.astype(jnp.float64)
        hp64 = jax.tree.map(lambda a: a.astype(jnp.float64), hp)
        vg = jax.jit(jax.value_and_grad(lambda f: bn.masked_loss(
            unravel(f), (x64, y64), hparams=hp64, cost=bn.mse_cost)[0]))

        def fun(v):
            val, g = vg(jnp.asarray(v))
            return float(val), np.asarray(g, dtype=np.float64)

        res = scipy.optimize.minimize(fun, np.asarray(flat), jac=True, method="L-BFGS-B",
                                      options={"maxiter": maxiter, "gtol": 1e-12, "ftol": 0.0,
                                               "maxcor": 50})
        out = [w.astype(jnp.float32) for w in unravel(jnp.asarray(res.x))]
        out64 = unravel(jnp.asarray(res.x))
    return out64, {"iters": int(res.nit), "max_grad": float(np.abs(res.jac).max()),
                   "final_loss": float(res.fun), "message": str(res.message),
                   "float32_params": out is not None}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=42)
    p.add_argument("--width", type=int, default=50)
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--lam", type=float, default=1e-3)
    p.add_argument("--steps", type=int, default=10000)
    p.add_argument("--checkpoints", type=int, default=5)
    p.add_argument("--ridge", type=float, default=1e-8)
    p.add_argument("--polish-iters", type=int, default=3000)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    out = results_dir("bottleneck_forces", args.out)
    x, y, labels = load_digits(args.n)
    X = x.T
    sizes = [x.shape[1]] + [args.width] * (args.depth - 1) + [3]
    W0 = bn.init_weights(jax.random.key(0), sizes)
    hp = {"masks": jnp.ones((args.depth - 1, args.width)), "lam": jnp.asarray(args.lam)}
    sched = optax.cosine_decay_schedule(3e-3, args.steps, alpha=1e-3)
    ts = bn.sweep_step(bn.mse_cost, optax.adam(sched))
    state = ts.init(W0, hp)
    _stats = jax.jit(lambda W: force_stats(W, X.astype(jnp.float64), args.lam, args.ridge))

    def stats_fn(W):  # forces in float64: the trained representations are nearly low-rank
        with jax.enable_x64(True):
            return _stats([w.astype(jnp.float64) for w in W])

    seg = args.steps // args.checkpoints
    trace, snaps = [], {}
    _, F0, s0 = stats_fn(state.params)
    trace.append({"step": 0, "loss": float(bn.masked_loss(state.params, (x, y), hparams=hp,
                                                           cost=bn.mse_cost)[0]),
                  "layers": s0})
    snaps["init"] = state.params
    key = jax.random.key(1)
    for c in range(args.checkpoints):
        state, hist = loop.fit(ts.step, state, (x, y), key=jax.random.fold_in(key, c),
                               steps=seg, progress=False)
        _, _, st = stats_fn(state.params)
        trace.append({"step": (c + 1) * seg, "loss": float(hist["train"]["loss"][-1]),
                      "layers": st})
        print(f"step {(c + 1) * seg}: loss {hist['train']['loss'][-1]:.5f}, imbalance per layer "
              + ", ".join(f"{float(s['imbalance']):.3g} (row space "
                          f"{float(s['imbalance_row_space']):.3g}, rank sigma(Z) "
                          f"{int(s['rank_output_sigma'])})" for s in st), flush=True)
    snaps["adam"] = state.params
    # polish to a critical point in float64 with L-BFGS (the forces amplify any gradient residual
    # along the small singular directions of Z^sigma by 1/s_min, so Adam's end point is not enough)
    polished, info = polish_lbfgs(state.params, x, y, hp, args.polish_iters)
    _, _, st = stats_fn(polished)
    trace.append({"step": args.steps, "phase": "lbfgs", "lbfgs": info,
                  "loss": info["final_loss"], "layers": st})
    print(f"L-BFGS polish ({info['iters']} its, max |grad| {info['max_grad']:.2e}): loss "
          f"{info['final_loss']:.6f}, imbalance per layer "
          + ", ".join(f"{float(s['imbalance']):.3g} (weight metric "
                      f"{float(s['imbalance_weight_metric']):.2g})" for s in st), flush=True)
    snaps["trained"] = polished

    fig, axes = plt.subplots(2, args.depth - 1, figsize=(5.5 * (args.depth - 1), 10))
    colors = np.array(["tab:blue", "tab:orange", "tab:green"])
    for row, name in enumerate(["init", "trained"]):  # "trained" = Adam + L-BFGS
        Zs, F, st = stats_fn(snaps[name])
        for l in range(args.depth - 1):  # noqa: E741
            ax = axes[row, l]
            Z = np.asarray(Zs[l])
            mu = Z.mean(1, keepdims=True)
            U, _, _ = np.linalg.svd(Z - mu, full_matrices=False)
            P = U[:, :2].T
            pts = P @ (Z - mu)
            a, r = P @ np.asarray(F.attraction[l]), P @ np.asarray(F.repulsion[l])
            sc = 0.25 * np.abs(pts).max() / max(np.abs(a).max(), np.abs(r).max(), 1e-12)
            ax.scatter(pts[0], pts[1], c=colors[labels], s=18, zorder=3)
            ax.quiver(pts[0], pts[1], sc * a[0], sc * a[1], color="tab:red", angles="xy",
                      scale_units="xy", scale=1, width=0.004, label="attraction")
            ax.quiver(pts[0], pts[1], sc * r[0], sc * r[1], color="tab:purple", angles="xy",
                      scale_units="xy", scale=1, width=0.004, label="repulsion")
            ax.set_title(f"{name}: layer {l + 1}, ||att+rep||/||att|| = "
                         f"{float(st[l]['imbalance']):.2g}", fontsize=9)
            if l == 0 and row == 0:
                ax.legend(fontsize=8)
    fig.suptitle("digits 7/8/9 (blue/orange/green), N=42, L=3, width 50: forces on Z_l "
                 "(top-2 PCs)")
    fig.tight_layout()
    fig.savefig(out / "forces.png", dpi=100)
    write_json(out / "forces.json", {
        "config": vars(args), "trace": trace,
        "final_imbalance": [float(s["imbalance"]) for s in trace[-1]["layers"]],
        "initial_imbalance": [float(s["imbalance"]) for s in trace[0]["layers"]],
        "final_imbalance_row_space": [float(s["imbalance_row_space"])
                                      for s in trace[-1]["layers"]],
        "final_imbalance_weight_metric": [float(s["imbalance_weight_metric"])
                                          for s in trace[-1]["layers"]],
        "initial_imbalance_weight_metric": [float(s["imbalance_weight_metric"])
                                            for s in trace[0]["layers"]],
        "final_rank_Z_sigma": [int(s["rank_output_sigma"]) for s in trace[-1]["layers"]],
        "paper": "forces cancel at a minimum; attraction pulls Z_l towards Z_{l-1}, repulsion "
                 "keeps the information Z_{l+1} needs (Fig. 1, qualitative)"})
    print("written:", out)


if __name__ == "__main__":
    main()
