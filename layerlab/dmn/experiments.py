"""Reproductions of Dehmamy, Rohani & Katsaggelos (arXiv:1703.04757): Tables 2-5, Figs. 6, 10,
and the separation of time scales (Figs. 2, 3, SI Figs. 5, 7: :func:`run_timescales`).

Every table row is one architecture written as in the paper (``d`` conv DMN layer, ``m``
2x2 max-pool, ``c`` trained conv, ``bn`` batch-norm, ``de`` dense; the last ``de`` is the
softmax classifier).  DMN layers are closed form, so a run builds them once from (a
fraction of) the training set, computes the frozen features of the whole training and
test sets once, and trains only the head with ``layerlab.loop.fit`` (Adam, batch 128, 50
epochs: the authors' notebook ``2dmn-010818-classes.ipynb``).  The matching ConvNet is
the same architecture with every ``d`` replaced by a trained ``c``, trained end to end
with the same optimizer and budget.

Drivers here jit (the library maths does not).  Resumable: with a ``checkpoint_dir`` every
finished (row, variant, seed) is stored as JSON and skipped on the next call, and an
unfinished one resumes from its last epoch (``<tag>.run/``, ``loop.fit`` checkpoints and the
validation curve so far; removed when the run's JSON is written).
"""
from __future__ import annotations

import collections
import dataclasses
import functools
import json
import os
import pathlib
import re
import shutil
import statistics
import time
import warnings
from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import numpy as np
import optax
from jax.typing import ArrayLike

from layerlab import loop, nets, probes
from layerlab._checks import as_device_array, check_finite, check_int
from layerlab._plotting import subplots
from layerlab.data import DatasetNotFoundError, extract_patches, load
from layerlab.data._targets import as_labels
from layerlab.dmn._apply import max_pool_2x2
from layerlab.dmn._build import DMNConfig
from layerlab.dmn._head import Conv3x3, classifier_step, head_variables, make_network, map_batches
from layerlab.dmn._spec import convnet_spec, format_spec, parse_spec
from layerlab.dmn._timescales import (
    distance_to_final,
    eigenvalue_convergence,
    eigenvalue_fluctuations,
    eq18_variance,
    layer_spectra,
)
from layerlab.record import Claim, Record, Row, row_from_values, to_jsonable

__all__ = [
    "ArchRow",
    "Fig5CNN",
    "Fig6Config",
    "TableConfig",
    "TimescalesConfig",
    "merge_tables",
    "plot_fig6",
    "plot_table",
    "plot_timescales",
    "run_fig10",
    "run_fig6",
    "run_table",
    "run_table2",
    "run_table3",
    "run_table4",
    "run_table5",
    "run_timescales",
    "table_rows",
    "train_and_evaluate",
]

NUM_CLASSES = {"mnist": 10, "cifar10": 10, "cifar100": 100}
TOL = {"mnist": 1.0, "cifar10": 2.0, "cifar100": 2.0}


# ----------------------------------------------------------------------------- one run


@functools.lru_cache(maxsize=64)
def _net_and_step(spec, num_classes, config, optimizer):
    """Same arguments -> the same function objects, so a repeated run reuses compilations."""
    net = make_network(spec, num_classes, config)
    return net, classifier_step(net, optimizer)


@functools.lru_cache(maxsize=16)
def _adam(lr):
    """The default optimizer, one object per rate: repeated runs hit ``_net_and_step``'s cache."""
    return optax.adam(lr)


@functools.lru_cache(maxsize=128)
def _jitted(fn):
    return jax.jit(fn)


@functools.lru_cache(maxsize=128)
def _jitted_head_init(init_head, init_state):
    """``init_state(init_head(key, feats))`` as one program (eagerly, ~40 ops)."""
    return jax.jit(lambda key, feats: init_state(init_head(key, feats)))


@jax.jit
def _train_keys(key):
    """:func:`train_and_evaluate`'s keys: ``split(key, 4)`` (noise, build, init, fit) and the
    noise key split in two (training, validation inputs), as one program."""
    k_noise, k_build, k_init, k_fit = jax.random.split(key, 4)
    return (k_noise, k_build, k_init, k_fit, *jax.random.split(k_noise))


