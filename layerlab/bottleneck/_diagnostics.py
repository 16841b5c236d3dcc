"""Bottleneck-structure diagnostics of deep L2-regularised networks (paper B).

For large depth ``L`` the learned weights have ``k`` singular values close to 1 (the others
``O(L^{-1/2})``) in almost all layers, where ``k`` is the bottleneck rank of the task, and with
an NTK of order ``L`` almost all hidden representations are ``~k``-dimensional.

References:
  (B) Jacot, "Bottleneck Structure in Learned Features: Low-Dimension vs Regularity Tradeoff",
  NeurIPS 2023: Theorem 3 (R^(0) = bottleneck rank, R^(1) bounds the log pseudo-determinant of
  the Jacobian), Theorem 6 (k singular values ~ 1), Theorem 7 / Corollary 8 (representations of
  dimension k, NTK of order L).
"""
from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp

from layerlab import kernels, probes
from layerlab.bottleneck._reformulations import representations

Array = jax.Array


def layer_singular_values(weights: Sequence[Array], *, include_bias: bool = False) -> list[Array]:
    """Singular values of each ``W_l`` (bias column dropped unless ``include_bias``).

    Args:
      weights: ``[W_1, ..., W_L]``, ``W_l`` ``[n_l, n_{l-1} + 1]``.

    Returns:
      list of ``L`` arrays ``[min(n_l, n_{l-1})]`` (descending).
    """
    mats = [W if include_bias else W[:, :-1] for W in weights]
    return probes.singular_values(mats)


def layer_counts_near_one(weights: Sequence[Array], *, tol: float = 0.25,
                          include_bias: bool = False) -> Array:
    """Per-layer count of singular values within ``tol`` of 1: ``probes.count_near_one`` (the
    one definition) applied to each weight matrix's spectrum.

    .. math:: k_\\ell = \\#\\{i : |s_i(W_\\ell) - 1| < \\text{tol}\\}

    Args:
      weights: ``[W_1, ..., W_L]``.
      tol: tolerance.

    Returns:
      int ``[L]``.

    References:
      (B) Theorem 6.
    """
    return jnp.stack([probes.count_near_one(s, tol) for s in
                      layer_singular_values(weights, include_bias=include_bias)])


def representation_dims(weights: Sequence[Array], X, *, beta=1.0, activation=jax.nn.relu,
                        rel_tol: float = 1e-2, centre: bool = True) -> dict:
    """Dimension of each hidden representation along depth.

    For each ``Z_l`` ``[n_l, N]`` (centred over the data if ``centre``): the entropy effective
    rank of its singular values (``layerlab.probes.effective_rank``) and the numerical rank
    ``#{i : s_i > rel_tol * s_1}``.

    Args:
      weights: ``[W_1, ..., W_L]``.  X: ``[n_0, N]``.

    Returns:
      ``{"effective_rank": [L], "numerical_rank": [L]}`` (``l = 1..L``, the last being the
      output).

    References:
      (B) Theorem 7 and Corollary 8.
    """
    Zs = representations(weights, X, beta=beta, activation=activation)
    er, nr = [], []
    for Z in Zs:
        if centre:
            Z = Z - jnp.mean(Z, axis=1, keepdims=True)
        s = jnp.linalg.svd(Z, compute_uv=False)
        er.append(probes.effective_rank(s))
        nr.append(jnp.sum(s > rel_tol * s[0]))
    return {"effective_rank": jnp.stack(er), "numerical_rank": jnp.stack(nr)}


def network_fn(weights: Sequence[Array], x: Array, *, beta=1.0, activation=jax.nn.relu) -> Array:
    """``f(x)`` for a batch in the rows convention: ``x [B, n_0] -> [B, n_L]``."""
    return representations(weights, x.T, beta=beta, activation=activation)[-1].T


def jacobian_stats(weights: Sequence[Array], x: Array, *, beta=1.0, activation=jax.nn.relu,
                   rel_tol: float = 1e-2) -> dict:
    """Rank and log pseudo-determinant of the input-output Jacobian, averaged over inputs.

    .. math:: \\operatorname{rank} J f(x_i) = \\#\\{j : s_j > \\text{rel\\_tol}\\, s_1\\},\\qquad
              \\log|J f(x_i)|_+ = \\sum_{j \\le \\text{rank}} \\log s_j

    Args:
      weights: ``[W_1, ..., W_L]``.  x: ``[B, n_0]`` (rows = samples).

    Returns:
      ``{"rank": [], "log_pdet": [], "rank_per_point": [B], "singular_values": [B, r]}``.

    References:
      (B) Theorem 3 (R^(1) >= log pseudo-determinant of the Jacobian on the data).
    """
    def one(xi):
        return jax.jacfwd(lambda v: network_fn(weights, v[None], beta=beta,
                                               activation=activation)[0])(xi)

    J = jax.vmap(one)(x)
    s = jnp.linalg.svd(J, compute_uv=False)
    keep = s > rel_tol * s[:, :1]
    rank = jnp.sum(keep, axis=1)
    logp = jnp.sum(jnp.where(keep, jnp.log(jnp.where(keep, s, 1.0)), 0.0), axis=1)
    return {"rank": jnp.mean(rank.astype(s.dtype)), "log_pdet": jnp.mean(logp),
            "rank_per_point": rank, "singular_values": s}


def ntk_trace(weights: Sequence[Array], x: Array, *, beta=1.0, activation=jax.nn.relu) -> Array:
    """Mean trace of the empirical NTK on the data, ``(1/B) sum_i Tr Theta(x_i, x_i)``.

    Uses :func:`layerlab.kernels.empirical_ntk` (traced over outputs).  Paper B: of order ``L``
    at large learning rates.

    Args:
      weights: ``[W_1, ..., W_L]``.  x: ``[B, n_0]``.

    Returns:
      scalar.
    """
    K = kernels.empirical_ntk(
        lambda W, v: network_fn(W, v, beta=beta, activation=activation), list(weights), x)
    return jnp.mean(jnp.diag(K))


def bottleneck_diagnostics(weights: Sequence[Array], x: Array, *, beta=1.0,
                           activation=jax.nn.relu, tol: float = 0.25,
                           rel_tol: float = 1e-2, ntk: bool = True) -> dict:
    """All diagnostics at once (host dict of arrays): weight spectra, counts of singular values
    near 1, representation dimensions, Jacobian rank / log pseudo-determinant, NTK trace.

    Args:
      weights: ``[W_1, ..., W_L]``.  x: ``[B, n_0]`` (rows = samples).

    Returns:
      dict of arrays (see the individual functions).
    """
    out = {"singular_values": layer_singular_values(weights),
           "count_near_one": layer_counts_near_one(weights, tol=tol)}
    out.update(representation_dims(weights, x.T, beta=beta, activation=activation,
                                   rel_tol=rel_tol))
    js = jacobian_stats(weights, x, beta=beta, activation=activation, rel_tol=rel_tol)
    out["jacobian_rank"] = js["rank"]
    out["jacobian_log_pdet"] = js["log_pdet"]
    if ntk:
        out["ntk_trace"] = ntk_trace(weights, x, beta=beta, activation=activation)
    return out
