"""Frank-Wolfe on the covariance reformulation L^k of a shallow bias-free ReLU net (Sec. 3.3).

Setting of Proposition 14: ``X = I_N``, no bias, depth ``L = 2``, MSE cost
``C(Z) = ||Z - Y||_F^2 / N``.  The public :func:`frank_wolfe_shallow` takes the targets with
samples as rows (``y = Y^T`` ``[N, n_out]``); inside, paper A's columns.  With ``K_0^sigma = I``,

.. math:: \\mathcal L^k(K, K^\\sigma, Z) = C(Z) + \\lambda \\operatorname{Tr} K
          + \\lambda \\operatorname{Tr}[Z (K^\\sigma)^+ Z^T],
          \\qquad (K, K^\\sigma) \\in S = \\operatorname{cone}\\{(x x^T, \\sigma(x)\\sigma(x)^T)\\}

is jointly convex (the matrix-fractional term is jointly convex in ``(Z, K^sigma)``), but the
cone ``S`` has infinitely many generators and no usable projection.  Frank-Wolfe needs only a
linear minimisation oracle (LMO) over the generators: with ``G = -dL^k/dK^sigma =
lambda P Z^T Z P`` (``P = (K^sigma + rho I)^{-1}``, ``Z`` the optimal output),

.. math:: \\min_{\\|x\\| = 1} \\lambda \\|x\\|^2 - \\sigma(x)^T G \\sigma(x)
          = \\lambda - \\max_{u \\ge 0, \\|u\\| = 1} u^T G u

(a nonnegative principal-eigenvector problem, solved by projected power iterations from several
starts).  We run the fully-corrective variant: after adding the oracle's atom, all atom weights
``c >= 0`` are re-optimised (L-BFGS-B).  The atoms with ``c_i > 0`` are the neurons
``sqrt(c_i) x_i`` of a network of that width reaching the same loss; their number upper-bounds
``Rank_sigma`` at the optimum found.  Host-side numpy/scipy (float64).

References:
  (A) Jacot, Golikov, Hongler, Gabriel, NeurIPS 2022: Proposition 3 (L^k), Proposition 5
  (partial convexity), Section 3.3 (Frank-Wolfe), Proposition 14.
"""
from __future__ import annotations

import time

import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from layerlab._checks import check_finite, check_int, check_number
from layerlab.bottleneck._layout import check_scalar


def _inner(Ks: np.ndarray, Y: np.ndarray, lam: float, ridge: float):
    """Optimal ``Z`` for fixed ``K^sigma`` and the value of ``C(Z) + lam Tr[Z P Z^T]``."""
    N = Y.shape[1]
    A = Ks + ridge * np.eye(N)
    # Z (I/N + lam P) = Y/N  <=>  Z = Y A (A + N lam I)^{-1}
    Z = np.linalg.solve((A + N * lam * np.eye(N)).T, (Y @ A).T).T
    P = np.linalg.pinv(A, hermitian=True)
    val = np.sum((Z - Y) ** 2) / N + lam * np.sum((Z @ P) * Z)
    return Z, P, val


def _shallow_lk_loss(c: np.ndarray, atoms: np.ndarray, Y: np.ndarray, lam: float,
                    ridge: float = 1e-9) -> float:
    """``L^k`` at ``K = sum_i c_i x_i x_i^T``, ``K^sigma = sum_i c_i sigma(x_i) sigma(x_i)^T``,
    minimised over the outputs ``Z``.

    Args:
      c: ``[m]`` nonnegative weights.  atoms: ``[m, N]`` unit vectors ``x_i``.
      Y: ``[n_out, N]`` (paper A's columns).  lam: ``lambda``.
      ridge: Tikhonov ``rho`` of ``(K^sigma)^+``.

    Returns:
      float.
    """
    S = np.maximum(atoms, 0.0)
    Ks = (S * c[:, None]).T @ S
    return float(lam * np.sum(c * np.sum(atoms ** 2, 1)) + _inner(Ks, Y, lam, ridge)[2])


