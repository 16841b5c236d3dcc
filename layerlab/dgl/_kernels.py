"""Top-network kernels for the DGL: NNGP of the layers above a trainee layer, MF and FIT.

Conventions.  ``layerlab.kernels.relu_nngp`` uses the fan-in convention
``K^0(h, h') = b_var[0] + w_var[0] * h.h' / d``; the paper's eq. (2) writes
``K^0 = sigma_b^2 + sigma_w^2 h.h'`` with ``sigma_w^2`` the variance of one weight.  The two
agree with ``w_var = d_in * sigma_w^2`` (``d_in`` = fan-in of that layer) and
``b_var = sigma_b^2``.  Everything here uses ``w_var``/``b_var`` in the fan-in convention.

Networks are ``layerlab.nets`` MLPs: a list of ``{"w": [d_in, d_out], "b": [d_out]}``;
layers ``0..L-1`` are followed by ReLU, layer ``L`` is the linear classifier.  The
representation of hidden layer ``l`` (``l = 1..L``; ``l = 0`` is the input) is
``h_l = relu(h_{l-1} W + b)``; the network *above* ``h_l`` is layers ``l..L``, whose NNGP is
``relu_nngp(h_l, depth=L - l, w_var=w_var[l:], b_var=b_var[l:])``.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from layerlab._checks import (
    check_array,
    check_int,
    check_key,
    check_number,
    is_concrete,
    promote_float,
)
from layerlab.kernels._closed_form import _fc_kernels

__all__ = [
    "LayerVariances",
    "top_kernel",
    "top_kernel_fn",
    "stax_kernel_fn",
    "mf_variances",
    "sample_relu_outputs",
    "mc_covariance",
    "fit_variances",
]


def _variance_vector(v, name: str, *, fn: str, length: int | None = None,
                     scalar: bool = False) -> jax.Array:
    """Per-layer prior variances ``v`` (fan-in convention) as a 1-d array; returns it.

    Static (also under ``jit``): a real array of rank 1, of ``length`` entries when given.
    With ``scalar=True`` also one value for every layer: rank 0, or one entry when ``length``
    is given (returned as given; the caller broadcasts).  Eager only: finite and ``>= 0``
    (each is a variance; a negative or infinite one gave NaN draws or kernels).
    """
    v = check_array(v, name, fn=fn, kind="real")
    one = scalar and (v.ndim == 0 or (v.ndim == 1 and v.shape[0] == 1))
    if not one and (
            v.ndim != 1 or (length is not None and v.shape[0] != length) or v.shape[0] == 0):
        want = "one value for every layer (a scalar or 1 entry) or " if scalar else ""
        size = ("at least one entry" if length is None else
                f"{length} {'entry' if length == 1 else 'entries'}")
        raise ValueError(f"{fn}: {name} must be {want}1-d with {size} (one variance per dense "
                         f"layer), got shape {tuple(v.shape)}.")
    check_number(v, name, fn=fn, min_value=0.0,
                 what="a variance per layer, fan-in convention")  # eager only
    return v


def _check_layer_variances(v, name: str, *, fn: str,
                           scalar: bool = False) -> tuple[jax.Array, jax.Array]:
    """``v.w_var`` and ``v.b_var``: 1-d of one equal length (static), finite and >= 0
    (eager only); returned 1-d.  With ``scalar=True`` a 0-d one is taken as one entry (as
    :func:`top_kernel` takes it: ``jnp.atleast_1d``)."""
    if not (hasattr(v, "w_var") and hasattr(v, "b_var")):
        raise TypeError(f"{fn}: {name} must be a LayerVariances(w_var, b_var), got "
                        f"{type(v).__name__}.")
    if scalar:
        w = jnp.atleast_1d(check_array(v.w_var, f"{name}.w_var", fn=fn, kind="real"))
        b = jnp.atleast_1d(check_array(v.b_var, f"{name}.b_var", fn=fn, kind="real"))
    else:
        w, b = v.w_var, v.b_var
    w = _variance_vector(w, f"{name}.w_var", fn=fn)
    b = _variance_vector(b, f"{name}.b_var", fn=fn, length=w.shape[0])
    return w, b


def _check_layer(p, name: str, *, fn: str) -> None:
    """``p`` is one dense layer ``{"w": [d_in, d_out], "b": [d_out]}``; static (shapes only,
    also under ``jit``).  ``name`` is the user's name for it (``layer``, ``params[2]``)."""
    if not (isinstance(p, dict) and "w" in p and "b" in p):
        got = sorted(map(str, p)) if isinstance(p, dict) else type(p).__name__
        raise TypeError(f"{fn}: {name} must be a dict {{'w': [d_in, d_out], 'b': "
                        f"[d_out]}}, got {got}.")
    w = check_array(p["w"], f"{name}['w']", fn=fn, ndim=2, kind="real")
    b = check_array(p["b"], f"{name}['b']", fn=fn, ndim=1, kind="real")
    if b.shape[0] != w.shape[1]:
        raise ValueError(f"{fn}: {name}['b'] must have d_out = {w.shape[1]} entries "
                         f"(the columns of {name}['w'] {tuple(w.shape)}), got shape "
                         f"{tuple(b.shape)}.")


