"""Quickstart section "gnrev": exact Gauss–Newton vs Adam, full batch, on a RevMLP.

``run(out_dir)`` trains the same 2-block RevMLP (bottleneck d' = 256, fixed orthonormal
readout) on 128 scikit-learn digits with exact GN (Prop. 4.4 of Buffelli et al. 2024,
lr 1.0) and with Adam (lr 1e-3), full batch, 20 steps each through ``layerlab.loop.fit``;
prints the final training-loss ratio Adam / GN and the GN residual certificate
``‖JΔθ − ε‖/‖ε‖``; writes ``gnrev_history.json`` and ``gnrev_loss.png``.  A few CPU seconds.
"""
from __future__ import annotations

import json
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from layerlab import data, loop
from layerlab import gnrev as g


def run(out_dir: pathlib.Path, *, n: int = 128, steps: int = 20, seed: int = 0) -> dict:
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    ds = data.load("digits", "train", n=n, balanced=True, seed=seed)
    x, _, _ = data.standardize(data.flatten(ds.x))
    x, y = jnp.asarray(x), jnp.asarray(ds.y)
    k1, k2 = jax.random.split(jax.random.key(seed))
    params, frozen = g.revmlp_init(k1, x.shape[1], 2, bottleneck=256)
    P = g.readout_init(k2, x.shape[1], ds.num_classes)
    steps_ = {"gn": g.gn_step(frozen, P, learning_rate=1.0),
              "adam": g.revmlp_optax_step(frozen, P, optax.adam(1e-3))}
    hist, t0 = {}, time.perf_counter()
    for name, ts in steps_.items():
        _, hist[name] = loop.fit(ts.step, ts.init(params), (x, y), steps=steps,
                                 key=jax.random.key(1), desc=f"gnrev: {name}")
    wall = time.perf_counter() - t0
    lg, la = (float(hist[k]["train"]["loss"][-1]) for k in ("gn", "adam"))
    (out_dir / "gnrev_history.json").write_text(
        json.dumps({k: loop.history_to_jsonable(v) for k, v in hist.items()}))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2))
    for k, c in (("gn", "C3"), ("adam", "C0")):
        ax.semilogy(hist[k]["step"], hist[k]["train"]["loss"], color=c, label=k.upper())
    ax.set(xlabel="step", ylabel="train CE", title=f"RevMLP on {n} digits, full batch")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out_dir / "gnrev_loss.png", dpi=110)
    plt.close(fig)
    summary = {
        "dataset": "digits", "n_train": n, "steps": steps,
        "gn_final_loss": lg, "adam_final_loss": la, "loss_ratio_adam_over_gn": la / lg,
        "gn_residual_median": float(np.median(hist["gn"]["train"]["residual"])),
        "gn_min_rank": float(np.min(hist["gn"]["train"]["min_rank"])),
        "fit_wall_s": round(wall, 2),
    }
    print(f"gnrev: full batch, {steps} steps: GN loss {lg:.4f} vs Adam {la:.4f} "
          f"(Adam/GN = {la / lg:.1f}x); GN residual {summary['gn_residual_median']:.2e}")
    return summary


if __name__ == "__main__":
    from benchmarks._common import results_dir

    print(run(results_dir("quickstart")))
