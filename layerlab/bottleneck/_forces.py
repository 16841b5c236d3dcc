"""Attraction/repulsion forces on the representations, and the deep-linear closed form (Sec. 3.1).

The two terms of ``L^r`` that depend on ``Z_l`` are an attraction
``||(Z_{l-1}^sigma)^+ Z_l||^2`` (pulls ``Z_l`` to the origin) and a repulsion
``||(Z_l^sigma)^+ Z_{l+1}||^2`` (pushes ``Z_l^sigma`` away); for linear networks the optimal
hidden covariances interpolate geometrically between input and output (item 2 of Sec. 3.1).
Public functions take samples as rows; the ``_``-functions are paper A's column maths.

References:
  (A) Jacot, Golikov, Hongler, Gabriel, NeurIPS 2022: Section 3.1 (items 2 and 4, Figure 1).
"""
from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from layerlab._checks import check_array, check_int, check_number
from layerlab._linalg import eigh
from layerlab.bottleneck._layout import (
    as_float,
    check_beta,
    check_reps,
    check_scalar,
    check_x,
    cols,
)
from layerlab.bottleneck._representations import (
    Activation,
    _augment,
    _ridge_kind,
    _tikhonov_pinv,
    as_activation,
)

Array = jax.Array


# ----------------------------------------------------------------------------- paper A (columns)
def _forces(Zs, X, lam, beta, activation, ridge, kind=None) -> tuple[list, list]:
    """``(attraction, repulsion)``, each a list of ``[n_l, N]`` (columns); ``kind`` is
    ``_ridge_kind(ridge)`` unless given (it must be, for a ``ridge`` traced by our own jit)."""
    L = len(Zs)
    kind = _ridge_kind(ridge) if kind is None else kind

    def term(Z_prev_sigma, Z):
        return lam * jnp.sum(jnp.square(Z @ _tikhonov_pinv(Z_prev_sigma, ridge, kind)))

    A0 = _augment(X, beta)
    att, rep = [], []
    for l in range(L):  # noqa: E741
        A_prev = A0 if l == 0 else _augment(activation(Zs[l - 1]), beta)
        att.append(-jax.grad(term, argnums=1)(A_prev, Zs[l]))
        if l < L - 1:
            g = jax.grad(lambda Z: term(_augment(activation(Z), beta), Zs[l + 1]))(Zs[l])
            rep.append(-g)
        else:
            rep.append(jnp.zeros_like(Zs[l]))
    return att, rep


def _psd_power(M: np.ndarray | Array, p: float, *, rtol: float | None = None) -> Array:
    r"""``M^p`` of a symmetric PSD matrix, with numerically-zero eigenvalues set to zero first.

    .. math:: M^p = V \operatorname{diag}(\tilde w_i^{\,p}) V^T,\qquad
              \tilde w_i = w_i\,[w_i > \text{rtol}\cdot \max_j w_j]

    Without the threshold an eigenvalue that is zero in exact arithmetic but ``~eps * |M|``
    in floating point is raised to ``p`` (``(1e-16)^{1/24} = 0.22``), which inflated the deep
    linear closed forms by several percent whenever ``M`` is singular (issue 14).

    Args:
      M: ``[N, N]`` symmetric positive semi-definite.
      p: power ``> 0``.
      rtol: eigenvalues ``<= rtol * max(w)`` are treated as 0; default
        ``100 * N * eps(dtype)``.

    Returns:
      ``[N, N]``.
    """
    M = jnp.asarray(M)
    if rtol is None:
        rtol = 100.0 * M.shape[-1] * float(jnp.finfo(M.dtype).eps)
    w, V = eigh((M + M.T) / 2)  # layerlab._linalg: safe under vmap on CPU
    keep = w > rtol * jnp.max(w)
    w = jnp.where(keep, w, 0.0)
    wp = jnp.where(keep, jnp.where(keep, w, 1.0) ** p, 0.0)
    return (V * wp[None, :]) @ V.T