def _check_mlp_params(params, name: str, *, fn: str) -> None:
    """``params`` is a non-empty list of ``{"w": [d_in, d_out], "b": [d_out]}`` layers that
    chain (``layerlab.nets.mlp_init``'s layout); static (shapes only, also under ``jit``)."""
    if isinstance(params, (dict, str, bytes)) or not isinstance(params, Sequence):
        raise TypeError(f"{fn}: {name} must be a list of layers {{'w': [d_in, d_out], 'b': "
                        f"[d_out]}} (layerlab.nets.mlp_init), got {type(params).__name__}.")
    if len(params) == 0:
        raise ValueError(f"{fn}: {name} must hold at least one layer, got an empty "
                         f"{type(params).__name__}.")
    for i, p in enumerate(params):
        _check_layer(p, f"{name}[{i}]", fn=fn)
        w = p["w"]
        if i and jnp.shape(w)[0] != jnp.shape(params[i - 1]["w"])[1]:
            raise ValueError(f"{fn}: {name}[{i}]['w'] has d_in = {jnp.shape(w)[0]} rows but "
                             f"{name}[{i - 1}]['w'] has d_out = "
                             f"{jnp.shape(params[i - 1]['w'])[1]} columns: not one MLP.")


class LayerVariances(NamedTuple):
    """Per-layer prior variances in the fan-in convention.

    Attributes:
      w_var: ``[L + 1]`` weight variances times fan-in (entry ``i`` for params[i]).
      b_var: ``[L + 1]`` bias variances.
    """

    w_var: jax.Array
    b_var: jax.Array


