"""Completely positive matrices from graphs and the bipartite lower-bound example.

A symmetric ``A`` is completely positive (CP) if ``A = sum_i v_i v_i^T`` with ``v_i >= 0``
entrywise; its CP-rank is the least number of terms.  For a triangle-free graph with incidence
matrix ``E`` (one row per edge), ``A = E^T E`` is CP with CP-rank equal to the number of edges.
The complete bipartite graph ``K_{N/2, N/2}`` gives ``B_N`` with CP-rank ``N^2 / 4``.

With inputs ``x = I_N`` and targets ``y`` ``[N, n_out]`` (rows are samples) such that
``(y y^T)^{1/2} = B_N`` (paper A's ``(Y^T Y)^{1/2}``, ``Y = y^T``; e.g. ``y = B_N``), every
optimum of a shallow bias-free ReLU net needs ``>= N^2/4`` hidden neurons, while a width-``N``
net reaches norm ``N^2 + N`` (Remark 23's construction) or ``N sqrt((N+2)(N-1)) < N^2 + N``
(ours, :func:`bipartite_width_n_network`), both within ``N`` of the optimum ``N^2``.

References:
  (A) Jacot, Golikov, Hongler, Gabriel, NeurIPS 2022: Propositions 13-14, Remark 23.
"""
from __future__ import annotations

import itertools
from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from layerlab._checks import check_int, check_number


def _check_edges(edges, n_vertices, fn: str) -> tuple[int, list[tuple[int, int]]]:
    """``n_vertices`` and ``edges`` as pairs of distinct vertices in ``[0, n_vertices)``: a
    negative index would wrap around (numpy) and a self-loop is no edge of a simple graph."""
    n_vertices = check_int(n_vertices, "n_vertices", fn=fn, min_value=0)
    out = []
    for e, pair in enumerate(edges):
        try:
            i, j = pair
        except (TypeError, ValueError):
            raise ValueError(f"{fn}: edges[{e}] must be a pair (i, j), got {pair!r}.") from None
        i = check_int(i, f"edges[{e}][0]", fn=fn)
        j = check_int(j, f"edges[{e}][1]", fn=fn)
        if i == j or not (0 <= i < n_vertices and 0 <= j < n_vertices):
            raise ValueError(f"{fn}: edges[{e}] = ({i}, {j}) must be a pair of distinct "
                             f"vertices in [0, {n_vertices}) (no self-loops).")
        out.append((i, j))
    return n_vertices, out


def incidence_matrix(edges: Sequence[tuple[int, int]], n_vertices: int) -> np.ndarray:
    """Edge-vertex incidence matrix ``E[e, i] = 1`` iff vertex ``i`` is an end of edge ``e``.

    Args:
      edges: ``m`` pairs ``(i, j)``, ``0 <= i != j < n_vertices``.
      n_vertices: ``n``.

    Returns:
      numpy ``[m, n]`` (each row has two ones); ``E^T E`` is CP with CP-rank ``<= m``.
    """
    n_vertices, edges = _check_edges(edges, n_vertices, "incidence_matrix")
    E = np.zeros((len(edges), n_vertices))
    for e, (i, j) in enumerate(edges):
        E[e, i] = E[e, j] = 1.0
    return E


def is_triangle_free(edges: Sequence[tuple[int, int]], n_vertices: int) -> bool:
    """Whether the simple graph has no 3-cycle (``trace(A^3) = 0`` for its adjacency ``A``).

    ``edges`` are pairs of distinct vertices in ``[0, n_vertices)``: a self-loop or an index
    out of range (a negative one wrapped around) is a ``ValueError``."""
    n_vertices, edges = _check_edges(edges, n_vertices, "is_triangle_free")
    Adj = np.zeros((n_vertices, n_vertices))
    for i, j in edges:
        Adj[i, j] = Adj[j, i] = 1.0
    return bool(np.trace(Adj @ Adj @ Adj) == 0)


def complete_bipartite_edges(N: int) -> list[tuple[int, int]]:
    """Edges of ``K_{N/2, N/2}`` (parts ``{0..N/2-1}`` and ``{N/2..N-1}``), ``N^2/4`` of them."""
    if N < 2 or N % 2:
        raise ValueError(f"B_N needs an even N >= 2; got N = {N}.")
    m = N // 2
    return [(i, m + j) for i, j in itertools.product(range(m), range(m))]


def bipartite_matrix(N: int) -> np.ndarray:
    """``B_N = E^T E`` for the complete bipartite graph ``K_{N/2, N/2}``.

    .. math:: B_N = \\begin{pmatrix} \\tfrac N2 I & 1 1^T \\\\ 1 1^T & \\tfrac N2 I\\end{pmatrix},
              \\qquad \\operatorname{CP-rank}(B_N) = N^2/4

    Args:
      N: even size.

    Returns:
      numpy ``[N, N]``.

    References:
      (A) Proposition 14 and Remark 23.
    """
    return incidence_matrix(complete_bipartite_edges(N), N).T @ incidence_matrix(
        complete_bipartite_edges(N), N)