def _linear_M(X: Array, Z_L: Array) -> tuple[Array, Array]:
    """``(X^{-1}, X^{-T} Z_L^T Z_L X^{-1})`` (columns)."""
    Xinv = jnp.linalg.inv(X)
    return Xinv, Xinv.T @ (Z_L.T @ Z_L) @ Xinv


# ----------------------------------------------------------------------------- forces
class Forces(NamedTuple):
    """Attraction and repulsion on each representation (negative gradients).

    Fields:
      attraction: ``[F_1, ..., F_L]``,
        ``F_l = -lambda d/dZ_l ||(Z_{l-1}^sigma)^+ Z_l||^2``, each ``[N, n_l]``.
      repulsion: ``[R_1, ..., R_L]``, ``R_l = -lambda d/dZ_l ||(Z_l^sigma)^+ Z_{l+1}||^2``,
        ``R_L = 0``.
    """

    attraction: list
    repulsion: list


def forces(Zs: Sequence[Array], x: ArrayLike, *, lam: ArrayLike, beta: ArrayLike = 1.0,
           activation: Activation = jax.nn.relu, ridge: ArrayLike = 0.0) -> Forces:
    """Attraction/repulsion forces on the hidden representations.

    .. math:: F^{att}_\\ell =
              -\\lambda\\,\\partial_{Z_\\ell}\\|(Z_{\\ell-1}^\\sigma)^+ Z_\\ell\\|_F^2
              = -2\\lambda (K_{\\ell-1}^\\sigma)^+ Z_\\ell,\\qquad
              F^{rep}_\\ell =
              -\\lambda\\,\\partial_{Z_\\ell}\\|(Z_\\ell^\\sigma)^+ Z_{\\ell+1}\\|_F^2

    At a critical point of L^r, ``F^att_l + F^rep_l = 0`` for hidden layers and
    ``F^att_L = dC/dZ_L``.  This holds as stated in the wide regime where every ``Z`` is
    admissible (``Z_{l-1}^sigma`` of full row rank ``N``, e.g. ``n_{l-1} + 1 >= N``); otherwise
    only the components tangent to the admissible set cancel.

    Args:
      Zs: ``[Z_1, ..., Z_L]``, ``Z_l`` of shape ``[N, n_l]`` (rows are samples).
      x: ``[N, n_0]``.
      lam: ``lambda >= 0``.
      activation: the nonlinearity, a callable or its name in ``ACTIVATIONS`` (``"tanh"``).
        The forces compile once per shapes and activation, so pass a name or the same
        function object on every call: a fresh ``lambda`` per call is a new static argument
        and compiles anew each time (a fresh ``functools.partial`` of plain numbers, e.g.
        ``partial(jax.nn.leaky_relu, negative_slope=0.1)``, is compared by content).
      ridge: Tikhonov parameter ``rho >= 0`` of the pseudo-inverses (``> 0`` recommended away
        from minima; a zero of any type, concrete or traced, is the Moore-Penrose inverse:
        see ``tikhonov_pinv``).

    Returns:
      :class:`Forces`, two lists of ``L`` arrays ``[N, n_l]``.

    References:
      (A) Section 3.1 (item 4) and Figure 1.
    """
    check_beta(beta, "forces")
    fn = "forces"
    check_scalar(lam, "lam", fn)
    check_number(lam, "lam", fn=fn, min_value=0.0,
                 what="a regulariser; a negative one flips attraction and repulsion")
    check_scalar(ridge, "ridge", fn)
    check_number(ridge, "ridge", fn=fn, min_value=0.0)
    x = check_x(x, fn)
    Zs = check_reps(Zs, x.shape[0], fn)
    activation = as_activation(activation, fn)   # a name or a partial: one static argument
    # read before our jit traces ridge: a concrete zero of any type -> Moore-Penrose,
    # a concrete positive -> the regularised solve, the caller's tracer -> chosen at run time
    kind = _ridge_kind(ridge)
    att, rep = _forces_jit(cols(Zs), x.T, lam, beta, jnp.zeros(()) if kind == "zero" else ridge,
                           activation=activation, kind=kind)
    return Forces(attraction=cols(att), repulsion=cols(rep))


