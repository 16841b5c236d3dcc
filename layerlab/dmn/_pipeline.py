"""End-to-end pipelines: build DMN layers in closed form, then train the head with ``fit``.

``train_and_evaluate`` is the one function the reproduction scripts call for every table
row: for a DMN or hybrid architecture it builds the DMN prefix from (a fraction of) the
training set, computes the frozen features once, and trains only the trainable head with
``layerlab.loop.fit``; for a ConvNet (``convnet_spec``) the prefix is empty and the whole
network is trained end to end.  Wall-clock of each stage is returned.
"""
from __future__ import annotations

import functools
import time
from typing import Any

import jax
import numpy as np
import optax

from layerlab import loop
from layerlab.data._targets import as_labels
from layerlab.dmn._layers import (
    DMNConfig,
    accuracy,
    classifier_step,
    format_spec,
    head_variables,
    make_network,
    map_batches,
)


def make_optimizer(name: str, lr: float) -> optax.GradientTransformation:
    """``"adam"`` or ``"sgd"`` (momentum 0.9) with learning rate ``lr``."""
    if name == "adam":
        return optax.adam(lr)
    if name == "sgd":
        return optax.sgd(lr, momentum=0.9)
    raise ValueError(f"optimizer must be 'adam' or 'sgd'; got {name!r}.")


@functools.lru_cache(maxsize=64)
def _net_and_step(spec, num_classes, config, optimizer, lr):
    """Same arguments -> the same function objects, so a repeated run reuses compilations."""
    net = make_network(spec, num_classes, config)
    return net, classifier_step(net, make_optimizer(optimizer, lr))


@functools.lru_cache(maxsize=128)
def _jitted(fn):
    return jax.jit(fn)


def train_and_evaluate(
    spec,
    x_train,
    y_train,
    x_val,
    y_val,
    num_classes: int,
    *,
    key: jax.Array,
    config: DMNConfig = DMNConfig(),
    optimizer: str = "adam",
    lr: float = 1e-3,
    epochs: int = 5,
    batch_size: int = 128,
    eval_every_epoch: bool = False,
    progress: bool = True,
    train_eval_n: int = 5000,
) -> dict[str, Any]:
    """Build, train and evaluate one architecture; return accuracies and wall-clock.

    Args:
      spec: architecture string (``"d6,m,de10"``, ``"c6,m,de10"``, ...).
      x_train: ``[N, H, W, C]`` training images; ``y_train`` ``[N]`` integer labels in
        ``[0, num_classes)`` (or ``[N, num_classes]`` one-hot rows).
      x_val: ``[M, H, W, C]`` validation images; ``y_val`` ``[M]`` labels (or one-hot).
      num_classes: ``C``.
      key: PRNG key (data fraction, head init, data order).
      config: how DMN layers are built.
      optimizer: ``"adam"`` or ``"sgd"``; ``lr``: its learning rate.
      epochs / batch_size: head training length.
      eval_every_epoch: record validation accuracy and wall-clock after every epoch
        (``curve``), for time-to-accuracy comparisons.
      progress: show the loop's progress bar.
      train_eval_n: training accuracy is measured on the first ``train_eval_n`` samples.

    Returns:
      dict with ``spec``, ``widths`` (DMN filters kept), ``build_s``, ``features_s``,
      ``train_s``, ``total_s``, ``train_acc``, ``val_acc``, ``curve`` (list of
      ``(epoch, seconds_since_start, val_acc)``) and ``final_loss``.
    """
    y_train = as_labels(y_train, num_classes, name="y_train", n=len(x_train))
    y_val = as_labels(y_val, num_classes, name="y_val", n=len(x_val))
    k_build, k_init, k_fit = jax.random.split(key, 3)
    spec = spec if isinstance(spec, str) else tuple(spec)
    net, (init, step) = _net_and_step(spec, num_classes, config, optimizer, lr)
    t0 = time.perf_counter()
    dmn_params, info = net.build(k_build, x_train, y_train)
    t_build = time.perf_counter() - t0
    feat = _jitted(net.features)
    f_tr = map_batches(lambda xb: feat(dmn_params, xb), x_train) if net.prefix else x_train
    f_val = map_batches(lambda xb: feat(dmn_params, xb), x_val) if net.prefix else x_val
    t_feat = time.perf_counter() - t0 - t_build
    variables = net.init_head(k_init, f_tr[:2])
    state = init(variables)
    predict = _jitted(net.head_apply)
    curve: list = []
    bs = min(batch_size, f_tr.shape[0])
    spe = f_tr.shape[0] // bs
    t_start = time.perf_counter()

    def callback(t, st, metrics):
        if eval_every_epoch and t % spe == 0:
            acc = accuracy(predict, head_variables(st), f_val, y_val)
            curve.append((t // spe, time.perf_counter() - t0, acc))

    state, hist = loop.fit(
        step, state, (f_tr, np.asarray(y_train)), key=k_fit, epochs=epochs, batch_size=bs,
        progress=progress, desc=format_spec(net.layers), callback=callback,
        chunk_size=spe if eval_every_epoch else None,
    )
    jax.block_until_ready(state)
    t_train = time.perf_counter() - t_start
    v = head_variables(state)
    val_acc = accuracy(predict, v, f_val, y_val)
    train_acc = accuracy(predict, v, f_tr[:train_eval_n], np.asarray(y_train)[:train_eval_n])
    return {
        "spec": format_spec(net.layers),
        "pca": config.pca if net.prefix else None,
        "optimizer": optimizer,
        "widths": info.widths,
        "build_s": t_build,
        "features_s": t_feat,
        "train_s": t_train,
        "total_s": time.perf_counter() - t0,
        "train_acc": train_acc,
        "val_acc": val_acc,
        "curve": curve,
        "final_loss": float(np.asarray(hist["train"]["loss"])[-1]),
        "epochs": epochs,
        "n_train": int(np.shape(x_train)[0]),
        "n_val": int(np.shape(x_val)[0]),
    }