def top_kernel(
    h: jax.Array, h2: jax.Array | None = None, *, w_var: ArrayLike, b_var: ArrayLike
) -> jax.Array:
    r"""NNGP kernel of the ReLU top network (``len(w_var) - 1`` ReLU layers + linear output).

    .. math::
       K^0 = \sigma_{b,0}^2 + \sigma_{w,0}^2\, h\cdot h'/d,\quad
       K^l = \sigma_{b,l}^2 + \frac{\sigma_{w,l}^2}{2\pi}\sqrt{K^{l-1}_{hh}K^{l-1}_{h'h'}}
       \,(\sin\Theta + (\pi-\Theta)\cos\Theta)

    Args:
      h: ``[N, d]`` representations of the trainee layer.
      h2: optional ``[M, d]`` second set (default ``h``).  For the symmetric kernel pass
        ``None`` (or omit it): ``top_kernel(h, h)`` is recognised only eagerly (the same
        object); under ``jit``/``vmap`` it is computed as a cross kernel, with a float32
        error near the diagonal of ~1e-4 relative per ReLU layer, at most 2e-4 per layer (see
        :func:`layerlab.kernels.fc_kernels`).
      w_var, b_var: ``[D + 1]`` variances of the top network's dense layers (fan-in
        convention); ``D = 0`` is the linear classifier alone, ``K = b + w h.h'/d``.

    Returns:
      ``[N, M]`` kernel.

    References:
      Eq. (2) of Ben-David & Ringel (2019); Cho & Saul (2009).
    """
    fn = "top_kernel"
    h = check_array(h, "h", fn=fn, ndim=2, kind="real")
    h2 = check_array(h2, "h2", fn=fn, ndim=2, kind="real", allow_none=True)
    if h2 is not None and h2.shape[1] != h.shape[1]:
        raise ValueError(f"{fn}: h2 must have the feature dimension d = {h.shape[1]} of h, got "
                         f"shape {tuple(h2.shape)}.")
    w_var = jnp.atleast_1d(check_array(w_var, "w_var", fn=fn, kind="real"))
    b_var = jnp.atleast_1d(check_array(b_var, "b_var", fn=fn, kind="real"))
    if w_var.shape != b_var.shape or w_var.ndim != 1:
        raise ValueError(
            f"{fn}: w_var and b_var must be 1-d of equal length (depth + 1), got shapes "
            f"{tuple(w_var.shape)} and {tuple(b_var.shape)}."
        )
    for name, v in (("w_var", w_var), ("b_var", b_var)):
        check_number(v, name, fn=fn, min_value=0.0,
                     what="a variance per layer, fan-in convention")  # eager only
    # relu_nngp's own route, its messages naming top_kernel and h/h2 (it checks h and h2 are
    # finite, eagerly: once, not here again)
    return _fc_kernels(h, h2, depth=w_var.shape[0] - 1, w_var=w_var, b_var=b_var,
                       activation="relu", diagonal=False, return_all_layers=False,
                       with_ntk=False, fn=fn, names=("h", "h2")).nngp


def top_kernel_fn(w_var: ArrayLike, b_var: ArrayLike) -> Callable[[jax.Array], jax.Array]:
    """``h [N, d] -> K [N, N]`` closure of :func:`top_kernel` (for ``dgl_features`` etc.)."""
    return lambda h: top_kernel(h, w_var=w_var, b_var=b_var)


def stax_kernel_fn(kernel_fn: Callable) -> Callable[[jax.Array], jax.Array]:
    """Adapt a neural-tangents ``stax`` ``kernel_fn`` (any top network) to ``h -> K``.

    ``kernel_fn`` is the third element of ``layerlab.kernels.stax.serial(...)``; the NNGP of
    the top network on ``h [N, ...]`` is ``kernel_fn(h, None, "nngp")``.
    """
    return lambda h: kernel_fn(h, None, "nngp")


def mf_variances(params: Sequence[dict]) -> LayerVariances:
    r"""Mean-field (MF) prior variances: the empirical second moments of the trained weights.

    .. math::
       w\_var_i = d^{(i)}_{in}\,\overline{W_i^2}, \qquad b\_var_i = \overline{b_i^2}

    (the second moment, which is what enters the covariance; it equals the variance for the
    zero-mean weights of ReLU nets to O(1/d)).

    Args:
      params: MLP params, a list of ``{"w": [d_in, d_out], "b": [d_out]}``.

    Returns:
      :class:`LayerVariances` with ``[len(params)]`` arrays.

    References:
      Sec. V ("MF") and Fig. 1 of Ben-David & Ringel (2019).
    """
    _check_mlp_params(params, "params", fn="mf_variances")
    return _mf_variances_core([{"w": p["w"], "b": p["b"]} for p in params])


# One jitted program per net shape (the checks stay eager, before the call): called eagerly
# its ~5 primitives per layer were compiled and dispatched one by one.
@jax.jit
def _mf_variances_core(params):
    w = jnp.stack([p["w"].shape[0] * jnp.mean(p["w"] ** 2) for p in params])
    b = jnp.stack([jnp.mean(p["b"] ** 2) for p in params])
    return LayerVariances(w, b)