def _loss_and_grad(c, atoms, Y, lam, ridge):
    S = np.maximum(atoms, 0.0)
    Ks = (S * c[:, None]).T @ S
    Z, P, val = _inner(Ks, Y, lam, ridge)
    G = lam * P @ Z.T @ Z @ P
    sq = np.sum(atoms ** 2, 1)
    # envelope theorem: d/dc_i = lam |x_i|^2 - sigma(x_i)^T G sigma(x_i)
    grad = lam * sq - np.einsum("ia,ab,ib->i", S, G, S)
    return float(lam * np.sum(c * sq) + val), grad


def _lmo(G: np.ndarray, rng: np.random.Generator, starts: int = 16, iters: int = 200):
    """``argmax_{u >= 0, |u| = 1} u^T G u`` by projected power iteration from several starts."""
    N = G.shape[0]
    w, V = np.linalg.eigh(G)
    cands = [np.maximum(V[:, -1], 0), np.maximum(-V[:, -1], 0)] + list(np.eye(N))
    cands += list(np.abs(rng.standard_normal((starts, N))))
    best, best_val = None, -np.inf
    shift = max(0.0, -float(w[0])) + 1e-12
    for u in cands:
        if np.linalg.norm(u) == 0:
            continue
        u = u / np.linalg.norm(u)
        for _ in range(iters):
            v = np.maximum(G @ u + shift * u, 0.0)
            nv = np.linalg.norm(v)
            if nv == 0:
                break
            v = v / nv
            if np.linalg.norm(v - u) < 1e-13:
                u = v
                break
            u = v
        val = float(u @ G @ u)
        if val > best_val:
            best, best_val = u, val
    return best, best_val


def frank_wolfe_shallow(y: ArrayLike, lam: float, *, iters: int = 100, ridge: float = 1e-9,
                        seed: int = 0, tol: float = 1e-9, prune: float = 1e-10) -> dict:
    """Fully-corrective Frank-Wolfe on ``L^k`` over the cone ``S`` (``X = I_N``, ``L = 2``).

    Args:
      y: ``[N, n_out]`` targets (rows are samples).
      lam: ``lambda > 0``.
      iters: maximal number of oracle calls (``>= 1``).
      ridge: Tikhonov ``rho`` of ``(K^sigma)^+``.
      seed: seed of the oracle's random starts.
      tol: stop when the oracle's best atom has directional derivative ``>= -tol * lambda``
        (no descent direction left in the cone: a global minimum of the convex problem).
      prune: atoms with weight below ``prune * max(c)`` are dropped.

    Returns:
      dict with ``loss`` ``[T]`` (after each iteration), ``gap`` ``[T]`` (``lambda - max u^T G u``,
      ``>= 0`` at the optimum), ``time_s`` ``[T]`` (cumulative), ``atoms`` ``[N, m]`` (unit
      columns ``x_i``, one per neuron), ``c`` ``[m]``, ``K_sigma`` ``[N, N]``
      (``sum_i c_i sigma(x_i) sigma(x_i)^T``), ``width`` (number of atoms kept), ``params``
      (``layerlab.nets`` params of the width-m network, zero biases: use ``beta=0``) and
      ``final_loss``.

    References:
      (A) Section 3.3 (Frank-Wolfe on the second reformulation), Proposition 3.
    """
    import scipy.optimize

    fn = "frank_wolfe_shallow"
    y = np.asarray(y, dtype=np.float64)
    if y.ndim != 2:
        raise ValueError(f"{fn}: y must be [N, n_out] (rows are samples); got "
                         f"shape {y.shape}.")
    Y = np.ascontiguousarray(y.T)  # paper A's columns from here on (C order: same BLAS calls)
    check_scalar(lam, "lam", fn)
    check_number(lam, "lam", fn=fn, min_value=0.0, lo_open=True, what="a regulariser")
    check_int(iters, "iters", fn=fn, min_value=1)
    check_scalar(ridge, "ridge", fn)
    check_number(ridge, "ridge", fn=fn, min_value=0.0)
    check_scalar(tol, "tol", fn)
    check_number(tol, "tol", fn=fn, min_value=0.0)
    check_scalar(prune, "prune", fn)
    check_number(prune, "prune", fn=fn, min_value=0.0)
    lam, ridge, tol, prune = float(lam), float(ridge), float(tol), float(prune)
    N = Y.shape[1]
    rng = np.random.default_rng(seed)
    atoms = np.zeros((0, N))
    c = np.zeros((0,))
    losses, gaps, times = [], [], []
    t0 = time.perf_counter()
    for _ in range(iters):
        S = np.maximum(atoms, 0.0)
        Ks = (S * c[:, None]).T @ S if atoms.shape[0] else np.zeros((N, N))
        Z, P, _ = _inner(Ks, Y, lam, ridge)
        G = lam * P @ Z.T @ Z @ P
        u, val = _lmo(G, rng)
        gap = lam - val
        gaps.append(gap)
        if gap >= -tol * lam and atoms.shape[0]:
            losses.append(_shallow_lk_loss(c, atoms, Y, lam, ridge))
            times.append(time.perf_counter() - t0)
            break
        atoms = np.concatenate([atoms, u[None]], 0)
        c = np.concatenate([c, [0.0]])
        c0 = c.copy()
        c0[-1] = max(1e-3, float(np.max(c, initial=0.0)))

        res = scipy.optimize.minimize(_loss_and_grad, c0, args=(atoms, Y, lam, ridge), jac=True,
                                      method="L-BFGS-B",
                                      bounds=[(0.0, None)] * len(c0),
                                      options={"maxiter": 500, "ftol": 1e-15, "gtol": 1e-12})
        c = res.x
        keep = c > prune * max(c.max(), 1e-300)
        atoms, c = atoms[keep], c[keep]
        losses.append(float(res.fun))
        times.append(time.perf_counter() - t0)
    S = np.maximum(atoms, 0.0)
    W1 = np.sqrt(c)[:, None] * atoms                       # [m, N]
    Ks = (S * c[:, None]).T @ S
    Z, _, _ = _inner(Ks, Y, lam, ridge)
    W2 = Z @ np.linalg.pinv(np.maximum(W1, 0.0))           # [n_out, m]
    params = [{"w": W.T, "b": np.zeros(W.shape[0])} for W in (W1, W2)]
    return {"loss": np.asarray(losses), "gap": np.asarray(gaps), "time_s": np.asarray(times),
            "atoms": atoms.T, "c": c, "K_sigma": Ks, "width": int(atoms.shape[0]),
            "params": params, "final_loss": float(losses[-1])}


