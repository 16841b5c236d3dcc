"""Separation of time scales (Figs. 2, 3, 5 and SI Fig. 7 of Dehmamy et al.).

    python -m benchmarks.dmn_timescales                 # MNIST subset, CPU minutes
    python -m benchmarks.dmn_timescales --full          # all 60k images, more epochs

* Fig. 2: MNIST -> maxpool(3,3) -> Dense 30, 100, 30 -> classifier 10, ReLU, weights
  N(0, 2/d_in) ("Glorot" in the paper, He et al. in today's naming), SGD.  Top singular
  values of every W^(k) and of prod_{m>=k} W^(m) during training.
* Fig. 5: conv32, maxpool, conv32, maxpool, dense 10 on MNIST: per-layer relative
  distance ||w_k(t) - w_k(T)|| / ||w_k(T)|| -- lower layers settle first.
* Fig. 3: eigenvalue fluctuations of the density matrix of 5x5 MNIST patches (25 dims)
  when dN samples are added: |delta lambda| / dN against lambda / N (eq. 18).
* SI Fig. 7: eigenvalues of the 3x3-patch density matrix vs N = 10 ... 10000.
"""
from __future__ import annotations

import argparse
import json

import flax.linen as nn
import jax
import jax.numpy as jnp
import matplotlib
import numpy as np
import optax

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from benchmarks._common import results_dir, write_json  # noqa: E402
from layerlab import loop, nets, probes  # noqa: E402
from layerlab.data import extract_patches, load  # noqa: E402
from layerlab.dmn import (  # noqa: E402
    distance_to_final,
    eigenvalue_convergence,
    eigenvalue_fluctuations,
    eq18_variance,
    layer_spectra,
)
from layerlab.dmn.experiments import Fig5CNN  # noqa: E402

HE = nn.initializers.variance_scaling(2.0, "fan_in", "normal")


def _pool3(x):
    return nn.max_pool(x, (3, 3), strides=(3, 3)).reshape(x.shape[0], -1)