def train_and_evaluate(
    spec: str,
    x_train: ArrayLike,
    y_train: ArrayLike,
    x_val: ArrayLike,
    y_val: ArrayLike,
    num_classes: int,
    *,
    key: jax.Array,
    config: DMNConfig = DMNConfig(),
    optimizer: optax.GradientTransformation | None = None,
    lr: float = 1e-3,
    epochs: int = 5,
    batch_size: int = 128,
    eval_every_epoch: bool = False,
    progress: bool = True,
    train_eval_n: int | None = 5000,
    checkpoint_dir: str | os.PathLike | None = None,
    train_curve_n: int = 0,
) -> dict[str, Any]:
    """Build, train and evaluate one architecture; return accuracies and wall-clock.

    Args:
      spec: architecture string (``"d6,m,de10"``, ``"c6,m,de10"``, ...).
      x_train: ``[N, H, W, C]`` training images; ``y_train`` ``[N]`` integer labels in
        ``[0, num_classes)`` (or ``[N, num_classes]`` one-hot rows).
      x_val: ``[M, H, W, C]`` validation images; ``y_val`` ``[M]`` labels.  NaN or inf in
        ``x_train`` or ``x_val`` raises ``ValueError`` naming the argument.
      num_classes: ``C``.
      key: PRNG key (input noise, data fraction, head init, data order).
      config: how DMN layers are built.
      optimizer: an optax optimizer for the trainable part (default ``optax.adam(lr)``).
      lr: learning rate of the default Adam.
      epochs / batch_size: head training length.
      eval_every_epoch: record validation accuracy and wall-clock after every epoch
        (``curve``), for best-epoch reports and time-to-accuracy comparisons.
      progress: show the loop's progress bar.
      train_eval_n: training accuracy on the first ``train_eval_n`` samples (None: all).
      train_curve_n: with ``eval_every_epoch``, also the accuracy of every epoch's state on
        the first ``train_curve_n`` training samples (``train_curve``; 0: not measured).
      checkpoint_dir: resumable training (a ConvNet on full CIFAR-10 trains for 7-65 min on
        a 2-core CPU): the head's ``loop.fit`` state is saved here after every epoch (every
        ``max(1, epochs // 10)`` epochs without ``eval_every_epoch``) with the validation
        curve and the training seconds so far (``curve.json``); a rerun with the same
        arguments resumes from the last saved epoch and ends in the state of an uninterrupted
        run.  The DMN layers and their features are rebuilt (deterministic in ``key``).
        ``train_s`` / ``total_s`` add the training time of the interrupted runs up to the
        restored epoch (work after it is redone, not counted twice); curve seconds are the
        first run's build + features time plus training time so far.  An epoch restored
        without its accuracy (stopped in the second between ``loop.fit``'s save and the
        curve's) stays in the curve as ``(epoch, None, None)``.  ``resumed_from_epoch`` says
        where training restarted.  The folder is left in place; remove it when the result is
        stored.

    Returns:
      dict with ``spec``, ``widths`` (DMN filters kept), ``build_s``, ``features_s``,
      ``train_s``, ``total_s``, ``train_acc``, ``val_acc``, ``best_val_acc``, ``curve``
      (list of ``(epoch, seconds_since_start, val_acc)``), ``final_loss``,
      ``running_train_acc`` (``(epoch, acc)``: the mean of the per-batch training accuracies
      while the epoch trained -- the ``acc`` Keras logs; ``loop.fit`` keeps the history of a
      resumed run, so every epoch is there), ``train_curve`` (``(epoch, train_acc)`` with
      ``train_curve_n``; ``(epoch, None)`` for an epoch restored without it, as ``curve``) and
      ``resumed_from_epoch`` (0 unless resumed from ``checkpoint_dir``).
    """
    # before the closed-form build (minutes on CIFAR): batch_size=0 ended in a
    # ZeroDivisionError after it, a negative value in loop.fit's error naming "fit"
    epochs = check_int(epochs, "epochs", fn="train_and_evaluate", min_value=0)
    batch_size = check_int(batch_size, "batch_size", fn="train_and_evaluate", min_value=1)
    # NaN/inf images: the training images would reach build_dmn's own check only after the
    # input noise; validation images were never checked, and XLA's CPU max-pool can turn a
    # NaN image into finite features (a finite, wrong val_acc)
    for name, xs in (("x_train", x_train), ("x_val", x_val)):
        check_finite(xs, name, fn="train_and_evaluate",
                     hint="clean or drop those images; a NaN image has no accuracy to score.")
    y_train = as_labels(y_train, num_classes, name="y_train", n=len(x_train),
                        fn="train_and_evaluate")
    y_val = as_labels(y_val, num_classes, name="y_val", n=len(x_val), fn="train_and_evaluate")
    k_noise, k_build, k_init, k_fit, kn_tr, kn_val = _train_keys(key)
    spec = spec if isinstance(spec, str) else format_spec(spec)
    opt = _adam(lr) if optimizer is None else optimizer
    net, ts = _net_and_step(spec, num_classes, config, opt)
    y_train = np.asarray(y_train)
    y_val = np.asarray(y_val)
    t0 = time.perf_counter()
    if net.prefix:
        prepare = _jitted(net.prepare)  # one program per shape (eagerly: draw, scale, add)
        x_train = np.asarray(prepare(kn_tr, x_train))
        x_val = np.asarray(prepare(kn_val, x_val))
    dmn_params, info = net.build(k_build, x_train, y_train)
    t_build = time.perf_counter() - t0
    feat = _jitted(net.features)
    f_tr = map_batches(lambda xb: feat(dmn_params, xb), x_train) if net.prefix else x_train
    f_val = map_batches(lambda xb: feat(dmn_params, xb), x_val) if net.prefix else x_val
    t_feat = time.perf_counter() - t0 - t_build
    state = _jitted_head_init(net.init_head, ts.init)(k_init, f_tr[:2])
    predict = _jitted(net.head_apply)

    def score(variables, f, y):  # accuracy on a whole split, logits chunk by chunk
        return float(probes.accuracy(map_batches(lambda fb: predict(variables, fb), f), y))

    curve: list = []
    bs = min(batch_size, f_tr.shape[0])
    spe = f_tr.shape[0] // bs
    every = spe * (1 if eval_every_epoch else max(1, epochs // 10))
    ck = None if checkpoint_dir is None else pathlib.Path(checkpoint_dir)
    t_start = time.perf_counter()
    # resumable bookkeeping: cumulative training seconds at every saved epoch and the first
    # run's pre-training (build + features) seconds; curve seconds = pre + training so far
    saved = {"curve": [], "train_s_at": {"0": 0.0}, "pre_s": t_start - t0}
    if ck is not None and (ck / "curve.json").exists():
        saved = json.loads((ck / "curve.json").read_text())
    train_curve: list = [tuple(c) for c in saved.get("train_curve", [])]
    base = {"train_s": 0.0}  # training seconds before this run's start, set on resume
    resumed_from, seen = 0, []

    def rebase(epoch):
        """Restored at ``epoch``: keep what was measured up to it, mark what is missing."""
        nonlocal resumed_from
        resumed_from = epoch
        at = {int(e): v for e, v in saved["train_s_at"].items()}
        base["train_s"] = at.get(epoch, max((v for e, v in at.items() if e <= epoch),
                                            default=0.0))
        # a curve.json ahead of the restored step (a save not committed, a fallback to an
        # older checkpoint) is cut back; epochs restored without a stored accuracy (stopped
        # between loop.fit's save and the curve's) are kept as None, not re-measured
        kept = {int(c[0]): tuple(c) for c in saved["curve"] if int(c[0]) <= epoch}
        if eval_every_epoch:
            curve[:] = [kept.get(e, (e, None, None)) for e in range(1, epoch + 1)]
            if train_curve_n:  # the same placeholders as ``curve`` for lost epochs
                kept_tr = {int(c[0]): tuple(c) for c in train_curve if int(c[0]) <= epoch}
                train_curve[:] = [kept_tr.get(e, (e, None)) for e in range(1, epoch + 1)]

    def seconds_now():
        return saved["pre_s"] + base["train_s"] + time.perf_counter() - t_start

    def callback(t, st, metrics):
        if ck is not None and not seen:  # the first chunk ran from the restored step
            seen.append(t)
            rebase((t - (t % every or every)) // spe)  # chunks are `every` steps (or up to T)
        if eval_every_epoch and t % spe == 0:
            acc = score(head_variables(st), f_val, y_val)
            curve.append((t // spe, seconds_now(), acc))
            if train_curve_n:
                n = min(train_curve_n, f_tr.shape[0])
                train_curve.append((t // spe, score(head_variables(st), f_tr[:n],
                                                    y_train[:n])))
        if ck is not None and (t % every == 0 or t == epochs * spe):  # fit saved t just before
            at = {e: v for e, v in saved["train_s_at"].items() if int(e) < t // spe}
            at[str(t // spe)] = base["train_s"] + time.perf_counter() - t_start
            saved.update(curve=list(curve), train_s_at=at, train_curve=list(train_curve))
            tmp = ck / "curve.json.tmp"
            tmp.write_text(json.dumps(saved))
            os.replace(tmp, ck / "curve.json")

    state, hist = loop.fit(
        ts.step, state, (f_tr, y_train), key=k_fit, epochs=epochs, batch_size=bs,
        progress=progress, desc=format_spec(net.layers), callback=callback,
        chunk_size=spe if eval_every_epoch else (None if ck is None else every),
        checkpoint_dir=None if ck is None else ck / "fit",
        checkpoint_every=None if ck is None else every,
    )
    jax.block_until_ready(state)
    finished_before = ck is not None and not seen  # the checkpoint held the final step
    if finished_before:
        rebase(epochs)
    # a run whose checkpoint held the final step trained nothing now (restoring is not training)
    t_train = base["train_s"] + (0.0 if finished_before else time.perf_counter() - t_start)
    v = head_variables(state)
    val_acc = score(v, f_val, y_val)
    if finished_before and eval_every_epoch and curve[-1][2] is None:
        curve[-1] = (epochs, None, val_acc)  # the final state's accuracy is measured here
    if finished_before and train_curve_n and train_curve and train_curve[-1][1] is None:
        n = min(train_curve_n, f_tr.shape[0])
        train_curve[-1] = (epochs, score(v, f_tr[:n], y_train[:n]))
    n_tr = f_tr.shape[0] if train_eval_n is None else train_eval_n
    train_acc = score(v, f_tr[:n_tr], y_train[:n_tr])
    step_acc = np.asarray(hist["train"].get("accuracy", []), np.float64).ravel()
    done_steps = step_acc.size // spe * spe  # whole epochs trained by this call
    running = step_acc[step_acc.size - done_steps:].reshape(-1, spe).mean(1) if spe else []
    first = epochs - len(running) + 1
    return {
        "spec": format_spec(net.layers),
        "pca": config.pca if net.prefix else None,
        "widths": info.widths,
        "build_s": t_build,
        "features_s": t_feat,
        "train_s": t_train,
        "total_s": time.perf_counter() - t0 + base["train_s"],
        "train_acc": train_acc,
        "val_acc": val_acc,
        "best_val_acc": max([c[2] for c in curve if c[2] is not None], default=val_acc),
        "curve": curve,
        "final_loss": float(np.asarray(hist["train"]["loss"])[-1]),
        "running_train_acc": [(first + i, float(a)) for i, a in enumerate(running)],
        "train_curve": [(int(e), None if a is None else float(a)) for e, a in train_curve],
        "resumed_from_epoch": resumed_from,
        "epochs": epochs,
        "n_train": int(np.shape(x_train)[0]),
        "n_val": int(np.shape(x_val)[0]),
    }


# ----------------------------------------------------------------------------- configs


@dataclasses.dataclass(frozen=True)
class ArchRow:
    """One row of a paper table.

    Attributes:
      dataset: ``"mnist"``, ``"cifar10"`` or ``"cifar100"``.
      arch: the architecture as our spec (``"d4,m,d15,m,de10"``).
      label: the row as printed in the paper (``"d4, d15"``).
      input_fraction / var_fraction / cutoff: Table 2's "Input", "Var.", "Cutoff"
        (``var_fraction=None``: fixed count, the token's width; Tables 3-5 print none).
      paper_val / paper_train: the paper's validation (test) / training accuracy, %.
      paper_convnet: Table 2's "ConvNet Acc." of the matching ConvNet, %.
      layer_vars: Var. per DMN layer when it differs from ``var_fraction`` (two-layer rows
        of Table 2; see ``TABLE2``).  The printed width caps every layer.
    """

    dataset: str
    arch: str
    label: str
    input_fraction: float = 1.0
    var_fraction: float | None = None
    cutoff: float | None = 0.9
    paper_val: float | None = None
    paper_train: float | None = None
    paper_convnet: float | None = None
    layer_vars: tuple | None = None


# Table 2 prints one Var. per row.  The widths show which layer it selects: on MNIST the
# first (d4 at .85 and d6 at .95, as in the one-layer rows); the second layers (d15, d93) are
# built at the authors' notebook's th_eig=0.99 and capped at the printed width.  On
# CIFAR-10/100 the second (d41/d87/d305 grow with Var. .995/.997/.999); the first layer d22
# (d79) is the Var .999 one-layer row's, capped at the printed width.
_UPPER = {"mnist": lambda v: (v, 0.99), "cifar10": lambda v: (0.999, v),
          "cifar100": lambda v: (0.999, v)}


def _t2(ds, label, inp, var, cut, val, conv):
    c = NUM_CLASSES[ds]
    arch = ",".join(f"{t.strip()},m" for t in label.split(",")) + f",de{c}"
    two = "," in label
    lv = _UPPER[ds](var) if two and ds != "cifar10" or two and label.startswith("d22") \
        else None
    if two and ds == "cifar10" and label.startswith("d10"):
        lv = (var, var)  # d10, d11 at .99: both layers (d10 is the .99 one-layer row)
    return ArchRow(ds, arch, label, inp, var, cut, val, None, conv, lv)


def _t35(ds, label, train, val):
    arch = label.replace(" ", "").lower()
    return ArchRow(ds, arch, label, 1.0, None, 0.9, val, train, None)


# Table 2 (per row: Input, Var., Cutoff, Val. Acc., ConvNet Acc.), as printed.
TABLE2 = (
    _t2("mnist", "d4", 0.5, 0.85, 0.9, 96.81, 97.47),
    _t2("mnist", "d6", 0.3, 0.95, 0.9, 97.78, 98.12),
    _t2("mnist", "d16", 0.3, 0.99, 0.9, 97.28, 98.37),
    _t2("mnist", "d4, d15", 0.5, 0.85, 0.9, 97.84, 98.63),
    _t2("mnist", "d6, d93", 0.3, 0.95, 0.9, 98.5, 98.86),
    _t2("cifar10", "d10", 0.7, 0.99, 0.9, 49.92, 48.61),
    _t2("cifar10", "d10, d11", 0.7, 0.99, 0.9, 49.94, 46.88),
    _t2("cifar10", "d22", 0.7, 0.999, 0.9, 56.2, 49.94),
    _t2("cifar10", "d22, d41", 0.2, 0.995, 0.9, 59.64, 51.96),
    _t2("cifar10", "d22, d41", 0.7, 0.995, 0.9, 59.48, 51.96),
    _t2("cifar10", "d22, d87", 0.7, 0.997, 0.9, 62.15, 52.66),
    _t2("cifar10", "d22, d305", 0.7, 0.999, 0.9, 63.71, 52.13),
    _t2("cifar100", "d79", 1.0, 0.999, 0.9, 30.93, 26.14),
    _t2("cifar100", "d79, d545", 1.0, 0.995, 0.9, 38.38, 38.38),
)
# Tables 3-5 (training acc., validation acc.), as printed; no Var./Cutoff given.
TABLE3 = tuple(_t35("mnist", *r) for r in (
    ("de10", 93.51, 92.90),
    ("d6, m, de10", 99.29, 97.53),
    ("c9, m, de10", 99.35, 98.27),
    ("d9, m, d40, m, de10", 98.78, 98.10),
    ("d6, m, d54, m, BN, de10", 99.90, 98.39),
    ("d9, m, BN, c81, m, de10", 99.98, 99.07),
    ("c6, m, c40, m, de10", 99.64, 99.06),
))
TABLE4 = tuple(_t35("cifar10", *r) for r in (
    ("de10", 43.11, 40.06),
    ("d10, m, de10", 73.21, 60.41),
    ("c27, m, de10", 62.69, 51.94),
    ("d15, m, d108, m, de10", 66.11, 55.36),
    ("d20, m, d180, m, BN, de10", 66.02, 63.66),
    ("d15, m, c80, m, de10", 79.21, 68.03),
    ("d27, m, c108, m, BN, de10", 81.18, 71.19),
    ("c10, m, c80, m, de10", 58.48, 50.10),
    ("c32, m, c32, m, de10", 58.64, 51.84),
))
TABLE5 = tuple(_t35("cifar100", *r) for r in (
    ("de100", 23.68, 15.96),
    ("d15, m, de100", 37.48, 22.93),
    ("d18, m, BN, de100", 51.07, 30.30),
    ("c27, m, de100", 41.31, 25.23),
    ("d15, m, d50, m, de100", 51.57, 25.93),
    ("d18, m, d108, m, BN, de100", 53.58, 34.76),
    ("d15, m, c108, m, de100", 65.06, 36.56),
    ("d27, m, BN, c108, m, de100", 63.57, 41.03),
    ("c32, m, c32, m, de100", 33.03, 23.07),
    ("c27, m, c108, m, de100", 36.95, 23.97),
))
_TABLES = {"table2": TABLE2, "table3": TABLE3, "table4": TABLE4, "table5": TABLE5}
_TITLES = {
    "table2": "Table 2: DMN (Input, Var., Cutoff per row) vs the ConvNet of the same widths",
    "table3": "Table 3: MNIST, DMN / hybrid / ConvNet, training and validation accuracy",
    "table4": "Table 4: CIFAR-10, DMN / hybrid / ConvNet, training and validation accuracy",
    "table5": "Table 5: CIFAR-100, DMN / hybrid / ConvNet, training and validation accuracy",
}


def table_rows(artifact: str) -> tuple[ArchRow, ...]:
    """The paper's rows of ``"table2"`` ... ``"table5"``."""
    if artifact not in _TABLES:
        raise ValueError(f"artifact must be one of {tuple(_TABLES)}; got {artifact!r}.")
    return _TABLES[artifact]


PCA_MODES = ("class", "naive")


@dataclasses.dataclass(frozen=True)
class TableConfig:
    """One of Tables 2-5 (or a selection of rows, e.g. Fig. 10's two-layer networks).

    Attributes:
      artifact: ``"table2"`` ... ``"table5"`` or ``"fig10"`` (names the record).
      rows: the ``ArchRow`` s to run (default: the paper's, every row).
      preset: ``"authors"`` (``DMNConfig.authors``) or ``"paper"`` (``DMNConfig.paper``).
      pca: ``"class"`` (class-based PCA, eq. 15 per class: the presets' own) or ``"naive"``
        (PCA of the class-blind ``rho = sum_c rho_c``, no Cutoff): the paper's Sec. 5 says
        the experiments of Figs. 6 and 10 (Tables 3-5 summarise them) "use a naive DMN, i.e.
        agnostic to labels and trained using basic PCA".  Replaces the preset's ``pca``.
      convnet: also train the matching ConvNet of each DMN row (Table 2's last column).
      seeds: independent runs per row (data fraction, noise, init, order).
      epochs / batch_size / optimizer: head (and ConvNet) training; the authors' notebook:
        50 epochs of Keras' Adam (lr 1e-3), batch 128.
      optimizer_name: how ``optimizer`` is written in the record.
      n_train / n_test: images per split (None: the full official split, the paper's).
      report: ``"final"`` (accuracy after the last epoch) or ``"best"`` (best epoch on the
        test set, as the authors' ``ModelCheckpoint(monitor='val_acc')`` keeps).
      data_dir: dataset root (None: the loader's default search).
      dtype: ``"float32"`` or ``"float64"`` (the latter needs ``jax_enable_x64``).
      conv_rows: ``False`` drops the rows whose network trains conv layers end to end (a
        ``c`` token, e.g. ``d15,m,c80,m,de10``): the DMN-only rows of a table on a CPU, where
        those ConvNets take minutes (one conv layer) to about an hour (wide two-layer nets) per
        run at full data.  Set through :func:`table_config`, which filters ``rows``; the record
        is then ``"reduced"`` and its note says so.
    """

    artifact: str = "table2"
    rows: tuple[ArchRow, ...] = TABLE2
    preset: str = "authors"
    pca: str = "class"
    convnet: bool = True
    seeds: int = 3
    epochs: int = 50
    batch_size: int = 128
    optimizer: optax.GradientTransformation = dataclasses.field(
        default_factory=lambda: optax.adam(1e-3), compare=False, hash=False)
    optimizer_name: str = "adam(lr=1e-3)"
    n_train: int | None = None
    n_test: int | None = None
    report: str = "final"
    data_dir: str | None = None
    dtype: str = "float32"
    conv_rows: bool = True

    def __post_init__(self):
        if self.preset not in ("authors", "paper"):
            raise ValueError(f"preset must be 'authors' or 'paper'; got {self.preset!r}.")
        if self.pca not in PCA_MODES:
            raise ValueError(f"pca must be one of {PCA_MODES}; got {self.pca!r}.")
        if self.report not in ("final", "best"):
            raise ValueError(f"report must be 'final' or 'best'; got {self.report!r}.")
        if self.seeds < 1 or self.epochs < 1 or self.batch_size < 1:
            raise ValueError("seeds, epochs and batch_size must be >= 1; got "
                             f"{self.seeds}, {self.epochs}, {self.batch_size}.")

    @classmethod
    def paper(cls, artifact: str = "table2", **changes: Any) -> TableConfig:
        """Every row as printed, full training and test sets, 3 seeds, 50 epochs of Adam."""
        base = dict(artifact=artifact, rows=table_rows(artifact),
                    convnet=artifact == "table2")
        return cls(**(base | changes))

    @classmethod
    def smoke(cls, artifact: str = "table2", **changes: Any) -> TableConfig:
        """Seconds: two runs of the table (a two-layer DMN with BN or its ConvNet, and a
        ConvNet) on 200 training / 200 test images, 1 epoch, 1 seed."""
        rows = table_rows(artifact)
        pick = [r for r in rows if "bn" in r.arch][:1]
        pick += [r for r in rows if r.arch.startswith("c")][:1]
        if artifact == "table2":
            pick = [rows[3]]
        # n_test = n_train: the features, head and accuracy of both splits share compiled
        # programs (one shape)
        base = dict(artifact=artifact, rows=tuple(dict.fromkeys(pick)), seeds=1, epochs=1,
                    n_train=200, n_test=200, convnet=artifact == "table2")
        return cls(**(base | changes))

    def dmn_config(self, row: ArchRow) -> DMNConfig:
        preset = DMNConfig.authors if self.preset == "authors" else DMNConfig.paper
        var = row.layer_vars if row.layer_vars is not None else row.var_fraction
        return preset(var_fraction=var, cutoff=row.cutoff,
                      input_fraction=row.input_fraction, pca=self.pca)

    def is_paper_scale(self) -> bool:
        full = fig10_config() if self.artifact == "fig10" else self.paper(self.artifact)
        return (self.n_train is None and self.n_test is None and self.epochs >= full.epochs
                and self.seeds >= 3 and set(self.rows) >= set(full.rows))


def table_config(artifact: str, scale: str = "default", **changes) -> TableConfig:
    """The configuration a reproduction script runs.

    Args:
      artifact: ``"table2"`` ... ``"table5"`` or ``"fig10"``.
      scale: ``"paper"`` (every row, full data, 3 seeds, 50 epochs), ``"smoke"`` (seconds)
        or ``"default"`` (the largest faithful reduction for a 2-core CPU: every row,
        6000 training / 2000 test images, 10 epochs, 1 seed).
      **changes: fields to override (``None`` values are ignored); also ``datasets``
        (keep only these datasets' rows), ``conv_rows=False`` (drop the rows with trained
        conv layers, see :class:`TableConfig`) and ``row_numbers`` (keep only these rows,
        1-based as printed in the paper's table, e.g. ``(6, 7, 8)`` for Table 2's first three
        CIFAR-10 rows: a CPU budget that covers some of a table; the record is then reduced).

    Returns:
      A ``TableConfig``.
    """
    changes = {k: v for k, v in changes.items() if v is not None}
    if scale not in ("paper", "smoke", "default"):
        raise ValueError(f"scale must be 'paper', 'smoke' or 'default'; got {scale!r}.")
    if artifact == "fig10":
        base = fig10_config(paper=scale != "smoke")
    elif scale == "smoke":
        base = TableConfig.smoke(artifact)
    else:
        base = TableConfig.paper(artifact)
    if scale == "default":
        base = dataclasses.replace(base, n_train=6000, n_test=2000, epochs=10, seeds=1)
    numbers = changes.pop("row_numbers", None)
    if numbers:
        numbers = tuple(int(i) for i in numbers)
        table = base.rows if artifact == "fig10" else table_rows(artifact)
        if not all(1 <= i <= len(table) for i in numbers):
            raise ValueError(f"row_numbers must be 1-based rows of {artifact} (1.."
                             f"{len(table)}); got {numbers}.")
        base = dataclasses.replace(base, rows=tuple(table[i - 1] for i in sorted(set(numbers))))
    datasets = changes.pop("datasets", None)
    if datasets:
        base = dataclasses.replace(base, rows=tuple(r for r in base.rows
                                                    if r.dataset in datasets))
    if changes.get("conv_rows") is False:
        base = dataclasses.replace(base, rows=tuple(r for r in base.rows
                                                    if not has_trained_conv(r.arch)))
    return dataclasses.replace(base, **changes)


def has_trained_conv(arch: str) -> bool:
    """Whether an architecture string trains a conv layer end to end (a ``c<F>`` token)."""
    return any(tok.strip().lower().startswith("c") for tok in arch.split(","))


# ----------------------------------------------------------------------------- data


@functools.lru_cache(maxsize=4)
def _load_cached(name, n_train, n_test, data_dir, dtype):
    tr = load(name, "train", n=n_train, balanced=n_train is not None, data_dir=data_dir,
              dtype=np.dtype(dtype))
    te = load(name, "test", n=n_test, balanced=n_test is not None, data_dir=data_dir,
              dtype=np.dtype(dtype))
    return tr, te


def _load_split(name, cfg):
    try:
        return _load_cached(name, cfg.n_train, cfg.n_test, cfg.data_dir, cfg.dtype), None
    except DatasetNotFoundError as e:
        return None, str(e)


# ----------------------------------------------------------------------------- table runs


def _cache_path(checkpoint_dir, tag):
    if checkpoint_dir is None:
        return None
    d = pathlib.Path(checkpoint_dir)
    d.mkdir(parents=True, exist_ok=True)
    return d / (tag.replace(",", "_").replace(" ", "") + ".json")


def _one(cfg, row, variant, seed, data, *, key, progress, checkpoint_dir):
    """One (row, variant, seed) run, cached as JSON under ``checkpoint_dir``."""
    spec = row.arch if variant == "dmn" else format_spec(convnet_spec(row.arch))
    built = bool({"dmn_conv", "dmn_dense"} & {t.kind for t in parse_spec(spec)})
    pca = "" if cfg.pca == "class" else f"pca{cfg.pca}-"
    # "w2": a width under the class order picks the first filters to enter as Var grows
    # (select_filters since 2026-11-29); results cached before under the old rule (class 0's
    # filters first) must not be reused
    rule = "w2-" if cfg.pca == "class" and cfg.dmn_config(row).order == "class" else ""
    dmn_tag = (f"{cfg.preset}-{pca}{rule}in{row.input_fraction}-var{row.var_fraction}"
               f"-lv{row.layer_vars}-cut{row.cutoff}-" if built else "")  # ConvNets: shared
    tag = (f"{row.dataset}-{spec}-{dmn_tag}s{seed}-e{cfg.epochs}-n{cfg.n_train}-{cfg.n_test}"
           f"-b{cfg.batch_size}-{cfg.optimizer_name}-{cfg.dtype}")
    path = _cache_path(checkpoint_dir, tag)
    if path is not None and path.exists():
        return json.loads(path.read_text())
    tr, te = data
    dmn_cfg = cfg.dmn_config(row) if variant == "dmn" else DMNConfig.paper()
    run_dir = None if path is None else path.with_suffix(".run")  # the unfinished run

    def train(ck):
        return train_and_evaluate(
            spec, tr.x, tr.y, te.x, te.y, tr.num_classes, key=jax.random.fold_in(key, seed),
            config=dmn_cfg, optimizer=cfg.optimizer, epochs=cfg.epochs,
            batch_size=cfg.batch_size, eval_every_epoch=True, progress=progress,
            train_eval_n=None, checkpoint_dir=ck,
        )

    try:
        r = train(run_dir)
    except (loop.CheckpointMismatchError, loop.CheckpointCorruptError) as e:
        # another run's state (e.g. DMN features not bitwise equal) or no step that restores
        warnings.warn(f"{tag}: the saved partial run cannot be resumed ({e}); "
                      "training from the start", stacklevel=2)
        shutil.rmtree(run_dir)
        r = train(run_dir)
    r = {k: v for k, v in r.items()} | {"seed": seed, "variant": variant}
    if path is not None:
        path.write_text(json.dumps(r))
        shutil.rmtree(run_dir, ignore_errors=True)
    return r


def _acc(r, cfg, what="val"):
    if what == "train":
        return 100 * r["train_acc"]
    return 100 * (r["best_val_acc"] if cfg.report == "best" else r["val_acc"])


def run_table(config: TableConfig, *, key: jax.Array, progress: bool = True,
              checkpoint_dir: str | os.PathLike | None = None) -> Record:
    """Run the rows of ``config`` and return the record (our numbers beside the paper's).

    Rows whose dataset files are missing (e.g. CIFAR-100) are recorded with ``ours=None``
    and the loader's message as the note.

    Args:
      config: a ``TableConfig``.
      key: PRNG key; seed ``s`` of every row uses ``fold_in(key, s)``.
      progress: progress bars.
      checkpoint_dir: finished runs are stored here and skipped when run again.

    Returns:
      ``layerlab.record.Record`` with, per row, the DMN (or table architecture) validation
      accuracy, its training accuracy (Tables 3-5), the matching ConvNet (Table 2), the
      filter counts in the notes, and timings in ``extra`` (``compute_s``, per run, and the
      ConvNet runs' per-epoch test curves: ``merge_tables`` recomputes a row's cost from them
      when a later DMN-only run replaces its DMN half); the wall time is stamped by the
      script (``reproduce._cli.finish``).
    """
    t0 = time.perf_counter()
    rows: list[Row] = []
    runs: list[dict] = []
    missing: dict[str, str] = {}
    for row in config.rows:
        data, err = _load_split(row.dataset, config)
        tol = TOL[row.dataset]
        is_dmn = _is_dmn(row.arch)
        variants = ["dmn"] + (["convnet"] if config.convnet and is_dmn else [])
        name = _row_name(row)
        if err is not None:
            missing[row.dataset] = err
            rows += _not_run_rows(row, config.convnet, f"not run: {err}")
            continue
        for v in variants:
            rs = [_one(config, row, v, s, data, key=key, progress=progress,
                       checkpoint_dir=checkpoint_dir) for s in range(config.seeds)]
            # the row as named in the record: two rows may share a label (Table 2's d22, d41
            # at Input 0.2 and 0.7), and the cost table is per row
            runs += [r | {"row": name.split(" ", 1)[1], "dataset": row.dataset} for r in rs]
            widths = sorted({tuple(r["widths"]) for r in rs})
            note = (f"DMN filters kept per seed: {[list(w) for w in widths]}"
                    if v == "dmn" and is_dmn else "")
            if v == "convnet":
                note = f"ConvNet {rs[0]['spec']} (printed widths), trained end to end"
            label = f"{name} {'ConvNet ' if v == 'convnet' else ''}val acc"
            paper = row.paper_val if v == "dmn" else row.paper_convnet
            rows.append(row_from_values(label, [_acc(r, config) for r in rs], paper=paper,
                                        unit="%", tol=tol, note=note))
            if row.paper_train is not None and v == "dmn":
                rows.append(row_from_values(f"{name} train acc",
                                            [_acc(r, config, "train") for r in rs],
                                            paper=row.paper_train, unit="%", tol=tol))
    claims = _table_claims(config, rows)
    cost = _cost(runs)
    claims += _cost_claims(cost)
    scale = "paper" if config.is_paper_scale() and not missing else "reduced"
    return Record(
        paper="dmn", artifact=config.artifact, title=_TITLES.get(config.artifact, "Fig. 10"),
        scale=scale, config=_config_dict(config), rows=rows, claims=claims,
        note=_note(config) + ("" if not missing else
                              f" Not run (files absent): {sorted(missing)}."),
        extra={"compute_s": time.perf_counter() - t0, "cost": cost,
               # a ConvNet run keeps its per-epoch curve: a merge that pairs it with a later
               # DMN run (merge_tables, a --no-convnet rerun) recomputes the cost from it
               "runs": [{k: r[k] for k in ("dataset", "row", "variant", "seed", "spec",
                                           "widths", "val_acc", "best_val_acc", "train_acc",
                                           "build_s", "features_s", "train_s", "total_s")}
                        | ({"curve": r.get("curve")} if r["variant"] == "convnet" else {})
                        for r in runs]},
    )


def _is_dmn(arch: str) -> bool:
    """Whether an architecture has DMN (closed-form) layers, i.e. a matching ConvNet."""
    return any(t.kind in ("dmn_conv", "dmn_dense") for t in parse_spec(arch))


def _not_run_rows(row: ArchRow, convnet: bool, why: str) -> list[Row]:
    """The record's entries of a row that did not run (``ours=None``, ``why`` as the note)."""
    name, tol = _row_name(row), TOL[row.dataset]
    out = [Row(f"{name} val acc", None, row.paper_val, "%", tol, 0, None, None, why)]
    if convnet and _is_dmn(row.arch):
        out.append(Row(f"{name} ConvNet val acc", None, row.paper_convnet, "%", tol, 0, None,
                       None, why))
    if row.paper_train is not None:
        out.append(Row(f"{name} train acc", None, row.paper_train, "%", tol, 0, None, None,
                       why))
    return out


def _row_name(row: ArchRow) -> str:
    """A table row's name in a record (its entries add " val acc", " ConvNet val acc", ...)."""
    name = f"{row.dataset} {row.label}"
    if row.var_fraction is not None:
        name += f" (Input {row.input_fraction}, Var {row.var_fraction})"
    return name


# the run settings every part of a merged record must share (the rows may differ)
_PROTOCOL = ("preset", "dmn_preset", "seeds", "epochs", "batch_size", "optimizer_name",
             "n_train", "n_test", "report", "dtype", "convnet")
# protocol fields added after records were written: their value in older records
_PROTOCOL_DEFAULTS = {"pca": "class"}
# DMNConfig fields added after records were committed, with the value those records ran with
_DMN_PRESET_ADDED = {"conv_activation": "relu"}


def _protocol_value(config: dict, field: str):
    """``config[field]`` as a merge compares it: older records' missing fields filled in."""
    v = config.get(field, _PROTOCOL_DEFAULTS.get(field))
    if field == "dmn_preset" and isinstance(v, dict):
        v = _DMN_PRESET_ADDED | v
    return v
# what defines a row's runs (the paper's printed numbers may be corrected without rerunning)
_RUN_FIELDS = ("dataset", "arch", "label", "input_fraction", "var_fraction", "cutoff",
               "layer_vars")


def _run_key(d: dict) -> tuple:
    return tuple(tuple(d[f]) if isinstance(d.get(f), list) else d.get(f) for f in _RUN_FIELDS)


def _load_parts(fn: str, parts, ok: set[str]) -> list[tuple[str, dict]]:
    """``[(label, record)]`` of ``parts`` (paths or loaded dicts), each a dmn record of one of
    the artifacts ``ok``; ``fn`` names the caller in the errors."""
    from layerlab.record import load_record

    if not parts:
        raise ValueError(f"{fn}: parts is empty; pass the records to merge.")
    loaded = []
    for i, part in enumerate(parts):
        label = str(part) if not isinstance(part, dict) else f"parts[{i}]"
        d = part if isinstance(part, dict) else load_record(part)
        if d.get("paper") != "dmn" or d.get("artifact") not in ok:
            raise ValueError(f"{fn}: {label} is a {d.get('paper')} {d.get('artifact')} "
                             f"record, not dmn {' / '.join(sorted(ok))}.")
        loaded.append((label, d))
    return loaded


def _where(p: dict, what: str) -> str:
    """A merged record's note on one part: its path, what it gave, machine and wall time."""
    m = p["machine"] or {}
    dev = m.get("device_kind") or m.get("platform") or "?"
    return (f"{p['path']}: {what} on {dev} ({m.get('cpu_count', '?')} cores), "
            f"{p['wall_s'] or 0:.0f} s")


# a row's entries by half: Table 2 pairs each DMN row with the ConvNet of the same widths; a
# part run without the ConvNets (--no-convnet) holds only the DMN half of its rows
_ENTRY_HALF = {"val acc": "dmn", "ConvNet val acc": "convnet", "train acc": "dmn"}


def _half_given(sub: dict, name: str) -> str:
    """The half of row ``name`` that a merged record's ``extra.parts`` entry gave (entries
    written before halves were recorded gave whole rows: ``"both"``)."""
    return (sub.get("halves") or {}).get(name, "both")


def merge_tables(artifact: str, parts: Sequence[str | os.PathLike | dict], *,
                 data_dir: str | os.PathLike | None = None) -> Record:
    """One record of a whole table from records that each ran some of its rows.

    A table's rows can take days on one machine; they are run in parts (``--rows``,
    ``--datasets``, on different machines) and merged here without training anything.
    Every row of the paper's table appears in the result, in the paper's order: from the
    **last** part that ran it (so a rerun of a row replaces it when listed after the older
    part; a row a part lists but marks not run never replaces one that ran), else as not
    run -- with the loader's message when the dataset's files are absent (e.g. CIFAR-100),
    otherwise naming the ``--rows`` to run.  Rows are matched on what defines their runs
    (dataset, architecture, Input, Var., Cutoff, per-layer Var.); the paper's numbers and
    ``holds`` come from the parts' rows.

    Table 2 is merged half by half.  A row's **DMN half** (its ``val acc`` and ``train acc``
    entries and its runs of variant ``"dmn"``) comes from the last part that ran it, a part
    with the ConvNets or a DMN-only part (``--no-convnet``, ``convnet: false``); its
    **ConvNet half** (``ConvNet val acc``, runs of variant ``"convnet"``) from the last part
    that ran the ConvNet.  So a DMN-only rerun listed after the full parts replaces their DMN
    numbers and keeps their ConvNets, and a full part listed after a DMN-only one replaces
    both halves.  ``convnet`` is then the one protocol field the parts may differ in; the
    merged record has ``convnet: true`` when any part ran ConvNets, whatever the parts' order
    (the order only decides which part's half is kept), and a row whose ConvNet half no part
    ran is marked not run.  When a row's halves come from different parts, its cost entry is
    recomputed with :func:`_cost` from the combined runs (the new DMN runs' mean accuracy as the
    target on the ConvNet runs' per-epoch curves) where the ConvNet runs carry their curve
    (``run_table`` keeps it in ``extra.runs`` since 2026-11-29).  Older records do not: such a
    row's cost is bounded (:func:`_cost_bound`) from the cost entry of the part that ran its
    ConvNet, i.e. from that ConvNet's time to the DMN accuracy of its own run -- at most that
    time when the new DMN is less accurate, at least when it is more accurate, the same when
    equal -- with ``ratio_at_most`` / ``ratio_at_least`` and ``bound_from`` (the old numbers) in
    the entry; the row holds or fails the cost claim when its bound decides and leaves it open
    otherwise, and the note names these rows.  A row with neither a curve nor such an entry is
    left out of the cost claim and named in its evidence and in the note.

    Args:
      artifact: ``"table2"`` ... ``"table5"`` or ``"fig10"``.
      parts: records (paths or loaded dicts) of that artifact, written by ``run_table`` /
        ``run_fig10`` or by an earlier merge; for ``"fig10"`` also records of Tables 3-5
        (Fig. 10 plots their one- and two-layer rows; their other rows are ignored).  They
        must share the run protocol (``_PROTOCOL``: DMN preset and its rules, seeds, epochs,
        batch size, optimizer, ``n_train``/``n_test``, ``report``, dtype and, except for
        Table 2's DMN-only parts, ``convnet``); a ``ValueError`` names the part and the field
        that differs.
      data_dir: where to look for the files of rows no part holds (the loader's default).

    Returns:
      A :class:`~layerlab.record.Record`: rows and claims recomputed from the kept rows and
      their cost entries (``extra["cost"]``, ``extra["runs"]`` restricted to the kept rows,
      named as the record names the row, each run with the command that made it); ``scale``
      is ``"paper"`` when the protocol is the paper's (full data, >= 3 seeds, its epochs,
      batch size, report and, for Table 2, the ConvNets of every row) and every row ran;
      ``extra["parts"]`` lists each run that contributed rows (path, rows kept, ``halves``:
      per row ``"both"`` for the whole row or ``"dmn"`` / ``"convnet"`` for one half of a
      Table 2 row, machine, wall time, command, git, width rule) -- for a part that is itself
      a merge, its own parts -- and ``wall_s`` is the sum of their whole wall times (a run
      counts in full even when some of its rows were replaced; ``None`` when none recorded
      one).  The note names the rows whose halves come from different runs, and the DMN
      halves made under the old width rule (``_old_rule_note``; a part that gives only
      ConvNet halves is not named).
    """
    full = fig10_config().rows if artifact == "fig10" else table_rows(artifact)
    by_key = {_run_key(dataclasses.asdict(r)): r for r in full}
    # Fig. 10 plots rows of Tables 3-5: their records are parts of it too
    ok = {artifact} | ({"table3", "table4", "table5"} if artifact == "fig10" else set())
    loaded = _load_parts("merge_tables", parts, ok)
    for label, d in loaded:
        missing_f = [f for f in _PROTOCOL + ("rows",) if f not in d.get("config", {})]
        if missing_f:
            raise ValueError(f"merge_tables: {label} has no config field(s) {missing_f}; "
                             "it was not written by run_table / merge_tables.")
    # the tables whose paper protocol pairs DMN rows with ConvNets (Table 2) merge DMN-only
    # parts: convnet may differ, the merged record runs ConvNets when any part did
    halves = artifact != "fig10" and TableConfig.paper(artifact).convnet
    ref_label, ref = loaded[0]
    for label, d in loaded[1:]:
        for f in tuple(_PROTOCOL_DEFAULTS) + _PROTOCOL:  # pca first: it also changes dmn_preset
            if f == "convnet" and halves:
                continue
            a, b = (_protocol_value(x["config"], f) for x in (ref, d))
            if a != b:
                raise ValueError(f"merge_tables: {label} ran with {f}={b!r} but {ref_label} with "
                                 f"{f}={a!r}; rows run under different protocols do not merge.")
    c0 = ref["config"]
    convnet = (any(bool(d["config"]["convnet"]) for _, d in loaded) if halves
               else bool(c0["convnet"]))
    cfg = TableConfig(artifact=artifact, rows=full, preset=c0["preset"],
                      pca=c0.get("pca", _PROTOCOL_DEFAULTS["pca"]), convnet=convnet,
                      seeds=c0["seeds"], epochs=c0["epochs"],
                      batch_size=c0["batch_size"], optimizer_name=c0["optimizer_name"],
                      n_train=c0["n_train"], n_test=c0["n_test"], report=c0["report"],
                      dtype=c0["dtype"])
    # (row, half) -> (part, the part's name of the row): the last part that ran that half (a
    # part owns the halves it ran, not those it marks not run or does not hold)
    owner: dict[tuple[ArchRow, str], tuple[int, str]] = {}
    for i, (_, d) in enumerate(loaded):
        ran = {r["name"] for r in d["rows"] if r.get("ours") is not None}
        for rd in d["config"]["rows"]:
            row = by_key.get(_run_key(rd))
            if row is None and d["artifact"] != artifact:
                continue  # a row of Table 3-5 that Fig. 10 does not plot
            if row is None:
                raise ValueError(f"merge_tables: {loaded[i][0]} holds a row that is not one of "
                                 f"the paper's {artifact} rows: {rd}.")
            name = _row_name(row)  # the run fields match, so the part names it alike
            for suffix, half in _ENTRY_HALF.items():
                if f"{name} {suffix}" in ran:
                    owner[row, half] = (i, name)

    def path_of(i: int, j: int) -> str:
        if j < 0:
            return loaded[i][0]
        return (loaded[i][1].get("extra") or {})["parts"][j].get("path", loaded[i][0])

    rows: list[Row] = []
    runs: list[dict] = []
    cost: list[dict] = []
    missing: dict[str, str] = {}
    kept: dict[tuple[int, int], dict[str, str]] = {}  # (part, sub-part) -> {row name: half}
    no_timing: list[str] = []
    mixed: list[tuple[str, tuple[int, int], tuple[int, int]]] = []  # (row, DMN's, ConvNet's)
    recomputed: list[str] = []
    bounded: list[str] = []  # split rows whose cost is bounded from the ConvNet part's entry
    no_curve: list[str] = []
    for n, row in enumerate(full, start=1):
        name = _row_name(row)
        want = {"dmn"} | ({"convnet"} if cfg.convnet and _is_dmn(row.arch) else set())
        src: dict[str, tuple[int, int, str]] = {}  # half -> (part, sub-part, part's row name)
        for half in ("dmn", "convnet"):
            if (row, half) in owner:
                i, pname = owner[row, half]
                subs = (loaded[i][1].get("extra") or {}).get("parts") or []
                j = next((k for k, sp in enumerate(subs) if name in sp.get("rows", ())
                          and _half_given(sp, name) in (half, "both")), -1)
                src[half] = (i, j, pname)
        if not src:
            try:
                load(row.dataset, "test", data_dir=data_dir)
                why = (f"not run: no part record holds this row (run it with --rows {n} and "
                       "merge again)")
            except DatasetNotFoundError as e:
                missing[row.dataset] = str(e)
                why = f"not run: {e}"
            rows += _not_run_rows(row, cfg.convnet, why)
            continue
        for suffix, half in _ENTRY_HALF.items():
            if half in src:
                i, _, pname = src[half]
                r = {x["name"]: x for x in loaded[i][1]["rows"]}.get(f"{pname} {suffix}")
                if r is not None:
                    rows.append(Row(**(r | {"name": f"{name} {suffix}"})))
            elif half in want and (suffix != "train acc" or row.paper_train is not None):
                why = ("not run: the parts that hold this row ran it without its ConvNet "
                       f"(--no-convnet); run it with --rows {n} and merge again"
                       if half == "convnet" else
                       f"not run: no part ran this row's DMN (run it with --rows {n} and "
                       "merge again)")
                paper = {"val acc": row.paper_val, "ConvNet val acc": row.paper_convnet,
                         "train acc": row.paper_train}[suffix]
                rows.append(Row(f"{name} {suffix}", None, paper, "%", TOL[row.dataset], 0,
                                None, None, why))
        # runs and cost entries name the row as the record does; records written before
        # rows carried (Input, Var) name it by its label, kept when that is unambiguous;
        # both are renamed to the row's name here
        short: dict[int, set[str]] = {}
        for i, _, pname in src.values():
            cfg_rows = loaded[i][1]["config"]["rows"]
            short[i] = {pname.split(" ", 1)[1]} | (
                {row.label} if sum(rd["label"] == row.label for rd in cfg_rows) == 1 else set())
        row_runs: list[dict] = []
        gave: dict[tuple[int, int], set[str]] = {}
        for half, (i, j, _) in src.items():
            extra = loaded[i][1].get("extra") or {}
            sub = extra["parts"][j] if j >= 0 else loaded[i][1]
            row_runs += [r | {"row": name.split(" ", 1)[1],
                              "command": r.get("command") or sub.get("command")}
                         for r in extra.get("runs", [])
                         if r.get("dataset") == row.dataset and r.get("row") in short[i]
                         and r.get("variant", "dmn") == half]
            gave.setdefault((i, j), set()).add(half)
        runs += row_runs
        for ij, hs in gave.items():
            kept.setdefault(ij, {})[name] = "both" if hs >= want else hs.pop()
        if len(gave) > 1:
            mixed.append((name, src["dmn"][:2], src["convnet"][:2]))
        if len(gave) == 1:  # one run gave the whole row: its cost entry (if any) stands
            # (a merged part whose row is split between two of its runs takes the split path)
            (i,) = short
            mine = [c | {"row": name} for c in (loaded[i][1].get("extra") or {}).get("cost", [])
                    if c.get("row") in {f"{row.dataset} {x}" for x in short[i]}]
            cost += mine
            if not mine and "convnet" in src:
                no_timing.append(name)
            continue
        # the halves of different parts: the ConvNet's time to the new DMN accuracy, from its
        # per-epoch curve (absent in records written before run_table kept it)
        d_runs = [r for r in row_runs if r.get("variant") == "dmn"]
        c_runs = [r for r in row_runs if r.get("variant") == "convnet"]
        if (d_runs and c_runs
                and all(r.get("val_acc") is not None and r.get("total_s") is not None
                        for r in d_runs)
                and all(any(c[1] is not None for c in r.get("curve") or ()) for r in c_runs)):
            cost += _cost(row_runs)
            recomputed.append(name)
            continue
        # no curve: bound the cost from the ConvNet's part's own cost entry (its ConvNet's
        # time to that part's DMN accuracy), one-sided unless the two DMN accuracies agree
        i, j, _ = src["convnet"]
        old_c = [c for c in (loaded[i][1].get("extra") or {}).get("cost", [])
                 if c.get("row") in {f"{row.dataset} {x}" for x in short[i]}]
        bound = (_cost_bound(name, d_runs, old_c[0], path_of(i, j))
                 if len(old_c) == 1 and d_runs and all(
                     r.get("val_acc") is not None and r.get("total_s") is not None
                     for r in d_runs) else None)
        if bound is not None:
            cost.append(bound)
            bounded.append(name)
        else:
            no_curve.append(name)
    claims = (_fig10_claims(rows) if artifact == "fig10"
              else _table_claims(cfg, rows) + _cost_claims(cost, no_timing, no_curve))
    paper_cfg = TableConfig.paper("table3" if artifact == "fig10" else artifact)
    protocol_paper = (cfg.n_train is None and cfg.n_test is None and cfg.seeds >= 3
                      and cfg.epochs >= paper_cfg.epochs
                      and cfg.batch_size == paper_cfg.batch_size
                      and cfg.report == paper_cfg.report
                      and (artifact == "fig10" or cfg.convnet == paper_cfg.convnet))
    all_ran = all(r.ours is not None for r in rows)
    part_info = []
    for (i, j), given in sorted(kept.items()):  # in the order given (a merge: its own order)
        label, d = loaded[i]
        src_d = (d.get("extra") or {}).get("parts", [])[j] if j >= 0 else d
        part_info.append({"path": path_of(i, j),
                          "via": label if j >= 0 else None, "rows": list(given),
                          "halves": dict(given),
                          "scale": src_d.get("scale"), "machine": src_d.get("machine"),
                          "wall_s": src_d.get("wall_s"), "command": src_d.get("command"),
                          "git": src_d.get("git"),
                          "width_rule": (src_d.get("width_rule") if j >= 0
                                         else src_d.get("config", {}).get("width_rule"))})

    def what(p: dict) -> str:
        count = collections.Counter(p["halves"].values())
        return ", ".join([f"{count['both']} row(s)"] * bool(count["both"]) + [
            f"the {w} half of {count[h]} row(s)" for h, w in (("dmn", "DMN"),
                                                              ("convnet", "ConvNet"))
            if count[h]])

    split = ""
    if mixed:
        groups: dict[tuple[str, str], list[str]] = {}
        for name, a, b in mixed:
            groups.setdefault((path_of(*a), path_of(*b)), []).append(name)
        split = (" Rows whose DMN and ConvNet halves come from different runs (a later run "
                 "replaced the DMN half; extra.parts[].halves): " + "; ".join(
                     f"DMN from {a}, ConvNet from {b}: {', '.join(ns)}"
                     for (a, b), ns in groups.items()) + "."
                 + ("" if not recomputed else
                    f" Cost recomputed for {', '.join(recomputed)}: the DMN runs' mean "
                    "accuracy as the target on the ConvNet runs' per-epoch curves, the two "
                    "timed in different runs (machines may differ).")
                 + ("" if not bounded else
                    f" Cost bounded from the earlier run for {', '.join(bounded)}: their "
                    "ConvNet runs carry no per-epoch curve, so the ConvNet's time to the new "
                    "DMN accuracy is bounded by its time to the DMN accuracy of the run that "
                    "paired them (extra.cost[].bound_from): at most that time when the new DMN "
                    "is less accurate, at least when it is more accurate (the same when equal); "
                    "a bound on the side that does not decide leaves the row open.")
                 + ("" if not no_curve else
                    f" Not timed (left out of the cost claim): {', '.join(no_curve)}; their "
                    "ConvNet runs carry no per-epoch curve (records written before run_table "
                    "kept it), so the ConvNet's time to the new DMN accuracy is unknown."))
    old_dmn = []  # the old-rule note judges the DMN halves only
    for p in part_info:
        dmn = [n for n, h in p["halves"].items() if h != "convnet" and _has_dmn_layer(n)]
        if dmn:
            old_dmn.append(p | {"rows": dmn})
    unused = [label for i, (label, _) in enumerate(loaded)
              if not any(k[0] == i for k in kept)]
    note = (_note(cfg) + f" Merged from {len(part_info)} runs (merge_tables; later parts "
            "replace earlier ones row by row, Table 2's DMN and ConvNet halves apart; "
            "extra.parts names each run's rows): "
            + "; ".join(_where(p, what(p)) for p in part_info) + "."
            + split
            + ("" if not unused else f" Parts whose rows were all replaced: {unused}.")
            + ("" if not missing else f" Not run (files absent): {sorted(missing)}.")
            + _old_rule_note(c0["dmn_preset"], old_dmn, "rows"))
    walls = [p["wall_s"] for p in part_info if p["wall_s"] is not None]
    return Record(
        paper="dmn", artifact=artifact,
        title=_FIG10_TITLE if artifact == "fig10" else _TITLES[artifact],
        scale="paper" if protocol_paper and all_ran else "reduced",
        config=_config_dict(cfg) | {"dmn_preset": c0["dmn_preset"]}, rows=rows,
        claims=claims, note=note, wall_s=sum(walls) if walls else None,
        extra={"parts": part_info, "cost": cost, "runs": runs},
    )


_COST_CLAIM = ("cost: the DMN pipeline (build + features + head) reaches its accuracy faster "
               "than the ConvNet of the same widths")


def _cost_claims(cost, no_timing: Sequence[str] = (),
                 no_curve: Sequence[str] = ()) -> list[Claim]:
    """The cost claim (issue 13, item 5) from the per-row entries of :func:`_cost` and
    :func:`_cost_bound` (none: []); ``no_timing``: rows with both variants run but no timing
    recorded; ``no_curve``: rows whose DMN half was rerun apart from a ConvNet half that kept
    no per-epoch curve and no cost entry to bound it from (both named in the evidence: the
    claim is decided on the timed rows only; with ``no_curve`` and no timed row it stays
    open).  Each row holds, fails or stays open (:func:`_cost_verdict`); the claim holds when
    every row holds, fails when any row fails, and is open (``None``) otherwise."""
    if not cost:
        if not no_curve:
            return []
        return [Claim(
            _COST_CLAIM, None,
            "not decided: no row timed; DMN half rerun apart from a ConvNet run without its "
            f"per-epoch curve: {list(no_curve)}"
            + ("" if not no_timing else f"; no timing recorded for: {list(no_timing)}"))]
    verdicts = [_cost_verdict(c) for c in cost]
    holds = (False if False in verdicts else None if None in verdicts else True)
    open_rows = [c["row"] for c, v in zip(cost, verdicts) if v is None]
    return [Claim(
        _COST_CLAIM, holds,
        "; ".join(_cost_text(c) for c in cost)
        + ("" if not open_rows or holds is False else
           f"; not decided: the bound of {open_rows} is on the side that does not decide")
        + ("" if not no_timing else
           f"; decided on the timed rows only, no timing recorded for: {list(no_timing)}")
        + ("" if not no_curve else
           "; decided on the timed rows only, not timed (DMN half rerun apart from a ConvNet "
           f"run without its per-epoch curve): {list(no_curve)}"))]


def _cost_verdict(c: dict) -> bool | None:
    """Whether a cost entry's row has the DMN faster (``None``: its bound does not decide).

    An exact entry (``ratio``) decides; so does a ConvNet that never reached the target
    (``ratio_at_least`` from its whole run, no time to bound it from: the ConvNet counts as
    slower when its whole run took longer than the DMN pipeline).  A bounded entry
    (:func:`_cost_bound`) holds when ``ratio_at_least > 1``, fails when ``ratio_at_most <= 1``,
    and is open otherwise."""
    bf = c.get("bound_from")
    if bf is None or c.get("ratio") is not None or bf.get("convnet_s") is None:
        r = c["ratio"] if c.get("ratio") is not None else c.get("ratio_at_least")
        return r is not None and r > 1.0
    if c.get("ratio_at_least") is not None and c["ratio_at_least"] > 1.0:
        return True
    if c.get("ratio_at_most") is not None and c["ratio_at_most"] <= 1.0:
        return False
    return None


def _x(r: float) -> str:
    """A cost ratio for the evidence (three decimals where one would print 1.0, the claim's
    threshold)."""
    return f"{r:.3f}" if f"{r:.1f}" == "1.0" and r != 1.0 else f"{r:.1f}"


def _cost_text(c: dict) -> str:
    """One row of the cost claim's evidence."""
    bf = c.get("bound_from")
    if bf is None:
        return (f"{c['row']}: DMN {c['dmn_s']:.0f} s, ConvNet "
                + (f"{c['convnet_s']:.0f} s ({_x(c['ratio'])}x)" if c["ratio"] is not None
                   else f"never reached it in {c['convnet_total_s']:.0f} s "
                   f"(>= {_x(c['ratio_at_least'])}x)"))
    old = f"the old run's time to its DMN's {100 * bf['dmn_val_acc']:.2f} %"
    head = f"{c['row']}: DMN {100 * c['dmn_val_acc']:.2f} % in {c['dmn_s']:.0f} s, ConvNet "
    if c.get("ratio") is not None:
        return head + f"{c['convnet_s']:.0f} s ({_x(c['ratio'])}x; {old}, the same accuracy)"
    if bf.get("convnet_s") is None:
        return head + (f"never reached it in {c['convnet_total_s']:.0f} s "
                       f"(>= {_x(c['ratio_at_least'])}x; it never reached the old run's DMN's "
                       f"{100 * bf['dmn_val_acc']:.2f} % either)")
    if c.get("ratio_at_most") is not None:
        return head + (f"<= {bf['convnet_s']:.0f} s (<= {_x(c['ratio_at_most'])}x; bound from "
                       f"{old})")
    return head + (f">= {bf['convnet_s']:.0f} s (>= {_x(c['ratio_at_least'])}x; bound from "
                   f"{old})")


# two mean accuracies this close are the same: records round to 6 significant digits (an
# error of at most 1e-6 between a written and a recomputed mean), while two different means
# over seeds differ by at least 1 / (seeds * n_test)
_SAME_ACC = 2e-6


def _cost_bound(row: str, dmn_runs: Sequence[dict], old: dict, path: str) -> dict | None:
    """A row's cost entry when its DMN half was rerun apart from a ConvNet half whose runs
    keep no per-epoch curve, bounded from ``old``: the cost entry of the part that ran those
    ConvNets (``path``), made against that part's DMN.

    With the new DMN's accuracy ``t`` (mean of ``dmn_runs``) and time ``dmn_s`` (mean total)
    and the old entry's DMN accuracy ``t_old`` and ConvNet time to it ``convnet_s_old``: a
    ConvNet first reaches ``t <= t_old`` no later than it first reaches ``t_old`` (any curve:
    what reaches ``t_old`` reaches ``t``), so ``ratio_at_most = convnet_s_old / dmn_s``; it
    first reaches ``t >= t_old`` no earlier (or never), so ``ratio_at_least = convnet_s_old /
    dmn_s``; equal accuracies give the exact ``ratio``.  Seed by seed, so also for the means.
    A ConvNet that never reached ``t_old`` never reaches ``t >= t_old`` either:
    ``ratio_at_least`` from its whole run, as :func:`_cost` has it.  ``None`` when nothing
    bounds the cost (no old accuracy; ``t < t_old`` and the ConvNet never reached ``t_old``).

    ``bound_from`` keeps the old numbers (and where they were made; an old entry that was
    itself bounded passes its own ``bound_from`` on, as the ConvNet runs are the same)."""
    ref = old.get("bound_from") or {"path": path} | {
        k: old.get(k) for k in ("dmn_val_acc", "dmn_s", "convnet_s", "convnet_total_s")}
    t_old, conv_old, total = ref.get("dmn_val_acc"), ref.get("convnet_s"), ref.get(
        "convnet_total_s")
    if t_old is None:
        return None
    t = statistics.fmean(r["val_acc"] for r in dmn_runs)
    dmn_s = statistics.fmean(r["total_s"] for r in dmn_runs)
    c = {"row": row, "dmn_val_acc": t, "dmn_s": dmn_s, "convnet_s": None, "ratio": None,
         "convnet_total_s": total, "ratio_at_least": None, "ratio_at_most": None,
         "bound_from": dict(ref)}
    same = abs(t - t_old) <= _SAME_ACC
    if conv_old is not None:
        if same:
            c["convnet_s"], c["ratio"] = conv_old, conv_old / dmn_s
        elif t < t_old:
            c["ratio_at_most"] = conv_old / dmn_s
        else:
            c["ratio_at_least"] = conv_old / dmn_s
    elif (same or t > t_old) and total is not None:
        c["ratio_at_least"] = total / dmn_s
    else:
        return None
    return c


def _cost(runs) -> list[dict]:
    """Per row with both variants: mean DMN wall time (build + features + head, compilation
    included) and the mean time the ConvNet needed to first reach the DMN's final accuracy
    (from its per-epoch curve; ``None`` when it never did).  ``ratio_at_most`` and
    ``bound_from`` are ``None``: they belong to the entries :func:`_cost_bound` makes."""
    out = []
    keys = dict.fromkeys((r["dataset"], r["row"]) for r in runs)
    for ds, row in keys:
        d = [r for r in runs if (r["dataset"], r["row"], r["variant"]) == (ds, row, "dmn")]
        c = [r for r in runs if (r["dataset"], r["row"], r["variant"]) == (ds, row, "convnet")]
        if not d or not c:
            continue
        target = statistics.fmean(r["val_acc"] for r in d)
        hit = [next((t for _, t, a in r["curve"] if a is not None and a >= target), None)
               for r in c]  # (None: an epoch restored without its accuracy, see
        # train_and_evaluate's checkpoint_dir; its time, too, when it ended a resumed run)
        conv_s = None if None in hit else statistics.fmean(hit)
        dmn_s = statistics.fmean(r["total_s"] for r in d)
        # never reached: the ConvNet's whole run is a lower bound on its time to the target
        conv_total = statistics.fmean(
            next(t for _, t, _ in reversed(r["curve"]) if t is not None) for r in c)
        out.append({"row": f"{ds} {row}", "dmn_val_acc": target, "dmn_s": dmn_s,
                    "convnet_s": conv_s, "ratio": None if conv_s is None else conv_s / dmn_s,
                    "convnet_total_s": conv_total,
                    "ratio_at_least": None if conv_s is not None else conv_total / dmn_s,
                    "ratio_at_most": None, "bound_from": None})
    return out


def _has_dmn_layer(row_name: str) -> bool:
    """Whether a row (named "<dataset> <arch> ...") has a DMN layer (a ``d``/``dd`` token)."""
    arch = row_name.split(" ", 1)[1].split(" (")[0]
    return any(re.fullmatch(r"dd?\d+", t.strip()) for t in arch.split(","))


def _config_dict(cfg) -> dict:
    d = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name != "optimizer"}
    d["rows"] = [dataclasses.asdict(r) for r in cfg.rows]
    if hasattr(cfg, "preset"):
        d["dmn_preset"] = dataclasses.asdict(
            (DMNConfig.authors if cfg.preset == "authors" else DMNConfig.paper)(
                pca=getattr(cfg, "pca", "class")))
        d["width_rule"] = WIDTH_RULE  # records made before it was set: the old rule
    return d


# How select_filters applies a width under the class order: "w2" (since 2026-11-29) keeps the
# filters that enter first as Var grows; records without the field used the old rule (a
# width cut the class order: class 0's filters first, all of them in the fixed-count mode).
WIDTH_RULE = "w2"


def _old_rule_note(preset_cfg: dict, parts: list[dict], what: str) -> str:
    """The merged record's note on rows from parts made under the old width rule (only
    where it applies: class-based PCA visited class by class, i.e. the authors' preset)."""
    if preset_cfg.get("pca", "class") != "class" or preset_cfg.get("order") != "class":
        return ""
    old = [(p["path"], p[what]) for p in parts if p.get("width_rule") != WIDTH_RULE]
    if not old:
        return ""
    return (" Made under the old width rule (before 2026-11-29 a width cut the class order, "
            "so class 0's filters came first: every filter in the fixed-count mode, the last "
            "classes' where a width bound Var's outcome; docs/dmn.md, 'A width under the "
            "class order'): the DMN layers of " + "; ".join(
                f"{path}: {', '.join(str(x) for x in items)}" for path, items in old) + ".")


def _fixed_count(preset: str, pca: str, *, table: bool = False) -> str:
    """How a fixed-count width is chosen under a preset (the records' notes)."""
    if pca != "class":
        return ("top-F, no Cutoff" if table else "top-F eigenvectors of the class-blind density "
                "matrix: the paper's naive DMN, pca='naive'")
    if preset == "authors":  # select_filters: the class order has no width of its own
        return ("the first F class-PCA filters to enter as Var grows (the smallest Var that "
                "keeps F; select_filters since 2026-11-29), after Cutoff 0.9")
    return "top-F class-PCA filters by eigenvalue after Cutoff 0.9"


def _note(cfg) -> str:
    return (f"DMN preset {cfg.preset!r} (docs/dmn.md lists every rule)"
            + (f" with pca={cfg.pca!r} (the paper's naive DMN of Figs. 6 and 10: PCA of the "
               "class-blind density matrix, no Cutoff)" if cfg.pca != "class" else "")
            + "; head and ConvNets: "
            f"{cfg.epochs} epochs of {cfg.optimizer_name}, batch {cfg.batch_size}; accuracy "
            f"reported: {cfg.report} epoch on the official test split; training sets "
            f"{'full' if cfg.n_train is None else cfg.n_train}. Tables 3-5 print no "
            "Var./Cutoff: their DMN widths are fixed counts ("
            + _fixed_count(cfg.preset, cfg.pca, table=True) + ")."
            + ("" if cfg.artifact == "fig10" or set(cfg.rows) >= set(table_rows(cfg.artifact))
               else f" Rows run: {len(cfg.rows)} of the table's {len(table_rows(cfg.artifact))}"
               " (the others are not in this record).")
            + ("" if getattr(cfg, "conv_rows", True) else
               " Rows that train conv layers end to end were not run (conv_rows=False, "
               "--no-conv-rows; minutes to an hour per run at full data on a 2-core CPU), so the "
               "record is reduced and the claims that need them are open."))


def _table_claims(cfg, rows) -> list[Claim]:
    if cfg.artifact != "table2":
        return []
    by = {r.name: r for r in rows}
    labels = [r.label for r in cfg.rows if r.dataset == "cifar10"]

    def shown(row):  # two rows share "d22, d41" (Input 0.2 and 0.7)
        return (row.label if labels.count(row.label) == 1
                else f"{row.label} (Input {row.input_fraction})")

    pairs = []
    for row in cfg.rows:
        if row.dataset != "cifar10":
            continue
        name = _row_name(row)
        a, b = by.get(f"{name} val acc"), by.get(f"{name} ConvNet val acc")
        if a is not None and b is not None and a.ours is not None and b.ours is not None:
            pairs.append((shown(row), a.ours, b.ours))
    if not pairs:
        # ConvNets not run (e.g. --no-convnet on a CPU): the claim stays open (None); the
        # evidence compares our DMN rows with the paper's printed ConvNet numbers instead
        alone = []
        for row in cfg.rows:
            a = by.get(f"{_row_name(row)} val acc")
            if (row.dataset == "cifar10" and a is not None and a.ours is not None
                    and row.paper_convnet is not None):
                alone.append((shown(row), a.ours, row.paper_convnet))
        if not alone:
            return [Claim("DMN >= ConvNet of the same width on CIFAR-10 (Table 2)", None,
                          "no CIFAR-10 rows run")]
        wins = sum(a >= b for _, a, b in alone)
        ev = "; ".join(f"{lab}: {a:.2f} vs {b:.2f}" for lab, a, b in alone)
        return [Claim("DMN >= ConvNet of the same width on CIFAR-10 (Table 2)", None,
                      f"our ConvNets not run (--no-convnet), so not decided; against the "
                      f"paper's printed ConvNet numbers our DMN is ahead in {wins}/{len(alone)} "
                      f"rows: {ev}")]
    wins = sum(a >= b for _, a, b in pairs)
    ev = "; ".join(f"{lab}: {a:.2f} vs {b:.2f}" for lab, a, b in pairs)
    return [Claim("DMN >= ConvNet of the same width on CIFAR-10 (Table 2)",
                  wins == len(pairs), f"{wins}/{len(pairs)} rows: {ev}")]


def run_table2(config: TableConfig | None = None, *, key: jax.Array, progress: bool = True,
               checkpoint_dir: str | os.PathLike | None = None) -> Record:
    """Table 2 (``TableConfig.paper("table2")`` by default); see ``run_table``."""
    return run_table(config or TableConfig.paper("table2"), key=key, progress=progress,
                     checkpoint_dir=checkpoint_dir)


def run_table3(config: TableConfig | None = None, *, key: jax.Array, progress: bool = True,
               checkpoint_dir: str | os.PathLike | None = None) -> Record:
    """Table 3, MNIST (``TableConfig.paper("table3")`` by default); see ``run_table``."""
    return run_table(config or TableConfig.paper("table3"), key=key, progress=progress,
                     checkpoint_dir=checkpoint_dir)


def run_table4(config: TableConfig | None = None, *, key: jax.Array, progress: bool = True,
               checkpoint_dir: str | os.PathLike | None = None) -> Record:
    """Table 4, CIFAR-10 (``TableConfig.paper("table4")`` by default); see ``run_table``."""
    return run_table(config or TableConfig.paper("table4"), key=key, progress=progress,
                     checkpoint_dir=checkpoint_dir)


def run_table5(config: TableConfig | None = None, *, key: jax.Array, progress: bool = True,
               checkpoint_dir: str | os.PathLike | None = None) -> Record:
    """Table 5, CIFAR-100 (``TableConfig.paper("table5")`` by default): rows run when the
    ``cifar100`` files are present, else ``ours=None`` with the loader's message."""
    return run_table(config or TableConfig.paper("table5"), key=key, progress=progress,
                     checkpoint_dir=checkpoint_dir)


# ----------------------------------------------------------------------------- Fig. 10

FIG10_ROWS = tuple(r for r in TABLE3 + TABLE4 + TABLE5 if "m" in r.arch.split(","))


def fig10_config(paper: bool = True, **changes) -> TableConfig:
    """Fig. 10: the one- and two-layer networks of Tables 3-5 (two DMN, DMN + Conv, two
    Conv, with and without BN).  ``paper=False``: the smoke configuration."""
    if paper:
        return TableConfig(**(dict(artifact="fig10", rows=FIG10_ROWS, convnet=False)
                              | changes))
    rows = (TABLE3[4],)  # n_test = n_train: one split shape, shared compiled programs
    return TableConfig(**(dict(artifact="fig10", rows=rows, convnet=False, seeds=1,
                               epochs=1, n_train=200, n_test=200) | changes))


def run_fig10(config: TableConfig | None = None, *, key: jax.Array, progress: bool = True,
              checkpoint_dir: str | os.PathLike | None = None) -> Record:
    """Fig. 10 (two-layer networks); the numbers are those of Tables 3-5, plus the paper's
    qualitative claims checked on ours."""
    cfg = config or fig10_config()
    rec = run_table(cfg, key=key, progress=progress, checkpoint_dir=checkpoint_dir)
    rec.claims = _fig10_claims(rec.rows)
    rec.title = _FIG10_TITLE
    return rec


_FIG10_TITLE = "Fig. 10: one- and two-layer DMN, DMN + Conv and ConvNets (Tables 3-5)"


def _fig10_claims(rows) -> list[Claim]:
    """Fig. 10's qualitative claims, from the rows of a Fig. 10 record."""
    val = {r.name: r.ours for r in rows if r.name.endswith("val acc")}

    def get(ds, label):
        return val.get(f"{ds} {label} val acc")

    claims = []
    one, two = get("mnist", "d6, m, de10"), get("mnist", "d9, m, d40, m, de10")
    claims.append(_cmp("MNIST: a second DMN layer increases accuracy", two, one))
    one, two = get("cifar10", "d10, m, de10"), get("cifar10", "d15, m, d108, m, de10")
    claims.append(_cmp("CIFAR-10 without BN: two DMN layers < one DMN layer", one, two))
    two_bn = get("cifar10", "d20, m, d180, m, BN, de10")
    claims.append(_cmp("CIFAR-10: BN after two DMN layers increases accuracy", two_bn, two))
    hyb, cc = get("cifar10", "d27, m, c108, m, BN, de10"), get("cifar10", "c10, m, c80, m, de10")
    claims.append(_cmp("CIFAR-10: DMN + Conv beats two Conv layers", hyb, cc))
    # the same second layer (80 conv filters) on a DMN or a conv first layer
    claims.append(_cmp("CIFAR-10: d15, c80 (DMN + Conv) beats c10, c80 (two Conv)",
                       get("cifar10", "d15, m, c80, m, de10"), cc))
    # the paper's sentence: "The best performance achieves by networks with one DMN and one
    # Conv. layer and the worst performance is obtained by two Conv. layer networks"
    two = {"two DMN": ("d15, m, d108, m, de10", "d20, m, d180, m, BN, de10"),
           "DMN + Conv": ("d15, m, c80, m, de10", "d27, m, c108, m, BN, de10"),
           "two Conv": ("c10, m, c80, m, de10", "c32, m, c32, m, de10")}
    got = {g: [(a, get("cifar10", a)) for a in archs] for g, archs in two.items()}
    text = "CIFAR-10: of the two-layer networks the best is DMN + Conv, the worst two Conv"
    missing = [a for rows_ in got.values() for a, v in rows_ if v is None]
    if missing:
        claims.append(Claim(text, None, "not run: " + "; ".join(missing)))
    else:
        flat = [(v, g, a) for g, rows_ in got.items() for a, v in rows_]
        best, worst = max(flat), min(flat)
        claims.append(Claim(text, best[1] == "DMN + Conv" and worst[1] == "two Conv",
                            f"best {best[2]} {best[0]:.2f} ({best[1]}), worst {worst[2]} "
                            f"{worst[0]:.2f} ({worst[1]})"))
    return [c for c in claims if c is not None]


def _cmp(text, a, b):
    if a is None or b is None:
        return Claim(text, None, "not run")
    return Claim(text, a > b, f"{a:.2f} vs {b:.2f}")


# ----------------------------------------------------------------------------- Fig. 6


@dataclasses.dataclass(frozen=True)
class Fig6Config:
    """Fig. 6: test accuracy vs number of filters, one DMN layer vs one conv layer.

    Attributes:
      datasets: which of ``mnist``, ``cifar10``, ``cifar100`` (absent files: not run).
      filters: the widths ``F`` of ``dF, m, de`` / ``cF, m, de`` (fixed-count DMN).
      preset, pca, seeds, epochs, batch_size, optimizer, n_train, n_test, report, data_dir,
      dtype: as in ``TableConfig`` (``pca="naive"``: the paper's "naive DMN" of Fig. 6, the
        top-F eigenvectors of the class-blind density matrix).
      convnet: also train the one-layer ConvNet of each ``F`` (``False``: the DMN curve and
        the baselines only; the record is then reduced and the DMN-vs-ConvNet claim stays
        open).  On a 2-core CPU a full-data CIFAR-10 ``cF,m,de10`` run of 50 epochs took
        142-335 s on a quiet machine (``conv3x3``'s one-matmul route; up to ~2.5x that
        under load), all eight ConvNets ~30 min a seed.
    """

    datasets: tuple[str, ...] = ("mnist", "cifar10", "cifar100")
    filters: tuple[int, ...] = (2, 4, 6, 9, 12, 15, 20, 27)
    preset: str = "authors"
    pca: str = "class"
    seeds: int = 3
    epochs: int = 50
    batch_size: int = 128
    optimizer: optax.GradientTransformation = dataclasses.field(
        default_factory=lambda: optax.adam(1e-3), compare=False, hash=False)
    optimizer_name: str = "adam(lr=1e-3)"
    n_train: int | None = None
    n_test: int | None = None
    report: str = "final"
    data_dir: str | None = None
    dtype: str = "float32"
    convnet: bool = True

    @classmethod
    def paper(cls, **changes: Any) -> Fig6Config:
        """Full data, F = 2 ... 27 (the largest a 3x3 RGB patch allows), 3 seeds."""
        return cls(**changes)

    @classmethod
    def smoke(cls, **changes: Any) -> Fig6Config:
        """Seconds: MNIST, F = 6, 200 / 100 images, 1 epoch, 1 seed."""
        return cls(**(dict(datasets=("mnist",), filters=(6,), seeds=1, epochs=1,
                           n_train=200, n_test=100) | changes))


FIG6_BASELINE = {"mnist": 92.9, "cifar10": 40.04, "cifar100": 15.96}
FIG6_BEST_F = {"mnist": 6, "cifar10": 12, "cifar100": 15}


def _fig6_scale(cfg: Fig6Config, rows: list) -> str:
    """Fig. 6's record scale: ``"paper"`` with the full data, 3 seeds, the paper's epochs,
    both datasets, every one of the paper's widths (``--filters`` with fewer is a reduction),
    the ConvNet curve and every row run."""
    full = Fig6Config.paper()
    return ("paper" if cfg.n_train is None and cfg.n_test is None and cfg.seeds >= 3
            and cfg.epochs >= full.epochs and set(cfg.datasets) == set(full.datasets)
            and set(cfg.filters) >= set(full.filters)
            and cfg.convnet and all(r.ours is not None for r in rows) else "reduced")


def run_fig6(config: Fig6Config | None = None, *, key: jax.Array, progress: bool = True,
             checkpoint_dir: str | os.PathLike | None = None) -> Record:
    """Fig. 6: per dataset the classifier-only baseline, and for each ``F`` the one-layer
    DMN (top ``F`` class-PCA filters, Cutoff 0.9) and the one-layer ConvNet."""
    cfg = config or Fig6Config.paper()
    t0 = time.perf_counter()
    rows, claims, runs = [], [], []
    for ds in cfg.datasets:
        tcfg = TableConfig(artifact="fig6", rows=(), preset=cfg.preset, pca=cfg.pca,
                           seeds=cfg.seeds,
                           epochs=cfg.epochs, batch_size=cfg.batch_size,
                           optimizer=cfg.optimizer, optimizer_name=cfg.optimizer_name,
                           n_train=cfg.n_train, n_test=cfg.n_test, report=cfg.report,
                           data_dir=cfg.data_dir, dtype=cfg.dtype)
        data, err = _load_split(ds, tcfg)
        c = NUM_CLASSES[ds]
        if err is not None:
            rows.append(Row(f"{ds} baseline de{c} val acc", None, FIG6_BASELINE[ds], "%",
                            TOL[ds], 0, None, None, f"not run: {err}"))
            continue
        base = ArchRow(ds, f"de{c}", f"de{c}")
        rs = [_one(tcfg, base, "dmn", s, data, key=key, progress=progress,
                   checkpoint_dir=checkpoint_dir) for s in range(cfg.seeds)]
        rows.append(row_from_values(f"{ds} baseline de{c} val acc",
                                    [_acc(r, tcfg) for r in rs], paper=FIG6_BASELINE[ds],
                                    unit="%", tol=TOL[ds]))
        curves = {"dmn": [], "convnet": []}
        for f in cfg.filters:
            row = ArchRow(ds, f"d{f},m,de{c}", f"d{f}", 1.0, None, 0.9)
            for v in ("dmn", "convnet") if cfg.convnet else ("dmn",):
                rs = [_one(tcfg, row, v, s, data, key=key, progress=progress,
                           checkpoint_dir=checkpoint_dir) for s in range(cfg.seeds)]
                runs += [r | {"dataset": ds, "filters": f} for r in rs]
                vals = [_acc(r, tcfg) for r in rs]
                curves[v].append(statistics.fmean(vals))
                kept = sorted({r["widths"][0] for r in rs}) if v == "dmn" else [f]
                rows.append(row_from_values(
                    f"{ds} F={f} {'DMN' if v == 'dmn' else 'ConvNet'} val acc", vals,
                    unit="%", tol=TOL[ds],
                    note=f"filters kept: {kept}" if v == "dmn" else ""))
        claims += _fig6_claims(ds, cfg.filters, curves["dmn"],
                               curves["convnet"] if cfg.convnet else None)
    scale = _fig6_scale(cfg, rows)
    d = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name != "optimizer"}
    d["width_rule"] = WIDTH_RULE  # as _config_dict: merge_fig6 names DMN curves without it
    return Record(
        paper="dmn", artifact="fig6", title="Fig. 6: accuracy vs number of filters, one DMN "
        "layer vs one conv layer", scale=scale, config=d, rows=rows, claims=claims,
        note=f"DMN preset {cfg.preset!r}, fixed count ("
        + _fixed_count(cfg.preset, cfg.pca)
        + "); the paper gives the curves only as a figure, so only the "
        "baselines and the best widths have paper numbers."
        + ("" if cfg.convnet else " ConvNets not run (convnet=False): DMN curve and baselines "
           "only, so the record is reduced."),
        extra={"compute_s": time.perf_counter() - t0,
               "runs": [{k: r[k] for k in ("dataset", "filters", "variant", "seed", "widths",
                                           "val_acc", "train_acc", "total_s")} for r in runs]},
    )


def _fig6_claims(ds: str, filters: Sequence[int], dmn: Sequence[float],
                 convnet: Sequence[float] | None, *, why: str | None = None) -> list[Claim]:
    """Fig. 6's claims for one dataset from its mean curves over ``filters`` (``convnet``:
    ``None`` when the ConvNets did not run; ``why``: the open claim's evidence then, if not
    the run's own ``convnet=False``)."""
    best = filters[int(np.argmax(dmn))]
    claims = [Claim(f"{ds}: best one-layer DMN width is F={FIG6_BEST_F[ds]}",
                    best == FIG6_BEST_F[ds], f"ours: best F={best} among {list(filters)}")]
    if ds == "cifar10" and convnet is None:
        claims.append(Claim("CIFAR-10: one DMN layer >= one conv layer (most F)", None,
                            why or "ConvNets not run (convnet=False, --no-convnet)"))
    elif ds == "cifar10":
        wins = sum(a >= b for a, b in zip(dmn, convnet))
        claims.append(Claim("CIFAR-10: one DMN layer >= one conv layer (most F)",
                            wins > len(filters) / 2, f"{wins}/{len(filters)} widths"))
    return claims


# Fig. 6 records that merge must share these (older records lack pca / convnet: defaults);
# convnet is checked for presence only: a DMN-only part (--no-convnet) merges half by half
_FIG6_PROTOCOL = ("filters", "preset", "pca", "seeds", "epochs", "batch_size", "optimizer_name",
                  "n_train", "n_test", "report", "dtype", "convnet")
_FIG6_DEFAULTS = {"pca": "class", "convnet": True}


def _fig6_half_rows(ds: str, filters: Sequence[int], half: str) -> list[str]:
    """The names of a Fig. 6 dataset's entries of one half: ``"dmn"`` is the classifier-only
    baseline and the DMN curve (the DMN-variant runs every part makes, DMN-only or not),
    ``"convnet"`` the ConvNet curve."""
    if half == "dmn":
        return [f"{ds} baseline de{NUM_CLASSES[ds]} val acc"] + [
            f"{ds} F={f} DMN val acc" for f in filters]
    return [f"{ds} F={f} ConvNet val acc" for f in filters]


def _part_width_rule(d: dict, datasets: Sequence[str]) -> str | None:
    """The width rule a Fig. 6 part ran under: its own, or for a merge the rule of the
    sub-part(s) that gave the DMN curves of ``datasets`` (a sub-part that gave only a
    dataset's ConvNet curve does not count; None if any of them predates the field)."""
    subs = (d.get("extra") or {}).get("parts")
    if not subs:
        return d.get("config", {}).get("width_rule")
    rules = {(sp.get("width_rules") or {}).get(ds, sp.get("width_rule"))
             for sp in subs for ds in datasets
             if ds in sp.get("datasets", ()) and _half_given(sp, ds) != "convnet"}
    return rules.pop() if len(rules) == 1 else None


def merge_fig6(parts: Sequence[str | os.PathLike | dict], *,
               data_dir: str | os.PathLike | None = None) -> Record:
    """One Fig. 6 record of every dataset from records that each ran some of its datasets.

    Fig. 6's datasets run for hours each on different machines (``--datasets``); this merges
    their records without training.  A dataset no part ran is marked not run, with the
    loader's message when its files are absent.

    Each dataset is merged half by half.  Its **DMN half** (the classifier-only baseline, the
    ``F=... DMN val acc`` curve and the runs of variant ``"dmn"``) comes from the last part
    that ran it, a part with the ConvNets or a DMN-only part (``--no-convnet``, ``convnet:
    false``); its **ConvNet half** (``F=... ConvNet val acc``, runs of variant ``"convnet"``)
    from the last part that ran the ConvNets.  So a DMN-only rerun listed after the full parts
    replaces their DMN curves (e.g. under the corrected width rule) and keeps their ConvNets,
    and a full part listed after a DMN-only one replaces both halves.  ``convnet`` is then the
    one protocol field the parts may differ in: the merged record has ``convnet: true`` when
    any part ran ConvNets, whatever the parts' order (the order only decides which part's half
    is kept), and a dataset whose ConvNet half no part ran has its ConvNet entries marked not
    run (its DMN-vs-ConvNet claim open).  Fig. 6 records keep no cost entries (each run's
    ``total_s`` travels with its half in ``extra.runs``), so nothing is recomputed but the
    claims.

    Args:
      parts: ``fig6`` records (paths or loaded dicts) written by :func:`run_fig6` or an
        earlier merge.  They must share the protocol (``_FIG6_PROTOCOL``: widths, DMN preset
        and PCA, seeds, epochs, batch size, optimizer, ``n_train``/``n_test``, ``report``,
        dtype; ``convnet`` may differ, as above); a ``ValueError`` names the part and the field
        that differs.
      data_dir: where to look for the files of datasets no part ran.

    Returns:
      A :class:`~layerlab.record.Record`; claims (best F, DMN >= ConvNet on CIFAR-10)
      recomputed from the assembled curves; ``scale`` ``"paper"`` when the protocol is the
      paper's and every dataset ran with both halves; ``extra["parts"]`` names each
      contributing run (path, datasets, ``halves``: per dataset ``"both"`` for the whole
      dataset or ``"dmn"`` / ``"convnet"`` for one half, machine, wall time, command, git,
      width rule(s)) -- for a part that is itself a merge, its own parts (``via``: the merged
      record) -- in the order given; ``extra["runs"]`` the kept runs, each with the command
      that made it; ``wall_s`` is the sum of their whole wall times (a run counts in full even
      when some of its halves were replaced).  The note names the datasets whose curves come
      from different runs, and the DMN curves made under the old width rule
      (``_old_rule_note``; a part that gives only a ConvNet curve is not named).
    """
    loaded = _load_parts("merge_fig6", parts, {"fig6"})
    for label, d in loaded:
        missing_f = [f for f in _FIG6_PROTOCOL if f not in d.get("config", {})
                     and f not in _FIG6_DEFAULTS] + [k for k in ("rows", "claims") if k not in d]
        if missing_f:
            raise ValueError(f"merge_fig6: {label} has no field(s) {missing_f} (config or "
                             "record); it was not written by run_fig6 / merge_fig6.")

    def proto(d, f):
        return d["config"].get(f, _FIG6_DEFAULTS.get(f))

    ref_label, ref = loaded[0]
    for label, d in loaded[1:]:
        for f in _FIG6_PROTOCOL:
            if f == "convnet":  # every Fig. 6 dataset pairs DMN and ConvNet: half by half
                continue
            if proto(ref, f) != proto(d, f):
                raise ValueError(f"merge_fig6: {label} ran with {f}={proto(d, f)!r} but "
                                 f"{ref_label} with {f}={proto(ref, f)!r}; runs under different "
                                 "protocols do not merge.")
    filters = list(proto(ref, "filters"))
    convnet = any(bool(proto(d, "convnet")) for _, d in loaded)
    # (dataset, half) -> the last part that ran it: the DMN half where the baseline ran (every
    # part that runs a dataset runs its baseline and DMN curve), the ConvNet half where a
    # ConvNet point ran (not a DMN-only part, nor a merge that marks them not run)
    owner: dict[tuple[str, str], int] = {}
    for i, (_, d) in enumerate(loaded):
        ran = {r["name"] for r in d["rows"] if r.get("ours") is not None}
        for ds in Fig6Config().datasets:
            for half in ("dmn", "convnet"):
                names = _fig6_half_rows(ds, filters, half)
                if names[0] in ran if half == "dmn" else set(names) & ran:
                    owner[ds, half] = i

    def path_of(i: int, j: int) -> str:
        if j < 0:
            return loaded[i][0]
        return (loaded[i][1].get("extra") or {})["parts"][j].get("path", loaded[i][0])

    fields = {f.name for f in dataclasses.fields(Row)}
    rows, claims, runs, missing = [], [], [], {}
    kept: dict[tuple[int, int], dict[str, str]] = {}  # (part, sub-part) -> {dataset: half}
    mixed: list[tuple[str, tuple[int, int], tuple[int, int]]] = []  # (ds, DMN's, ConvNet's)
    no_conv: list[str] = []  # datasets whose ConvNet half no part ran (merged convnet=True)
    for ds in Fig6Config().datasets:
        c = NUM_CLASSES[ds]
        if (ds, "dmn") not in owner:
            try:
                load(ds, "test", data_dir=data_dir)
                why = (f"not run: no part record holds {ds} (run it with --datasets {ds} and "
                       "merge again)")
            except DatasetNotFoundError as e:
                missing[ds] = str(e)
                why = f"not run: {e}"
            rows.append(Row(f"{ds} baseline de{c} val acc", None, FIG6_BASELINE[ds], "%",
                            TOL[ds], 0, None, None, why))
            continue
        want = ("dmn", "convnet") if convnet else ("dmn",)
        src: dict[str, tuple[int, int]] = {}  # half -> (part, sub-part)
        got: dict[str, dict[str, dict]] = {}  # half -> {entry name: the part's row}
        for half in want:
            if (ds, half) not in owner:
                continue
            i = owner[ds, half]
            label, d = loaded[i]
            by = {r["name"]: r for r in d["rows"]}
            names = _fig6_half_rows(ds, filters, half)
            if any(by.get(n, {}).get("ours") is None for n in names):
                raise ValueError(f"merge_fig6: {label} ran {ds} but lacks some of its F rows "
                                 f"(filters {filters}).")
            subs = (d.get("extra") or {}).get("parts") or []
            j = next((k for k, sp in enumerate(subs) if ds in sp.get("datasets", ())
                      and _half_given(sp, ds) in (half, "both")), -1)
            src[half], got[half] = (i, j), {n: by[n] for n in names}
        if convnet and "convnet" not in src:
            no_conv.append(ds)
            why = (f"not run: the parts that hold {ds} ran it without its ConvNets "
                   f"(--no-convnet); run it with --datasets {ds} and merge again")
            got["convnet"] = {n: dataclasses.asdict(Row(n, None, None, "%", TOL[ds], 0, None,
                                                        None, why))
                              for n in _fig6_half_rows(ds, filters, "convnet")}
        every = {**got.get("dmn", {}), **got.get("convnet", {})}
        # run_fig6's order: the baseline, then per F the DMN and the ConvNet entry
        order = _fig6_half_rows(ds, filters, "dmn")[:1] + [
            n for f in filters for n in (f"{ds} F={f} DMN val acc", f"{ds} F={f} ConvNet val acc")
            if n in every]
        rows += [Row(**{k: v for k, v in every[n].items() if k in fields}) for n in order]
        dmn = [every[f"{ds} F={f} DMN val acc"]["ours"] for f in filters]
        conv = ([every[f"{ds} F={f} ConvNet val acc"]["ours"] for f in filters]
                if "convnet" in src else None)
        claims += _fig6_claims(ds, filters, dmn, conv, why=(
            None if not convnet else f"ConvNets not run: no part ran {ds}'s ConvNets (the parts "
            "that hold it ran --no-convnet)"))
        gave: dict[tuple[int, int], set[str]] = {}
        for half, (i, j) in src.items():
            gave.setdefault((i, j), set()).add(half)
        for (i, j), hs in sorted(gave.items()):  # a part's runs in its own order
            extra = loaded[i][1].get("extra") or {}
            sub = extra["parts"][j] if j >= 0 else loaded[i][1]
            runs += [r | {"command": r.get("command") or sub.get("command")}
                     for r in extra.get("runs", [])
                     if r.get("dataset") == ds and r.get("variant", "dmn") in hs]
            kept.setdefault((i, j), {})[ds] = "both" if hs >= set(want) else next(iter(hs))
        if len(gave) > 1:
            mixed.append((ds, src["dmn"], src["convnet"]))

    part_info = []
    for (i, j), given in sorted(kept.items()):  # in the order given (a merge: its own order)
        label, d = loaded[i]
        sp = (d.get("extra") or {})["parts"][j] if j >= 0 else d
        if j >= 0:
            rule = sp.get("width_rule")
            rules = {ds: (sp.get("width_rules") or {}).get(ds, rule) for ds in given}
        else:
            rule = _part_width_rule(d, list(given))
            rules = {ds: _part_width_rule(d, [ds]) for ds in given}
        part_info.append({"path": path_of(i, j), "via": label if j >= 0 else None,
                          "datasets": list(given), "halves": dict(given),
                          "scale": sp.get("scale"), "machine": sp.get("machine"),
                          "wall_s": sp.get("wall_s"), "command": sp.get("command"),
                          "git": sp.get("git"), "width_rule": rule, "width_rules": rules})
    full = Fig6Config.paper()
    protocol_paper = (proto(ref, "n_train") is None and proto(ref, "n_test") is None
                      and proto(ref, "seeds") >= 3 and proto(ref, "epochs") >= full.epochs
                      and convnet)
    walls = [p["wall_s"] for p in part_info if p["wall_s"] is not None]
    pca = proto(ref, "pca")

    def what(p: dict) -> str:
        return ", ".join(ds if h == "both" else f"the DMN curve and baseline of {ds}"
                         if h == "dmn" else f"the ConvNet curve of {ds}"
                         for ds, h in p["halves"].items())

    split = ""
    if mixed:
        groups: dict[tuple[str, str], list[str]] = {}
        for ds, a, b in mixed:
            groups.setdefault((path_of(*a), path_of(*b)), []).append(ds)
        split = (" Datasets whose DMN and ConvNet curves come from different runs (a later run "
                 "replaced the DMN curve and baseline; extra.parts[].halves): " + "; ".join(
                     f"DMN from {a}, ConvNet from {b}: {', '.join(dss)}"
                     for (a, b), dss in groups.items()) + ".")
    unused = [label for i, (label, _) in enumerate(loaded)
              if not any(k[0] == i for k in kept)]
    old_dmn = []  # the old-rule note judges the DMN curves only
    for p in part_info:
        old = [f"{ds} DMN curve" for ds, h in p["halves"].items()
               if h != "convnet" and p["width_rules"][ds] != WIDTH_RULE]
        if old:
            old_dmn.append(p | {"width_rule": None, "datasets": old})
    note = (f"DMN preset {proto(ref, 'preset')!r}, fixed count ("
            + _fixed_count(proto(ref, "preset"), pca)
            + "); the paper gives the curves only as a figure, so only the "
            "baselines and the best widths have paper numbers. Merged from "
            f"{len(part_info)} runs (merge_fig6; a later part replaces an earlier one dataset by "
            "dataset, the DMN curve with its baseline and the ConvNet curve apart; extra.parts "
            "names each run's datasets and halves): "
            + "; ".join(_where(p, what(p)) for p in part_info) + "."
            + split
            + ("" if not unused else f" Parts whose datasets were all replaced: {unused}.")
            + ("" if convnet else " ConvNets not run (convnet=False in every part): DMN curves "
               "and baselines only, so the record is reduced.")
            + ("" if not no_conv else f" ConvNets not run for {no_conv}: the parts that hold "
               "them ran without (--no-convnet), so their entries are marked not run.")
            + ("" if not missing else f" Not run (files absent): {sorted(missing)}.")
            + _old_rule_note(
                ref.get("config", {}).get("dmn_preset") or dataclasses.asdict(
                    (DMNConfig.authors if proto(ref, "preset") == "authors"
                     else DMNConfig.paper)(pca=pca)),
                old_dmn, "datasets"))
    config = {f: proto(ref, f) for f in _FIG6_PROTOCOL} | {
        "convnet": convnet, "datasets": list(full.datasets), "data_dir": None,
        "width_rule": WIDTH_RULE}
    return Record(
        paper="dmn", artifact="fig6", title="Fig. 6: accuracy vs number of filters, one DMN "
        "layer vs one conv layer",
        scale="paper" if protocol_paper and all(r.ours is not None for r in rows) else "reduced",
        config=config, rows=rows, claims=claims, note=note,
        wall_s=sum(walls) if walls else None, extra={"parts": part_info, "runs": runs})


# ----------------------------------------------------------------------------- time scales
#
# Separation of time scales: Figs. 2 and 3 of the main text, Figs. 5 and 7 of the SI.


class Fig5CNN(nn.Module):
    """SI Fig. 5's network: conv32, maxpool, conv32, maxpool, dense (3x3 kernels, SAME, ReLU,
    2x2 pools), He-normal initialised; :func:`run_timescales` trains it with SGD and tracks
    each layer's distance to its final weights."""

    num_classes: int = 10

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        he = nn.initializers.variance_scaling(2.0, "fan_in", "normal")
        # Conv3x3 / max_pool_2x2 = nn.Conv(32, (3, 3)) / nn.max_pool(x, (2, 2), strides=(2, 2))
        # (same parameters, names and init draws); on CPU inside loop.fit's lax.scan,
        # lax.conv's gradients ran ~10x slower than the one-matmul route (16 SGD steps of
        # batch 64: 7.5 s vs 0.74 s, docs/dmn.md)
        x = max_pool_2x2(jax.nn.relu(Conv3x3(32, kernel_init=he, name="conv1")(x)))
        x = max_pool_2x2(jax.nn.relu(Conv3x3(32, kernel_init=he, name="conv2")(x)))
        return nn.Dense(self.num_classes, kernel_init=he, name="dense")(
            x.reshape(x.shape[0], -1))


TIMESCALE_PARTS = ("fig2", "fig3", "fig5", "fig7")


@dataclasses.dataclass(frozen=True)
class TimescalesConfig:
    """Separation of time scales: Figs. 2 and 3 (main text), Figs. 5 and 7 (SI), on MNIST.

    Attributes:
      parts: which of ``"fig2"``, ``"fig3"``, ``"fig5"`` (SI), ``"fig7"`` (SI) to run.
      n_train: MNIST training images (label-balanced subset; ``None``: all 60 000); Figs. 3
        and 7 take their patches from the first of these images.
      n_test: test images for Fig. 2's validation accuracy (``None``: all 10 000).
      lr, batch_size: plain SGD of Figs. 2 and 5.
      mlp_widths: Fig. 2's four dense layers after a 3x3 max-pool (81 inputs), ReLU,
        weights ``N(0, 2/d_in)`` ("Glorot" in the paper, He et al. in today's naming).
      mlp_epochs, evals_per_epoch: Fig. 2's training length and spectra per epoch.
      cnn_datasets: SI Fig. 5's data sets (the caption: "3 datasets"; missing files: the
        rows are recorded as not run).
      cnn_epochs, snapshots_per_epoch: SI Fig. 5's training length ("the final weight at step
        t=100", epochs) and weight snapshots per epoch.
      fig3_images, fig3_pool, fig3_ns, fig3_draws: Fig. 3: 5x5 patches of the first
        ``fig3_images`` images, a random pool of ``fig3_pool`` of them, sample counts ``N``
        (``dN = N / 10``) and draws per ``N``.
      fig7_images: SI Fig. 7's numbers of images ``N`` (the caption: 10, 100, 1000, 10000);
        ``rho`` of the 3x3 patches of the first ``N`` images.
      data_dir: dataset root (default: the loader's search path).
    """

    parts: tuple[str, ...] = TIMESCALE_PARTS
    n_train: int | None = 6000
    n_test: int | None = 2000
    lr: float = 0.05
    batch_size: int = 64
    mlp_widths: tuple[int, ...] = (30, 100, 30)
    mlp_epochs: int = 3
    evals_per_epoch: int = 8
    cnn_datasets: tuple[str, ...] = ("mnist",)
    cnn_epochs: int = 1
    snapshots_per_epoch: int = 10
    fig3_images: int = 2000
    fig3_pool: int = 100_000
    fig3_ns: tuple[int, ...] = (250, 1000, 4000, 16000)
    fig3_draws: int = 40
    fig7_images: tuple[int, ...] = (10, 18, 32, 56, 100, 178, 316, 562, 1000)
    data_dir: str | None = None

    def __post_init__(self):
        bad = [p for p in self.parts if p not in TIMESCALE_PARTS]
        if bad:
            raise ValueError(f"TimescalesConfig.parts: unknown {bad}; choose from "
                             f"{TIMESCALE_PARTS}.")
        if any(n * 11 // 10 > self.fig3_pool for n in self.fig3_ns):
            raise ValueError(f"TimescalesConfig: fig3_pool={self.fig3_pool} must hold N + dN "
                             f"samples for every N in fig3_ns={self.fig3_ns}.")

    @classmethod
    def paper(cls, **changes: Any) -> TimescalesConfig:
        """All of MNIST, 10 MLP epochs, SI Fig. 5 on MNIST, CIFAR-10 and CIFAR-100 for 100
        epochs (one snapshot per epoch), Fig. 3 with 100 draws, SI Fig. 7 up to 10^4 images."""
        return cls(**(dict(
            n_train=None, n_test=None, mlp_epochs=10,
            cnn_datasets=("mnist", "cifar10", "cifar100"), cnn_epochs=100,
            snapshots_per_epoch=1, fig3_images=10_000, fig3_draws=100,
            fig7_images=tuple(int(v) for v in np.unique(np.logspace(1, 4, 13).astype(int))),
        ) | changes))

    @classmethod
    def smoke(cls, **changes: Any) -> TimescalesConfig:
        """Seconds: 256 / 128 images, a few SGD steps, small patch pools."""
        return cls(**(dict(
            n_train=256, n_test=128, mlp_widths=(8, 16, 8), mlp_epochs=1, evals_per_epoch=2,
            cnn_epochs=1, snapshots_per_epoch=4, fig3_images=50, fig3_pool=5000,
            fig3_ns=(250, 1000), fig3_draws=4, fig7_images=(2, 5, 10, 20),
        ) | changes))


def _pool3(x):
    return nn.max_pool(x, (3, 3), strides=(3, 3)).reshape(x.shape[0], -1)


_pool3_jit = jax.jit(_pool3)  # one program per shape (eagerly: the pool and the reshape)


@functools.partial(jax.jit, static_argnames="sizes")
def _fig2_init(key, *, sizes):
    """``(He init of sizes, fit key)`` from ``split(key)``, as one program."""
    k_init, k_fit = jax.random.split(key)
    return nets.mlp_init(k_init, sizes, init="he"), k_fit


def _spectra_eval_metrics(xte, yte, state):
    """Top singular value of every W(k) and of the products above it, and test accuracy."""
    L = len(state.params)
    s, pr = layer_spectra(state.params, top=1)
    acc = probes.accuracy(nets.mlp_apply(state.params, xte), yte)
    out = {f"sW{k + 1}": s[k, 0] for k in range(L)}
    return out | {f"sP{k + 1}": pr[k, 0] for k in range(L)} | {"val_acc": acc}


def _timescales_fig2(cfg, tr, te, key, progress):
    """Top singular values of every W(k) and of the products above it during SGD."""
    sizes = [81, *cfg.mlp_widths, tr.num_classes]
    params, k_fit = _fig2_init(key, sizes=tuple(sizes))
    xtr, xte = _pool3_jit(tr.x), _pool3_jit(te.x)
    L = len(sizes) - 1

    def loss_fn(p, batch):
        x, y = batch
        return optax.softmax_cross_entropy_with_integer_labels(nets.mlp_apply(p, x), y).mean()

    # a Partial of arrays: the test set is an input of the compiled evaluation, not a constant
    eval_fn = jax.tree_util.Partial(_spectra_eval_metrics, xte, as_device_array(te.y))

    ts = loop.optax_step(loss_fn, optax.sgd(cfg.lr))
    spe = xtr.shape[0] // cfg.batch_size
    _, hist = loop.fit(ts.step, ts.init(params), (xtr, tr.y), key=k_fit,
                       epochs=cfg.mlp_epochs, batch_size=cfg.batch_size, eval_fn=eval_fn,
                       eval_every=max(spe // cfg.evals_per_epoch, 1), eval_at_start=True,
                       progress=progress, desc="Fig. 2 MLP")
    return {"eval_step": hist["eval_step"], "steps_per_epoch": spe, "layers": L,
            **{k: np.asarray(v) for k, v in hist["eval"].items()}}


def _timescales_fig5(cfg, tr, key, progress):
    """Per-layer ``||w(t) - w(T)|| / ||w(T)||`` of :class:`Fig5CNN` trained with SGD."""
    model = Fig5CNN(num_classes=tr.num_classes)
    k_init, k_fit = jax.random.split(key)
    params = jax.jit(model.init)(k_init, tr.x[:1])["params"]  # one program, not ~40 ops

    def loss_fn(p, batch):
        x, y = batch
        return optax.softmax_cross_entropy_with_integer_labels(
            model.apply({"params": p}, x), y).mean()

    ts = loop.optax_step(loss_fn, optax.sgd(cfg.lr))
    spe = tr.x.shape[0] // cfg.batch_size
    every = max(spe // cfg.snapshots_per_epoch, 1)
    snaps, steps = [jax.device_get(params)], [0]

    def keep(t, state, metrics):
        snaps.append(jax.device_get(state.params))
        steps.append(t)

    _, hist = loop.fit(ts.step, ts.init(params), (tr.x, tr.y), key=k_fit,
                       epochs=cfg.cnn_epochs, batch_size=cfg.batch_size, chunk_size=every,
                       callback=keep, progress=progress, desc=f"SI Fig. 5 CNN ({tr.name})")
    names = ["conv1", "conv2", "dense"]
    layered = [[s[n] for n in names] for s in snaps]
    dist = distance_to_final(layered, layered[-1], relative=True)
    frac = dist / np.maximum(dist[:1], 1e-12)   # distance relative to the initial one
    # first snapshot from which a layer stays below 20% of its initial distance
    t20 = [int(steps[int(np.argmax([np.all(frac[i:, k] < 0.2) for i in range(len(steps))]))])
           for k in range(len(names))]
    return {"steps": steps, "steps_per_epoch": spe, "layers": names,
            "relative_distance": dist, "mean_fraction": frac.mean(axis=0),
            "steps_to_20pct": t20, "final_loss": float(hist["train"]["loss"][-1])}


_eq18_jit = jax.jit(eq18_variance, static_argnames=("n", "dn"))


def _timescales_fig3(cfg, tr, key):
    """``std(delta lambda) / dN`` against ``lambda / N`` for 5x5 patches (25 dims), eq. 18."""
    pt = np.asarray(extract_patches(tr.x[: cfg.fig3_images], 5)).reshape(-1, 25)
    rng = np.random.default_rng(0)
    pool = as_device_array(pt[rng.choice(pt.shape[0], min(cfg.fig3_pool, pt.shape[0]),
                                     replace=False)])
    fn = jax.jit(eigenvalue_fluctuations, static_argnames=("n", "dn", "num_draws"))
    rows = []
    for n in cfg.fig3_ns:
        dn = max(n // 10, 1)
        lam, dlam = fn(jax.random.fold_in(key, n), pool, n=n, dn=dn, num_draws=cfg.fig3_draws)
        lam_m = np.asarray(lam).mean(0)
        rows.append({"n": n, "dn": dn, "lam": lam_m, "std_dlam": np.asarray(dlam).std(0),
                     "eq18_std": np.sqrt(np.asarray(_eq18_jit(lam_m, n=n, dn=dn)))})
    x = np.concatenate([r["lam"] / r["n"] for r in rows])
    y = np.concatenate([r["std_dlam"] / r["dn"] for r in rows])
    ok = (x > 0) & (y > 0)
    ratio = np.concatenate([r["std_dlam"] / r["eq18_std"] for r in rows])
    ratio = ratio[np.isfinite(ratio) & (ratio > 0)]
    q10, q50, q90 = np.quantile(ratio, [0.1, 0.5, 0.9])
    return {"rows": rows, "loglog_slope": float(np.polyfit(np.log(x[ok]), np.log(y[ok]), 1)[0]),
            "ratio_median": float(q50), "ratio_q90_over_q10": float(q90 / q10)}


def _timescales_fig7(cfg, tr):
    """Eigenvalues of the 3x3-patch density matrix of the first ``N`` images."""
    images = sorted({min(int(n), tr.x.shape[0]) for n in cfg.fig7_images})
    pt = np.asarray(extract_patches(tr.x[: images[-1]], 3))
    per_image = pt.shape[1] * pt.shape[2]
    lam = eigenvalue_convergence(pt.reshape(-1, 9), [n * per_image for n in images])
    rel = np.abs(lam / lam[-1] - 1)
    # smallest N from which eigenvalue a stays within 10% of its value at the largest N
    within = [int(images[int(np.argmax([np.all(rel[i:, a] < 0.1) for i in range(len(images))]))])
              for a in range(lam.shape[1])]
    return {"images": images, "patches_per_image": per_image, "eigvals": lam,
            "images_within_10pct": within}


def _cached_part(checkpoint_dir, tag, fields, compute):
    """``compute()``'s JSON form, cached under ``checkpoint_dir`` by ``tag`` and ``fields``."""
    import hashlib

    h = hashlib.sha1(json.dumps(to_jsonable(fields), sort_keys=True).encode()).hexdigest()[:12]
    path = _cache_path(checkpoint_dir, f"timescales-{tag}-{h}")
    if path is not None and path.exists():
        return json.loads(path.read_text())
    out = to_jsonable(compute())
    if path is not None:
        path.write_text(json.dumps(out))
    return out


def run_timescales(config: TimescalesConfig | None = None, *, key: jax.Array, progress: bool = True,
                   checkpoint_dir: str | os.PathLike | None = None) -> Record:
    """Separation of time scales: Figs. 2 and 3, SI Figs. 5 and 7 of Dehmamy et al.

    * Fig. 2: MNIST -> 3x3 max-pool -> four dense layers (ReLU, softmax), ``N(0, 2/d_in)``
      weights, SGD: the top singular value of every ``W(k)`` and of ``prod_{m>=k} W(m)``
      (a proxy for ``A(k)``) during training; lower layers should see the larger products.
    * Fig. 3: eigenvalue changes of the 5x5-patch density matrix when ``dN`` samples are
      added to ``N``: ``std(delta lambda)/dN`` against ``lambda/N`` (eq. 18: slope 1).
    * SI Fig. 5: conv32, m, conv32, m, dense trained with SGD: each layer's distance to its
      final weights; the first layer should converge first.
    * SI Fig. 7: eigenvalues of the 3x3-patch ``rho`` of the first ``N`` images converge
      within a small subset of the data.

    The paper gives these as figures only, so rows carry no paper number (except eq. 18's
    slope); the claims are the paper's statements, checked.  With ``checkpoint_dir`` every
    finished part is cached as JSON and skipped when the same part runs again.
    """
    cfg = config or TimescalesConfig.paper()
    t0 = time.perf_counter()
    fields = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    rows: list[Row] = []
    claims: list[Claim] = []
    extra: dict[str, Any] = {}
    keys = dict(zip(TIMESCALE_PARTS, jax.random.split(key, len(TIMESCALE_PARTS))))
    def mnist():  # loaded once, when a part needs it
        return _load_cached("mnist", cfg.n_train, cfg.n_test, cfg.data_dir, "float32")

    common = {k: fields[k] for k in ("n_train", "n_test", "lr", "batch_size", "data_dir")}

    if "fig2" in cfg.parts:
        f2 = _cached_part(checkpoint_dir, "fig2", common | {
            k: fields[k] for k in ("mlp_widths", "mlp_epochs", "evals_per_epoch")},
            lambda: _timescales_fig2(cfg, *mnist(), keys["fig2"], progress))
        extra["fig2"] = f2
        rows += _fig2_rows(f2)
        claims += _fig2_claims(f2)
    if "fig3" in cfg.parts:
        f3 = _cached_part(checkpoint_dir, "fig3", {k: fields[k] for k in (
            "n_train", "data_dir", "fig3_images", "fig3_pool", "fig3_ns", "fig3_draws")},
            lambda: _timescales_fig3(cfg, mnist()[0], keys["fig3"]))
        extra["fig3"] = f3
        rows += [
            Row("Fig. 3: log-log slope of std(δλ)/δN against λ/N", f3["loglog_slope"],
                paper=1.0, tol=0.2, note="the paper's prediction (eq. 18: Var[δλ] = 2 δN λ²/N²); "
                "the figure shows the collapse, not a fitted number"),
            Row("Fig. 3: median std(δλ) / eq. 18 std", f3["ratio_median"],
                note="1 for Gaussian samples; pixel patches have heavier tails"),
        ]
        claims.append(Claim(
            "Fig. 3: scaled by eq. 18, the fluctuations of all 25 eigenvalues collapse onto one "
            "value (90th / 10th percentile of std(δλ) / eq. 18 std within 2x, over every "
            "eigenvalue and N)", f3["ratio_q90_over_q10"] <= 2.0,
            f"90th / 10th percentile {f3['ratio_q90_over_q10']:.2f}, median "
            f"{f3['ratio_median']:.2f}, N = {list(cfg.fig3_ns)}"))
    if "fig5" in cfg.parts:
        extra["fig5"] = {}
        for ds in cfg.cnn_datasets:
            try:
                tr = _load_cached(ds, cfg.n_train, cfg.n_test, cfg.data_dir, "float32")[0]
            except DatasetNotFoundError as e:
                msg = f"not run: {str(e).splitlines()[0]}"
                rows += [Row(f"SI Fig. 5 {ds}: {n} epochs to 20% of its initial distance",
                             None, unit="epochs", note=msg) for n in ("conv1", "conv2", "dense")]
                claims.append(Claim(f"SI Fig. 5 {ds}: the first layer converges first", None,
                                    msg))
                continue
            f5 = _cached_part(checkpoint_dir, f"fig5-{ds}", common | {k: fields[k] for k in (
                "cnn_epochs", "snapshots_per_epoch")} | {"dataset": ds},
                lambda tr=tr, ds=ds: _timescales_fig5(
                    cfg, tr, jax.random.fold_in(keys["fig5"], list(NUM_CLASSES).index(ds)),
                    progress))
            extra["fig5"][ds] = f5
            rows += _fig5_rows(ds, f5)
            claims.append(_fig5_claim(ds, f5))
    if "fig7" in cfg.parts:
        f7 = _cached_part(checkpoint_dir, "fig7", {k: fields[k] for k in (
            "n_train", "data_dir", "fig7_images")}, lambda: _timescales_fig7(cfg, mnist()[0]))
        extra["fig7"] = f7
        n_max = f7["images"][-1]
        rows += [Row(f"SI Fig. 7: images until eigenvalue {a + 1} stays within 10% of its "
                     f"N = {n_max} value", float(v), unit="images")
                 for a, v in enumerate(f7["images_within_10pct"])]
        worst = max(f7["images_within_10pct"])
        claims.append(Claim(
            "SI Fig. 7: the eigenvalues of rho converge on a small subset of the data (all 9 "
            f"within 10% of their N = {n_max} value from N <= {n_max // 10} images on)",
            worst <= n_max // 10, f"slowest eigenvalue from N = {worst} images "
            f"({f7['patches_per_image']} patches per image)"))

    full = TimescalesConfig.paper(data_dir=cfg.data_dir)
    scale = "paper" if cfg == full and all(r.ours is not None for r in rows) else "reduced"
    return Record(
        paper="dmn", artifact="timescales",
        title="Separation of time scales: Figs. 2, 3 and SI Figs. 5, 7", scale=scale,
        config=fields, rows=rows, claims=claims,
        note="Fig. 2's widths (81 -> 30, 100, 30 -> 10 after a 3x3 max-pool), the learning rate "
        "and the batch size are ours (the paper gives four dense layers, ReLU, Glorot/He "
        "init, SGD); SI Fig. 5 uses He-normal weights and SGD.",
        extra={"compute_s": time.perf_counter() - t0, **extra})


def _fig2_rows(f2) -> list[Row]:
    rows = []
    for kind, label in (("sW", "W({k})"), ("sP", "prod_(m>={k}) W(m)")):
        for k in range(1, f2["layers"] + 1):
            v = f2[f"{kind}{k}"]
            for when, i in (("init", 0), ("end", -1)):
                rows.append(Row(f"Fig. 2{'A' if kind == 'sW' else 'B'}: top singular value of "
                                f"{label.format(k=k)}, {when}", v[i]))
    rows.append(Row("Fig. 2: validation accuracy, end", 100 * f2["val_acc"][-1], unit="%"))
    return rows


def _fig2_claims(f2) -> list[Claim]:
    L = f2["layers"]
    w0 = [f2[f"sW{k}"][0] for k in range(1, L + 1)]
    w1 = [f2[f"sW{k}"][-1] for k in range(1, L + 1)]
    p1 = [f2[f"sP{k}"][-1] for k in range(1, L + 1)]
    fmt = ", ".join
    return [
        Claim("Fig. 2A: the top singular value of every W(k) grows during training",
              all(b > a for a, b in zip(w0, w1)),
              f"init {fmt(f'{v:.2f}' for v in w0)} -> end {fmt(f'{v:.2f}' for v in w1)}"),
        Claim("Fig. 2A: the top singular value of every W(k) ends above 2", min(w1) > 2.0,
              f"end {fmt(f'{v:.2f}' for v in w1)}"),
        Claim("Fig. 2B: the top singular value of prod_(m>=k) W(m) is larger for lower layers "
              "(decreasing in k) at the end", all(a > b for a, b in zip(p1, p1[1:])),
              f"k = 1..{L}: {fmt(f'{v:.2f}' for v in p1)}"),
    ]


def _fig5_rows(ds, f5) -> list[Row]:
    spe = f5["steps_per_epoch"]
    rows = []
    for k, n in enumerate(f5["layers"]):
        rows.append(Row(f"SI Fig. 5 {ds}: {n} relative distance to its final weights at init",
                        f5["relative_distance"][0][k]))
        rows.append(Row(f"SI Fig. 5 {ds}: {n} epochs to 20% of its initial distance",
                        f5["steps_to_20pct"][k] / spe, unit="epochs"))
    return rows


def _fig5_claim(ds, f5) -> Claim:
    m = f5["mean_fraction"]
    names = f5["layers"]
    return Claim(
        f"SI Fig. 5 {ds}: the first layer converges first (smallest mean distance to its "
        "final weights, relative to its initial one, over training)",
        m[0] < min(m[1:]),
        ", ".join(f"{n} {v:.3f} (20% after {t / f5['steps_per_epoch']:.3g} epochs)"
                  for n, v, t in zip(names, m, f5["steps_to_20pct"])))


def plot_timescales(record: Record | dict, path: str | os.PathLike) -> None:
    """Five panels from the record: Fig. 2A, 2B, Fig. 3, SI Fig. 5, SI Fig. 7."""
    ex = _rec_dict(record).get("extra", {})
    fig, axs = subplots(2, 3, figsize=(14, 7.6))
    axs = axs.ravel()
    if "fig2" in ex:
        f2 = ex["fig2"]
        for k in range(1, f2["layers"] + 1):
            axs[0].plot(f2["eval_step"], f2[f"sW{k}"], label=f"W({k})")
            axs[1].plot(f2["eval_step"], f2[f"sP{k}"], label=f"prod m>={k}")
        axs[0].axhline(2.0, color="k", lw=0.5)
        axs[0].set_title("Fig. 2A: top singular value of W(k)", fontsize=9)
        axs[1].set_title("Fig. 2B: top singular value of prod_{m>=k} W(m)", fontsize=9)
        axs[1].set_yscale("log")
        for a in axs[:2]:
            a.set_xlabel("SGD step")
            a.legend(fontsize=7)
    if "fig3" in ex:
        f3 = ex["fig3"]
        for r in f3["rows"]:
            lam, n, dn = np.asarray(r["lam"]), r["n"], r["dn"]
            axs[2].loglog(lam / n, np.asarray(r["std_dlam"]) / dn, "o", ms=3, label=f"N={n}")
            axs[2].loglog(lam / n, np.asarray(r["eq18_std"]) / dn, "k-", lw=0.5)
        axs[2].set_xlabel("λ / N")
        axs[2].set_ylabel("std(δλ) / δN")
        axs[2].set_title(f"Fig. 3: slope {f3['loglog_slope']:.2f} (eq. 18: 1; lines)",
                         fontsize=9)
        axs[2].legend(fontsize=7)
    if ex.get("fig5"):
        for j, (ds, f5) in enumerate(ex["fig5"].items()):
            ep = np.asarray(f5["steps"]) / f5["steps_per_epoch"]
            dist = np.asarray(f5["relative_distance"])
            for k, n in enumerate(f5["layers"]):
                axs[3].plot(ep, dist[:, k], color=f"C{j}", lw=0.8 + 1.0 * k,
                            label=f"{ds} {n}")
        axs[3].set_xlabel("epoch")
        axs[3].set_ylabel("||w(t) - w(T)|| / ||w(T)||")
        axs[3].set_title("SI Fig. 5: distance to the final weights (thicker: higher layer)",
                         fontsize=9)
        axs[3].legend(fontsize=6)
    if "fig7" in ex:
        f7 = ex["fig7"]
        lam = np.asarray(f7["eigvals"])
        for a in range(lam.shape[1]):
            axs[4].plot(f7["images"], lam[:, a], "o-", ms=3, label=f"λ{a + 1}")
        axs[4].set_xscale("log")
        axs[4].set_yscale("log")
        axs[4].set_xlabel("N (images; 3x3 patches)")
        axs[4].set_ylabel("eigenvalue of rho")
        axs[4].set_title("SI Fig. 7: eigenvalues converge with N", fontsize=9)
        axs[4].legend(fontsize=6, ncol=2)
    for ax, title in zip(axs, ("Fig. 2A", "Fig. 2B", "Fig. 3", "SI Fig. 5", "SI Fig. 7")):
        if not ax.has_data():
            ax.set_title(title, fontsize=9)
            ax.text(0.5, 0.5, "not run", ha="center", va="center", transform=ax.transAxes)
    axs[5].axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# ----------------------------------------------------------------------------- plots


def _rec_dict(record) -> dict:
    return record.to_dict() if hasattr(record, "to_dict") else dict(record)


def plot_table(record: Record | dict, path: str | os.PathLike) -> None:
    """Two panels per row of the table: ours (mean +- std over seeds) beside the paper's number,
    and ours - paper in points against the +-tol band (where the differences are visible)."""
    d = _rec_dict(record)
    rows = d["rows"]
    x = np.arange(len(rows))
    fig, (ax, ax2) = subplots(2, 1, figsize=(max(6, 0.45 * len(rows) + 2), 7.2),
                              sharex=True, gridspec_kw={"height_ratios": [1, 1.2]})
    ours = np.array([r["ours"] if r["ours"] is not None else np.nan for r in rows], float)
    paper = np.array([r["paper"] if r["paper"] is not None else np.nan for r in rows], float)
    spread = np.array([r["spread"] or 0.0 for r in rows], float)
    ax.bar(x - 0.2, ours, 0.4, yerr=spread, label="ours", color="C0")
    ax.bar(x + 0.2, paper, 0.4, label="paper", color="C7")
    finite = np.concatenate([ours[np.isfinite(ours)], paper[np.isfinite(paper)]])
    if finite.size:
        ax.set_ylim(max(0.0, finite.min() - 5), min(100.0, finite.max() + 2))
    for i, r in enumerate(rows):
        if r["ours"] is None:
            ax.text(i - 0.2, ax.get_ylim()[0], "not run", rotation=90, fontsize=6,
                    ha="center", va="bottom")
    ax.set_ylabel("accuracy %")
    ax.set_title(d["title"], fontsize=9)
    ax.legend(fontsize=7)
    diff = ours - paper
    tol = np.array([r["tol"] if r["tol"] is not None else np.nan for r in rows], float)
    colors = ["C2" if r["holds"] else "C3" if r["holds"] is False else "C7" for r in rows]
    ax2.bar(x, diff, 0.6, yerr=spread, color=colors)
    ax2.fill_between(np.r_[x - 0.5, x[-1:] + 0.5] if len(x) else x,
                     -np.r_[tol, tol[-1:]] if len(x) else x,
                     np.r_[tol, tol[-1:]] if len(x) else x,
                     step="post", color="C2", alpha=0.12, label="tolerance")
    ax2.axhline(0, color="k", lw=0.6)
    ax2.set_ylabel("ours - paper (points)")
    ax2.legend(fontsize=7)
    ax2.set_xticks(x, [r["name"] for r in rows], rotation=90, fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def plot_fig6(record: Record | dict, path: str | os.PathLike) -> None:
    """Accuracy vs number of filters per dataset, DMN vs ConvNet (ours), baseline dashed."""
    d = _rec_dict(record)
    dsets = list(dict.fromkeys(r["name"].split()[0] for r in d["rows"]))
    fig, axs = subplots(1, len(dsets), figsize=(4.2 * len(dsets), 3.6), squeeze=False)
    for ax, ds in zip(axs[0], dsets):
        for v, col in (("DMN", "C0"), ("ConvNet", "C2")):
            pts = [(int(r["name"].split("F=")[1].split()[0]), r["ours"], r["spread"])
                   for r in d["rows"] if r["name"].startswith(ds + " F=")
                   and f" {v} " in r["name"] and r["ours"] is not None]
            if pts:
                f, m, s = zip(*pts)
                ax.errorbar(f, m, yerr=s, fmt="o-", color=col, label=v)
        for r in d["rows"]:
            if r["name"].startswith(ds + " baseline"):
                if r["ours"] is not None:
                    ax.axhline(r["ours"], color="k", ls=":", lw=1, label="de only (ours)")
                ax.axhline(r["paper"], color="k", ls="--", lw=1, label="de only (paper)")
        ax.set_title(ds)
        ax.set_xlabel("filters F")
        ax.set_ylabel("test accuracy %")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def widths_for(
    x, y, num_classes: int, var_fractions: Sequence[float], config: DMNConfig, *,
    key: jax.Array, fraction: float = 1.0,
) -> list[int]:
    """Number of first-layer filters the selection keeps at each ``var_fraction`` (no
    cap), e.g. MNIST 3x3 patches at Var 0.85/0.95/0.99 (Table 2's d4/d6/d16)."""
    from layerlab.dmn._build import build_dmn
    from layerlab.dmn._spec import Layer

    k_noise, k_frac = jax.random.split(key)
    x = np.asarray(make_network(f"d1,de{num_classes}", num_classes, config).prepare(
        k_noise, x))
    out = []
    for v in var_fractions:
        cfg = dataclasses.replace(config, var_fraction=v, input_fraction=fraction)
        _, info = build_dmn(k_frac, (Layer("dmn_conv", 10_000),), x, y, num_classes, cfg)
        out.append(info.widths[0])
    return out
