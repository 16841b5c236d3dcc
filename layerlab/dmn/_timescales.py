"""Separation-of-time-scales diagnostics (Sec. 2-3 of Dehmamy et al., arXiv:1703.04757).

* ``layer_spectra``: largest singular values of every weight ``W^(k)`` and of the suffix
  products ``prod_{m>=k} W^(m)`` (the proxy for ``A^(k)`` of eq. 11, Fig. 2): lower layers,
  with larger products, move faster and converge first.
* ``distance_to_final``: per-layer ``||w_k(t) - w_k(T)||`` curves (Fig. 5).
* ``eigenvalue_fluctuations`` / ``eq18_variance``: eigenvalue fluctuations of density
  matrices when ``dN`` samples are added, ``Var[d rho_c] = 2 dN rho_c^2 / N^2`` (eq. 18, Fig. 3).
* ``eigenvalue_convergence``: eigenvalues of ``rho`` from the first ``N`` samples (SI Fig. 7).
"""
from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax.tree
from jax.typing import ArrayLike

from layerlab import probes
from layerlab._checks import check_array, check_int, promote_float
from layerlab._types import PyTree


def layer_spectra(weights: Sequence, *, top: int = 1) -> tuple[jax.Array, jax.Array]:
    """Top singular values of each layer's weight and of the products above it.

    .. math::  s^{(k)}_{1..top} = \\mathrm{sv}(W^{(k)}), \\qquad
       p^{(k)}_{1..top} = \\mathrm{sv}\\Big(\\prod_{m \\ge k} W^{(m)}\\Big)
       = \\mathrm{sv}(W^{(k)} W^{(k+1)} \\cdots W^{(L)})

    (row convention ``h @ W``; the product maps layer ``k``'s input to the logits).

    Args:
      weights: ``L`` matrices ``[d_{k-1}, d_k]`` (or ``{"w": ...}`` layer dicts, as made by
        ``layerlab.nets.mlp_init``), in the order applied.
      top: how many leading singular values to keep, an integer in ``[1, smallest width]``.

    Returns:
      ``(s [L, top], p [L, top])``.

    References:
      Eqs. (10)-(12) and Fig. 2 of Dehmamy et al., arXiv:1703.04757.
    """
    fn = "layer_spectra"
    top = check_int(top, "top", fn=fn, min_value=1)
    mats = [w["w"] if isinstance(w, dict) else w for w in weights]
    s = probes.singular_values(list(mats))
    p = probes.product_singular_values(mats, convention="row", suffix=True)
    if top > min(min(m.shape) for m in mats):
        raise ValueError(f"{fn}: top={top} exceeds the smallest layer width "
                         f"{min(min(m.shape) for m in mats)}.")
    return jnp.stack([v[:top] for v in s]), jnp.stack([v[:top] for v in p])


def distance_to_final(snapshots: Sequence, final: Sequence[PyTree], *,
                      relative: bool = False) -> np.ndarray:
    """Per-layer distance of the weights at each snapshot from the final weights.

    .. math::  D_k(t) = \\|w_k(t) - w_k(T)\\|_F
       \\quad (\\text{or } / \\|w_k(T)\\|_F \\text{ with ``relative``})

    Args:
      snapshots: ``T`` parameter snapshots, each a sequence of ``L`` per-layer pytrees.
      final: the final parameters (a sequence of ``L`` per-layer pytrees).
      relative: divide by ``||w_k(T)||`` (``probes.tree_relative_change``; undefined, and
        refused, for a layer whose final weights are all zero).  Without it a zero final
        layer gives ``||w_k(t)||``.

    Returns:
      ``[T, L]`` numpy array.

    References:
      Fig. 5 of Dehmamy et al., arXiv:1703.04757.
    """
    # a layer whose final weights are all zero: no relative change, but the absolute distance
    # is ||w_k(t) - 0|| (computed directly; the other layers keep the scaled route)
    zero = [not relative and all(not np.any(np.asarray(leaf))
                                 for leaf in jax.tree_util.tree_leaves(b)) for b in final]
    out = np.zeros((len(snapshots), len(final)))
    for t, snap in enumerate(snapshots):
        if len(snap) != len(final):
            raise ValueError(f"distance_to_final: snapshot {t} has {len(snap)} layers, final "
                             f"has {len(final)}.")
        for k, (a, b) in enumerate(zip(snap, final)):
            if zero[k]:
                out[t, k] = _zero_final_distance(a, b, t, k)
                continue
            rel, nb = _relative_change_and_norm(a, b)
            if float(nb) == 0.0:  # a zero final layer: the eager call raises its ValueError
                probes.tree_relative_change(a, b)
            rel = float(rel)
            out[t, k] = rel if relative else rel * float(nb)
    return out


@jax.jit
def _relative_change_and_norm(a: PyTree, b: PyTree) -> tuple[jax.Array, jax.Array]:
    """``(tree_relative_change(a, b), ||b||)`` as one program per layer layout (eagerly, each
    of their ~20 ops per leaf shape was its own); a zero ``b`` gives ``inf`` (or NaN) here."""
    return probes.tree_relative_change(a, b), optax.tree.norm(b)


