"""The trainable head after the DMN layers (flax), the network and its training step."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from layerlab import loop, probes
from layerlab._checks import (
    as_device_array,
    check_number,
    is_concrete,
    nonnegative_or_nan,
    promote_float,
)
from layerlab.dmn._apply import (
    _check_poolable,
    conv3x3,
    dmn_apply,
    max_pool_2x2,
)
from layerlab.dmn._build import DMNConfig, build_dmn
from layerlab.dmn._spec import Layer, format_spec, parse_spec, split_spec


def _float_input(x: jax.typing.ArrayLike) -> jax.Array:
    """``x`` as a float array: integer (uint8 pixels) or bool to JAX's default
    float (float32; float64 under x64), floats unchanged."""
    x = as_device_array(x)
    return x if jnp.issubdtype(x.dtype, jnp.floating) else promote_float(x)[0]


class Conv3x3(nn.Module):
    """``nn.Conv(features, (3, 3))`` with the same parameters (``kernel [3, 3, C, O]``,
    ``bias [O]``, dtype of the input) computed by :func:`layerlab.dmn.conv3x3` (one matrix
    product of the image patches on CPU, ``lax.conv`` elsewhere)."""

    features: int
    padding: str = "SAME"
    kernel_init: Callable = nn.initializers.glorot_uniform()
    im2col: bool | None = None  # conv3x3's route: None = patches on CPU, lax.conv elsewhere

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        k = self.param("kernel", self.kernel_init, (3, 3, x.shape[-1], self.features), x.dtype)
        b = self.param("bias", nn.initializers.zeros, (self.features,), x.dtype)
        return conv3x3(x, k, self.padding, im2col=self.im2col) + b.reshape(1, 1, 1, -1)


class Head(nn.Module):
    """Trainable layers (``c``, ``bn``, ``bnw``, ``m``, ``de``) as a flax module; last ``de`` =
    logits.

    Keras' defaults, as the paper used Keras: Glorot-uniform kernels, zero biases, 3x3
    convolutions with ReLU, batch-norm momentum 0.99 and epsilon 1e-3.
    """

    layers: tuple
    padding: str = "SAME"
    #: after each conv layer: ``"relu"`` (the paper) or ``"linear"`` (an ablation)
    conv_activation: str = "relu"
    #: ``True``: XLA's ``lax.conv`` and ``reduce_window`` max-pooling (what ``nn.Conv`` and
    #: ``nn.max_pool`` run) instead of the default CPU route (patch product, reshape max):
    #: same parameters and values, the reference route of ``benchmarks/dmn_fit.py``.
    lax_ops: bool = False

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
        # integer images (uint8 pixels of a ConvNet, no DMN prefix): parameters and computation
        # in JAX's default float (float32; float64 under x64); a float input keeps its dtype
        x = _float_input(x)
        n_dense = sum(lay.kind == "dense" for lay in self.layers)
        seen = 0
        init = nn.initializers.glorot_uniform()
        n_conv = 0
        for j, lay in enumerate(self.layers):
            if lay.kind == "conv":
                x = Conv3x3(lay.width, padding=self.padding.upper(), kernel_init=init,
                            name=f"Conv_{n_conv}", im2col=False if self.lax_ops else None)(x)
                if self.conv_activation == "relu":
                    x = jax.nn.relu(x)
                elif self.conv_activation != "linear":
                    raise ValueError(f"Head.conv_activation must be 'relu' or 'linear'; got "
                                     f"{self.conv_activation!r}.")
                n_conv += 1
            elif lay.kind in ("bn", "bn_col"):
                if lay.kind == "bn_col" and x.ndim != 4:
                    raise ValueError(f"bnw normalises per image column and needs [N, H, W, C] "
                                     f"features; got shape {x.shape} (after a dense layer use "
                                     "bn).")
                # bn: per channel; bn_col: per image column (NHWC axis 2), i.e. Keras'
                # BatchNormalization(axis=-1) on channels_first data
                x = nn.BatchNorm(use_running_average=not train, momentum=0.99, epsilon=1e-3,
                                 axis=-1 if lay.kind == "bn" else 2,
                                 dtype=x.dtype, param_dtype=x.dtype)(x)
            elif lay.kind == "pool":
                if x.ndim == 4:
                    _check_poolable(x.shape, f"Head: layer {j} ({format_spec([lay])}) of the "
                                             f"head {format_spec(self.layers)}")
                x = (nn.max_pool(x, (2, 2), strides=(2, 2), padding="VALID") if self.lax_ops
                     else max_pool_2x2(x))
            elif lay.kind == "dense":
                seen += 1
                x = nn.Dense(lay.width, kernel_init=init, dtype=x.dtype,
                             param_dtype=x.dtype)(x.reshape(x.shape[0], -1))
                if seen < n_dense:
                    x = jax.nn.relu(x)
            else:
                raise ValueError(f"{lay.kind!r} layers are closed-form; build them with build_dmn.")
        return x


class Network(NamedTuple):
    """A DMN/hybrid/ConvNet classifier as pure functions.

    ``prepare(key, x)`` (float images, plus the config's input noise), ``build(key, x, y) ->
    (dmn_params, info)`` (closed form), ``features(dmn_params, x)``, ``init_head(key, feats) ->
    variables``, ``head_apply(variables, feats)`` and ``apply(params, x) -> logits`` with
    ``params = {"dmn": ..., "head": variables}``.
    """

    layers: tuple
    prefix: tuple
    head: Head
    build: Callable
    features: Callable
    init_head: Callable
    head_apply: Callable
    apply: Callable
    prepare: Callable


def add_input_noise(key: jax.Array, x: jax.typing.ArrayLike, amplitude: float) -> jax.Array:
    """``x + U[0, amplitude)`` elementwise (the authors' guard against degenerate spectra);
    ``x`` unchanged when ``amplitude == 0``.  Float ``x`` keeps its dtype; integer ``x``
    (uint8 pixels) is returned in JAX's default float (float32; float64 under x64), with or
    without noise.

    ``amplitude`` may be traced (``jit``/``vmap`` over it): then the noise is always drawn
    (``amplitude = 0`` adds ``0 * U``), it is applied in ``x``'s dtype, and a negative or
    non-finite value gives NaN (its check, ``>= 0``, is eager only)."""
    check_number(amplitude, "amplitude", fn="add_input_noise", min_value=0.0)
    x = _float_input(x)
    if not is_concrete(amplitude):
        if jnp.ndim(amplitude) != 0:
            raise ValueError(f"add_input_noise: amplitude must be a scalar, got shape "
                             f"{jnp.shape(amplitude)}.")
        amplitude = nonnegative_or_nan(jnp.asarray(amplitude).astype(x.dtype))
    elif amplitude == 0:
        return x
    return x + amplitude * jax.random.uniform(key, x.shape, x.dtype)


def make_network(
    spec: str | Sequence[Layer], num_classes: int, config: DMNConfig = DMNConfig()
) -> Network:
    """Pure functions of a network written as in the paper, e.g. ``"d15,m,c80,m,de10"``.

    Args:
      spec: architecture string or parsed layers; must end with ``de<num_classes>``.
      num_classes: number of classes.
      config: how the DMN layers are built (and the padding of trained convolutions).

    Returns:
      A ``Network``.  For a pure ConvNet pass ``convnet_spec(spec)`` (empty DMN prefix).

    Examples:
      One closed-form conv layer of 3 filters (eager build: ``jit=False`` is quicker for a
      tiny data set) and a 2x2 max-pool give the features a trainable dense classifier
      (``de10``; ``net.init_head``, :func:`classifier_step`) is then trained on:

      >>> import jax
      >>> from layerlab import data, dmn
      >>> tr = data.load("digits", n=100, seed=0)                      # x [100, 8, 8, 1]
      >>> net = dmn.make_network("d3,m,de10", 10)
      >>> dmn_params, info = net.build(jax.random.key(0), tr.x, tr.y, jit=False)
      >>> net.features(dmn_params, tr.x[:5]).shape                     # [n, H/2, W/2, F]
      (5, 4, 4, 3)
    """
    try:
        layers = parse_spec(spec)
        prefix, head_layers = split_spec(layers)
    except ValueError as err:  # the spec's own message, under this function's name
        raise ValueError(f"make_network: spec: {err}") from None
    if layers[-1].width != num_classes:
        raise ValueError(
            f"make_network: the classifier {format_spec(layers[-1:])} must have "
            f"num_classes={num_classes} units; got {layers[-1].width}.")
    head = Head(head_layers, padding=config.padding, conv_activation=config.conv_activation)
    padding = config.padding

    def prepare(key, x):
        return add_input_noise(key, x, config.input_noise) if prefix else _float_input(x)

    def build(key, x, y, *, jit=True):
        return build_dmn(key, prefix, x, y, num_classes, config, jit=jit)

    def features(dmn_params, x):
        return dmn_apply(dmn_params, prefix, x, padding=padding, activation=config.activation,
                         standardize=config.standardize)

    def init_head(key, feats):
        v = head.init(key, feats, train=False)
        return {"params": v["params"], "batch_stats": v.get("batch_stats", {})}

    def head_apply(variables, feats):
        # inference: batch norm uses its running statistics (training: classifier_step)
        v = {"params": variables["params"]}
        if variables.get("batch_stats"):
            v["batch_stats"] = variables["batch_stats"]
        return head.apply(v, feats, train=False)

    def apply(params, x):
        return head_apply(params["head"], features(params["dmn"], x))

    return Network(layers, prefix, head, build, features, init_head, head_apply, apply,
                   prepare)


def classifier_step(net: Network, optimizer: optax.GradientTransformation) -> loop.TrainStep:
    """``loop.TrainStep`` training the trainable head by softmax cross-entropy.

    .. math::  L = -\\frac{1}{B} \\sum_i \\log \\mathrm{softmax}(f(h_i))_{y_i}

    ``init(variables) -> loop.TrainState`` (flax ``params`` as ``params``, ``batch_stats``
    as ``model_state``); ``step(state, (feats, y), key) -> (state, metrics)`` (metrics:
    ``loss``, ``accuracy``), batch-norm statistics updated in train mode.  Drive it with
    ``layerlab.loop.fit``.
    """

    def init(variables, hparams=None):
        return loop.TrainState(variables["params"], optimizer.init(variables["params"]),
                               jnp.zeros((), jnp.int32), hparams,
                               variables.get("batch_stats", {}))

    def loss_fn(p, stats, feats, y):
        v = {"params": p}
        if stats:
            v["batch_stats"] = stats
            logits, upd = net.head.apply(v, feats, train=True, mutable=["batch_stats"])
            stats = upd["batch_stats"]
        else:
            logits = net.head.apply(v, feats, train=True)
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
        acc = probes.accuracy(logits, y)
        return loss, (stats, acc)

    def step(state, batch, key):
        del key
        feats, y = batch
        (loss, (stats, acc)), g = jax.value_and_grad(loss_fn, has_aux=True)(
            state.params, state.model_state, feats, y
        )
        upd, opt_state = optimizer.update(g, state.opt_state, state.params)
        params = optax.apply_updates(state.params, upd)
        new = loop.TrainState(params, opt_state, state.step + 1, state.hparams, stats)
        return new, {"loss": loss, "accuracy": acc}

    return loop.TrainStep(init, step)


def head_variables(state: loop.TrainState) -> dict:
    """The head's flax variables from a training state."""
    return {"params": state.params, "batch_stats": state.model_state or {}}


def map_batches(fn: Callable, x: np.ndarray | jax.Array, *, batch_size: int = 1000) -> np.ndarray:
    """``concat([fn(x[i:i+b]) ...])`` as numpy: features of a large set chunk by chunk."""
    x = np.asarray(x)
    return np.concatenate(
        [np.asarray(fn(x[s : s + batch_size])) for s in range(0, x.shape[0], batch_size)]
    )