def shallow_min_norm_identity_inputs(y: ArrayLike) -> float:
    """Minimal ``||w_1||^2 + ||w_2||^2`` of a bias-free shallow ReLU net with ``x = I_N`` fitting y.

    .. math:: \\min_{\\sigma(x w_1) w_2 = y} \\|w_1\\|^2 + \\|w_2\\|^2
              \\ \\ge\\ \\min_{K \\succeq 0} \\operatorname{Tr} K + \\operatorname{Tr}[y y^T K^+]
              = 2 \\operatorname{Tr}(y y^T)^{1/2}

    with equality iff ``(y y^T)^{1/2}`` is completely positive (then ``K = (y y^T)^{1/2}`` is
    realised by nonnegative neurons, using CP-rank many of them).  ``= N^2`` for ``y = B_N``.
    (Paper A's ``(Y^T Y)^{1/2}`` with ``Y = y^T``.)

    Args:
      y: ``[N, n_out]`` (rows are samples).

    Returns:
      the lower bound ``2 Tr (y y^T)^{1/2}`` (a float; twice the nuclear norm of ``y``).

    References:
      (A) Proposition 14 and its proof (``K_1 = K_1^sigma = (Y^T Y)^{1/2}`` at the optimum).
    """
    s = np.linalg.svd(np.asarray(y, dtype=np.float64), compute_uv=False)
    return float(2 * s.sum())


def identity_inputs_loss_lower_bound(y: ArrayLike, lam: float) -> float:
    """Lower bound of the regularised loss of a bias-free shallow ReLU net with ``x = I_N``.

    .. math:: \\min_{\\hat y} \\tfrac1N\\|\\hat y - y\\|_F^2 + 2\\lambda \\|\\hat y\\|_*
              = \\sum_i \\tfrac1N \\min(s_i, \\lambda N)^2 + 2\\lambda (s_i - \\lambda N)_+

    (singular-value soft thresholding; valid at every width, attained at infinite width when the
    shrunk target's ``(\\hat y \\hat y^T)^{1/2}`` is CP).  Cost convention:
    ``C = ||Z_L - y||^2 / N`` (:func:`mse_cost`).

    Args:
      y: ``[N, n_out]`` (rows are samples).
      lam: ``lambda >= 0``.

    Returns:
      float.

    References:
      (A) Proposition 14 (with :func:`shallow_min_norm_identity_inputs` as the penalty).
    """
    check_number(lam, "lam", fn="identity_inputs_loss_lower_bound", min_value=0.0,
                 what="a regulariser")
    y = np.asarray(y, dtype=np.float64)
    N = y.shape[0]
    s = np.linalg.svd(y, compute_uv=False)
    t = float(lam) * N
    return float(np.sum(np.minimum(s, t) ** 2) / N + 2 * lam * np.sum(np.maximum(s - t, 0.0)))


def bipartite_width_n_network(N: int) -> tuple[list, float]:
    """Width-``N`` bias-free shallow ReLU net with ``x = I_N`` fitting ``y = B_N`` exactly.

    In paper A's view ``W_1 = B_N / sqrt(c)`` (nonnegative, so ``sigma(W_1) = W_1``) and
    ``W_2 = sqrt(c) B_N B_N^+``, ``c = (N/2) sqrt((N+2)/(N-1))``, so that

    .. math:: \\|W_1\\|^2 + \\|W_2\\|^2 = \\tfrac{\\operatorname{Tr} B_N^2}{c} + c (N - 1)
              = N\\sqrt{(N+2)(N-1)} \\in [N^2, N^2 + N)

    Args:
      N: even size.

    Returns:
      ``(params, norm)``: ``layerlab.nets`` params ``[{"w": W_1^T, "b": 0}, {"w": W_2^T,
      "b": 0}]`` (weights ``[N, N]``, zero biases; use ``beta=0``) and the squared norm.

    References:
      Our construction.  (A) Remark 23 gives a different width-N net,
      ``W_1 = sqrt(N/2) I``, ``W_2 = sqrt(2/N) B_N``, of norm ``N^2 + N`` (20 at N = 4); ours,
      with ``W_1`` proportional to ``B_N`` and the scale balanced, has the smaller norm
      ``N sqrt((N+2)(N-1))`` (16.97 at N = 4; the optimum is N^2 = 16).
    """
    B = bipartite_matrix(N)
    c = (N / 2) * np.sqrt((N + 2) / (N - 1))
    W1 = B / np.sqrt(c)
    W2 = np.sqrt(c) * (B @ np.linalg.pinv(B))
    params = [{"w": jnp.asarray(W.T), "b": jnp.zeros((N,), jnp.asarray(W).dtype)}
              for W in (W1, W2)]
    return params, float(np.sum(W1 ** 2) + np.sum(W2 ** 2))
