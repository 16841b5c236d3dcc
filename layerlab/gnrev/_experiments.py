"""Experiment helpers shared by the ``benchmarks/gnrev_*`` reproduction scripts.

Data preparation, model construction, optimiser factories (GN / Adam / SGD on the same
RevMLP), learning-rate sweeps (one vmapped program per optimiser via ``fit(runs=True)``) and
training with per-epoch probes: test metrics, the empirical NTK on a fixed probe set
(alignment with the NTK at initialisation, relative change between epochs; Fig. 4a–b), linear
CKA of every block's representation with its initial one over the whole probe set
(Fig. 4c–e) and weight cosine similarity / relative norm change (App. G).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from layerlab import data as lldata
from layerlab import probes
from layerlab.kernels import empirical_ntk
from layerlab.loop import fit

from ._revmlp import readout_init, revmlp_hidden, revmlp_init
from ._steps import gn_step, revmlp_logits, revmlp_loss, revmlp_optax_step

__all__ = [
    "Prepared",
    "prepare_classification",
    "prepare_regression",
    "make_model",
    "make_step",
    "init_state",
    "lr_sweep",
    "train",
]


@dataclasses.dataclass
class Prepared:
    """Arrays for one experiment: ``x_*`` ``[n, d]`` float32 (``d`` even), ``y_*`` labels."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_outputs: int
    name: str
    note: str = ""


def _pad_even(x):
    return x if x.shape[1] % 2 == 0 else np.pad(x, ((0, 0), (0, 1)))


def prepare_classification(name: str = "mnist", n_train: int = 1024, n_test: int = 1000,
                           *, seed: int = 0) -> Prepared:
    """Load a balanced subset, flatten, normalise by the train mean/std (global), pad to even d.

    No fallback: a missing dataset raises :class:`layerlab.data.DatasetNotFoundError`
    (naming the dataset and how to get it); pass ``name="digits"`` for the embedded set.
    """
    note = ""
    tr = lldata.load(name, "train", n=n_train, balanced=True, seed=seed)
    te = lldata.load(name, "test", n=n_test, balanced=True, seed=seed)
    xtr = np.asarray(lldata.flatten(tr.x), np.float32)
    xte = np.asarray(lldata.flatten(te.x), np.float32)
    mu, sd = xtr.mean(), xtr.std() + 1e-8
    xtr, xte = _pad_even((xtr - mu) / sd), _pad_even((xte - mu) / sd)
    return Prepared(xtr, np.asarray(tr.y, np.int32), xte, np.asarray(te.y, np.int32),
                    int(tr.num_classes), name, note)


def prepare_regression(name: str, *, seed: int = 0) -> Prepared:
    """Train/test split of a tabular data set; standardised inputs (and real targets), even d.

    Integer labels (classification sets such as sklearn ``wine``) are kept as labels and
    trained with MSE on one-hot targets; real targets are standardised to ``[n, 1]``.
    """
    tr, te = lldata.load(name, "train", seed=seed), lldata.load(name, "test", seed=seed)
    xtr = np.asarray(lldata.flatten(tr.x), np.float32)
    xte = np.asarray(lldata.flatten(te.x), np.float32)
    mu, sd = xtr.mean(0), xtr.std(0) + 1e-8
    xtr, xte = _pad_even((xtr - mu) / sd), _pad_even((xte - mu) / sd)
    if tr.num_classes:
        return Prepared(xtr, np.asarray(tr.y, np.int32), xte, np.asarray(te.y, np.int32),
                        int(tr.num_classes), name, "MSE on one-hot class targets")
    ytr, yte = np.asarray(tr.y, np.float32), np.asarray(te.y, np.float32)
    ym, ys = ytr.mean(), ytr.std() + 1e-8
    return Prepared(xtr, ((ytr - ym) / ys)[:, None], xte, ((yte - ym) / ys)[:, None], 1, name,
                    "standardised real target")


def make_model(key, dim: int, depth: int, num_outputs: int, *, bottleneck: int | None,
               first_linear: bool = True, w_scale: float = 1.0):
    """``(params, frozen, readout)`` for a RevMLP + fixed orthonormal readout."""
    k1, k2 = jax.random.split(key)
    params, frozen = revmlp_init(k1, dim, depth, bottleneck=bottleneck,
                                 first_linear=first_linear, w_scale=w_scale)
    return params, frozen, readout_init(k2, dim, num_outputs)


def make_step(opt: str, frozen, readout, *, loss: str = "ce", weight_decay: float = 0.0,
              loss_after: bool = False, **gn_kwargs):
    """``TrainStep`` for ``opt`` in ``{"gn", "gn_newton", "adam", "sgd"}``; rate in the state.

    ``"gn_newton"`` is GN with the function-space Newton target (Eq. 19).
    """
    if opt == "gn_newton":
        gn_kwargs = {**gn_kwargs, "target": "newton"}
    if opt in ("gn", "gn_newton"):
        return gn_step(frozen, readout, loss=loss, weight_decay=weight_decay,
                       loss_after=loss_after, **gn_kwargs)
    if opt == "adam":
        tx = optax.inject_hyperparams(
            lambda learning_rate: optax.adamw(learning_rate, weight_decay=weight_decay)
        )(learning_rate=1e-3)
    elif opt == "sgd":
        tx = optax.inject_hyperparams(
            lambda learning_rate: optax.chain(optax.add_decayed_weights(weight_decay),
                                              optax.sgd(learning_rate))
        )(learning_rate=0.1)
    else:
        raise ValueError(f"optimizer must be 'gn', 'adam' or 'sgd', got {opt!r}")
    return revmlp_optax_step(frozen, readout, tx, loss=loss, loss_after=loss_after)