def fig2(tr, te, args, out):
    """Top singular values of W^(k) and of the products above them during SGD."""
    sizes = [81, 30, 100, 30, 10]
    params = nets.mlp_init(jax.random.key(1), sizes, init="he")
    xtr, xte = _pool3(jnp.asarray(tr.x)), _pool3(jnp.asarray(te.x))

    def loss_fn(p, batch):
        x, y = batch
        return optax.softmax_cross_entropy_with_integer_labels(nets.mlp_apply(p, x), y).mean()

    def eval_fn(state):
        s, pr = layer_spectra(state.params, top=1)
        acc = probes.accuracy(nets.mlp_apply(state.params, xte), te.y)
        out = {f"sW{k + 1}": s[k, 0] for k in range(len(sizes) - 1)}
        out |= {f"sP{k + 1}": pr[k, 0] for k in range(len(sizes) - 1)}
        return out | {"val_acc": acc}

    ts = loop.optax_step(loss_fn, optax.sgd(args.lr))
    spe = xtr.shape[0] // 64
    state, hist = loop.fit(ts.step, ts.init(params), (xtr, tr.y), key=jax.random.key(2),
                           epochs=args.epochs_mlp, batch_size=64, eval_fn=eval_fn,
                           eval_every=max(spe // 8, 1), eval_at_start=True, desc="fig2 mlp")
    steps = hist["eval_step"]
    L = len(sizes) - 1
    fig, axs = plt.subplots(1, 2, figsize=(10, 3.8))
    for k in range(L):
        axs[0].plot(steps, hist["eval"][f"sW{k + 1}"], label=f"W{k + 1}")
        axs[1].plot(steps, hist["eval"][f"sP{k + 1}"], label=f"prod m>={k + 1}")
    axs[0].axhline(1.0, color="k", lw=0.5)
    axs[0].set_title("largest singular value of W(k)")
    axs[1].set_title("largest singular value of prod_{m>=k} W(m)")
    axs[1].set_yscale("log")
    for a in axs:
        a.set_xlabel("SGD step")
        a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "fig2_singular_values.png", dpi=120)
    plt.close(fig)
    return {k: np.asarray(v) for k, v in hist["eval"].items()} | {"eval_step": steps}


def fig5(tr, te, args, out):
    """Per-layer ||w(t) - w(T)|| / ||w(T)|| of a small CNN."""
    model = Fig5CNN()
    params = model.init(jax.random.key(3), tr.x[:1])["params"]

    def loss_fn(p, batch):
        x, y = batch
        return optax.softmax_cross_entropy_with_integer_labels(model.apply({"params": p}, x),
                                                               y).mean()

    ts = loop.optax_step(loss_fn, optax.sgd(args.lr))
    spe = tr.x.shape[0] // 64
    every = max(spe // 10, 1)
    snaps, steps = [jax.device_get(params)], [0]

    def cb(t, state, metrics):
        snaps.append(jax.device_get(state.params))
        steps.append(t)

    state, hist = loop.fit(ts.step, ts.init(params), (tr.x, tr.y), key=jax.random.key(4),
                           epochs=args.epochs_cnn, batch_size=64, chunk_size=every,
                           callback=cb, desc="fig5 cnn")
    names = ["conv1", "conv2", "dense"]
    layered = [[s[n] for n in names] for s in snaps]
    dist = distance_to_final(layered, layered[-1], relative=True)
    fig, ax = plt.subplots(figsize=(5, 3.6))
    for k, n in enumerate(names):
        ax.plot(steps, dist[:, k], label=n)
    ax.set_xlabel("SGD step")
    ax.set_ylabel("||w(t) - w(T)|| / ||w(T)||")
    ax.set_title("Fig. 5: per-layer distance to the final weights")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "fig5_distance_to_final.png", dpi=120)
    plt.close(fig)
    # steps until each layer's distance to its final weights falls below 20% of the initial one
    frac = dist / np.maximum(dist[:1], 1e-12)
    t20 = {n: int(steps[int(np.argmax(frac[:, k] < 0.2))]) for k, n in enumerate(names)}
    return {"steps": steps, "layers": names, "relative_distance": dist, "steps_to_20pct": t20,
            "final_loss": float(hist["train"]["loss"][-1])}


def fig3(tr, args, out):
    """|delta lambda| / dN vs lambda / N for 5x5 patches (25 dims)."""
    pt = np.asarray(extract_patches(tr.x[: args.fig3_images], 5)).reshape(-1, 25)
    rng = np.random.default_rng(0)
    pool = jnp.asarray(pt[rng.choice(pt.shape[0], min(args.fig3_pool, pt.shape[0]),
                                     replace=False)])
    rows = []
    fn = jax.jit(eigenvalue_fluctuations, static_argnames=("n", "dn", "num_draws"))
    for n in args.fig3_ns:
        dn = max(n // 10, 1)
        lam, dlam = fn(jax.random.key(n), pool, n=n, dn=dn, num_draws=args.fig3_draws)
        lam_m = np.asarray(lam).mean(0)
        std = np.asarray(dlam).std(0)
        pred = np.sqrt(np.asarray(eq18_variance(lam_m, n, dn)))
        rows.append({"n": n, "dn": dn, "lam": lam_m, "std_dlam": std, "eq18_std": pred})
    x = np.concatenate([r["lam"] / r["n"] for r in rows])
    y = np.concatenate([r["std_dlam"] / r["dn"] for r in rows])
    keep = (x > 0) & (y > 0)
    slope = float(np.polyfit(np.log(x[keep]), np.log(y[keep]), 1)[0])
    ratio = float(np.median(np.concatenate([r["std_dlam"] / r["eq18_std"] for r in rows])))
    fig, ax = plt.subplots(figsize=(5, 3.8))
    for r in rows:
        ax.loglog(r["lam"] / r["n"], r["std_dlam"] / r["dn"], "o", ms=3, label=f"N={r['n']}")
        ax.loglog(r["lam"] / r["n"], r["eq18_std"] / r["dn"], "k-", lw=0.5)
    ax.set_xlabel("lambda / N")
    ax.set_ylabel("std(delta lambda) / dN")
    ax.set_title(f"Fig. 3: slope {slope:.2f} (eq. 18: 1); lines: eq. 18")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "fig3_eigenvalue_fluctuations.png", dpi=120)
    plt.close(fig)
    return {"rows": rows, "loglog_slope": slope, "median_measured_over_eq18": ratio}


def si_fig7(tr, args, out):
    """Eigenvalues of the 3x3-patch density matrix for N = 10 ... 10000 patches."""
    pt = np.asarray(extract_patches(tr.x[:2000], 3)).reshape(-1, 9)
    pt = pt[np.random.default_rng(1).permutation(pt.shape[0])]
    ns = np.unique(np.logspace(1, 4, 25).astype(int))
    lam = eigenvalue_convergence(pt, ns)
    rel = np.abs(lam / lam[-1] - 1)
    fig, ax = plt.subplots(figsize=(5, 3.6))
    for a in range(9):
        ax.plot(ns, lam[:, a], label=f"lambda{a + 1}" if a < 4 else None)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(max(lam[-1].min() / 10, 1e-6), None)  # small N: rank-deficient (blank patches)
    ax.set_xlabel("N (3x3 patches)")
    ax.set_ylabel("eigenvalue of rho")
    ax.set_title("SI Fig. 7: eigenvalues converge with N")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "si_fig7_eigenvalue_convergence.png", dpi=120)
    plt.close(fig)
    # smallest N from which eigenvalue a stays within 10% of its N = 10^4 value
    n_within = {a: int(ns[np.argmax([np.all(rel[i:, a] < 0.1) for i in range(len(ns))])])
                for a in range(9)}
    return {"ns": ns, "eigvals": lam, "n_within_10pct": n_within}


