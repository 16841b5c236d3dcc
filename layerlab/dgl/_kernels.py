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

from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from layerlab._checks import check_array, promote_float
from layerlab.kernels import relu_nngp

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
      h2: optional ``[M, d]`` second set (default ``h``).
      w_var, b_var: ``[D + 1]`` variances of the top network's dense layers (fan-in
        convention); ``D = 0`` is the linear classifier alone, ``K = b + w h.h'/d``.

    Returns:
      ``[N, M]`` kernel.

    References:
      Eq. (2) of Ben-David & Ringel (2019); Cho & Saul (2009).
    """
    w_var = jnp.atleast_1d(jnp.asarray(w_var))
    b_var = jnp.atleast_1d(jnp.asarray(b_var))
    if w_var.shape != b_var.shape or w_var.ndim != 1:
        raise ValueError(
            f"w_var and b_var must be 1-D of equal length (depth + 1); got {w_var.shape} and "
            f"{b_var.shape}."
        )
    return relu_nngp(h, h2, depth=w_var.shape[0] - 1, w_var=w_var, b_var=b_var)


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
    if len(params) == 0:
        raise ValueError("mf_variances: params is empty.")
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
      key: PRNG key. x: ``[N, d]`` inputs (integer or half-precision inputs are computed in
        float32, as :func:`layerlab._checks.promote_float`). widths: ``[D]`` hidden widths.
      w_var, b_var: ``[D + 1]`` variances (fan-in convention).
      num_samples: number of independent networks. out_dim: outputs per network.

    Returns:
      ``[num_samples * out_dim, N]`` outputs (each output unit is one GP sample), in ``x``'s
      float dtype (at least float32).
    """
    x = check_array(x, "x", fn="sample_relu_outputs", ndim=2, kind="real")
    (x,) = promote_float(x)  # float16 overflows (inf), bfloat16 biases, ints cannot be sampled
    sizes = [x.shape[1], *[int(w) for w in widths], out_dim]
    w_var = jnp.broadcast_to(jnp.asarray(w_var, x.dtype), (len(sizes) - 1,))
    b_var = jnp.broadcast_to(jnp.asarray(b_var, x.dtype), (len(sizes) - 1,))

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
    return out.reshape(num_samples * out_dim, x.shape[0])


def mc_covariance(samples: jax.Array) -> tuple[jax.Array, jax.Array]:
    r"""Monte-Carlo covariance ``K = mean_s f_s f_s^T`` and its per-entry standard error.

    Args:
      samples: ``[S, N]`` function samples (zero-mean prior); integer or half-precision
        samples are summed in float32 (float16 products overflow).

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
      K_target: ``[N, N]`` Monte-Carlo covariance of finite-width random nets.
      init: starting :class:`LayerVariances` (``[D + 1]`` each).
      steps, lr: Adam steps and learning rate. ridge: pull of ``s`` towards 0.

    Returns:
      Fitted :class:`LayerVariances`.

    References:
      Sec. V ("FIT") and Fig. 1 of Ben-David & Ringel (2019).
    """
    import optax

    w0, b0 = jnp.asarray(init.w_var), jnp.asarray(init.b_var)
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