@functools.partial(jax.jit, static_argnames=("activation", "kind"))
def _forces_jit(Zs, X, lam, beta, ridge, *, activation, kind):
    """:func:`_forces` as one program per shapes, activation and kind of ridge (eagerly, its two
    ``grad`` and pseudo-inverses per layer compiled op by op: ~3.5 s for a 3-layer net)."""
    return _forces(Zs, X, lam, beta, activation, ridge, kind)


# ----------------------------------------------------------------------------- linear closed form
def _check_linear(x, Z_L, fn: str) -> tuple[Array, Array]:
    x = check_x(x, fn)
    if x.shape[0] != x.shape[1]:
        raise ValueError(f"{fn}: the closed form needs a square invertible x [N, N]; got shape "
                         f"{x.shape}.")
    Z_L = as_float(check_array(Z_L, "Z_L", fn=fn, ndim=2, kind="real"))
    if Z_L.shape[0] != x.shape[0]:
        raise ValueError(f"{fn}: Z_L must be [N, n_L] = [{x.shape[0]}, ?] (rows are samples); "
                         f"got {Z_L.shape}.")
    return x, Z_L


def linear_optimal_covariances(x: ArrayLike, Z_L: ArrayLike, depth: int) -> list[Array]:
    """Hidden covariances of the optimal deep linear network (no bias) reaching ``Z_L``.

    .. math:: K_\\ell = x \\left(x^{-1} Z_L Z_L^T x^{-T}\\right)^{\\ell / L} x^T,
              \\qquad \\ell = 1, \\dots, L-1

    (geometric interpolation between ``K_0 = x x^T`` and ``K_L = Z_L Z_L^T``; the minimal
    regulariser is then ``L Tr[(x^{-1} Z_L Z_L^T x^{-T})^{1/L}]``).  Paper A's
    ``X^T (X^{-T} Z_L^T Z_L X^{-1})^{l/L} X`` with ``X = x^T``.

    Args:
      x: ``[N, N]`` square invertible inputs (rows are samples).
      Z_L: ``[N, n_L]`` outputs.
      depth: ``L``, an integer ``>= 1``.

    Returns:
      ``[K_1, ..., K_{L-1}]``, each ``[N, N]``.

    References:
      (A) Section 3.1, item 2 (linear networks).
    """
    x, Z_L = _check_linear(x, Z_L, "linear_optimal_covariances")
    depth = check_int(depth, "depth", fn="linear_optimal_covariances", min_value=1)
    X = x.T
    _, M = _linear_M(X, Z_L.T)
    return [X.T @ _psd_power(M, l / depth) @ X for l in range(1, depth)]  # noqa: E741


def linear_optimal_regulariser(x: ArrayLike, Z_L: ArrayLike, depth: int) -> Array:
    """Minimal ``sum_l ||W_l||^2`` of a bias-free depth-``L`` linear net mapping x to Z_L.

    .. math:: \\min \\sum_\\ell \\|W_\\ell\\|_F^2 = L\\,\\operatorname{Tr}
              \\left[(x^{-1} Z_L Z_L^T x^{-T})^{1/L}\\right]

    Args:
      x: ``[N, N]`` invertible (rows are samples).  Z_L: ``[N, n_L]``.
      depth: ``L``, an integer ``>= 1``.

    Returns:
      scalar.

    References:
      (A) Section 3.1, item 2.
    """
    x, Z_L = _check_linear(x, Z_L, "linear_optimal_regulariser")
    depth = check_int(depth, "depth", fn="linear_optimal_regulariser", min_value=1)
    _, M = _linear_M(x.T, Z_L.T)
    return depth * jnp.trace(_psd_power(M, 1.0 / depth))