def main(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--n-train", type=int, default=6000)
    p.add_argument("--epochs-mlp", type=int, default=3)
    p.add_argument("--epochs-cnn", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--fig3-images", type=int, default=2000)
    p.add_argument("--fig3-pool", type=int, default=100000)
    p.add_argument("--fig3-ns", type=lambda s: [int(v) for v in s.split(",")],
                   default=[250, 1000, 4000, 16000])
    p.add_argument("--fig3-draws", type=int, default=40)
    p.add_argument("--full", action="store_true", help="all 60k images, 10 epochs")
    p.add_argument("--only", default="fig2,fig5,fig3,si_fig7", help="parts to (re-)run")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if args.full:
        args.n_train, args.epochs_mlp, args.epochs_cnn = None, 10, 10
    tr = load("mnist", "train", n=args.n_train, balanced=args.n_train is not None)
    te = load("mnist", "test", n=2000, balanced=True)
    out = results_dir("dmn_timescales", args.out)
    path = out / "timescales.json"
    res = {}
    if path.exists():  # --only re-runs some parts and keeps the others
        old = json.loads(path.read_text())
        res = {k: old[k] for k in ("fig2", "fig5", "fig3", "si_fig7") if k in old}
    parts = args.only.split(",")
    if "fig2" in parts:
        res["fig2"] = fig2(tr, te, args, out)
        print("fig2 done", flush=True)
    if "fig5" in parts:
        res["fig5"] = fig5(tr, te, args, out)
        print("fig5 done:", res["fig5"]["steps_to_20pct"], flush=True)
    if "fig3" in parts:
        res["fig3"] = fig3(tr, args, out)
        print("fig3 done: slope", res["fig3"]["loglog_slope"], "measured/eq18",
              res["fig3"]["median_measured_over_eq18"], flush=True)
    if "si_fig7" in parts:
        res["si_fig7"] = si_fig7(tr, args, out)
        print("si fig7 done:", res["si_fig7"]["n_within_10pct"], flush=True)
    write_json(path, {"what": "separation of time scales, Figs. 2, 3, 5, SI 7",
                      "settings": vars(args), **res})


if __name__ == "__main__":
    main()
