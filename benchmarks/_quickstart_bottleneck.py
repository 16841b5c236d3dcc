"""Quickstart section for layerlab.bottleneck: the bottleneck structure in a few CPU seconds.

``run(out_dir)`` trains a depth-8, width-24 ReLU net with L2 regularisation on data with a
2-dimensional latent (``layerlab.data.latent``, k = 2) through ``layerlab.loop.fit`` and prints,
per layer, the number of weight singular values within 0.25 of 1 (paper B, Thm. 6: ~k in
almost all layers) and the Jacobian rank (Thm. 3: k); writes ``bottleneck.json`` and
``bottleneck.png`` (singular values of every layer; counts near 1).
"""
from __future__ import annotations

import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from benchmarks._common import write_json
from layerlab import bottleneck as bn
from layerlab import data, loop, nets


def run(out_dir: pathlib.Path, progress: bool = True) -> dict:
    t0 = time.perf_counter()
    depth, width, steps = 8, 24, 1000
    ds = data.latent(jax.random.key(1), 100, k=2, d_in=10, d_out=10)
    x, y = jnp.asarray(ds.x), jnp.asarray(ds.y)
    y = (y - y.mean(0)) / y.std()
    W0 = nets.mlp_init(jax.random.key(2), [10] + [width] * (depth - 1) + [10], init="he")
    hp = {"masks": jnp.ones((depth - 1, width)), "lam": jnp.asarray(3e-3)}
    ts = bn.sweep_step(bn.mse_cost, optax.adam(optax.cosine_decay_schedule(1e-2, steps, 1e-2)))
    state, hist = loop.fit(ts.step, ts.init(W0, hp), (x, y), key=jax.random.key(3),
                           steps=steps, progress=progress, desc="bottleneck: depth-8 net")
    diag = jax.jit(lambda W: bn.bottleneck_diagnostics(W, x[:50], ntk=False))(state.params)
    counts = [int(c) for c in np.asarray(diag["count_near_one"])]
    summary = {"depth": depth, "latent_k": 2, "count_near_one_per_layer": counts,
               "jacobian_rank": float(diag["jacobian_rank"]),
               "effective_rank_per_layer": [round(float(e), 2) for e in diag["effective_rank"]],
               "train_cost": float(hist["train"]["cost"][-1]),
               "wall_s": round(time.perf_counter() - t0, 2)}
    write_json(pathlib.Path(out_dir) / "bottleneck.json",
               {"what": "depth-8 L2-regularised ReLU net on latent-2 data (paper B)",
                "summary": summary})
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(8, 3.2))
    for i, sv in enumerate(diag["singular_values"]):
        sv = np.asarray(sv)
        a1.plot(np.full(sv.shape, i + 1), sv, "k.", ms=3)
    a1.axhspan(0.75, 1.25, color="C2", alpha=0.2, label="within 0.25 of 1")
    a1.set(xlabel="layer", ylabel="singular values of W_l", yscale="log",
           title="weight spectra after training")
    a1.legend(fontsize=8)
    a2.bar(range(1, len(counts) + 1), counts)
    a2.axhline(2, color="C3", ls="--", label="latent dimension k = 2")
    a2.set(xlabel="layer", ylabel="# singular values near 1", title="bottleneck structure")
    a2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(pathlib.Path(out_dir) / "bottleneck.png", dpi=110)
    plt.close(fig)
    print(f"bottleneck: depth-8 net on latent-2 data, singular values near 1 per layer: {counts}"
          f", Jacobian rank {summary['jacobian_rank']:.2f} (bottleneck rank k = 2)")
    inner = counts[1:-1]
    return {k: v for k, v in summary.items() if not isinstance(v, list)} | {
        "count_near_one_per_layer": str(counts),
        "rows": [
            ["Jacobian rank", summary["jacobian_rank"],
             "of the trained net at the data (Thm. 3 of paper B: the latent k = 2)"],
            ["median # sv near 1", float(np.median(inner)),
             f"inner layers' singular values within 0.25 of 1 (Thm. 6: ~k); all {counts}"],
            ["train cost", summary["train_cost"], "MSE after 1000 Adam steps, lam = 3e-3"],
        ],
        "figure": "bottleneck.png"}
