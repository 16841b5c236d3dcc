"""Quickstart section for layerlab.dgl: LEGO on a digits subset vs random features.

End-to-end MSE training of a small ReLU MLP (L=2, d=32), its mean-field variances, then
LEGO: each ReLU layer trained alone on the DGL (eq. 3 of Ben-David & Ringel 2019), frozen,
and a closed-form MSE classifier; compared with the same classifier on the frozen random
layers. Writes ``dgl.json`` and ``dgl.png`` (accuracies; per-layer DGL during LEGO).
A few CPU seconds.
"""
from __future__ import annotations

import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import optax

from layerlab import data, dgl, nets, probes


def run(out_dir: pathlib.Path, progress: bool = True) -> dict:
    tr, te = data.load("digits", "train"), data.load("digits", "test")
    x = jnp.asarray(data.flatten(tr.x)[:600])
    y = jnp.asarray(data.one_hot(tr.y[:600], 10, zero_mean=True))
    xt, lt = jnp.asarray(data.flatten(te.x)), jnp.asarray(te.y)
    key = jax.random.key(0)
    p0 = nets.mlp_init(key, [x.shape[1], 32, 32, 10], init="he")
    pe, _ = dgl.train_end_to_end(key, p0, x, y, optimizer=optax.adam(3e-3), steps=300,
                                 batch_size=100, progress=progress, desc="dgl: end-to-end")
    v = dgl.mf_variances(pe)
    cfg = dgl.LegoConfig(steps=60, lr=1e-2, batch_size=None, eps_rel=0.05)
    pl, hists = dgl.lego(key, p0, x, y, v, cfg, progress=progress)
    pr = dgl.random_features(p0, x, y)
    acc = {name: float(probes.accuracy(nets.mlp_apply(p, xt), lt))
           for name, p in (("end-to-end", pe), ("DGL-LEGO", pl), ("random features", pr))}
    res = {
        "n_train": int(x.shape[0]), "n_test": int(xt.shape[0]), "L": 2, "width": 32,
        "acc_end_to_end": acc["end-to-end"], "acc_dgl_lego": acc["DGL-LEGO"],
        "acc_random": acc["random features"],
        "layer_dgl_first_last": [(float(h["train"]["loss"][0]), float(h["train"]["loss"][-1]))
                                 for h in hists],
    }
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "dgl.json").write_text(json.dumps(res, indent=2))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(8, 3.2))
    a1.bar(list(acc), [100 * a for a in acc.values()], color=["C0", "C3", "C7"])
    a1.set(ylabel="test accuracy %", ylim=(0, 100), title="digits, 600 training samples")
    for i, h in enumerate(hists):
        a2.plot(h["step"], np.asarray(h["train"]["loss"]), label=f"layer {i + 1}")
    a2.set(xlabel="LEGO step", ylabel="DGL of the layer", yscale="log",
           title="each layer trained alone on its DGL")
    a2.legend()
    fig.tight_layout()
    fig.savefig(out_dir / "dgl.png", dpi=110)
    plt.close(fig)
    res["rows"] = [
        ["DGL-LEGO test acc", acc["DGL-LEGO"],
         "layers trained one by one on the DGL, then a closed-form classifier"],
        ["end-to-end test acc", acc["end-to-end"], "same MLP (64-32-32-10) trained with MSE"],
        ["random-features acc", acc["random features"],
         "same classifier on the frozen random layers"],
    ]
    res["figure"] = "dgl.png"
    print(f"dgl: digits test accuracy  end-to-end {acc['end-to-end']:.3f}  "
          f"DGL-LEGO {acc['DGL-LEGO']:.3f}  random features {acc['random features']:.3f}")
    return res
