"""Quickstart section "core": a small MLP on scikit-learn's digits through layerlab.loop.

``run(out_dir, progress=True)`` trains a 64-128-10 ReLU MLP with Adam on the digits
training split (minibatch, shuffled on device inside the compiled loop, progress bar),
evaluates test accuracy every 100 steps, writes ``core_history.json`` and ``core_loss.png``
into ``out_dir`` and returns a summary.  A few CPU seconds.
"""
from __future__ import annotations

import json
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from layerlab import data, loop, nets, probes


def run(out_dir: pathlib.Path, progress: bool = True, *, steps: int = 600, batch_size: int = 64,
        seed: int = 0) -> dict:
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    train, test = data.load("digits", "train"), data.load("digits", "test")
    x, mean, std = data.standardize(data.flatten(train.x))
    xt, _, _ = data.standardize(data.flatten(test.x), mean, std)
    y, yt = jnp.asarray(train.y), jnp.asarray(test.y)
    x, xt = jnp.asarray(x), jnp.asarray(xt)

    def loss_fn(params, batch):
        xb, yb = batch
        logits = nets.mlp_apply(params, xb)
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, yb).mean()
        return loss, {"acc": probes.accuracy(logits, yb)}

    def eval_fn(state):
        logits = nets.mlp_apply(state.params, xt)
        return {
            "test_loss": optax.softmax_cross_entropy_with_integer_labels(logits, yt).mean(),
            "test_acc": probes.accuracy(logits, yt),
        }

    key = jax.random.key(seed)
    k_init, k_fit = jax.random.split(key)
    ts = loop.optax_step(loss_fn, optax.adam(1e-3), has_aux=True)
    state = ts.init(nets.mlp_init(k_init, [x.shape[1], 128, train.num_classes], init="he"))
    t0 = time.perf_counter()
    state, hist = loop.fit(ts.step, state, (x, y), steps=steps, batch_size=batch_size, key=k_fit,
                           eval_fn=eval_fn, eval_every=100, eval_at_start=True,
                           desc="core: digits MLP", progress=progress)
    wall = time.perf_counter() - t0

    (out_dir / "core_history.json").write_text(json.dumps(loop.history_to_jsonable(hist)))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(hist["step"], hist["train"]["loss"], lw=0.8, alpha=0.7, label="train (minibatch)")
    ax.plot(hist["eval_step"], hist["eval"]["test_loss"], "o-", label="test")
    ax.set(xlabel="step", ylabel="cross-entropy", yscale="log",
           title=f"digits MLP 64-128-10, Adam; test acc {hist['eval']['test_acc'][-1]:.3f}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out_dir / "core_loss.png", dpi=110)
    plt.close(fig)

    summary = {
        "dataset": "digits",
        "n_train": int(x.shape[0]),
        "n_test": int(xt.shape[0]),
        "steps": int(steps),
        "batch_size": int(batch_size),
        "final_train_loss": float(np.mean(hist["train"]["loss"][-20:])),
        "test_acc": float(hist["eval"]["test_acc"][-1]),
        "fit_wall_s": round(wall, 2),
        "rows": [
            ["test accuracy", float(hist["eval"]["test_acc"][-1]),
             f"64-128-10 ReLU MLP, Adam 1e-3, {steps} steps of batch {batch_size}"],
            ["train loss", float(np.mean(hist["train"]["loss"][-20:])),
             "cross-entropy, mean of the last 20 minibatches"],
        ],
        "figure": "core_loss.png",
    }
    print(f"core: digits MLP, {steps} Adam steps in {wall:.1f}s (incl. compile): "
          f"test accuracy {summary['test_acc']:.3f}, train loss {summary['final_train_loss']:.3f}")
    return summary


if __name__ == "__main__":
    from benchmarks._common import out_dir

    print(run(out_dir("quickstart")))