def sample_relu_outputs(
    key: jax.Array,
    x: jax.Array,
    *,
    widths: Sequence[int],
    w_var: ArrayLike,
    b_var: ArrayLike,
    num_samples: int,
    out_dim: int = 1,
) -> jax.Array:
    r"""Outputs of ``num_samples`` random finite-width ReLU nets on ``x``.

    ``W_i ~ N(0, w_var_i / d_in)``, ``b_i ~ N(0, b_var_i)``, hidden widths ``widths`` (one per
    ReLU layer), a linear output of width ``out_dim``.

    Args:
      key: PRNG key. x: ``[N, d]`` inputs (integer inputs are computed in JAX's default float,
        float32 or float64 under x64, half-precision ones in float32, as
        :func:`layerlab._checks.promote_float`). widths: ``[D]`` hidden widths
        (positive integers).
      w_var, b_var: ``[D + 1]`` variances (fan-in convention), or one value for every
        layer (a scalar or a length-1 array); finite and ``>= 0`` (a zero variance is a
        zero weight or bias, as in :func:`top_kernel`; checked eagerly).
      num_samples: number of independent networks (``>= 1``). out_dim: outputs per network
        (``>= 1``).

    Returns:
      ``[num_samples * out_dim, N]`` outputs (each output unit is one GP sample), in ``x``'s
      float dtype (at least float32).
    """
    fn = "sample_relu_outputs"
    key = check_key(key, "key", fn=fn)
    x = check_array(x, "x", fn=fn, ndim=2, kind="real", finite=True)
    (x,) = promote_float(x)  # float16 overflows (inf), bfloat16 biases, ints cannot be sampled
    if isinstance(widths, (str, bytes)) or not isinstance(widths, Sequence | jax.Array
                                                          | np.ndarray):
        raise TypeError(f"{fn}: widths must be a sequence of hidden widths (one per ReLU "
                        f"layer; [] for none), got {type(widths).__name__}.")
    widths = [check_int(w, f"widths[{i}]", fn=fn, min_value=1) for i, w in enumerate(widths)]
    num_samples = check_int(num_samples, "num_samples", fn=fn, min_value=1)
    out_dim = check_int(out_dim, "out_dim", fn=fn, min_value=1)
    sizes = [x.shape[1], *widths, out_dim]
    n_layers = len(sizes) - 1
    w_var = _variance_vector(w_var, "w_var", fn=fn, length=n_layers, scalar=True)
    b_var = _variance_vector(b_var, "b_var", fn=fn, length=n_layers, scalar=True)
    return _sample_relu_core(key, x, jnp.asarray(w_var, x.dtype), jnp.asarray(b_var, x.dtype),
                             sizes=tuple(sizes), num_samples=num_samples)


# One jitted program per (sizes, num_samples, shapes): called eagerly, the lax.map over the
# networks (a closure made afresh at every call) was compiled again at every call, and the
# ops around it one by one.  The argument checks stay outside (eager, before the call).
@functools.partial(jax.jit, static_argnames=("sizes", "num_samples"))
def _sample_relu_core(key, x, w_var, b_var, *, sizes, num_samples):
    n_layers = len(sizes) - 1
    w_var = jnp.broadcast_to(w_var, (n_layers,))
    b_var = jnp.broadcast_to(b_var, (n_layers,))

    def one(k):
        h = x
        ks = jax.random.split(k, 2 * (len(sizes) - 1))
        for i, (di, do) in enumerate(zip(sizes[:-1], sizes[1:])):
            W = jnp.sqrt(w_var[i] / di) * jax.random.normal(ks[2 * i], (di, do), x.dtype)
            b = jnp.sqrt(b_var[i]) * jax.random.normal(ks[2 * i + 1], (do,), x.dtype)
            h = h @ W + b[None, :]
            if i < len(sizes) - 2:
                h = jax.nn.relu(h)
        return h.T  # [out_dim, N]

    keys = jax.random.split(key, num_samples)
    out = jax.lax.map(one, keys, batch_size=min(num_samples, 256))
    return out.reshape(num_samples * sizes[-1], x.shape[0])


