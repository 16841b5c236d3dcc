"""Quickstart section for layerlab.dgl: LEGO on a digits subset vs random features.

End-to-end MSE training of a small ReLU MLP (L=2, d=32), its mean-field variances, then
LEGO: each ReLU layer trained alone on the DGL (eq. 3 of Ben-David & Ringel 2019), frozen,
and a closed-form MSE classifier; compared with the same classifier on the frozen random
layers.  A few CPU seconds.
"""
from __future__ import annotations

import json
import pathlib

import jax
import jax.numpy as jnp
import optax

from layerlab import data, dgl, nets


def run(out_dir: pathlib.Path) -> dict:
    tr, te = data.load("digits", "train"), data.load("digits", "test")
    x = jnp.asarray(data.flatten(tr.x)[:600])
    y = jnp.asarray(data.one_hot(tr.y[:600], 10, zero_mean=True))
    xt, lt = jnp.asarray(data.flatten(te.x)), jnp.asarray(te.y)
    key = jax.random.key(0)
    p0 = nets.mlp_init(key, [x.shape[1], 32, 32, 10], init="he")
    pe, _ = dgl.train_end_to_end(key, p0, x, y, optimizer=optax.adam(3e-3), steps=300,
                                 batch_size=100, progress=False)
    v = dgl.mf_variances(pe)
    cfg = dgl.LegoConfig(steps=60, lr=1e-2, batch_size=None, eps_rel=0.05)
    pl, hists = dgl.lego(key, p0, x, y, v, cfg, progress=False)
    pr = dgl.random_features(p0, x, y)
    res = {
        "n_train": int(x.shape[0]), "n_test": int(xt.shape[0]), "L": 2, "width": 32,
        "acc_end_to_end": float(dgl.accuracy(pe, xt, lt)),
        "acc_dgl_lego": float(dgl.accuracy(pl, xt, lt)),
        "acc_random": float(dgl.accuracy(pr, xt, lt)),
        "layer_dgl_first_last": [(float(h["train"]["loss"][0]), float(h["train"]["loss"][-1]))
                                 for h in hists],
    }
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "dgl.json").write_text(json.dumps(res, indent=2))
    print(f"dgl: digits test accuracy  end-to-end {res['acc_end_to_end']:.3f}  "
          f"DGL-LEGO {res['acc_dgl_lego']:.3f}  random features {res['acc_random']:.3f}")
    return res
