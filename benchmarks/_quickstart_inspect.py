"""Quickstart section for layerlab.inspect: a flax linen CNN on digits, monitored layer by layer.

A small CNN (two 3x3 convolutions, a dense layer, a linear readout) is trained with Adam on
scikit-learn's 8x8 digits (MNIST 28x28 with ``dataset="mnist"`` when ../shared/data has it)
through :func:`layerlab.loop.fit`; every ``eval_every`` steps :func:`layerlab.inspect.monitor`
computes the per-layer report on a fixed probe batch inside the compiled eval.  Saves the
final report and the history as PNGs (``inspect_report.png``, ``inspect_history.png``) and a
JSON summary.  A few CPU seconds.

Hook into ``benchmarks/quickstart.py``: add ``"inspect"`` to ``SECTIONS`` (it imports
``benchmarks._quickstart_inspect`` and calls ``run(out)``).
"""
from __future__ import annotations

import json
import pathlib

SECTION = "inspect"


def build(dataset: str = "digits", *, n_probe: int = 128, seed: int = 0, hidden: int = 32):
    """The quickstart problem: ``(model, inspectable, params0, (x, y), (x_probe, y_probe), ts)``.

    Shared with ``benchmarks/inspect_overhead.py`` and the tests.
    """
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import optax

    from layerlab import data, inspect, loop

    tr = data.load(dataset, "train")
    x = jnp.asarray(tr.x, jnp.float32)
    if x.ndim == 3:
        x = x[..., None]
    y = jnp.asarray(tr.y, jnp.int32)

    class CNN(nn.Module):
        """conv(8) -> relu -> conv(16, stride 2) -> relu -> mean pool -> dense -> relu -> dense."""

        @nn.compact
        def __call__(self, x):
            h = nn.relu(nn.Conv(8, (3, 3))(x))
            self.sow("intermediates", "conv1_relu", h)
            h = nn.relu(nn.Conv(16, (3, 3), strides=(2, 2))(h))
            self.sow("intermediates", "conv2_relu", h)
            h = jnp.mean(h, axis=(1, 2)) if h.shape[1] > 8 else h.reshape(h.shape[0], -1)
            h = nn.relu(nn.Dense(hidden)(h))
            self.sow("intermediates", "dense_relu", h)
            return nn.Dense(10)(h)

    model = CNN()
    params0 = model.init(jax.random.key(seed), x[:2])["params"]
    insp = inspect.from_linen(model, capture=False)  # the sown post-ReLU representations

    def loss_fn(params, batch):
        xb, yb = batch
        logits = model.apply({"params": params}, xb)
        return optax.softmax_cross_entropy_with_integer_labels(logits, yb).mean()

    ts = loop.optax_step(loss_fn, optax.adam(3e-3))
    rng = jax.random.permutation(jax.random.key(seed + 1), x.shape[0])[:n_probe]
    return model, insp, params0, (x, y), (x[rng], y[rng]), ts


def config(**kw):
    """The quickstart monitoring config (the overhead benchmark measures this one)."""
    from layerlab import inspect

    base = dict(num_classes=10, conv="mean", ntk_samples=8, ntk_method="jacobian")
    base.update(kw)
    return inspect.InspectConfig(**base)


def run(out_dir, progress: bool = True, *, steps: int = 1000, eval_every: int = 100,
        dataset: str = "digits") -> dict:
    import jax
    import numpy as np

    from layerlab import inspect, loop, probes

    model, insp, params0, (x, y), (xp, yp), ts = build(dataset)
    cfg = config()
    ref = inspect.make_reference(insp, params0, xp, config=cfg)  # the CNN at initialisation
    import optax

    def probe_loss(state):  # drawn beside the DGL curves, as the training MSE in Fig. 4
        logits = model.apply({"params": state.params}, xp)
        return {"probe_loss": optax.softmax_cross_entropy_with_integer_labels(logits, yp).mean()}

    mon = inspect.monitor(insp, xp, yp, reference=ref, config=cfg, extra=probe_loss)
    state, hist = loop.fit(ts.step, ts.init(params0), (x, y), key=jax.random.key(0), steps=steps,
                           batch_size=64, eval_fn=mon.eval_fn, eval_every=eval_every,
                           eval_at_start=True, progress=progress, desc="inspect CNN")
    history = mon.history(hist, state.params)
    final = mon.report(state.params)
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    inspect.plot_report(final, out_dir / "inspect_report.png",
                        title=f"linen CNN on {dataset}, after {steps} steps")
    inspect.plot_history(history, out_dir / "inspect_history.png",
                         title=f"linen CNN on {dataset}: per-layer diagnostics while training "
                               "(dashed: cross-entropy on the probe batch)", extra="probe_loss")
    te = __import__("layerlab").data.load(dataset, "test")
    xt = np.asarray(te.x, np.float32)
    xt = xt[..., None] if xt.ndim == 3 else xt
    acc = float(probes.accuracy(model.apply({"params": state.params}, xt), te.y))
    res = {
        "dataset": dataset, "steps": steps, "eval_every": eval_every,
        "n_probe": int(xp.shape[0]), "test_accuracy": acc,
        "layers": list(final.layers), "weights": list(final.weights),
        "final": {d: dict(zip(final.layers, np.asarray(v).tolist()))
                  for d, v in final.layer_values.items()},
        "final_model": {k: float(v) for k, v in final.model_values.items()},
        "cka_to_init_first_last": {n: [float(history.layer_values["cka"][0, i]),
                                       float(history.layer_values["cka"][-1, i])]
                                   for i, n in enumerate(history.layers)},
        "probe_loss_first_last": [float(history.extra["probe_loss"][0]),
                                  float(history.extra["probe_loss"][-1])],
        "figures": ["inspect_report.png", "inspect_history.png"],
    }
    (out_dir / "inspect.json").write_text(json.dumps(res, indent=2))
    print(final.table())
    print(f"inspect: linen CNN on {dataset}: test accuracy {acc:.3f}; figures in {out_dir}")
    return res
