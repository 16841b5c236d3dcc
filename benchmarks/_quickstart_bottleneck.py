"""Quickstart section for layerlab.bottleneck: the bottleneck structure in a few CPU seconds.

``run(out_dir)`` trains a depth-8, width-24 ReLU net with L2 regularisation on data with a
2-dimensional latent (``layerlab.data.latent``, k = 2) through ``layerlab.loop.fit`` and prints,
per layer, the number of weight singular values within 0.25 of 1 (paper B, Thm. 6: ~k in
almost all layers) and the Jacobian rank (Thm. 3: k).
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
from layerlab import data, loop


def run(out_dir: pathlib.Path) -> dict:
    t0 = time.perf_counter()
    depth, width, steps = 8, 24, 1000
    ds = data.latent(jax.random.key(1), 100, k=2, d_in=10, d_out=10)
    x, y = jnp.asarray(ds.x), jnp.asarray(ds.y)
    y = (y - y.mean(0)) / y.std()
    W0 = bn.init_weights(jax.random.key(2), [10] + [width] * (depth - 1) + [10])
    hp = {"masks": jnp.ones((depth - 1, width)), "lam": jnp.asarray(3e-3)}
    ts = bn.sweep_step(bn.mse_cost, optax.adam(optax.cosine_decay_schedule(1e-2, steps, 1e-2)))
    state, hist = loop.fit(ts.step, ts.init(W0, hp), (x, y), key=jax.random.key(3),
                           steps=steps, progress=False)
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
    print(f"bottleneck: depth-8 net on latent-2 data, singular values near 1 per layer: {counts}"
          f", Jacobian rank {summary['jacobian_rank']:.2f} (bottleneck rank k = 2)")
    return {k: v for k, v in summary.items() if not isinstance(v, list)} | {
        "count_near_one_per_layer": str(counts)}