def _zero_final_distance(a: PyTree, b: PyTree, t: int, k: int) -> float:
    """``||a - b||`` for an all-zero ``b`` of the same layout, in float64."""
    la, ta = jax.tree_util.tree_flatten(a)
    lb, tb = jax.tree_util.tree_flatten(b)
    if ta != tb or [np.shape(x) for x in la] != [np.shape(x) for x in lb]:
        raise ValueError(f"distance_to_final: layer {k} of snapshot {t} has structure {ta} "
                         f"with leaf shapes {[np.shape(x) for x in la]}, the final layer "
                         f"{tb} with {[np.shape(x) for x in lb]}.")
    return float(np.sqrt(sum(np.sum(np.square(np.asarray(x, np.float64) -
                                               np.asarray(y, np.float64)))
                             for x, y in zip(la, lb))))


def eq18_variance(eigvals: ArrayLike, n: ArrayLike, dn: ArrayLike) -> jax.Array:
    """Eq. (18): variance of an eigenvalue of ``rho`` when ``dN`` samples are added to ``N``.

    .. math::  \\mathrm{Var}[\\delta\\lambda] = \\frac{2\\, \\delta N\\, \\lambda^2}{N^2}

    (the ``rho_c^2`` of eq. 18 read in the eigenbasis).  It is the ``dN << N`` limit of the
    exact Gaussian value ``2 dN lambda^2 / (N (N + dN))`` (``exact=True`` in the test).  So
    the typical ``|delta lambda| / delta N`` scales as ``lambda / N`` (Fig. 3).

    Args:
      eigvals: ``[...]`` eigenvalues ``lambda``.
      n: current number of samples ``N``.
      dn: number of added samples ``dN``.

    Returns:
      ``[...]`` variances.

    References:
      Eq. (18) and Fig. 3 of Dehmamy et al., arXiv:1703.04757.
    """
    lam = jnp.asarray(eigvals)
    return 2.0 * dn * lam**2 / n**2


def eigenvalue_fluctuations(
    key: jax.Array, h: jax.Array, *, n: int, dn: int, num_draws: int
) -> tuple[jax.Array, jax.Array]:
    """Measured eigenvalue changes when ``dn`` samples are added to ``n`` random samples.

    For each draw, a random ordering of ``h``; ``lambda(N)`` from the first ``n`` rows and
    ``lambda(N + dN)`` from the first ``n + dn`` rows (both with ``rho = h^T h / N``,
    eigenvalues descending); ``delta lambda = lambda(N + dN) - lambda(N)``.

    Args:
      key: PRNG key.
      h: ``[M, d]`` samples, ``M >= n + dn``.
      n: ``N``, an integer ``>= 1`` (``rho(N)`` of no samples is undefined).
      dn: ``dN``, an integer ``>= 1`` (samples added).
      num_draws: number of random orderings, an integer ``>= 1``.

    Returns:
      ``(lam [num_draws, d], dlam [num_draws, d])``: ``lambda(N)`` and ``delta lambda``.

    References:
      Eq. (18) and Fig. 3 of Dehmamy et al., arXiv:1703.04757.
    """
    fn = "eigenvalue_fluctuations"
    n = check_int(n, "n", fn=fn, min_value=1)
    dn = check_int(dn, "dn", fn=fn, min_value=1)
    num_draws = check_int(num_draws, "num_draws", fn=fn, min_value=1)
    h = check_array(h, "h", fn=fn, kind="real")
    (h,) = promote_float(h)  # integer pixels would overflow (or wrap, uint8) in h^T h
    if h.ndim != 2 or h.shape[0] < n + dn:
        raise ValueError(f"{fn}: h must be [M >= n + dn = {n + dn}, d]; got shape {h.shape}.")

    def one(k):
        idx = jax.random.permutation(k, h.shape[0])[: n + dn]
        hs = h[idx]
        a = hs[:n]
        lam_n = jnp.linalg.eigvalsh(a.T @ a / n)[::-1]
        lam_m = jnp.linalg.eigvalsh(hs.T @ hs / (n + dn))[::-1]
        return lam_n, lam_m - lam_n

    return jax.vmap(one)(jax.random.split(key, num_draws))


def eigenvalue_convergence(h: ArrayLike, ns: Sequence[int]) -> np.ndarray:
    """Eigenvalues of ``rho(N) = (1/N) sum_{i<=N} h_i h_i^T`` for each ``N`` in ``ns``.

    Accumulated incrementally (the running sum of outer products is extended from one ``N``
    to the next), so the total cost is one pass over ``h[:max(ns)]``.

    Args:
      h: ``[M, d]`` samples in the order they are seen.
      ns: increasing sample counts ``<= M``.

    Returns:
      ``[len(ns), d]`` eigenvalues, descending.

    References:
      SI Fig. 7 of Dehmamy et al., arXiv:1703.04757.
    """
    h = np.asarray(h, np.float64)
    if h.ndim != 2:
        raise ValueError(f"eigenvalue_convergence: h must be [M, d] samples as rows (rank 2); "
                         f"got shape {h.shape}. Flatten patch batches [n, p, d] to "
                         "h.reshape(-1, d).")
    ns = [int(v) for v in ns]
    if not ns:
        raise ValueError("eigenvalue_convergence: ns must hold at least one sample count; got [].")
    if any(b <= a for a, b in zip(ns[:-1], ns[1:])) or ns[0] < 1 or ns[-1] > h.shape[0]:
        raise ValueError(f"ns must increase within [1, {h.shape[0]}]; got {ns}.")
    acc = np.zeros((h.shape[1], h.shape[1]))
    out, prev = [], 0
    for m in ns:
        acc += h[prev:m].T @ h[prev:m]
        prev = m
        out.append(np.linalg.eigvalsh(acc / m)[::-1])
    return np.stack(out)
