"""Reversible MLP (RevMLP) with fixed random inverted bottlenecks, its exact inverse and readout.

Conventions (read this once; every function in ``layerlab.gnrev`` follows it):

* Samples are **rows**: ``x`` has shape ``[n, d]``.  The paper writes samples as columns
  (``X`` is ``d x n``), so a paper product ``W σ(V X)`` is ``σ(x V) W`` here, with
  ``V`` stored as ``[d/2, d']`` and ``W`` as ``[d', d/2]``.
* ``x = (x1, x2)`` is split in two halves of size ``h = d / 2`` along the feature axis.
* Block ``ℓ`` (Eqs. 14–15 of Buffelli et al. 2024) is two additive half-layers::

      x1_ℓ = x1_{ℓ-1} + σ(x2_{ℓ-1} V1_ℓ) W1_ℓ + b1_ℓ       (paper: V^{(2)}_{ℓ-1}, W^{(1)}_ℓ)
      x2_ℓ = x2_{ℓ-1} + σ(x1_ℓ     V2_ℓ) W2_ℓ + b2_ℓ       (paper: V^{(1)}_ℓ,   W^{(2)}_ℓ)

  ``W`` and ``b`` are trainable, ``V`` is a fixed random "inverted bottleneck"
  (entries ``N(0, 1/d')``, as in the authors' code) of width ``d'``; without a
  bottleneck (paper §5.3) ``V`` is the identity and ``d' = h``.
* Trainable biases: the pseudo-inverse in the Gauss–Newton update is then taken of the
  augmented matrix ``[σ(x V), 1]`` (authors' code).
* ``first_linear=True`` replaces ``σ`` by the identity in the first block (authors' code);
  the default follows the paper's equations (``σ`` everywhere).
* Parameters of all blocks are stacked along a leading depth axis so that the network is a
  ``lax.scan`` over blocks.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import sys
import warnings
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import DTypeLike

from layerlab import _checks

__all__ = [
    "RevMLPFrozen",
    "revmlp_init",
    "revmlp_apply",
    "revmlp_inverse",
    "revmlp_hidden",
    "readout_init",
    "check_finite",
    "INITS",
    "rank_bounds",
    "check_rank_bounds",
]

INITS = ("xavier_uniform", "xavier_normal_relu")


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class RevMLPFrozen:
    """Fixed (non-trainable) part of a RevMLP.

    Attributes:
      v1: ``[L, h, d']`` bottleneck of the first half-layer of each block (reads ``x2``),
        or ``None`` without bottleneck (identity, ``d' = h``).
      v2: ``[L, h, d']`` bottleneck of the second half-layer (reads ``x1``), or ``None``.
      linear: ``[L]`` bool, blocks whose nonlinearity is replaced by the identity.
      activation: the nonlinearity ``σ`` (static).
    """

    v1: jax.Array | None
    v2: jax.Array | None
    linear: jax.Array
    activation: Callable = dataclasses.field(default=jax.nn.relu, metadata=dict(static=True))

    @property
    def depth(self) -> int:
        return self.linear.shape[0]


def check_finite(x, name: str, fn: str | None = None) -> None:
    """Raise ``ValueError`` if a concrete array has NaN/inf entries (no-op under tracing)."""
    _checks.check_finite(
        x, name, fn=fn,
        hint="clean the data (or lower the learning rate if it came from training).",
    )


def _check_x(x, dim: int, name: str = "x", dtype=None, fn: str | None = None) -> jax.Array:
    """``x`` as a float ``[n, dim]`` array of the parameters' ``dtype``; returns it."""
    x = _checks.check_array(x, name, fn=fn, kind="float")
    where = f"{fn}: " if fn else ""
    if dtype is not None and x.dtype != dtype:
        raise TypeError(
            f"{where}{name} has dtype {x.dtype} but the parameters are {dtype}; cast it with "
            f"{name}.astype(jnp.{jnp.dtype(dtype).name}) (the reversible blocks keep one dtype)."
        )
    if x.ndim != 2 or x.shape[1] != dim:
        raise ValueError(
            f"{where}{name} must have shape (n, {dim}) with samples as rows, got "
            f"{tuple(x.shape)}; flatten images first (layerlab.data.flatten)."
        )
    check_finite(x, name, fn=fn)
    return x


def revmlp_init(
    key: jax.Array,
    dim: int,
    depth: int,
    *,
    bottleneck: int | None = None,
    activation: Callable = jax.nn.relu,
    first_linear: bool = False,
    w_scale: float = 1.0,
    init: str = "xavier_uniform",
    dtype: DTypeLike = jnp.float32,
) -> tuple[dict, RevMLPFrozen]:
    """Initialise a RevMLP of ``depth`` reversible blocks on ``dim`` features.

    .. math::
        W \\sim \\mathcal{U}(\\pm s\\sqrt{6/(d'+d/2)})\\ \\text{or}\\
        W \\sim \\mathcal{N}(0, s^2 g^2\\, 2/(d'+d/2)),\\quad b = 0,\\quad
        V_{ij} \\sim \\mathcal{N}(0, 1/d')

    ``init="xavier_uniform"`` (variance ``2 s²/(d'+d/2)``) or ``"xavier_normal_relu"``: the
    authors' code, Xavier-normal with the ReLU gain ``g = √2`` in blocks with a nonlinearity
    and ``g = 1`` in a linear first block (variance ``2 g² s²/(d'+d/2)``, twice Xavier's in
    ReLU blocks).  ``s = w_scale`` (App. F init-variance study), zero bias (App. L), fixed
    Gaussian ``V`` (App. L).

    Args:
      key: PRNG key (``jax.random.key``).
      dim: ``d``, the feature dimension (must be even: it is split in two halves).
      depth: ``L``, number of reversible blocks (each has two half-layers).
      bottleneck: ``d'``, width of the fixed inverted bottleneck; ``None`` = no bottleneck
        (``V`` is the identity and ``d' = d/2``, paper §5.3).
      activation: ``σ``, any differentiable elementwise nonlinearity.
      first_linear: use the identity instead of ``σ`` in the first block.
      w_scale: multiplies the Xavier scale (standard deviation) of ``W``; ``> 0``.  It may be
        traced (``jit``/``vmap`` over it; checked eagerly only, a traced ``w_scale <= 0``
        gives NaN weights); a traced scale is applied in its dtype (at least float32), so
        the weights may differ from a concrete value's in the last bit.
      init: ``"xavier_uniform"`` or ``"xavier_normal_relu"`` (authors' code, App. L).
      dtype: parameter dtype, floating-point (an integer dtype is refused: the draws and
        the Gauss-Newton updates are real numbers).

    Returns:
      ``(params, frozen)``: ``params = {"w1": [L, d', h], "b1": [L, h], "w2": [L, d', h],
      "b2": [L, h]}`` (trainable, ``h = d/2``) and a :class:`RevMLPFrozen`.

    References:
      Eqs. (14)–(15) of Buffelli et al. 2024.
    """
    fn = "revmlp_init"
    key = _checks.check_key(key, fn=fn)
    dim = _checks.check_int(dim, "dim", fn=fn, min_value=2)
    if dim % 2 != 0:
        raise ValueError(
            f"{fn}: dim must be even (it is split into two halves of size dim/2), got {dim}; "
            "pad the input with one zero feature (e.g. jnp.pad(x, ((0, 0), (0, 1))))."
        )
    depth = _checks.check_int(depth, "depth (blocks)", fn=fn, min_value=1)
    dtype = _checks.check_float_dtype(dtype, "dtype", fn=fn)
    if init not in INITS:
        raise ValueError(f"{fn}: init must be one of {INITS}, got {init!r}")
    h = dim // 2
    # eager only: a traced w_scale (jit/vmap/grad over it) gives NaN weights when not > 0
    traced = not _checks.is_concrete(w_scale)
    if traced:
        if jnp.ndim(w_scale) != 0:
            raise ValueError(f"revmlp_init: w_scale must be a scalar, got shape "
                             f"{jnp.shape(w_scale)}.")
        ct = jnp.promote_types(jax.dtypes.canonicalize_dtype(dtype), jnp.float32)
        w_scale = _checks.nonnegative_or_nan(jnp.asarray(w_scale).astype(ct), positive=True)
    elif not (np.isfinite(w_scale) and w_scale > 0):
        raise ValueError(f"revmlp_init: w_scale must be a positive factor on the init's scale, "
                         f"got {w_scale!r}")
    bottleneck = _checks.check_int(bottleneck, "bottleneck (a width, or None)", fn=fn,
                                   min_value=1, allow_none=True)
    dp = h if bottleneck is None else bottleneck
    k1, k2, k3, k4 = jax.random.split(key, 4)
    # a concrete w_scale: the scales in NumPy float64, rounded once to dtype (the committed
    # records' inits); a traced one: in its dtype (may differ in the last bit)
    if init == "xavier_uniform":
        lim = w_scale * (float(np.sqrt(6.0 / (dp + h))) if traced else np.sqrt(6.0 / (dp + h)))
        w1 = jax.random.uniform(k1, (depth, dp, h), dtype, -lim, lim)
        w2 = jax.random.uniform(k2, (depth, dp, h), dtype, -lim, lim)
    else:
        gain = np.full((depth, 1, 1), np.sqrt(2.0))
        if first_linear:
            gain[0] = 1.0
        if traced:
            std = (w_scale * jnp.asarray(gain * np.sqrt(2.0 / (dp + h)), w_scale.dtype)
                   ).astype(dtype)
        else:
            std = jnp.asarray(w_scale * gain * np.sqrt(2.0 / (dp + h)), dtype)
        w1 = std * jax.random.normal(k1, (depth, dp, h), dtype)
        w2 = std * jax.random.normal(k2, (depth, dp, h), dtype)
    params = {"w1": w1, "b1": jnp.zeros((depth, h), dtype),
              "w2": w2, "b2": jnp.zeros((depth, h), dtype)}
    if bottleneck is None:
        v1 = v2 = None
    else:
        v1 = _bottleneck_init(k3, (depth, h, dp), dtype)
        v2 = _bottleneck_init(k4, (depth, h, dp), dtype)
    linear = jnp.zeros((depth,), bool).at[0].set(bool(first_linear))
    return params, RevMLPFrozen(v1=v1, v2=v2, linear=linear, activation=activation)


def _bottleneck_init(key, shape, dtype) -> jax.Array:
    """``V ~ N(0, 1/d')`` (``d' = shape[-1]``) in ``dtype``: a Gaussian draw in ``dtype``
    divided by ``sqrt(d')`` in float32 (float64 for a float64 net), cast back to ``dtype``.

    The division is done in one fixed dtype so that a float32 net gets the same ``V`` with
    and without ``jax_enable_x64`` (a NumPy ``sqrt`` would promote it to float64 under x64),
    and a bfloat16/float16 net the correctly rounded quotient.
    """
    z = jax.random.normal(key, shape, dtype)
    ct = jnp.promote_types(dtype, jnp.float32)
    return (z.astype(ct) / jnp.asarray(np.sqrt(shape[-1]), ct)).astype(dtype)


def _features(x_in, v, linear, activation):
    """``σ(x V)`` (or ``x V`` in a linear block); ``[n, h] -> [n, d']``."""
    z = x_in if v is None else x_in @ v
    return jnp.where(linear, z, activation(z))


def _block_apply(p, f, x, activation):
    """One block forward; ``p``/``f`` hold one block's slices."""
    h = x.shape[1] // 2
    x1, x2 = x[:, :h], x[:, h:]
    x1 = x1 + _features(x2, f["v1"], f["linear"], activation) @ p["w1"] + p["b1"][None, :]
    x2 = x2 + _features(x1, f["v2"], f["linear"], activation) @ p["w2"] + p["b2"][None, :]
    return jnp.concatenate([x1, x2], axis=1)


def _block_inverse(p, f, y, activation):
    """One block inverse; also returns the two feature matrices ``(a1, a2)``."""
    h = y.shape[1] // 2
    y1, y2 = y[:, :h], y[:, h:]
    a2 = _features(y1, f["v2"], f["linear"], activation)
    x2 = y2 - a2 @ p["w2"] - p["b2"][None, :]
    a1 = _features(x2, f["v1"], f["linear"], activation)
    x1 = y1 - a1 @ p["w1"] - p["b1"][None, :]
    return jnp.concatenate([x1, x2], axis=1), (a1, a2)


def _frozen_xs(frozen: RevMLPFrozen) -> dict:
    return {"v1": frozen.v1, "v2": frozen.v2, "linear": frozen.linear}


_PARAM_KEYS = ("w1", "b1", "w2", "b2")


def _params_dim(params, frozen, fn: str) -> int:
    """Static: the structure of ``params``/``frozen``; returns ``d = 2 h`` (``h`` from b1).

    ``params`` must be the dict of :func:`revmlp_init`: keys w1, b1, w2, b2 with
    ``w1, w2: [L, d', h]`` (equal shapes) and ``b1, b2: [L, h]``.  Each mismatch was silently
    broadcast by the forward pass (and trained, and given a GN step of another shape).
    """
    if not isinstance(frozen, RevMLPFrozen):
        raise TypeError(f"{fn}: frozen must be the RevMLPFrozen returned by revmlp_init, got "
                        f"{type(frozen).__name__}.")
    if not isinstance(params, dict):
        raise TypeError(f"{fn}: params must be the dict {{'w1', 'b1', 'w2', 'b2'}} returned by "
                        f"revmlp_init, got {type(params).__name__}.")
    if set(params) != set(_PARAM_KEYS):
        raise ValueError(f"{fn}: params must have exactly the keys {list(_PARAM_KEYS)} (from "
                         f"revmlp_init), got {sorted(map(str, params))}.")
    for k in _PARAM_KEYS:
        if not hasattr(params[k], "shape") or not hasattr(params[k], "dtype"):
            raise TypeError(f"{fn}: params['{k}'] must be an array, got "
                            f"{type(params[k]).__name__}.")
    b1 = params["b1"]
    if b1.ndim != 2:
        raise ValueError(f"{fn}: params['b1'] must have shape (depth={frozen.depth}, h), got "
                         f"{tuple(b1.shape)}.")
    if b1.shape[0] != frozen.depth:
        raise ValueError(f"{fn}: params['b1'] has shape {tuple(b1.shape)}, expected "
                         f"(depth={frozen.depth}, h): frozen has {frozen.depth} blocks.")
    if tuple(params["b2"].shape) != tuple(b1.shape):
        raise ValueError(f"{fn}: params['b2'] must have the shape of params['b1'] "
                         f"{tuple(b1.shape)} (depth, h), got {tuple(params['b2'].shape)}.")
    w1 = params["w1"]
    if w1.ndim != 3 or w1.shape[0] != b1.shape[0] or w1.shape[2] != b1.shape[1]:
        raise ValueError(f"{fn}: params['w1'] must have shape (depth={b1.shape[0]}, d', "
                         f"h={b1.shape[1]}), got {tuple(w1.shape)}.")
    if tuple(params["w2"].shape) != tuple(w1.shape):
        raise ValueError(f"{fn}: params['w2'] must have the shape of params['w1'] "
                         f"{tuple(w1.shape)} (depth, d', h), got {tuple(params['w2'].shape)}.")
    for k in _PARAM_KEYS:
        if params[k].dtype != b1.dtype:
            raise TypeError(f"{fn}: params['{k}'] has dtype {params[k].dtype}, expected "
                            f"{b1.dtype} like params['b1'] (one dtype for all parameters).")
    return 2 * b1.shape[1]


def _check_params(params, frozen: RevMLPFrozen, dim: int, fn: str | None = None) -> None:
    """Static: ``params`` and ``frozen`` describe one net on ``dim`` features."""
    where = f"{fn}: " if fn else ""
    h = dim // 2
    w = params["w1"]
    same = "were params and frozen made by the same revmlp_init?"
    if w.ndim != 3 or w.shape[0] != frozen.depth or w.shape[2] != h:
        raise ValueError(
            f"{where}params['w1'] has shape {tuple(w.shape)}, expected (depth={frozen.depth}, "
            f"d', {h}) for inputs of dimension {dim}; {same}"
        )
    if frozen.v1 is None:
        if w.shape[1] != h:
            raise ValueError(
                f"{where}params['w1'] has shape {tuple(w.shape)}, but without a bottleneck "
                f"(frozen.v1 is None) d' = d/2 = {h}; {same}")
        return
    for name in ("v1", "v2"):
        v = getattr(frozen, name)
        if tuple(v.shape) != (frozen.depth, h, w.shape[1]):
            raise ValueError(
                f"{where}frozen.{name} has shape {tuple(v.shape)}, expected "
                f"(depth={frozen.depth}, {h}, d'={w.shape[1]}) to match params['w1'] "
                f"{tuple(w.shape)}; {same}")
        if jnp.promote_types(v.dtype, w.dtype) != w.dtype:
            raise TypeError(
                f"{where}frozen.{name} has dtype {v.dtype}, wider than the parameters' "
                f"{w.dtype}; cast it with frozen.{name}.astype(jnp.{jnp.dtype(w.dtype).name}) "
                "(dataclasses.replace), or make both with one revmlp_init(dtype=...).")


def revmlp_apply(params: dict, frozen: RevMLPFrozen, x: jax.Array) -> jax.Array:
    """Forward pass of the reversible body (no readout).

    .. math::
        x^{(1)}_\\ell = x^{(1)}_{\\ell-1} + σ(x^{(2)}_{\\ell-1} V_1) W_1 + b_1,\\quad
        x^{(2)}_\\ell = x^{(2)}_{\\ell-1} + σ(x^{(1)}_{\\ell} V_2) W_2 + b_2

    Args:
      params: trainable pytree from :func:`revmlp_init` (``[L, ...]`` stacked).
      frozen: :class:`RevMLPFrozen`.
      x: ``[n, d]`` inputs, samples as rows.

    Returns:
      ``[n, d]`` outputs ``x_L``.

    References:
      Eqs. (14)–(15) of Buffelli et al. 2024.
    """
    dim = _params_dim(params, frozen, "revmlp_apply")
    _check_params(params, frozen, dim, fn="revmlp_apply")
    x = _check_x(x, dim, dtype=params["b1"].dtype, fn="revmlp_apply")

    def body(xc, pf):
        p, f = pf
        return _block_apply(p, f, xc, frozen.activation), None

    y, _ = lax.scan(body, x, (params, _frozen_xs(frozen)))
    return y


def revmlp_hidden(params: dict, frozen: RevMLPFrozen, x: jax.Array) -> jax.Array:
    """All block outputs ``x_0 .. x_L``; ``[L+1, n, d]`` (``[0]`` is the input).

    Used by the representation probes (CKA of each block with its initial value, Fig. 4c–e).
    Checks its arguments as :func:`revmlp_apply` does.
    """
    dim = _params_dim(params, frozen, "revmlp_hidden")
    _check_params(params, frozen, dim, fn="revmlp_hidden")
    x = _check_x(x, dim, dtype=params["b1"].dtype, fn="revmlp_hidden")

    def body(xc, pf):
        p, f = pf
        xn = _block_apply(p, f, xc, frozen.activation)
        return xn, xn

    _, hs = lax.scan(body, x, (params, _frozen_xs(frozen)))
    return jnp.concatenate([x[None], hs], axis=0)


def revmlp_inverse(params: dict, frozen: RevMLPFrozen, y: jax.Array) -> jax.Array:
    """Exact analytic inverse of :func:`revmlp_apply`.

    .. math::
        x^{(2)}_{\\ell-1} = x^{(2)}_\\ell - σ(x^{(1)}_\\ell V_2) W_2 - b_2,\\quad
        x^{(1)}_{\\ell-1} = x^{(1)}_\\ell - σ(x^{(2)}_{\\ell-1} V_1) W_1 - b_1

    Args:
      params: trainable pytree.
      frozen: :class:`RevMLPFrozen`.
      y: ``[n, d]`` outputs.

    Returns:
      ``[n, d]`` inputs ``x_0`` with ``revmlp_apply(params, frozen, x_0) == y``.

    References:
      §4.2 of Buffelli et al. 2024 (reversible blocks, Eqs. 14–15 inverted).
    """
    dim = _params_dim(params, frozen, "revmlp_inverse")
    _check_params(params, frozen, dim, fn="revmlp_inverse")
    y = _check_x(y, dim, "y", dtype=params["b1"].dtype, fn="revmlp_inverse")

    def body(yc, pf):
        p, f = pf
        xp, _ = _block_inverse(p, f, yc, frozen.activation)
        return xp, None

    x, _ = lax.scan(body, y, (params, _frozen_xs(frozen)), reverse=True)
    return x


def readout_init(key: jax.Array, dim: int, num_outputs: int,
                 dtype: DTypeLike = jnp.float32) -> jax.Array:
    """Fixed random readout ``P`` with orthonormal columns, logits ``= x_L P``.

    .. math::
        P = Q[:, :C],\\quad QR = G,\\ G_{ij} \\sim \\mathcal{N}(0,1),\\quad P^\\top P = I_C

    Because ``PᵀP = I``, an output-space target ``ε`` (``[n, C]``) becomes the body
    target ``ε Pᵀ`` (``[n, d]``), and hitting it moves the logits by exactly ``ε``.

    Args:
      key: PRNG key.
      dim: ``d``, body width.
      num_outputs: ``C`` (classes, or regression outputs); ``C <= d``.
      dtype: floating-point dtype of ``P`` (that of the RevMLP's parameters); a float16 or
        bfloat16 ``P`` is the float32 one rounded (orthonormal to that precision).

    Returns:
      ``[d, C]`` matrix with orthonormal columns.

    References:
      Authors' code of Buffelli et al. 2024 (fixed QR projection to the logits).
    """
    key = _checks.check_key(key, fn="readout_init")
    dim = _checks.check_int(dim, "dim", fn="readout_init", min_value=1)
    num_outputs = _checks.check_int(num_outputs, "num_outputs", fn="readout_init", min_value=1)
    dtype = _checks.check_float_dtype(dtype, "dtype", fn="readout_init")
    if num_outputs > dim:
        raise ValueError(
            f"readout_init: num_outputs={num_outputs} > dim={dim}: P cannot have orthonormal "
            "columns"
        )
    # float16/bfloat16: drawn and factored in float32 (XLA has no half-precision QR), then
    # cast; float32/float64 are drawn in their own dtype (the committed records' bits)
    work = jnp.promote_types(dtype, jnp.float32)
    g = jax.random.normal(key, (dim, num_outputs), work)
    q, r = jnp.linalg.qr(g)
    # fix signs so the map from G to P is continuous/deterministic
    return (q * jnp.sign(jnp.diagonal(r))[None, :]).astype(dtype)


def _bottleneck_width(frozen: RevMLPFrozen, bottleneck, fn: str) -> int:
    """``d'``: from ``frozen.v1`` (``[L, h, d']``) when there is a bottleneck, where an
    explicit ``bottleneck`` must agree; else the explicit value (``= h``)."""
    if not isinstance(frozen, RevMLPFrozen):
        raise TypeError(f"{fn}: frozen must be a RevMLPFrozen (from revmlp_init), got "
                        f"{type(frozen).__name__}.")
    bottleneck = _checks.check_int(bottleneck, "bottleneck", fn=fn, min_value=1,
                                   allow_none=True)
    if frozen.v1 is not None:
        dp = int(frozen.v1.shape[-1])
        if bottleneck is not None and bottleneck != dp:
            raise ValueError(f"{fn}: bottleneck={bottleneck} contradicts frozen.v1 of shape "
                             f"{tuple(frozen.v1.shape)} (d' = {dp}); pass None or {dp}.")
        return dp
    if bottleneck is None:
        raise ValueError(f"{fn}: a net without bottleneck (frozen.v1 is None) has d' = d/2, "
                         "which frozen does not hold; pass bottleneck=params['w1'].shape[1].")
    return bottleneck


def rank_bounds(frozen: RevMLPFrozen, bottleneck: int | None = None) -> list[int] | None:
    """Largest possible rank of each block's pseudo-inverse matrices ``[σ(x V), 1]``.

    A block with a nonlinearity has ``d' + 1`` columns (rank ``<= d' + 1``); a linear block
    computes ``x V`` from the ``h = d/2`` features of its input, so its rank is at most
    ``min(h, d') + 1`` whatever ``d'`` is (``h = d'`` without bottleneck).  The layer-wise
    update is an exact right inverse only when every bound is ``>= n`` (Prop. 4.4).

    Args:
      frozen: :class:`RevMLPFrozen`.
      bottleneck: ``d'`` (``params["w1"].shape[1]``); ``None`` reads it from ``frozen.v1``.
        Needed for a net without bottleneck (``d' = d/2``, which ``frozen`` does not hold);
        with a bottleneck it must equal ``frozen.v1.shape[-1]``.

    Returns:
      ``[L]`` ints, or ``None`` when ``frozen.linear`` is traced (not known on the host).
    """
    dp = _bottleneck_width(frozen, bottleneck, "rank_bounds")
    try:
        linear = np.asarray(frozen.linear)
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
        return None
    h = dp if frozen.v1 is None else int(frozen.v1.shape[1])
    return [(min(h, dp) if lin else dp) + 1 for lin in linear.tolist()]


def check_rank_bounds(n: int, frozen: RevMLPFrozen, bottleneck: int | None = None) -> list[int]:
    """Warn (once per call site and message) when a block's rank bound is below ``n``.

    Names every block whose ``[σ(x V), 1]`` cannot reach rank ``n`` (see :func:`rank_bounds`),
    its bound and the batch size; the update then misses its target (the ``residual``
    certificate measures by how much).  Under ``jit`` the warning is raised once, at trace
    time.  When ``frozen.linear`` is traced only the nonlinear bound ``d'+1`` is checked.

    Args:
      n: the batch size (rows of ``x``).
      frozen, bottleneck: as in :func:`rank_bounds`.

    Returns:
      the indices of the rank-deficient blocks.
    """
    n = _checks.check_int(n, "n", fn="check_rank_bounds", min_value=0)
    dp = _bottleneck_width(frozen, bottleneck, "check_rank_bounds")
    bounds = rank_bounds(frozen, dp)
    if bounds is None:
        bounds = [dp + 1] * frozen.depth
    bad = [i for i, b in enumerate(bounds) if b < n]
    if bad:
        what = ", ".join(
            f"block {i} ({'linear, ' if _is_linear(frozen, i) else ''}rank <= {bounds[i]})"
            for i in bad)
        warnings.warn(
            f"batch size n={n} exceeds the rank bound of {what}: the pseudo-inverse of "
            "[σ(xV), 1] cannot reach rank n, so the layer-wise Gauss-Newton update is not an "
            "exact right inverse (residual ‖JΔθ−ε‖/‖ε‖ > 0; see the 'residual' and 'min_rank' "
            "metrics). Use a batch n <= every bound, a bottleneck d' >= n, or no linear first "
            "block (first_linear=False).",
            UserWarning,
            stacklevel=_user_stacklevel(),
        )
    return bad


def _internal_paths() -> tuple[str, ...]:
    import jaxlib

    dirs = [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]  # layerlab/
    dirs += [os.path.dirname(os.path.abspath(m.__file__)) for m in (jax, jaxlib)]
    return tuple(d + os.sep for d in dirs)


_INTERNAL_DIRS = _internal_paths()
_INTERNAL_FILES = tuple(os.path.abspath(m.__file__) for m in (contextlib, functools))


def _user_stacklevel() -> int:
    """``stacklevel`` for a ``warnings.warn`` made by the caller of this function: the first
    frame outside layerlab, JAX and stdlib wrappers, i.e. the user's call of ``gn_direction``,
    of ``gn_step``'s step, or of ``loop.fit`` that traces it (2, the warner's caller, when
    every frame is internal)."""
    frame, level = sys._getframe(1), 1
    while frame is not None:
        name = os.path.abspath(frame.f_code.co_filename)
        if not (name.startswith(_INTERNAL_DIRS) or name in _INTERNAL_FILES):
            return level
        frame, level = frame.f_back, level + 1
    return 2


def _is_linear(frozen: RevMLPFrozen, i: int) -> bool:
    try:
        return bool(np.asarray(frozen.linear)[i])
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
        return False
