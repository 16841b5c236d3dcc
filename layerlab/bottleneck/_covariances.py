"""The second reformulation L^k: the loss over covariances (Sec. 3.2, Prop. 3).

``L^r`` depends on the representations only through the kernels over samples
``K_l = Z_l Z_l^T`` and ``K_l^sigma = Z_l^sigma (Z_l^sigma)^T`` (``[N, N]``, the same matrices
as paper A's ``Z_l^T Z_l`` in its column convention), since
``||(Z_{l-1}^sigma)^+ Z_l||_F^2 = Tr[K_l (K_{l-1}^sigma)^+]``.  Public functions take samples as
rows; the ``_``-functions are paper A's column maths.

References:
  (A) Jacot, Golikov, Hongler, Gabriel, NeurIPS 2022: Section 3.2, Proposition 3.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from layerlab._checks import check_array, check_number
from layerlab.bottleneck._layout import (
    as_float,
    check_beta,
    check_reps,
    check_scalar,
    check_x,
    col_cost,
    cols,
)
from layerlab.bottleneck._representations import (
    Activation,
    Cost,
    _layer_inputs,
    _ridge_kind,
    as_activation,
    traced_ridge_inverse,
)

Array = jax.Array


# ----------------------------------------------------------------------------- paper A (columns)
def _covariances(Zs, X, beta, activation) -> tuple[list, list]:
    """``([Z_l^T Z_l], [(Z_l^sigma)^T Z_l^sigma])`` (columns)."""
    As = _layer_inputs(Zs, X, beta, activation)
    return [Z.T @ Z for Z in Zs], [A.T @ A for A in As]


def _covariance_loss(K, K_sigma, Z_L, cost, lam, ridge) -> Array:
    """``C(Z_L) + lam sum_l Tr[K_l (K_{l-1}^sigma)^+]``, ``K_L = Z_L^T Z_L`` (columns)."""
    L = len(K_sigma)
    Ks = list(K[: L - 1]) + [Z_L.T @ Z_L]
    kind = _ridge_kind(ridge)
    reg = sum(jnp.sum(Kl * _psd_pinv(Ks_prev, ridge, kind)) for Kl, Ks_prev in zip(Ks, K_sigma))
    return cost(Z_L) + lam * reg


def _psd_solve(K: Array, ridge) -> Array:
    """``(K + rho I)^{-1} K (K + rho I)^{-1}`` (``rho > 0``)."""
    N = K.shape[0]
    M = jax.scipy.linalg.solve(K + ridge * jnp.eye(N, dtype=K.dtype), K, assume_a="pos")
    return jax.scipy.linalg.solve(K + ridge * jnp.eye(N, dtype=K.dtype), M.T, assume_a="pos")


def _psd_pinv(K: Array, ridge, kind: str) -> Array:
    """:func:`psd_pinv` with the branch chosen by ``kind`` (see ``_tikhonov_pinv``)."""
    if kind == "zero":
        return jnp.linalg.pinv(K, hermitian=True)
    if kind == "positive":
        return _psd_solve(K, ridge)
    # d K^+_rho / d rho = -2 (K^+)^2 at rho = 0 (K^+_rho = V diag(w / (w + rho)^2) V^T)
    return traced_ridge_inverse(K, ridge, _psd_solve,
                                lambda K: jnp.linalg.pinv(K, hermitian=True),
                                lambda P: -2.0 * (P @ P))


# ----------------------------------------------------------------------------- public
def psd_pinv(K: Array, ridge: ArrayLike = 0.0) -> Array:
    """Regularised pseudo-inverse of a Gram matrix, matching :func:`tikhonov_pinv`.

    .. math:: K^{+}_\\rho = (K + \\rho I)^{-1} K (K + \\rho I)^{-1},
       \\quad\\text{so that}\\quad (A^+_\\rho)^T A^+_\\rho = (A A^T)^+_\\rho .

    Args:
      K: ``[N, N]`` symmetric PSD (e.g. a kernel over samples ``A A^T``).
      ridge: scalar ``rho >= 0``; a zero of any type, concrete or traced, gives
        ``jnp.linalg.pinv(K, hermitian=True)`` (see ``tikhonov_pinv``).

    Returns:
      ``[N, N]``: float32 for a half-precision ``K`` (no LAPACK kernels: computed in float32,
      as by ``_layout.as_float``), the default float for an integer one, ``K``'s dtype
      otherwise.
    """
    check_scalar(ridge, "ridge", "psd_pinv")
    check_number(ridge, "ridge", fn="psd_pinv", min_value=0.0)
    K = check_array(K, "K", fn="psd_pinv", ndim=2)
    if K.shape[0] != K.shape[1]:
        raise ValueError(f"psd_pinv: K must be a square Gram matrix [N, N], got shape "
                         f"{tuple(K.shape)}; for a rectangular A use tikhonov_pinv.")
    return _psd_pinv(as_float(K), ridge, _ridge_kind(ridge))


class Covariances(NamedTuple):
    """Output of Gamma: the kernels of the representations over the samples.

    Fields:
      K: ``[K_1, ..., K_L]``, ``K_l = Z_l Z_l^T`` of shape ``[N, N]``.
      K_sigma: ``[K_0^sigma, ..., K_{L-1}^sigma]``,
        ``K_l^sigma = Z_l^sigma (Z_l^sigma)^T = sigma(Z_l) sigma(Z_l)^T + beta^2 1 1^T`` and
        ``K_0^sigma = x x^T + beta^2 1 1^T``; each ``[N, N]``.
    """

    K: list
    K_sigma: list


def covariances(Zs: Sequence[Array], x: ArrayLike, *, beta: ArrayLike = 1.0,
                activation: Activation = jax.nn.relu) -> Covariances:
    """Gamma: representations to covariance pairs ``(K_l, K_l^sigma)``.

    .. math:: K_\\ell = Z_\\ell Z_\\ell^T,\\quad
              K_\\ell^\\sigma = \\sigma(Z_\\ell)\\sigma(Z_\\ell)^T
              + \\beta^2 1 1^T,\\quad K_0^\\sigma = x x^T + \\beta^2 1 1^T

    Args:
      Zs: ``[Z_1, ..., Z_L]``, ``Z_l`` of shape ``[N, n_l]`` (rows are samples).
      x: ``[N, n_0]``.

    Returns:
      :class:`Covariances` with ``L`` matrices ``[N, N]`` in each field.

    References:
      (A) Section 3.2, Proposition 3.
    """
    check_beta(beta, "covariances")
    fn = "covariances"
    x = check_x(x, fn)
    Zs = check_reps(Zs, x.shape[0], fn)
    K, K_sigma = _covariances(cols(Zs), x.T, beta, as_activation(activation, fn))
    return Covariances(K=K, K_sigma=K_sigma)


def covariance_loss(K: Sequence[Array], K_sigma: Sequence[Array], Z_L: Array, *, cost: Cost,
                    lam: ArrayLike, ridge: ArrayLike = 0.0) -> Array:
    """Second reformulation L^k (homogeneous sigma): loss in terms of covariances.

    .. math:: \\mathcal L^k = C(Z_L) + \\lambda \\sum_{\\ell=1}^{L}
              \\operatorname{Tr}[K_\\ell (K_{\\ell-1}^\\sigma)^+],\\qquad K_L = Z_L Z_L^T

    Args:
      K: hidden covariances ``[K_1, ..., K_{L-1}]`` (or all ``L`` of them, as returned by
        :func:`covariances`; ``K_L`` is then ignored and recomputed from ``Z_L``), ``[N, N]``.
      K_sigma: ``[K_0^sigma, ..., K_{L-1}^sigma]``, each ``[N, N]``.
      Z_L: outputs ``[N, n_L]`` (rows are samples).
      cost: ``C(Z_L) -> scalar``.
      lam: ``lambda``.
      ridge: regularisation of the pseudo-inverses, matching :func:`psd_pinv`.

    Returns:
      scalar; equals ``representation_loss(Zs, ...)`` at ``(K, K_sigma) = Gamma(Zs)``.

    References:
      (A) Proposition 3.
    """
    fn = "covariance_loss"
    L = len(K_sigma)
    if L == 0:
        raise ValueError(f"{fn}: K_sigma must hold the L >= 1 input covariances "
                         "[K_0^sigma, ..., K_{L-1}^sigma], got an empty list.")
    if len(K) not in (L - 1, L):
        raise ValueError(
            f"{fn}: K must hold the L-1 hidden covariances (or all L); got {len(K)} with "
            f"len(K_sigma) = L = {L}."
        )
    Z_L = check_array(Z_L, "Z_L", fn=fn, ndim=2, kind="real")
    N = K_sigma[0].shape[0]
    for name, mats in (("K", K), ("K_sigma", K_sigma)):
        for i, m in enumerate(mats):
            if jnp.shape(m) != (N, N):
                raise ValueError(f"{fn}: every covariance must be [N, N] = [{N}, {N}] (N from "
                                 f"K_sigma[0]); {name}[{i}] has shape {jnp.shape(m)}.")
    if Z_L.shape[0] != N:
        raise ValueError(f"{fn}: Z_L must be [N, n_L] = [{N}, ?] (rows are samples); got "
                         f"{Z_L.shape}.")
    check_scalar(lam, "lam", fn)
    check_number(lam, "lam", fn=fn, min_value=0.0, what="a regulariser")
    check_scalar(ridge, "ridge", fn)
    check_number(ridge, "ridge", fn=fn, min_value=0.0)
    return _covariance_loss(K, K_sigma, Z_L.T, col_cost(cost, fn), lam, ridge)
