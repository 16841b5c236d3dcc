"""Small shared network definitions: a fully connected MLP as a list of ``{"w", "b"}`` dicts.

The parameter layout is deliberately plain so every paper package (and the probes) can read
the weight matrices directly::

    params = mlp_init(key, [64, 128, 10], init="he")
    logits = mlp_apply(params, x)                       # x: [n, 64] -> [n, 10]
    logits, hidden = mlp_apply(params, x, return_hidden=True)

Layer ``l`` computes

.. math::

    h_{l} = \\phi(h_{l-1} W_l + b_l), \\qquad l = 1..L-1, \\qquad
    f(x) = h_{L-1} W_L + b_L, \\qquad h_0 = x,

with ``W_l`` of shape ``[d_{l-1}, d_l]`` (row-vector convention, so a batch ``[n, d]`` is
multiplied on the right).  The last layer is linear (logits).
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import DTypeLike

from layerlab._checks import (
    check_array,
    check_float_dtype,
    check_int,
    check_key,
    check_number,
    is_concrete,
    nonnegative_or_nan,
)

__all__ = ["mlp_init", "mlp_apply", "INITS"]

INITS = ("glorot", "he", "ntk", "normal", "lecun", "torch")


def _weight_std(init: str, d_in: int, d_out: int, w_std):
    """Standard deviation of the Gaussian weights of one ``[d_in, d_out]`` layer.

    ``w_std`` is ``None`` (the init's default rule), a Python float (the product is taken in
    Python's double precision, as the committed records' inits were) or an array (a traced
    scale: the product is taken in its dtype)."""
    if init == "glorot":
        # Glorot & Bengio (2010), normal variant: Var = 2 / (fan_in + fan_out).
        base = (2.0 / (d_in + d_out)) ** 0.5
    elif init == "he":
        # He et al. (2015), Eq. (10): Var = 2 / fan_in.
        base = (2.0 / d_in) ** 0.5
    elif init in ("lecun", "torch"):
        # torch: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) has Var = 1 / (3 fan_in); the uniform
        # draw itself is in mlp_init (this is its standard deviation)
        base = (1.0 / d_in) ** 0.5 / (3.0 ** 0.5 if init == "torch" else 1.0)
    elif init == "ntk":
        # NTK parameterisation stores standard-normal weights; the 1/sqrt(fan_in) factor is
        # folded in here so mlp_apply stays a standard forward pass: W = w_std * N(0,1)/sqrt(d_in)
        # (Jacot et al. 2018, Eq. (1), in the "standard" re-parameterisation).
        base = (1.0 / d_in) ** 0.5
        return base * (1.0 if w_std is None else w_std)
    elif init == "normal":
        if w_std is None:
            raise ValueError('mlp_init(init="normal") needs an explicit w_std (the weight std).')
        return w_std
    else:
        raise ValueError(f"mlp_init: unknown init {init!r}; choose one of {INITS}.")
    return base if w_std is None else base * w_std


def mlp_init(
    key: jax.Array,
    sizes: Sequence[int],
    *,
    init: str = "glorot",
    w_std: float | None = None,
    b_std: float = 0.0,
    dtype: DTypeLike = jnp.float32,
) -> list[dict[str, jax.Array]]:
    """Gaussian (or PyTorch's uniform) initialisation of a fully connected net.

    .. math::

        W_l \\sim \\mathcal N(0, s_l^2)^{d_{l-1} \\times d_l}, \\qquad
        b_l \\sim \\mathcal N(0, \\sigma_b^2)^{d_l},

    with ``s_l = sqrt(2/(d_{l-1}+d_l))`` (glorot), ``sqrt(2/d_{l-1})`` (he),
    ``sqrt(1/d_{l-1})`` (lecun, ntk), each multiplied by ``w_std`` when given, or
    ``s_l = w_std`` for ``init="normal"``.  ``init="torch"`` is PyTorch's ``nn.Linear``
    default instead: ``W_l, b_l ~ U(-1/sqrt(d_{l-1}), 1/sqrt(d_{l-1}))`` (``kaiming_uniform``
    with ``a = sqrt 5``, so ``Var W = 1 / (3 d_{l-1})``; ``w_std`` scales ``W``, and ``b_std``
    must stay 0 because the bias law is fixed).  ``init="ntk"`` with ``w_std = sigma_w`` gives the
    neural-tangents fan-in convention ``Var(W) = sigma_w^2 / d_in`` (so the NNGP of a wide
    net matches ``layerlab.kernels.relu_nngp(..., w_var=sigma_w**2, b_var=b_std**2)``).  It
    is the *standard* parameterisation at that scale (the same draws as ``"lecun"`` times
    ``w_std``), not the NTK parameterisation (unit-variance weights with ``1/sqrt(d_in)``
    in the forward pass): the empirical NTK of such a net is not ``relu_ntk`` (it grows with
    the width); build the net with neural-tangents' ``stax`` for that comparison.

    Args:
      key: a single PRNG key (``jax.random.key``, or a raw ``jax.random.PRNGKey``); an
        integer seed is refused.
      sizes: ``[d_0, d_1, ..., d_L]`` (input width, hidden widths, output width); at least
        two entries, all positive.
      init: one of ``"glorot"``, ``"he"``, ``"lecun"``, ``"ntk"``, ``"normal"``, ``"torch"``.
      w_std: weight scale multiplier (or the absolute std for ``"normal"``), a scalar;
        ``None`` (the default) is the init's own rule.
      b_std: bias standard deviation (0 gives zero biases), a scalar.
      dtype: parameter dtype, floating-point (an integer, bool or complex dtype, or an array
        in place of a dtype, is refused with a ``TypeError``).

    Returns:
      ``L`` dicts ``{"w": [d_{l-1}, d_l], "b": [d_l]}``.

    ``w_std`` and ``b_std`` may be traced (``jax.jit``/``jax.vmap``/``jax.grad`` over them):
    they are arguments of the one compiled program, so a sweep over Python-float scales
    compiles it once.  Their checks (finite, ``>= 0``) are eager only; a traced negative or
    non-finite scale gives NaN parameters.  A concrete scale's per-layer std is computed in
    Python floats and rounded once to ``dtype``; a traced one in its own dtype (at least
    float32), so its weights may differ from the concrete value's in the last bit.  With
    ``init="torch"``, ``b_std`` must be a concrete 0.

    References:
      Glorot & Bengio (2010); He et al. (2015) Eq. (10); Jacot et al. (2018) Eq. (1);
      PyTorch ``torch.nn.Linear.reset_parameters`` (``init="torch"``).
    """
    if isinstance(sizes, (str, bytes)) or not hasattr(sizes, "__len__"):
        raise TypeError(f"mlp_init: sizes must be a list of widths [d_in, ..., d_out], got "
                        f"{sizes!r}.")
    key = check_key(key, "key", fn="mlp_init")
    sizes = [check_int(s, f"sizes[{i}]", fn="mlp_init") for i, s in enumerate(sizes)]
    for name, v in (("b_std", b_std), ("w_std", w_std)):
        check_number(v, name, fn="mlp_init", min_value=0, allow_none=name == "w_std")
        if v is not None and np.ndim(v) != 0:
            raise ValueError(f"mlp_init: {name} must be a scalar (one value for every layer), "
                             f"got shape {np.shape(v)}.")
    dtype = check_float_dtype(dtype, "dtype", fn="mlp_init")
    if len(sizes) < 2 or any(s <= 0 for s in sizes):
        raise ValueError(
            f"mlp_init: sizes must list >= 2 positive widths [d_in, ..., d_out], got {sizes}."
        )
    if init not in INITS:
        raise ValueError(f"mlp_init: unknown init {init!r}; choose one of {INITS}.")
    # the scales are arguments of the compiled program, not constants in it: one program per
    # (sizes, init, dtype, zero bias) whatever their values, and they may be traced (jit/vmap/
    # grad over w_std or b_std).  A concrete scale's per-layer std is computed here in Python
    # floats and rounded once to the parameters' dtype, as the committed records' inits were
    # (the same bits as a Python-float constant in the program); a traced one in its dtype
    # (at least float32), so it can differ from the concrete value's by one rounding.
    canon = jax.dtypes.canonicalize_dtype(dtype)
    ct = jnp.promote_types(canon, jnp.float32)
    if init == "torch":
        if not is_concrete(b_std):
            raise ValueError("mlp_init(init='torch') draws biases from U(+-1/sqrt(fan_in)); "
                             "b_std must be 0, not a traced value.")
        if b_std:
            raise ValueError(f"mlp_init(init='torch') draws biases from U(+-1/sqrt(fan_in)); "
                             f"b_std must be 0 (got {b_std}).")
    if w_std is not None:
        w_std = (float(w_std) if is_concrete(w_std)
                 else nonnegative_or_nan(jnp.asarray(w_std).astype(ct)))
    zero_bias = is_concrete(b_std) and not float(b_std)
    b_std = (jnp.asarray(float(b_std), canon) if is_concrete(b_std)
             else nonnegative_or_nan(jnp.asarray(b_std).astype(ct)).astype(canon))
    stds = []
    for d_in, d_out in zip(sizes[:-1], sizes[1:]):
        std = _weight_std(init, d_in, d_out, w_std)
        if init == "torch":
            std = 3.0 ** 0.5 * std  # U(-a, a) has std a / sqrt 3
        stds.append(jnp.asarray(std, canon) if isinstance(std, float) else std.astype(canon))
    return _mlp_init(key, tuple(stds), b_std, tuple(sizes), init, dtype, zero_bias)


def _barrier(a: jax.Array) -> jax.Array:
    # the draws stay the bits the eager ops gave (the committed records' inits): without the
    # barrier XLA fuses the scaling into the normal's inverse-erf and rounds differently
    return jax.lax.optimization_barrier(a)


@functools.partial(jax.jit, static_argnums=(3, 4, 5, 6))
def _mlp_init(key, stds, b_std, sizes, init, dtype, zero_bias):
    """:func:`mlp_init`'s draws as one program per (sizes, init, dtype, zero bias): eagerly,
    each layer's split, normal, scale and zeros were compiled separately (~1 s per new shape).
    ``stds``: one ``[]`` weight std per layer (for ``"torch"`` the uniform's half-width ``a``);
    ``b_std``: ``[]``, unused when ``zero_bias``."""
    keys = jax.random.split(key, len(sizes) - 1)
    params = []
    for k, std, d_in, d_out in zip(keys, stds, sizes[:-1], sizes[1:]):
        kw, kb = jax.random.split(k)
        if init == "torch":
            w = jax.random.uniform(kw, (d_in, d_out), dtype, -std, std)
            c = d_in ** -0.5
            params.append({"w": w, "b": jax.random.uniform(kb, (d_out,), dtype, -c, c)})
            continue
        w = std * _barrier(jax.random.normal(kw, (d_in, d_out), dtype))
        if zero_bias:
            b = jnp.zeros((d_out,), dtype)
        else:
            b = b_std * _barrier(jax.random.normal(kb, (d_out,), dtype))
        params.append({"w": w, "b": b})
    return params


def mlp_apply(
    params: Sequence[dict[str, jax.Array]],
    x: jax.Array,
    *,
    activation: Callable[[jax.Array], jax.Array] = jax.nn.relu,
    return_hidden: bool = False,
) -> jax.Array | tuple[jax.Array, list[jax.Array]]:
    """Forward pass ``f(x) = W_L^T phi(... phi(W_1^T x + b_1) ...) + b_L`` (last layer linear).

    Args:
      params: the list returned by :func:`mlp_init`.
      x: inputs ``[..., d_0]`` (any leading batch shape; ``[n, d_0]`` usually).
      activation: elementwise non-linearity applied after every layer but the last.
      return_hidden: also return the post-activation hidden representations.

    Returns:
      ``logits`` of shape ``[..., d_L]``, or ``(logits, hidden)`` where ``hidden`` is a list
      of the ``L - 1`` post-activation arrays ``[..., d_l]``.
    """
    if params is None or isinstance(params, (str, dict)) or len(params) == 0:
        raise ValueError(
            "mlp_apply: params must be the non-empty list of layers from mlp_init(key, sizes), "
            f"got {type(params).__name__}."
        )
    x = check_array(x, "x", fn="mlp_apply", kind="real", ndim=tuple(range(1, 8)))
    # every layer, layer 0 included (static shapes: checked under jit too): a hand-built layer
    # with a 1-D w or a bias of the wrong length gave a silently wrong shape or a raw
    # broadcasting error
    for i, layer in enumerate(params):
        if not (isinstance(layer, dict) and "w" in layer and "b" in layer):
            got = sorted(map(str, layer)) if isinstance(layer, dict) else type(layer).__name__
            raise TypeError(f"mlp_apply: params[{i}] (layer {i}) must be a dict {{'w': [d_in, "
                            f"d_out], 'b': [d_out]}} as mlp_init builds, got {got}.")
        w = check_array(layer["w"], f"params[{i}]['w'] (layer {i})", fn="mlp_apply", ndim=2,
                        kind="real")
        b = check_array(layer["b"], f"params[{i}]['b'] (layer {i})", fn="mlp_apply", ndim=1,
                        kind="real")
        if b.shape[0] != w.shape[1]:
            raise ValueError(f"mlp_apply: params[{i}]['b'] (layer {i}) must have d_out = "
                             f"{w.shape[1]} entries (the columns of its w {tuple(w.shape)}), "
                             f"got shape {tuple(b.shape)}.")
        prev = jnp.shape(params[i - 1]["w"]) if i else None
        if i and w.shape[0] != prev[-1]:
            raise ValueError(
                f"mlp_apply: layer {i} does not chain onto layer {i - 1}: its w has shape "
                f"{tuple(w.shape)}, layer {i - 1}'s w {prev} outputs {prev[-1]} features; each "
                "layer's w must be [d_in, d_out] with d_in the previous layer's d_out (as "
                "mlp_init(key, sizes) builds them)."
            )
    d0 = jnp.shape(params[0]["w"])[0]
    if x.shape[-1] != d0:
        raise ValueError(
            f"mlp_apply: input has {x.shape[-1]} features (shape {x.shape}) but the first layer "
            f"expects {d0}; flatten images first (layerlab.data.flatten)."
        )
    def dense(layer, h):
        z = h @ layer["w"]
        b = layer["b"]
        # explicit broadcast of the bias over the batch axes (no implicit rank promotion)
        return z + b.reshape((1,) * (z.ndim - b.ndim) + b.shape)

    h = x
    hidden = []
    for layer in params[:-1]:
        h = activation(dense(layer, h))
        hidden.append(h)
    out = dense(params[-1], h)
    if return_hidden:
        return out, hidden
    return out
