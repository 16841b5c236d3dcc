"""Rank_sigma of a covariance pair: neuron pairs, bounds and Caratheodory reduction (Sec. 4).

A hidden representation ``Z`` ``[N, n]`` (rows are samples, columns are the ``n`` neurons
``z_i in R^N``) realises the covariance pair

.. math:: K = \\sum_{i=1}^n z_i z_i^T,\\qquad
          K^\\sigma - \\beta^2 1 1^T = \\sum_{i=1}^n \\sigma(z_i)\\sigma(z_i)^T \\qquad (4.1)

and ``Rank_sigma(K, K^sigma)`` is the least number of terms of such a decomposition: the width
at which the pair becomes reachable.  Host-side numpy in float64 (the activation is applied in
float64 too, whatever ``jax_enable_x64``); the ``_``-functions are paper A's column maths
(neurons as rows of ``Z^T``).

References:
  (A) Jacot, Golikov, Hongler, Gabriel, NeurIPS 2022: Section 4.1, eq. (4.1), Proposition 8
  (``Rank_sigma`` is the least width) and Lemma 10 (``Rank K <= Rank_sigma <= N(N+1)``, from
  Caratheodory's theorem for conical hulls, discussed after Remark 4).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from layerlab._checks import check_finite, check_number
from layerlab.bottleneck._layout import check_scalar
from layerlab.bottleneck._representations import Activation, as_activation

Array = jax.Array


# ----------------------------------------------------------------------------- paper A (columns)
def _sym_vec(M: np.ndarray) -> np.ndarray:
    iu = np.triu_indices(M.shape[-1])
    return M[..., iu[0], iu[1]]


def _as_neurons(Z, fn: str, name: str = "Z") -> np.ndarray:
    """``Z [N, n]`` (rows are samples) as paper A's ``[n, N]`` (one row per neuron), float64,
    finite."""
    Z = np.asarray(Z, dtype=np.float64)
    if Z.ndim != 2:
        raise ValueError(f"{fn}: {name} must be [N, n] (rows are samples, columns are neurons); "
                         f"got shape {Z.shape}.")
    check_finite(Z, name, fn=fn, hint="the covariance pair of a non-finite Z is undefined.")
    return Z.T


def _positively_homogeneous(Zc: np.ndarray, S: np.ndarray, activation) -> bool:
    """``sigma(c z) = c sigma(z)`` for ``c = 1/2, 2`` on the neurons given (float64, relative
    ``1e-9``): the property the conic (Caratheodory) reduction of eq. (4.1) rests on, tested
    on the data at hand (ReLU, leaky ReLU, identity pass; tanh, softplus, GELU do not)."""
    scale = max(float(np.abs(S).max(initial=0.0)), 1e-300)
    return all(np.allclose(_activate64(c * Zc, activation), c * S, rtol=1e-9,
                           atol=1e-12 * c * scale) for c in (0.5, 2.0))


def _activate64(Zc: np.ndarray, activation) -> np.ndarray:
    """``sigma(Zc)`` computed in float64 whatever the global ``jax_enable_x64`` flag: the ranks
    here use tolerances (``1e-9``, ``1e-10``) far below float32's resolution, so in float32
    neurons on one ray (``sigma(a z) = a sigma(z)`` up to rounding) look independent."""
    with jax.enable_x64(True):
        return np.asarray(activation(jnp.asarray(Zc, dtype=jnp.float64)), dtype=np.float64)


def _neuron_pairs(Zc: np.ndarray, activation) -> np.ndarray:
    S = _activate64(Zc, activation)
    P = np.einsum("ia,ib->iab", Zc, Zc)
    Q = np.einsum("ia,ib->iab", S, S)
    return np.concatenate([_sym_vec(P), _sym_vec(Q)], axis=1)


# ----------------------------------------------------------------------------- public
def neuron_pairs(Z: ArrayLike, *, activation: Activation = jax.nn.relu) -> np.ndarray:
    """One row ``(vec z_i z_i^T, vec sigma(z_i) sigma(z_i)^T)`` per neuron ``z_i`` (column of Z).

    ``(K, K^sigma - beta^2 11^T) = sum_i (z_i z_i^T, sigma(z_i) sigma(z_i)^T)`` (eq. 4.1); the
    pairs live in a space of dimension ``N (N + 1)``.

    Args:
      Z: ``[N, n]`` (rows are samples; numpy or jax).

    Returns:
      numpy ``[n, N (N + 1)]`` (upper triangles of both outer products).

    References:
      (A) eq. (4.1).
    """
    return _neuron_pairs(_as_neurons(Z, "neuron_pairs"),
                         as_activation(activation, "neuron_pairs"))


def rank_sigma_bounds(Z: ArrayLike, *, activation: Activation = jax.nn.relu,
                      tol: float = 1e-9) -> dict:
    """Bounds on ``Rank_sigma(K, K^sigma)`` for the covariance pair realised by ``Z``.

    .. math:: \\max(\\operatorname{Rank} K, \\operatorname{Rank}(K^\\sigma - \\beta^2 11^T))
              \\le \\operatorname{Rank}_\\sigma(K, K^\\sigma) \\le
              \\min\\big(n,\\ \\operatorname{rank}[\\text{neuron pairs}]\\big) \\le N(N+1)

    The lower bound holds for any ``sigma`` (a decomposition (4.1) with ``k`` terms has
    ``Rank K <= k``).  The upper bound ``rank[neuron pairs]`` is Caratheodory's theorem for
    cones (attained by :func:`caratheodory_reduce`) and needs a positively homogeneous
    ``sigma`` (``sigma(c z) = c sigma(z)``, ``c > 0``: the pairs then form a cone, Sec. 3.2 of
    (A)); it is tested numerically on ``Z`` (``c = 1/2, 2``) and, for any other ``sigma`` (tanh,
    softplus, ...), ``upper`` is the width ``n`` (``Z`` itself) and ``homogeneous`` is False.
    Host-side numpy; not jittable.

    Args:
      Z: ``[N, n]`` a hidden representation (rows are samples, columns are neurons), finite.
      activation: the nonlinearity (a callable or a name in ``ACTIVATIONS``).
      tol: relative tolerance of the numerical ranks (``>= 0``).

    Returns:
      dict with ``lower``, ``upper``, ``rank_K``, ``rank_K_sigma``, ``width`` (= n),
      ``N_times_N_plus_1`` and ``homogeneous``.

    References:
      (A) eq. (4.1) and Lemma 10 (``Rank K <= Rank_sigma <= N(N+1)``).
    """
    fn = "rank_sigma_bounds"
    activation = as_activation(activation, fn)
    check_scalar(tol, "tol", fn)
    check_number(tol, "tol", fn=fn, min_value=0.0)
    Zc = _as_neurons(Z, fn)
    n, N = Zc.shape
    S = _activate64(Zc, activation)
    homogeneous = _positively_homogeneous(Zc, S, activation)

    def rank(M):
        s = np.linalg.svd(M, compute_uv=False)
        return int(np.sum(s > tol * max(s.max(initial=0.0), 1e-300))) if s.size else 0

    rK, rS = rank(Zc), rank(S)
    upper = min(n, rank(_neuron_pairs(Zc, activation))) if homogeneous else n
    return {"lower": max(rK, rS), "upper": upper, "rank_K": rK, "rank_K_sigma": rS,
            "width": n, "N_times_N_plus_1": N * (N + 1), "homogeneous": homogeneous}


def caratheodory_reduce(Z: ArrayLike, *, activation: Activation = jax.nn.relu,
                        tol: float = 1e-10) -> np.ndarray:
    """Remove neurons while keeping ``(K, K^sigma)`` exactly (positively homogeneous sigma).

    Writes the pair as a conic combination ``sum_i c_i v_i`` (``c_i = 1``, ``v_i`` the neuron
    pairs), and while the ``v_i`` with ``c_i > 0`` are linearly dependent moves ``c`` along a null
    vector until one weight hits zero (Caratheodory).  Returns the neurons ``sqrt(c_i) z_i`` kept:
    since ``sigma(a z) = a sigma(z)`` for ``a >= 0`` this realises the same pair with at most
    ``rank(v) <= N (N + 1)`` neurons.  Host-side numpy.

    Args:
      Z: ``[N, n]`` (rows are samples, columns are neurons), finite.
      activation: positively homogeneous nonlinearity (``sigma(c z) = c sigma(z)``, ``c > 0``,
        tested on ``Z``: any other is a ``ValueError``, the rescaled neurons would not keep
        ``K^sigma``).
      tol: null-space tolerance (``>= 0``).

    Returns:
      numpy ``[N, m]`` with ``m <= min(n, N (N + 1))``.

    References:
      (A) Lemma 10 and the discussion after Remark 4 (Caratheodory's theorem for conical
      hulls: ``S_n = S`` for ``n >= N(N+1)``).
    """
    fn = "caratheodory_reduce"
    activation = as_activation(activation, fn)
    check_scalar(tol, "tol", fn)
    check_number(tol, "tol", fn=fn, min_value=0.0)
    Zc = _as_neurons(Z, fn)
    if not _positively_homogeneous(Zc, _activate64(Zc, activation), activation):
        raise ValueError(f"{fn}: activation must be positively homogeneous (sigma(c z) = "
                         f"c sigma(z) for c > 0, e.g. relu): the neurons sqrt(c_i) z_i keep "
                         f"K^sigma only then; {activation!r} is not, on this Z.")
    V = _neuron_pairs(Zc, activation)
    c = np.ones(Zc.shape[0])
    keep = np.arange(Zc.shape[0])
    keep = keep[np.linalg.norm(V, axis=1) > 0]
    while keep.size > 0:
        M = V[keep].T  # [dim, m]
        _, s, vt = np.linalg.svd(M, full_matrices=True)
        rank = int(np.sum(s > tol * max(s.max(), 1e-300)))
        if rank == keep.size:
            break
        a = vt[-1]  # null vector of M
        if a.max() <= 0:
            a = -a
        pos = a > tol
        t = np.min(c[keep][pos] / a[pos])
        c[keep] = c[keep] - t * a
        c[keep] = np.where(np.abs(c[keep]) < tol, 0.0, c[keep])
        keep = keep[c[keep] > 0]
    return (np.sqrt(c[keep])[:, None] * Zc[keep]).T
