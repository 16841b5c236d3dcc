"""DMN layers: dense and convolutional layers whose weights are class-PCA filters.

A DMN (density-matrix network) layer replaces a trained layer by the leading eigenvectors
of the class density matrices of its inputs (eqs. 15, 19-24 of Dehmamy, Rohani &
Katsaggelos, arXiv:1703.04757), with zero bias and a ReLU:

.. math::  h^{(k)} = \\mathrm{ReLU}(W^{(k)\\top} h^{(k-1)}),
   \\qquad W^{(k)} = [v_1, \\dots, v_F],\\ \\rho_c v = \\lambda v .

Convolutional DMN layers do the same on ``k x k`` patches (``k*k*C`` dims): the filters
are eigenvectors of the patch density matrices reshaped to ``[k, k, C, F]`` kernels.

Architectures are written as in the paper's tables, comma separated:

* ``d<F>``  convolutional DMN layer with ``F`` filters (3x3 patches by default),
* ``dd<F>`` dense DMN layer on the flattened input,
* ``m``     2x2 max-pooling (stride 2),
* ``c<F>``  trainable (backprop) 3x3 convolution + ReLU (flax ``nn.Conv``),
* ``bn``    trainable batch-norm (flax ``nn.BatchNorm``),
* ``de<K>`` trainable dense layer; the last one is the softmax classifier (logits).

DMN layers must come first (a closed-form layer is built on the outputs of the layers below
it, which must already be fixed); the trainable "head" follows and is trained by
``layerlab.loop.fit`` on the frozen DMN features, so the DMN part never enters
back-propagation (eqs. 25-26).
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from layerlab.data import extract_patches
from layerlab.dmn._density import (
    density_eigh,
    density_finalize,
    density_init,
    density_update,
    density_update_grouped,
    fix_signs,
    select_filters,
)

_TOKEN = re.compile(r"^(dd|de|d|c)(\d+)$")


class Layer(NamedTuple):
    """One parsed architecture token: ``kind`` in {dmn_conv, dmn_dense, pool, conv, bn,
    dense} and ``width`` (filters/units; 0 for pool and bn)."""

    kind: str
    width: int = 0


_KINDS = {"d": "dmn_conv", "dd": "dmn_dense", "c": "conv", "de": "dense"}
_NAMES = {v: k for k, v in _KINDS.items()} | {"pool": "m", "bn": "bn"}


def parse_spec(spec: str | Sequence[Layer]) -> tuple[Layer, ...]:
    """Parse an architecture string such as ``"d15, m, c80, m, de10"``.

    Args:
      spec: comma-separated tokens (see the module docstring) or already-parsed layers.

    Returns:
      A tuple of ``Layer``.
    """
    if not isinstance(spec, str):
        return tuple(Layer(*t) for t in spec)
    out = []
    for tok in spec.replace(" ", "").lower().split(","):
        if tok == "m":
            out.append(Layer("pool"))
        elif tok == "bn":
            out.append(Layer("bn"))
        else:
            m = _TOKEN.match(tok)
            if not m or int(m.group(2)) < 1:
                raise ValueError(
                    f"bad architecture token {tok!r} in {spec!r}: use d<F> (conv DMN), dd<F> "
                    "(dense DMN), m (2x2 max-pool), c<F> (trained conv), bn, de<K> (dense)."
                )
            out.append(Layer(_KINDS[m.group(1)], int(m.group(2))))
    if not out or out[-1].kind != "dense":
        raise ValueError(f"architecture {spec!r} must end with the classifier de<num_classes>.")
    return tuple(out)


def format_spec(layers: Sequence[Layer]) -> str:
    """Inverse of ``parse_spec``: ``(Layer('dmn_conv', 6), Layer('pool'), ...) -> "d6,m,..."``."""
    return ",".join(_NAMES[lay.kind] + (str(lay.width) if lay.width else "") for lay in layers)


def convnet_spec(spec: str | Sequence[Layer]) -> tuple[Layer, ...]:
    """The same architecture with every DMN layer replaced by a trainable one (d->c, dd->de)."""
    swap = {"dmn_conv": "conv", "dmn_dense": "dense"}
    return tuple(Layer(swap.get(lay.kind, lay.kind), lay.width) for lay in parse_spec(spec))


def split_spec(layers: Sequence[Layer]) -> tuple[tuple[Layer, ...], tuple[Layer, ...]]:
    """Split into the closed-form DMN prefix (DMN layers and pools) and the trainable head.

    Pools right after the last DMN layer belong to the prefix.
    """
    layers = tuple(layers)
    cut = 0
    for i, lay in enumerate(layers):
        if lay.kind in ("dmn_conv", "dmn_dense"):
            cut = i + 1
    while cut and cut < len(layers) and layers[cut].kind == "pool":  # pools after the last
        cut += 1  # DMN layer are parameter-free: precompute them with the DMN features
    prefix, head = layers[:cut], layers[cut:]
    bad = [lay for lay in prefix if lay.kind in ("conv", "bn", "dense")]
    if bad:
        raise ValueError(
            f"DMN layers must come before trainable layers, got {format_spec(layers)!r}: a "
            "closed-form layer needs fixed inputs. Put d/dd/m tokens first."
        )
    return prefix, head


# ------------------------------------------------------------------------------ apply


def max_pool_2x2(x: jax.Array) -> jax.Array:
    """2x2 max-pooling with stride 2 (VALID) on ``[..., H, W, C]``; odd edges are dropped."""
    return nn.max_pool(x, (2, 2), strides=(2, 2), padding="VALID")


def dmn_conv_apply(kernel: jax.Array, x: jax.Array, *, padding: str = "SAME") -> jax.Array:
    """Convolutional DMN layer: ``ReLU`` of the projections of every patch on the filters.

    .. math::  y[n, i, j, f] = \\mathrm{ReLU}\\Big(\\sum_{a,b,c} K[a,b,c,f]\\,
       \\tilde x[n, i + a, j + b, c]\\Big) = \\mathrm{ReLU}(P[n,i,j,:] \\cdot v_f)

    where ``P = extract_patches(x, k, padding=padding)`` and ``v_f = K[..., f].ravel()``.

    Args:
      kernel: ``[k, k, C, F]`` filters (HWIO).
      x: ``[N, H, W, C]`` images (or a single ``[H, W, C]`` image).
      padding: ``"SAME"`` (output ``H x W``, zero padding) or ``"VALID"``.

    Returns:
      ``[N, H', W', F]`` (or ``[H', W', F]``).

    References:
      Sec. "Convolutional DMN" of Dehmamy et al., arXiv:1703.04757.
    """
    single = x.ndim == 3
    xb = x[None] if single else x
    if xb.ndim != 4 or xb.shape[-1] != kernel.shape[2]:
        raise ValueError(
            f"x must be [N, H, W, C={kernel.shape[2]}] for a kernel of shape {kernel.shape}; "
            f"got {x.shape}."
        )
    y = jax.lax.conv_general_dilated(
        xb, kernel.astype(xb.dtype), (1, 1), padding.upper(),
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
    )
    y = jax.nn.relu(y)
    return y[0] if single else y


def dmn_dense_apply(w: jax.Array, x: jax.Array) -> jax.Array:
    """Dense DMN layer ``ReLU(flatten(x) @ W)``: ``W [D, F]``, ``x [N, ...]`` -> ``[N, F]``."""
    return jax.nn.relu(x.reshape(x.shape[0], -1) @ w.astype(x.dtype))


def dmn_apply(
    params: Sequence[Any], layers: Sequence[Layer], x: jax.Array, *, padding: str = "SAME"
) -> jax.Array:
    """Run a closed-form DMN prefix (``d``, ``dd`` and ``m`` layers) on a batch ``[N, H, W, C]``.

    Args:
      params: one entry per layer: ``{"w": kernel}`` for DMN layers, ``None`` for pools.
      layers: the parsed prefix (``split_spec(...)[0]``).
      x: ``[N, H, W, C]`` images.
      padding: padding of the convolutional DMN layers.

    Returns:
      The prefix's output features (``[N, H', W', F]`` or ``[N, F]``).
    """
    for lay, p in zip(layers, params, strict=True):
        if lay.kind == "dmn_conv":
            x = dmn_conv_apply(p["w"], x, padding=padding)
        elif lay.kind == "dmn_dense":
            x = dmn_dense_apply(p["w"], x)
        elif lay.kind == "pool":
            x = max_pool_2x2(x)
        else:
            raise ValueError(f"{lay.kind!r} is not a closed-form layer.")
    return x


# ------------------------------------------------------------------------------ build


@dataclasses.dataclass(frozen=True)
class DMNConfig:
    """How DMN layers are built (Table 2's columns).

    Attributes:
      pca: ``"class"`` (class-based PCA, eq. 15 per class) or ``"naive"`` (PCA of
        ``sum_c rho_c``); ``"naive_first"`` uses naive PCA for the first DMN layer only.
      var_fraction: per-class variance fraction selecting the candidates ("Var."); None =
        all eigenvectors are candidates and the token's width alone sets the count.
      cutoff: cross-class |cosine| de-duplication threshold ("Cutoff"); None disables.
      input_fraction: stratified fraction of the training set used to build ("Input").
      patch: patch size ``k`` of convolutional DMN layers.
      padding: ``"SAME"`` or ``"VALID"`` for convolutional DMN layers.
      chunk_size: images per streaming chunk while accumulating density matrices.
    """

    pca: str = "class"
    var_fraction: float | None = None
    cutoff: float | None = 0.9
    input_fraction: float = 1.0
    patch: int = 3
    padding: str = "SAME"
    chunk_size: int = 500

    def __post_init__(self):
        if self.pca not in ("class", "naive", "naive_first"):
            raise ValueError(f"pca must be 'class', 'naive' or 'naive_first'; got {self.pca!r}.")
        if self.padding.upper() not in ("SAME", "VALID"):
            raise ValueError(f"padding must be 'SAME' or 'VALID'; got {self.padding!r}.")


class BuildInfo(NamedTuple):
    """Per DMN layer: filters kept, their eigenvalues and source classes, input dim."""

    widths: list
    eigvals: list
    sources: list
    input_dims: list


def _layer_inputs(below_params, xc, *, below, kind, k, padding):
    """Inputs of a DMN layer for a chunk of images: patches ``[n, H', W', k*k*C]`` or ``[n, D]``."""
    h = dmn_apply(below_params, below, xc, padding=padding)
    if kind == "dmn_conv":
        return extract_patches(h, k, padding=padding)
    return h.reshape(h.shape[0], -1)


def _density_chunk(state, below_params, xc, yc, mc, *, below, kind, k, padding):
    """Add one chunk of images to the running density sums of the layer above ``below``."""
    h = _layer_inputs(below_params, xc, below=below, kind=kind, k=k, padding=padding)
    if h.ndim == 4:  # the patches of one image share its label: per-image Gram matrices
        return density_update_grouped(state, h.reshape(h.shape[0], -1, h.shape[-1]), yc, mc)
    return density_update(state, h, yc, mc)


# build_dmn is a host-side loop (a jit boundary, like layerlab.loop.fit): one module-level
# compiled chunk update, so repeated builds with the same shapes reuse the compilation.
_density_chunk_jit = jax.jit(_density_chunk, static_argnames=("below", "kind", "k", "padding"))


def build_dmn(
    key: jax.Array,
    layers: Sequence[Layer],
    x,
    y,
    num_classes: int,
    config: DMNConfig = DMNConfig(),
    *,
    jit: bool = True,
) -> tuple[list, BuildInfo]:
    """Build the closed-form DMN prefix layer by layer from data (host-side loop).

    For each DMN layer the class density matrices of its inputs (patches for ``d``, the
    flattened features for ``dd``) are accumulated in chunks of images, each chunk pushed
    through the already built layers below; the filters are the selected eigenvectors
    (``select_filters``), signs fixed by ``fix_signs`` (each filter fires on its class mean).

    Args:
      key: PRNG key (for the data fraction).
      layers: the parsed prefix (DMN layers and pools only).
      x: ``[N, H, W, C]`` training images.
      y: ``[N]`` integer labels.
      num_classes: ``C``.
      config: ``DMNConfig``.
      jit: compile the per-chunk work (the boundary: this is a host loop).

    Returns:
      ``(params, info)``: ``params`` a list with ``{"w": kernel [k, k, C, F]}`` (conv),
      ``{"w": [D, F]}`` (dense) or ``None`` (pool) per layer, and a ``BuildInfo``.

    References:
      Eqs. (15), (19)-(24) and Table 2 of Dehmamy et al., arXiv:1703.04757.
    """
    x = np.asarray(x, np.float32)
    y = np.asarray(y)
    if x.ndim != 4:
        raise ValueError(f"x must be images [N, H, W, C]; got shape {x.shape}.")
    if y.shape != (x.shape[0],):
        raise ValueError(f"y must have shape ({x.shape[0]},); got {y.shape}.")
    if not np.all(np.isfinite(x)):
        raise ValueError("x contains NaN or inf; clean the data before building DMN layers.")
    if config.input_fraction < 1.0:
        from layerlab.dmn._density import data_fraction_indices

        idx = data_fraction_indices(key, y, config.input_fraction)
        x, y = x[idx], y[idx]
    layers = tuple(layers)
    params: list = []
    info = BuildInfo([], [], [], [])
    k = config.patch
    padding = config.padding.upper()
    first_dmn = True
    for i, lay in enumerate(layers):
        if lay.kind == "pool":
            params.append(None)
            continue
        if lay.kind not in ("dmn_conv", "dmn_dense"):
            raise ValueError(f"build_dmn builds closed-form layers only; got {lay.kind!r}.")
        below, below_params = layers[:i], list(params)
        static = dict(below=below, kind=lay.kind, k=k, padding=padding)
        d = jax.eval_shape(
            partial(_layer_inputs, **static), below_params,
            jax.ShapeDtypeStruct((1, *x.shape[1:]), jnp.float32),
        ).shape[-1]
        upd = partial(_density_chunk_jit if jit else _density_chunk, **static)
        state = density_init(num_classes, d)
        cs = min(config.chunk_size, x.shape[0])
        for s in range(0, x.shape[0], cs):
            xc, yc = x[s : s + cs], y[s : s + cs]
            mc = np.ones(xc.shape[0], np.float32)
            if xc.shape[0] < cs:  # pad so the jitted update compiles once
                pad = cs - xc.shape[0]
                xc = np.concatenate([xc, np.zeros((pad, *xc.shape[1:]), xc.dtype)])
                yc = np.concatenate([yc, np.zeros(pad, yc.dtype)])
                mc = np.concatenate([mc, np.zeros(pad, np.float32)])
            state = upd(state, below_params, xc, yc, mc)
        rho = density_finalize(state)
        means = state.total / jnp.maximum(state.count, 1.0)[:, None]
        naive = config.pca == "naive" or (config.pca == "naive_first" and first_dmn)
        if naive:
            rho = rho.sum(0, keepdims=True)
            means = state.total.sum(0, keepdims=True) / jnp.maximum(state.n, 1.0)
        lam, vec = density_eigh(rho)
        vec = fix_signs(vec, means)
        f = select_filters(
            lam, vec, num_filters=lay.width, var_fraction=config.var_fraction,
            cutoff=None if naive else config.cutoff,
        )
        w = f.w
        if lay.kind == "dmn_conv":
            c_in = d // (k * k)
            w = w.reshape(k, k, c_in, w.shape[1])
        params.append({"w": jnp.asarray(w)})
        info.widths.append(int(f.w.shape[1]))
        info.eigvals.append(f.eigvals.tolist())
        info.sources.append(f.source.tolist())
        info.input_dims.append(int(d))
        first_dmn = False
    return params, info


# ------------------------------------------------------------------------------ head


class Head(nn.Module):
    """Trainable layers (``c``, ``bn``, ``m``, ``de``) as a flax module; last ``de`` = logits."""

    layers: tuple
    padding: str = "SAME"

    @nn.compact
    def __call__(self, x, train: bool = False):
        n_dense = sum(lay.kind == "dense" for lay in self.layers)
        seen = 0
        for lay in self.layers:
            if lay.kind == "conv":
                x = jax.nn.relu(nn.Conv(lay.width, (3, 3), padding=self.padding.upper())(x))
            elif lay.kind == "bn":
                x = nn.BatchNorm(use_running_average=not train, momentum=0.9)(x)
            elif lay.kind == "pool":
                x = max_pool_2x2(x)
            elif lay.kind == "dense":
                seen += 1
                x = nn.Dense(lay.width)(x.reshape(x.shape[0], -1))
                if seen < n_dense:
                    x = jax.nn.relu(x)
            else:
                raise ValueError(f"{lay.kind!r} layers are closed-form; build them with build_dmn.")
        return x


class HeadState(NamedTuple):
    """Training state of the head: flax ``params``, ``batch_stats`` (or {}), optax state, step."""

    params: Any
    batch_stats: Any
    opt_state: Any
    step: jax.Array


class Network(NamedTuple):
    """A DMN/hybrid/ConvNet classifier as pure functions.

    ``build(key, x, y) -> (dmn_params, info)`` (closed form), ``features(dmn_params, x)``,
    ``init_head(key, feats) -> variables``, ``head_apply(variables, feats, train=False)``
    and ``apply(params, x) -> logits`` with ``params = {"dmn": ..., "head": variables}``.
    """

    layers: tuple
    prefix: tuple
    head: Head
    build: Callable
    features: Callable
    init_head: Callable
    head_apply: Callable
    apply: Callable


def make_network(
    spec: str | Sequence[Layer], num_classes: int, config: DMNConfig = DMNConfig()
) -> Network:
    """Pure functions of a network written as in the paper, e.g. ``"d15,m,c80,m,de10"``.

    Args:
      spec: architecture string or parsed layers; must end with ``de<num_classes>``.
      num_classes: number of classes.
      config: how the DMN layers are built.

    Returns:
      A ``Network``.  For a pure ConvNet pass ``convnet_spec(spec)`` (empty DMN prefix).
    """
    layers = parse_spec(spec)
    if layers[-1].width != num_classes:
        raise ValueError(
            f"the classifier {format_spec(layers[-1:])} must have num_classes={num_classes} units."
        )
    prefix, head_layers = split_spec(layers)
    head = Head(head_layers, padding=config.padding)
    padding = config.padding

    def build(key, x, y, *, jit=True):
        return build_dmn(key, prefix, x, y, num_classes, config, jit=jit)

    def features(dmn_params, x):
        return dmn_apply(dmn_params, prefix, x, padding=padding)

    def init_head(key, feats):
        v = head.init(key, feats, train=False)
        return {"params": v["params"], "batch_stats": v.get("batch_stats", {})}

    def head_apply(variables, feats, train=False):
        v = {"params": variables["params"]}
        if variables.get("batch_stats"):
            v["batch_stats"] = variables["batch_stats"]
        return head.apply(v, feats, train=False)

    def apply(params, x):
        return head_apply(params["head"], features(params["dmn"], x))

    return Network(layers, prefix, head, build, features, init_head, head_apply, apply)


def classifier_step(net: Network, optimizer: optax.GradientTransformation):
    """``(init, step)`` training the trainable head by softmax cross-entropy.

    .. math::  L = -\\frac{1}{B} \\sum_i \\log \\mathrm{softmax}(f(h_i))_{y_i}

    ``init(variables) -> HeadState``; ``step(state, (feats, y), key) -> (state, metrics)``
    (metrics: ``loss``, ``accuracy``), batch-norm statistics updated in train mode.  Drive it
    with ``layerlab.loop.fit``.
    """

    def init(variables):
        return HeadState(variables["params"], variables.get("batch_stats", {}),
                         optimizer.init(variables["params"]), jnp.zeros((), jnp.int32))

    def loss_fn(p, stats, feats, y):
        v = {"params": p}
        if stats:
            v["batch_stats"] = stats
            logits, upd = net.head.apply(v, feats, train=True, mutable=["batch_stats"])
            stats = upd["batch_stats"]
        else:
            logits = net.head.apply(v, feats, train=True)
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
        acc = jnp.mean(jnp.argmax(logits, -1) == y)
        return loss, (stats, acc)

    def step(state, batch, key):
        del key
        feats, y = batch
        (loss, (stats, acc)), g = jax.value_and_grad(loss_fn, has_aux=True)(
            state.params, state.batch_stats, feats, y
        )
        upd, opt_state = optimizer.update(g, state.opt_state, state.params)
        params = optax.apply_updates(state.params, upd)
        return HeadState(params, stats, opt_state, state.step + 1), {"loss": loss, "accuracy": acc}

    return init, step


def head_variables(state: HeadState) -> dict:
    """The head's flax variables from a training state."""
    return {"params": state.params, "batch_stats": state.batch_stats}


def accuracy(apply_fn: Callable, variables, x, y, *, batch_size: int = 1000) -> float:
    """Classification accuracy of ``apply_fn(variables, x_batch) -> logits`` in batches.

    ``apply_fn`` should be jitted by the caller.  Returns a Python float in ``[0, 1]``.
    """
    x = np.asarray(x)
    y = np.asarray(y)
    correct = 0
    for s in range(0, x.shape[0], batch_size):
        logits = apply_fn(variables, x[s : s + batch_size])
        correct += int(np.sum(np.argmax(np.asarray(logits), -1) == y[s : s + batch_size]))
    return correct / max(x.shape[0], 1)


def map_batches(fn: Callable, x, *, batch_size: int = 1000) -> np.ndarray:
    """``concat([fn(x[i:i+b]) ...])`` as numpy: features of a large set chunk by chunk."""
    x = np.asarray(x)
    return np.concatenate(
        [np.asarray(fn(x[s : s + batch_size])) for s in range(0, x.shape[0], batch_size)]
    )
