"""LEGO (layer-wise greedy optimisation with the DGL) and DGL monitoring, via ``layerlab.loop``.

Networks are ``layerlab.nets`` MLPs ``[d_in, d, ..., d, C]`` (``L`` ReLU layers of width
``d`` and a linear classifier).  LEGO (Fig. 2, Sec. VI steps 1-5 of Ben-David & Ringel 2019):

1. train the whole net end to end with MSE (:func:`train_end_to_end`);
2. take the mean-field (MF) variances of the trained net (:func:`~layerlab.dgl.mf_variances`);
3. from the input up, train each ReLU layer alone on the DGL whose top network is the
   remaining layers plus the classifier with the MF variances (:func:`train_layer_dgl`),
   then freeze it;
4. train the linear classifier alone with MSE (:func:`fit_classifier`, closed form);
5. compare with "Random": the same classifier on the frozen *random* initial layers.

Everything is a pure function of explicit keys; the loops are ``layerlab.loop.fit``.
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import optax
from jax.typing import ArrayLike

from layerlab._checks import (  # noqa: F401
    check_array,
    check_int,
    check_key,
    check_labels,
    check_number,
    nonnegative_or_nan,
    promote_float,
)
from layerlab.data._targets import as_targets
from layerlab.loop import CheckpointMismatchError, fit, optax_step
from layerlab.loop._checkpoint import checkpoint_path
from layerlab.nets import mlp_apply

from ._kernels import (
    LayerVariances,
    _check_layer,
    _check_layer_variances,
    _check_mlp_params,
    mf_variances,
    top_kernel,
)
from ._loss import _as_2d_targets, _check_flag, _check_scalar, dgl_loss, integer_labels_error

__all__ = [
    "LegoConfig",
    "mse_loss",
    "hidden_representations",
    "train_end_to_end",
    "layer_dgl",
    "train_layer_dgl",
    "fit_classifier",
    "lego",
    "random_features",
    "monitor_fn",
]


@dataclasses.dataclass(frozen=True)
class LegoConfig:
    """Settings of LEGO's layer-wise DGL stage.

    Attributes:
      steps: Adam steps per layer.  lr: learning rate.  weight_decay: AdamW decay.
      batch_size: DGL subset size per step (``None`` = all N points; the mini-batch
        estimator of :func:`layerlab.dgl.dgl_minibatch` otherwise).
      eps_rel: ``eps^2`` relative to the mean diagonal of the top kernel.
      variance: include the LOO variance term.  ridge_rel: classifier ridge (relative).
      adam_eps: AdamW's ``eps`` (the denominator's floor, ``>= 0``); the default is optax's
        ``1e-8``.  float16 parameters need ``adam_eps >= ~1e-4``: ``1e-8`` rounds to 0 in
        float16, so the first update divides by zero (``loop.NonFiniteError``).
    """

    steps: int = 300
    lr: float = 1e-3
    weight_decay: float = 0.0
    batch_size: int | None = 512
    eps_rel: float = 0.05
    variance: bool = False
    ridge_rel: float = 1e-4
    adam_eps: float = 1e-8

    def __post_init__(self):
        fn = "LegoConfig"
        check_int(self.steps, "steps", fn=fn, min_value=0)
        check_number(self.lr, "lr", fn=fn, min_value=0.0, lo_open=True,
                     what="a learning rate")
        check_number(self.weight_decay, "weight_decay", fn=fn, min_value=0.0)
        check_int(self.batch_size, "batch_size", fn=fn, min_value=2, allow_none=True)
        check_number(self.eps_rel, "eps_rel", fn=fn, min_value=0.0,
                     what="a noise variance relative to the kernel's mean diagonal")
        check_number(self.ridge_rel, "ridge_rel", fn=fn, min_value=0.0)
        _check_flag(self.variance, "variance", fn)
        check_number(self.adam_eps, "adam_eps", fn=fn, min_value=0.0,
                     what="AdamW's eps; float16 parameters need >= ~1e-4")


def mse_loss(params: Sequence[dict[str, jax.Array]],
             batch: tuple[jax.Array, jax.Array]) -> jax.Array:
    r"""``mean_n |f(x_n) - y_n|^2`` (summed over outputs) for an MLP ``params``.

    Args:
      params: MLP params. batch: ``(x [B, d_in], y [B, C])``.
    """
    x, y = batch
    return jnp.mean(jnp.sum((mlp_apply(params, x) - y) ** 2, axis=-1))


def _num_outputs(params) -> int:
    return int(params[-1]["w"].shape[-1])


def _check_variances(variances: Any, num_layers: int, *, fn: str) -> None:
    """``variances.w_var`` and ``.b_var`` are 1-d with one entry per dense layer (static), finite
    and ``>= 0`` (eager only)."""
    if not (hasattr(variances, "w_var") and hasattr(variances, "b_var")):
        raise TypeError(f"{fn}: variances must be a LayerVariances (w_var, b_var), got "
                        f"{type(variances).__name__}.")
    shapes = {nm: jnp.shape(getattr(variances, nm)) for nm in ("w_var", "b_var")}
    if any(len(sh) != 1 or sh[0] != num_layers for sh in shapes.values()):
        got = ", ".join(f"{nm} of shape {sh}" for nm, sh in shapes.items())
        raise ValueError(
            f"{fn}: variances.w_var and variances.b_var must be 1-d with len(params_init) = "
            f"{num_layers} entries (one per dense layer of the net: the top network above "
            f"hidden layer l uses entries l..L), got {got}. Take them from the trained net "
            "of the same architecture (dgl.mf_variances(params)).")
    _check_layer_variances(variances, "variances", fn=fn)  # the values: eager only


def hidden_representations(params: Sequence[dict[str, jax.Array]], x: jax.Array) -> list[jax.Array]:
    """``[h_0 = x, h_1, ..., h_L]``: the input and every post-ReLU representation."""
    _, hidden = mlp_apply(params, x, return_hidden=True)
    return [x, *hidden]


# one program per net and input shape (op by op, ~4 primitives per layer)
_hidden_representations = jax.jit(hidden_representations)


def train_end_to_end(
    key: jax.Array,
    params: Sequence[dict[str, jax.Array]],
    x: jax.Array,
    y: jax.Array,
    *,
    optimizer: optax.GradientTransformation,
    steps: int,
    batch_size: int | None = None,
    eval_fn: Callable[[Any], dict[str, jax.Array]] | None = None,
    eval_every: int | None = None,
    progress: bool = True,
    desc: str = "end-to-end",
) -> tuple[list[dict[str, jax.Array]], dict[str, Any]]:
    """Step 1: train all layers with :func:`mse_loss` through ``layerlab.loop.fit``.

    Args:
      key: PRNG key (batches).  params: initial MLP params.  x: ``[N, d_in]``.
      y: ``[N]`` integer labels (trained against plain one-hot rows) or ``[N, C]`` targets
        (e.g. ``data.one_hot(y, C, zero_mean=True)``, the paper's MNIST encoding).
        optimizer: optax transformation (e.g. ``optax.adamw``).
      steps, batch_size: loop settings.  eval_fn(state) / eval_every: monitoring
        (e.g. :func:`monitor_fn`).

    Returns:
      ``(params, history)`` (history as returned by ``layerlab.loop.fit``).
    """
    x = _check_net_and_input(params, x, fn="train_end_to_end")  # before y's row count
    y = as_targets(y, _num_outputs(params), name="y", n=x.shape[0],
                   fn="train_end_to_end")
    ts = optax_step(mse_loss, optimizer)
    state, hist = fit(
        ts.step, ts.init(params), (x, y), key=key, steps=steps, batch_size=batch_size,
        eval_fn=eval_fn, eval_every=eval_every, eval_at_start=eval_fn is not None,
        progress=progress, desc=desc,
    )
    return state.params, hist


def _check_layer_dgl_inputs(layer, h_prev, y, top, *, fn: str):
    """:func:`layer_dgl`'s ``layer``, ``h_prev``, ``y`` and ``top`` (shapes static, variance
    values eager only); returns ``(h_prev, y [N, C], w_var [D + 1], b_var [D + 1])``.  ``fn``
    is the public function called (``layer_dgl`` or ``train_layer_dgl``)."""
    _check_layer(layer, "layer", fn=fn)
    h_prev = check_array(h_prev, "h_prev", fn=fn, ndim=2, kind="real")
    d_prev = jnp.shape(layer["w"])[0]
    if h_prev.shape[1] != d_prev:
        raise ValueError(f"{fn}: h_prev must have the layer's d_prev = {d_prev} features "
                         f"(the rows of layer['w'] {tuple(jnp.shape(layer['w']))}), got shape "
                         f"{tuple(h_prev.shape)}.")
    y = _as_2d_targets(y, h_prev.shape[0], name="y", fn=fn, of="h_prev's rows")
    w_var, b_var = _check_layer_variances(top, "top", fn=fn, scalar=True)
    return h_prev, y, w_var, b_var


def layer_dgl(
    layer: dict,
    h_prev: jax.Array,
    y: jax.Array,
    top: LayerVariances,
    *,
    eps_rel: float,
    variance: bool = False,
) -> jax.Array:
    r"""Per-sample DGL of one ReLU layer's output under a ReLU top network.

    .. math::
       \frac1N\,\mathcal L_{DGL}\big(K_{top}(\mathrm{relu}(h_{prev}W + b)),\ Y;\
       \varepsilon^2 = \epsilon_{rel}\,\overline{\operatorname{diag}K}\big)

    Args:
      layer: ``{"w": [d_prev, d], "b": [d]}``.  h_prev: ``[N, d_prev]`` frozen input.
      y: ``[N, C]`` targets (integer labels ``[N]`` are refused, as in :func:`dgl_loss`:
        one-hot them, e.g. ``layerlab.data.as_targets(y, C)``).
      top: :class:`LayerVariances` ``[D + 1]`` of the top network (layers above; finite and
        ``>= 0``, checked eagerly); 0-d ``w_var``/``b_var`` are one layer (``D = 0``, the
        linear classifier alone), as in :func:`top_kernel`.
      eps_rel: relative noise (a scalar ``>= 0``).  variance: LOO variance term.

    Returns:
      Scalar.

    References:
      Eq. (3) and Sec. VI of Ben-David & Ringel (2019).
    """
    fn = "layer_dgl"
    _check_scalar(eps_rel, "eps_rel", fn)
    check_number(eps_rel, "eps_rel", fn=fn, min_value=0.0,
                 what="a noise variance relative to the kernel's mean diagonal")
    h_prev, y, w_var, b_var = _check_layer_dgl_inputs(layer, h_prev, y, top, fn=fn)
    h = jax.nn.relu(h_prev @ layer["w"] + layer["b"][None, :])
    K = top_kernel(h, w_var=w_var, b_var=b_var)
    eps2 = nonnegative_or_nan(eps_rel) * jnp.mean(jnp.diagonal(K))  # traced < 0: NaN
    return dgl_loss(K, y, eps2=eps2, variance=variance) / h.shape[0]


def train_layer_dgl(
    key: jax.Array,
    layer: dict,
    h_prev: jax.Array,
    y: jax.Array,
    top: LayerVariances,
    cfg: LegoConfig,
    *,
    progress: bool = True,
    desc: str = "DGL layer",
    checkpoint_dir: str | os.PathLike | None = None,
    checkpoint_every: int | None = None,
) -> tuple[dict[str, jax.Array], dict[str, Any]]:
    """Step 3 for one layer: minimise :func:`layer_dgl` with AdamW (``cfg.lr``,
    ``cfg.weight_decay``, ``cfg.adam_eps``) through ``loop.fit``.

    With ``cfg.batch_size`` smaller than N each step uses the DGL of a random subset (the
    mini-batch estimator); otherwise the full-data DGL.  ``layer``, ``h_prev``, ``y`` and
    ``top`` are as in :func:`layer_dgl` (checked once, before training); ``cfg`` a
    :class:`LegoConfig`.

    Args:
      checkpoint_dir: ``loop.fit`` checkpoints of this layer's run (the layer's params and
        AdamW state, the history), saved every ``checkpoint_every`` steps and after the
        last one.  A call on a folder that holds a checkpoint of the same run (same key,
        ``layer``, ``h_prev`` ``[N, d_prev]``, ``y`` ``[N, C]``, ``top`` and ``cfg``: fit's
        fingerprint) resumes from its last step, optimizer state included, and returns what
        the uninterrupted run returns (a finished run returns at once, untrained further);
        one of another run raises ``loop.CheckpointMismatchError`` before training.
      checkpoint_every: checkpoint period in steps, a positive int (default: only after the
        last step); needs ``checkpoint_dir``.

    Returns:
      ``(layer, history)``.
    """
    if not isinstance(cfg, LegoConfig):
        raise TypeError(f"train_layer_dgl: cfg must be a LegoConfig, got "
                        f"{type(cfg).__name__}.")
    checkpoint_dir, checkpoint_every = _check_checkpoint_args(checkpoint_dir, checkpoint_every,
                                                              fn="train_layer_dgl")
    # checked here, once, naming train_layer_dgl (inside the loss they would run only while
    # fit compiles it, naming layer_dgl)
    _, _, w_var, b_var = _check_layer_dgl_inputs(layer, h_prev, y, top, fn="train_layer_dgl")
    top = LayerVariances(w_var, b_var)

    def loss(p, batch):
        hp, yb = batch
        return layer_dgl(p, hp, yb, top, eps_rel=cfg.eps_rel, variance=cfg.variance)

    ts = optax_step(loss, optax.adamw(cfg.lr, eps=cfg.adam_eps,
                                      weight_decay=cfg.weight_decay))
    bs = cfg.batch_size if cfg.batch_size and cfg.batch_size < h_prev.shape[0] else None
    state, hist = fit(
        ts.step, ts.init(layer), (h_prev, y), key=key, steps=cfg.steps, batch_size=bs,
        progress=progress, desc=desc, checkpoint_dir=checkpoint_dir,
        checkpoint_every=checkpoint_every,
    )
    return state.params, hist


def _check_checkpoint_args(checkpoint_dir, checkpoint_every, *, fn: str
                           ) -> tuple[str | None, int | None]:
    """``checkpoint_dir`` a path (``loop.fit``'s rule: a non-empty ``str``/``os.PathLike``,
    ``~`` expanded) or ``None``; ``checkpoint_every`` a positive int or ``None``, given only
    with ``checkpoint_dir``.  Returns both, the path absolute."""
    if checkpoint_dir is not None:
        checkpoint_dir = checkpoint_path(checkpoint_dir, fn, "checkpoint_dir")
    every = check_int(checkpoint_every, "checkpoint_every", fn=fn, min_value=1,
                      allow_none=True)
    if every is not None and checkpoint_dir is None:
        raise ValueError(f"{fn}: checkpoint_every={every} given without checkpoint_dir (the "
                         "folder the checkpoints go to); pass checkpoint_dir= too.")
    return checkpoint_dir, every


def _check_ridge(ridge_rel, *, fn: str) -> None:
    """``ridge_rel`` is a scalar (static) that is finite and ``>= 0`` (eager): a negative
    one gave a finite wrong classifier (or a singular system), a vector an opaque
    broadcasting error."""
    _check_scalar(ridge_rel, "ridge_rel", fn)
    check_number(ridge_rel, "ridge_rel", fn=fn, min_value=0.0,
                 what="a ridge relative to tr(H^T H) / d")


def fit_classifier(h: jax.Array, y: jax.Array, *, ridge_rel: float = 1e-4) -> dict:
    r"""Step 4: the MSE-optimal linear classifier on frozen features (ridge, closed form).

    .. math::
       [W; b] = (\tilde H^T\tilde H + \lambda I)^{-1}\tilde H^T Y,\quad \tilde H = [H, 1],\quad
       \lambda = \texttt{ridge\_rel}\cdot\operatorname{tr}(H^TH)/d

    Args:
      h: ``[N, d]`` features.  y: ``[N, C]`` targets (integer labels ``[N]`` are refused:
        they would be regressed on as the numbers 0, 1, 2, ...; one-hot them first, e.g.
        ``layerlab.data.as_targets(y, C)``, as :func:`lego` and :func:`random_features`
        do).  h and y finite (checked eagerly).  ridge_rel: relative ridge, a scalar
        ``>= 0``.

    Returns:
      ``{"w": [d, C], "b": [C]}``, in float32 or wider: integer features (uint8 pixels
      wrapped in ``H^T H``) are promoted to JAX's default float (float32; float64 under
      x64) and half-precision ones (overflow in ``H^T H``; LAPACK has no half-precision
      solve) to float32 first (float64 stays float64), as by
      :func:`layerlab._checks.promote_float`.
    """
    hc = check_array(h, "h", fn="fit_classifier", ndim=2, kind="real", finite=True)
    yc = check_array(y, "y", fn="fit_classifier", ndim=(1, 2), kind="real", finite=True)
    _check_ridge(ridge_rel, fn="fit_classifier")
    if yc.ndim == 1 and jnp.issubdtype(yc.dtype, jnp.integer):
        raise integer_labels_error(yc, "y", "fit_classifier: ")
    if yc.shape[0] != hc.shape[0]:
        raise ValueError(f"fit_classifier: y must have one row per row of h ({hc.shape[0]}), "
                         f"got shape {tuple(yc.shape)}.")
    if not (jnp.issubdtype(hc.dtype, jnp.floating) and jnp.finfo(hc.dtype).bits >= 32):
        (hc,) = promote_float(hc)  # integer or half precision; float32+ runs as passed, as always
    # traced (the caller's jit): a negative or non-finite ridge gives NaN, not a wrong head
    return _fit_classifier_core(hc, yc, nonnegative_or_nan(ridge_rel))


# One jitted program per shape (checks stay eager, before the call): called eagerly its
# ~20 primitives (the solve's LU among them) were compiled and dispatched one by one.
@jax.jit
def _fit_classifier_core(h, y, ridge_rel):
    n, d = h.shape
    Ht = jnp.concatenate([h, jnp.ones((n, 1), h.dtype)], axis=1)
    lam = ridge_rel * jnp.sum(h * h) / d + 1e-12
    A = Ht.T @ Ht + lam * jnp.eye(d + 1, dtype=h.dtype)
    W = jnp.linalg.solve(A, Ht.T @ y)
    return {"w": W[:d], "b": W[d]}


@jax.jit
def _relu_layer(layer, h):
    """A frozen ReLU layer's output ``relu(h W + b)``: ``h [N, d_prev]`` -> ``[N, d]``; one
    program per shape (op by op it was four)."""
    return jax.nn.relu(h @ layer["w"] + layer["b"][None, :])


def _check_net_and_input(params_init, x, *, fn: str) -> jax.Array:
    """``params_init`` is an MLP (a list of chaining dense layers) and ``x`` a finite
    ``[N, d_in]`` input of its width (eager checks: ``lego``, ``random_features``); returns
    ``x`` as an array."""
    x = check_array(x, "x", fn=fn, ndim=2, kind="real", finite=True)
    _check_mlp_params(params_init, "params_init", fn=fn)
    w0 = params_init[0]["w"]
    if x.shape[1] != jnp.shape(w0)[0]:
        raise ValueError(f"{fn}: x must have the net's d_in = {jnp.shape(w0)[0]} features (the "
                         f"rows of params_init[0]['w'] {tuple(jnp.shape(w0))}), got shape "
                         f"{tuple(x.shape)}; flatten images first (layerlab.data.flatten).")
    return x


def lego(
    key: jax.Array,
    params_init: Sequence[dict],
    x: jax.Array,
    y: jax.Array,
    variances: LayerVariances,
    cfg: LegoConfig,
    *,
    progress: bool = True,
    checkpoint_dir: str | os.PathLike | None = None,
    checkpoint_every: int | None = None,
) -> tuple[list[dict[str, jax.Array]], list[dict[str, Any]]]:
    """Steps 3-4 of LEGO: greedy DGL training of each ReLU layer, then the classifier.

    Args:
      key: PRNG key.  params_init: MLP params whose ReLU layers start LEGO (random init).
      x: ``[N, d_in]``.  y: ``[N]`` integer labels (plain one-hot targets) or ``[N, C]``
        targets.  variances: MF (or FIT) variances
        ``[L + 1]`` of the end-to-end trained net, one entry per dense layer of
        ``params_init`` (``len(params_init) = L + 1``; the top network above hidden layer
        ``l`` uses entries ``l..L``).  cfg: :class:`LegoConfig`.
      checkpoint_dir: where each ReLU layer ``l = 1..L`` keeps its ``loop.fit`` checkpoints,
        ``<checkpoint_dir>/layer_<l>/`` (see :func:`train_layer_dgl`); a finished layer's
        last checkpoint holds its trained params.  A rerun with the same arguments resumes:
        finished layers are restored, not retrained, the interrupted one continues from its
        last checkpoint (params and AdamW state) and the later ones train as before.  Each
        layer gets the key of an uninterrupted run, so the result (params and histories) is
        the uninterrupted run's.  A folder written by another run (other ``key``,
        ``params_init``, ``x``, ``y``, ``variances`` or ``cfg``) is refused with
        ``loop.CheckpointMismatchError`` before that layer trains.
      checkpoint_every: checkpoint period in steps within each layer, a positive int
        (default: only after each layer's last step, so an interrupted layer restarts);
        needs ``checkpoint_dir``.

    Returns:
      ``(params, histories)``: the LEGO net and one loop history per layer.

    Examples:
      Three DGL steps for the one ReLU layer of a tiny net, then the ridge classifier:

      >>> import jax
      >>> from layerlab import dgl, nets
      >>> x = jax.random.normal(jax.random.key(0), (16, 4))
      >>> y = (x[:, 0] > 0).astype(int)                              # [N] labels
      >>> p0 = nets.mlp_init(jax.random.key(1), [4, 8, 2], init="he")
      >>> cfg = dgl.LegoConfig(steps=3, batch_size=None)
      >>> params, hists = dgl.lego(jax.random.key(2), p0, x, y, dgl.mf_variances(p0), cfg,
      ...                          progress=False)
      >>> [p["w"].shape for p in params], hists[0]["train"]["loss"].shape
      ([(4, 8), (8, 2)], (3,))
      >>> loss = hists[0]["train"]["loss"]
      >>> bool(loss[-1] < loss[0])
      True

    References:
      Fig. 2 and Sec. VI of Ben-David & Ringel (2019).
    """
    if not isinstance(cfg, LegoConfig):
        raise TypeError(f"lego: cfg must be a LegoConfig, got {type(cfg).__name__}.")
    key = check_key(key, "key", fn="lego")
    checkpoint_dir, checkpoint_every = _check_checkpoint_args(checkpoint_dir, checkpoint_every,
                                                              fn="lego")
    x = _check_net_and_input(params_init, x, fn="lego")
    params = [dict(p) for p in params_init]
    _check_variances(variances, len(params), fn="lego")
    y = as_targets(y, _num_outputs(params), name="y", n=x.shape[0], fn="lego")
    y = check_array(y, "y", fn="lego", ndim=2, kind="real", finite=True)
    L = len(params) - 1
    h = x
    hists = []
    for i in range(L):
        top = LayerVariances(variances.w_var[i + 1 :], variances.b_var[i + 1 :])
        key, sub = jax.random.split(key)  # every layer's key, resumed or not
        layer_dir = None if checkpoint_dir is None else os.path.join(
            os.fspath(checkpoint_dir), f"layer_{i + 1}")
        try:
            params[i], hist = train_layer_dgl(
                sub, params[i], h, y, top, cfg, progress=progress,
                desc=f"DGL layer {i + 1}/{L}", checkpoint_dir=layer_dir,
                checkpoint_every=checkpoint_every)
        except CheckpointMismatchError as e:
            raise CheckpointMismatchError(
                f"lego: checkpoint_dir {os.fspath(checkpoint_dir)} holds the checkpoints of "
                f"another LEGO run (layer {i + 1} of {L} differs: another key, params_init, "
                "x, y, variances or cfg); rerun with the same arguments to resume, or use a "
                f"new checkpoint_dir.\n{e}") from None
        hists.append(hist)
        h = _relu_layer(params[i], h)
    params[L] = fit_classifier(h, y, ridge_rel=cfg.ridge_rel)
    return params, hists


def random_features(params_init: Sequence[dict], x: jax.Array, y: ArrayLike, *,
                    ridge_rel: float = 1e-4) -> list[dict[str, jax.Array]]:
    """Step 5 ("Random"): frozen random ReLU layers, MSE-optimal linear classifier.

    ``params_init``: MLP params (a list of ``{"w": [d_in, d_out], "b": [d_out]}`` that
    chain).  ``x``: ``[N, d_in]`` (finite).  ``y``: ``[N]`` integer labels or ``[N, C]``
    targets, as in :func:`lego`.  ``ridge_rel``: as in :func:`fit_classifier`.  All checked
    eagerly, naming ``random_features``."""
    x = _check_net_and_input(params_init, x, fn="random_features")
    _check_ridge(ridge_rel, fn="random_features")
    params = [dict(p) for p in params_init]
    y = as_targets(y, _num_outputs(params), name="y", n=x.shape[0], fn="random_features")
    h = _hidden_representations(params, x)[-1]
    params[-1] = fit_classifier(h, y, ridge_rel=ridge_rel)
    return params


def monitor_fn(x: jax.Array, y: jax.Array, *, eps_rel: float,
               variance: bool = False) -> Callable[[Any], dict[str, jax.Array]]:
    r"""``eval_fn`` for ``loop.fit``: per-sample DGL of every layer and the training MSE.

    For state params ``theta``: with MF variances ``v(theta)`` of the *current* net, returns
    ``{"mse": mean|f - y|^2, "dgl_0": ..., "dgl_L": ...}`` where ``dgl_l`` is
    ``L_DGL(K_top,l(h_l), Y) / N`` (``l = 0`` the input, the top network being the whole
    net).  Fig. 4 of Ben-David & Ringel (2019): these track the training MSE.

    Args:
      x: ``[N, d_in]`` monitoring inputs (a training subset).  y: ``[N, C]`` targets or
        ``[N]`` integer labels (plain one-hot).
      eps_rel: ``eps^2`` relative to the mean diagonal of each layer's kernel (``>= 0``).
      variance: LOO variance term.

    Returns:
      ``eval_fn(state) -> dict`` of scalars.
    """
    _check_scalar(eps_rel, "eps_rel", "monitor_fn")
    check_number(eps_rel, "eps_rel", fn="monitor_fn", min_value=0.0,
                 what="a noise variance relative to the kernel's mean diagonal")
    variance = _check_flag(variance, "variance", "monitor_fn")  # now, not mid-training

    def eval_fn(state: Any) -> dict:
        params = state.params
        yt = as_targets(y, _num_outputs(params), name="y", n=x.shape[0],
                        fn="monitor_fn")
        v = mf_variances(params)
        hs = hidden_representations(params, x)
        out = {"mse": mse_loss(params, (x, yt))}
        for i, h in enumerate(hs):
            K = top_kernel(h, w_var=v.w_var[i:], b_var=v.b_var[i:])
            eps2 = eps_rel * jnp.mean(jnp.diagonal(K))
            out[f"dgl_{i}"] = dgl_loss(K, yt, eps2=eps2, variance=variance) / h.shape[0]
        return out

    return eval_fn