def init_state(opt: str, ts, params, lr):
    """Initial state with learning rate ``lr`` (scalar) stored in the state."""
    lr = jnp.asarray(lr, jnp.float32)
    if opt in ("gn", "gn_newton"):
        st = ts.init(params)
        return st._replace(hparams={**st.hparams, "learning_rate": lr})
    st = ts.init(params)
    hp = dict(st.opt_state.hyperparams)
    hp["learning_rate"] = lr
    return st._replace(opt_state=st.opt_state._replace(hyperparams=hp))


def lr_sweep(opt: str, lrs, params, frozen, readout, data, *, steps: int, batch_size=None,
             loss: str = "ce", key, progress: bool = True, **step_kw) -> dict[str, Any]:
    """Train one run per learning rate in one vmapped program; pick the largest stable rate.

    A rate is *stable* when its final training loss is finite and below 90% of the initial
    loss (it neither diverged nor stalled); the largest stable rate is returned as ``best``
    (the paper's protocol: "the largest learning rate that does not diverge").
    """
    lrs = np.asarray(lrs, np.float32)
    ts = make_step(opt, frozen, readout, loss=loss, **step_kw)
    states = jax.vmap(lambda lr: init_state(opt, ts, params, lr))(jnp.asarray(lrs))
    _, hist = fit(ts.step, states, data, key=key, steps=steps, batch_size=batch_size,
                  runs=True, check_finite=False, progress=progress, desc=f"sweep {opt}")
    loss_tr = np.asarray(hist["train"]["loss"])  # [T, R]
    k = max(1, steps // 10)
    final = np.nanmean(loss_tr[-k:], axis=0)
    stable = np.isfinite(final) & (final < 0.9 * loss_tr[0])
    best = float(lrs[stable].max()) if stable.any() else float(lrs.min())
    return {"lrs": lrs, "final_loss": final, "stable": stable, "best": best,
            "loss": loss_tr}


def train(opt: str, lr: float, params, frozen, readout, prep: Prepared, *, key,
          steps: int | None = None, epochs: int | None = None, batch_size: int | None = None,
          loss: str = "ce", eval_every: int | None = None, probe_x=None, ntk_n: int = 32,
          progress: bool = True, state=None, **step_kw) -> tuple[Any, dict[str, Any]]:
    """Train with ``layerlab.loop.fit``; evaluate (and probe) every ``eval_every`` steps.

    Returns ``(state, record)`` with the training history and, per evaluation, test loss /
    accuracy, full-train loss / accuracy and, when ``probe_x`` (``[m, d]``) is given:
    ``ntk_align_init`` (Frobenius cosine with the NTK at init, on the first ``ntk_n`` probes),
    ``ntk_change`` (``‖K_t − K_{t−1}‖/‖K_{t−1}‖``), ``cka_block`` ``[L]`` (linear CKA of each
    block output with its initial value over all ``m`` probes), ``w_cos`` and ``w_rel``.
    """
    ts = make_step(opt, frozen, readout, loss=loss, **step_kw)
    if state is None:
        state = init_state(opt, ts, params, lr)
    p0 = params
    xtr, ytr = jnp.asarray(prep.x_train), jnp.asarray(prep.y_train)
    xte, yte = jnp.asarray(prep.x_test), jnp.asarray(prep.y_test)

    def eval_fn(st):
        lt, at = revmlp_loss(st.params, frozen, readout, (xte, yte), loss=loss)
        lr_, ar = revmlp_loss(st.params, frozen, readout, (xtr, ytr), loss=loss)
        return {"test_loss": lt, "test_accuracy": at["accuracy"], "train_loss_full": lr_,
                "train_accuracy_full": ar["accuracy"]}

    rec: dict[str, list] = {"probe_step": [], "ntk_align_init": [], "ntk_change": [],
                            "cka_block": [], "w_cos": [], "w_rel": []}
    callback = None
    if probe_x is not None:
        px = jnp.asarray(probe_x)
        pn = px[:ntk_n]

        def fn(p, x):
            return revmlp_logits(p, frozen, readout, x)

        @jax.jit
        def kern(p):
            return (empirical_ntk(fn, p, pn, chunk_size=ntk_n),
                    revmlp_hidden(p, frozen, px))

        @jax.jit
        def metrics(p, K, hs, K0, hs0, Kprev):
            cka = jnp.stack([probes.linear_cka(hs[i], hs0[i]) for i in range(1, hs.shape[0])])
            return {"ntk_align_init": probes.kernel_alignment(K, K0),
                    "ntk_change": probes.kernel_change_rate(Kprev, K),
                    "cka_block": cka,
                    "w_cos": probes.tree_cosine_similarity(p, p0),
                    "w_rel": probes.tree_relative_change(p, p0)}

        K0, hs0 = kern(state.params)
        last = {"K": K0}

        def record(t, st):
            K, hs = kern(st.params)
            m = metrics(st.params, K, hs, K0, hs0, last["K"])
            last["K"] = K
            rec["probe_step"].append(t)
            for k_, v in m.items():
                rec[k_].append(np.asarray(v))

        record(0, state)

        def callback(t, st, _chunk):
            if eval_every is None or t % eval_every == 0:
                record(t, st)

    st, hist = fit(ts.step, state, (xtr, ytr), key=key, steps=steps, epochs=epochs,
                   batch_size=batch_size, eval_fn=eval_fn, eval_every=eval_every,
                   eval_at_start=True, progress=progress, desc=opt,
                   chunk_size=eval_every, callback=callback, check_finite=False)
    out = {"history": hist, "lr": float(lr), "opt": opt}
    if probe_x is not None:
        out["probes"] = {k_: np.asarray(v) for k_, v in rec.items()}
    return st, out