def mc_covariance(samples: jax.Array) -> tuple[jax.Array, jax.Array]:
    r"""Monte-Carlo covariance ``K = mean_s f_s f_s^T`` and its per-entry standard error.

    Args:
      samples: ``[S, N]`` function samples (zero-mean prior); integer samples are summed in
        JAX's default float (float32; float64 under x64), half-precision ones in float32
        (float16 products overflow).

    Returns:
      ``(K [N, N], se [N, N])`` with ``se = std_s(f_s(x) f_s(x')) / sqrt(S)``, in the
      samples' float dtype (at least float32).
    """
    samples = check_array(samples, "samples", fn="mc_covariance", ndim=2, kind="real")
    (samples,) = promote_float(samples)
    S = samples.shape[0]
    K = samples.T @ samples / S
    sq = (samples * samples).T @ (samples * samples) / S
    var = jnp.maximum(sq - K * K, 0.0) * S / max(S - 1, 1)
    return K, jnp.sqrt(var / S)


def fit_variances(
    x: jax.Array,
    K_target: jax.Array,
    init: LayerVariances,
    *,
    steps: int = 300,
    lr: float = 0.05,
    ridge: float = 1e-3,
) -> LayerVariances:
    r"""FIT: renormalise per-layer variances by least squares against a sampled covariance.

    .. math::
       \min_{s}\ \frac{\lVert K(x; v_0 e^{s}) - K_{MC}\rVert_F^2}{\lVert K_{MC}\rVert_F^2}
       + \rho \lVert s\rVert^2,\qquad v = (w\_var, b\_var)

    Multiplicative renormalisation ``v = v_0 exp(s)`` of the starting (e.g. MF) variances,
    optimised with Adam for ``steps`` steps (a ``lax.scan``; jit at the call site).  A zero
    starting variance stays zero.

    Args:
      x: ``[N, d]`` inputs the covariance was sampled on.
      K_target: ``[N, N]`` Monte-Carlo covariance of finite-width random nets (not all zero;
        an integer one is fitted in JAX's default float: float32, float64 under x64).
      init: starting :class:`LayerVariances` (``[D + 1]`` each, finite and ``>= 0``).
      steps, lr: Adam steps (``>= 0``) and learning rate (``> 0``). ridge: pull of ``s``
        towards 0 (``>= 0``).

    Returns:
      Fitted :class:`LayerVariances`.

    References:
      Sec. V ("FIT") and Fig. 1 of Ben-David & Ringel (2019).
    """
    import optax

    fn = "fit_variances"
    x = check_array(x, "x", fn=fn, ndim=2, kind="real", finite=True)
    n = x.shape[0]
    K_target = check_array(K_target, "K_target", fn=fn, shape=(n, n), kind="real", finite=True)
    if is_concrete(K_target) and not np.any(np.asarray(K_target)):
        raise ValueError(f"{fn}: K_target is all zero; the fit is relative to its norm "
                         "|K_target|_F (pass the Monte-Carlo covariance, e.g. "
                         "mc_covariance(sample_relu_outputs(...))[0]).")
    (K_target,) = promote_float(K_target)  # an integer K_target once made s an int array
    w0, b0 = _check_layer_variances(init, "init", fn=fn)
    steps = check_int(steps, "steps", fn=fn, min_value=0)
    check_number(lr, "lr", fn=fn, min_value=0.0, lo_open=True, what="Adam's learning rate")
    check_number(ridge, "ridge", fn=fn, min_value=0.0)
    norm = jnp.sum(K_target**2)

    def loss(s):
        K = top_kernel(x, w_var=w0 * jnp.exp(s[0]), b_var=b0 * jnp.exp(s[1]))
        return jnp.sum((K - K_target) ** 2) / norm + ridge * jnp.sum(s**2)

    opt = optax.adam(lr)
    s = jnp.zeros((2, w0.shape[0]), K_target.dtype)

    def body(carry, _):
        s, st = carry
        g = jax.grad(loss)(s)
        u, st = opt.update(g, st, s)
        return (optax.apply_updates(s, u), st), None

    (s, _), _ = jax.lax.scan(body, (s, opt.init(s)), None, length=steps)
    return LayerVariances(w0 * jnp.exp(s[0]), b0 * jnp.exp(s[1]))