def cp_rank_lower_bound(A: ArrayLike, *, rel_tol: float = 1e-6, zero_tol: float = 0.0,
                        rank_rtol: float | None = None) -> dict:
    """A computable lower bound on the CP-rank of a completely positive ``A``.

    If ``A = sum_i b_i b_i^T`` with ``b_i >= 0``, each support ``supp(b_i)`` is a clique of the
    support graph ``G(A)`` (edge ``ij`` iff ``A_ij > 0``, no cancellation is possible), and the
    cliques cover every edge.  So ``Rank_cp(A) >=`` the edge clique cover number ``>=`` the size
    of any set of edges no two of which lie in a common clique (two edges lie in a common
    clique iff their endpoints are pairwise adjacent).  We build such a set greedily; for a
    triangle-free ``G(A)`` it is every edge (Prop. 13: ``Rank_cp(B_N) = N^2/4``).
    Also ``Rank_cp(A) >= rank(A)``, counted as the singular values above
    ``rank_rtol * s_max``: by default ``100 N eps`` of ``A``'s own dtype (the rule of
    ``numpy.linalg.matrix_rank``, ``N eps s_max``, with a margin for the rounding of a computed
    ``A`` such as ``S S^T``): ``9.5e-5`` for a float32 ``A`` at ``N = 8``, ``1.8e-13`` for float64.
    A fixed ``1e-9`` counted float32 rounding noise as rank (a ``K^sigma`` of CP-rank ``<= 2``
    got the bound 5).  Pass the dtype in which ``A`` was computed: a float32 result cast to
    float64 is judged by float64's ``eps``.

    The bound is certified for the matrix as given: the edges to cover are the entries that
    are certainly nonzero (``A_ij > rel_tol * max|A|``), while two edges are taken to need two
    cliques only if a pair of their endpoints is certainly *not* adjacent, i.e. ``A_ab = 0``
    exactly (``|A_ab| <= zero_tol * max|A|`` with ``zero_tol > 0``).  A tiny entry is a tiny
    edge, not a missing one: ``v v^T`` with ``v = (1, 1e-3, 1e-3)`` has CP-rank 1 although
    ``A_12 = 1e-6``.  Pass ``zero_tol > 0`` only for a numerical approximation of a matrix
    whose small entries are known to be zeros (e.g. an optimiser's output for ``B_N``); the
    bound is then certified for that matrix with those entries set to zero.

    Args:
      A: ``[N, N]`` symmetric entrywise-nonnegative PSD (e.g. ``K^sigma - beta^2 1 1^T``).
      rel_tol: entries ``<= rel_tol * max|A|`` are not counted as edges to cover.
      zero_tol: entries ``|A_ab| <= zero_tol * max|A|`` count as zero (non-adjacent) in the
        common-clique test; default ``0``: only exact zeros.  Edges are then also required to
        exceed ``zero_tol * max|A|``.
      rank_rtol: singular values ``<= rank_rtol * s_max`` do not count toward ``rank(A)``;
        default ``100 * N * eps(A.dtype)`` (integer or boolean ``A``: float64's ``eps``).

    Returns:
      dict with ``lower`` (the max of both bounds), ``rank``, ``edge_packing``, ``edges``
      (certain edges of the support graph) and ``triangle_free`` (of the graph of the entries
      not counted as zero).

    References:
      (A) Definition 12, Proposition 13 and the bound ``Rank_sigma(K, K^sigma) >=
      Rank_cp(K^sigma - beta^2 11^T)`` for ReLU (Section 4.1).
    """
    fn = "cp_rank_lower_bound"
    check_scalar(rel_tol, "rel_tol", fn)
    check_number(rel_tol, "rel_tol", fn=fn, min_value=0.0)
    check_scalar(zero_tol, "zero_tol", fn)
    check_number(zero_tol, "zero_tol", fn=fn, min_value=0.0)
    check_scalar(rank_rtol, "rank_rtol", fn)
    check_number(rank_rtol, "rank_rtol", fn=fn, min_value=0.0, allow_none=True)
    A = np.asarray(A)
    in_dtype = A.dtype
    A = A.astype(np.float64)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"{fn}: A must be square [N, N]; got shape {A.shape}.")
    check_finite(A, "A", fn=fn, hint="the CP-rank of a non-finite matrix is undefined.")
    N = A.shape[0]
    if rank_rtol is None:
        eps = (float(jnp.finfo(in_dtype).eps) if jnp.issubdtype(in_dtype, jnp.floating)
               else float(np.finfo(np.float64).eps))
        rank_rtol = 100.0 * N * eps
    scale = np.abs(A).max(initial=0.0)
    off = ~np.eye(N, dtype=bool)
    maybe = (np.abs(A) > zero_tol * scale) & off  # possibly adjacent: not known to be zero
    edge = (A > max(rel_tol, zero_tol) * scale) & off  # certainly an edge (to be covered)
    edges = [(i, j) for i in range(N) for j in range(i + 1, N) if edge[i, j]]
    chosen: list[tuple[int, int]] = []
    for e in edges:
        ok = True
        for f in chosen:
            verts = sorted(set(e) | set(f))
            if all(maybe[a, b] for a in verts for b in verts if a < b):  # maybe a common clique
                ok = False
                break
        if ok:
            chosen.append(e)
    s = np.linalg.svd(A, compute_uv=False)
    rank = int(np.sum(s > float(rank_rtol) * max(s.max(initial=0.0), 1e-300)))
    tri_free = bool(np.trace(np.linalg.matrix_power(maybe.astype(float), 3)) == 0)
    return {"lower": max(rank, len(chosen)), "rank": rank, "edge_packing": len(chosen),
            "edges": len(edges), "triangle_free": tri_free}
