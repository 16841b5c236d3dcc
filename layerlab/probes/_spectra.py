r"""Spectra of weights and representations: singular values (per weight and of partial
products), effective / stable rank, participation ratio, near-one counts (Jacot 2023).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from layerlab._checks import (
    check_array,
    check_finite,
    check_number,
    check_scalar,
    is_concrete,
    promote_float,
)
from layerlab._linalg import svdvals
from layerlab._types import PyTree
from layerlab.probes._scale import unit_scaled


def _as_matrix(w) -> jax.Array:
    """``w`` as ``[prod(leading), d_out]`` in float32 or wider: LAPACK has no bfloat16/float16
    SVD (jax raises ``NotImplementedError: Unsupported dtype bfloat16``) and no integer one."""
    (w,) = promote_float(w)
    return w.reshape(-1, w.shape[-1])


def singular_values(tree: PyTree, *, min_ndim: int = 2) -> PyTree:
    """Singular values of every weight matrix in a parameter pytree.

    Leaves with ``ndim >= min_ndim`` are treated as weights; ``[..., d_out]`` kernels (e.g.
    convolutions ``[kh, kw, c_in, c_out]``) are reshaped to ``[prod(...), d_out]``. Other
    leaves (biases) map to ``None``.

    Args:
      tree: pytree of arrays (e.g. ``[{"w": [d0, d1], "b": [d1]}, ...]``).

    Returns:
      pytree of the same structure: ``[min(rows, cols)]`` descending singular values per
      weight (float32 for half-precision weights, JAX's default float for integer ones:
      float64 under x64; float32 and float64 as they are),
      ``None`` elsewhere.
    """
    return jax.tree.map(
        lambda w: (
            svdvals(_as_matrix(w)) if jnp.ndim(w) >= min_ndim else None
        ),
        tree,
    )


def _weights(mats) -> list[jax.Array]:
    out = []
    for m in mats:
        if isinstance(m, dict):
            if "w" not in m:
                raise ValueError(
                    f"product_singular_values: layer dict without a 'w' entry: {list(m)}."
                )
            m = m["w"]
        (m,) = promote_float(m)  # (no half-precision SVD, see _as_matrix)
        if m.ndim != 2:
            raise ValueError(
                f"product_singular_values expects 2-D weight matrices, got shape {m.shape}."
            )
        out.append(m)
    if not out:
        raise ValueError("product_singular_values: empty list of matrices.")
    return out


def product_singular_values(
    mats: Sequence, *, convention: str = "row", suffix: bool = True
) -> list[jax.Array]:
    r"""Singular values of the partial products of a chain of weight matrices.

    With ``suffix=True`` entry ``k`` is the spectrum of the map from layer ``k``'s input to
    the output, :math:`W_L \cdots W_{k+1} W_k` (the products :math:`\prod_{m \ge k} W_m`
    whose singular values cluster near 1 in deep L2-regularised nets, Jacot 2023, Thm. 6);
    with ``suffix=False`` it is the prefix :math:`W_k \cdots W_1`.

    Args:
      mats: ``L`` matrices in the order they are applied, or layer dicts with a ``"w"``.
        ``convention="row"`` (layerlab's ``x @ w``, ``w [d_in, d_out]``) or ``"column"``
        (``W x``, ``W [d_out, d_in]``).  For square matrices the convention matters.
      suffix: suffix products (default) or prefix products.

    Returns:
      list of ``L`` descending singular-value vectors, ``[min(dims of product k)]`` each.
    """
    ws = _weights(mats)
    if convention == "column":
        ws = [w.T for w in ws]
    elif convention != "row":
        raise ValueError(f"convention must be 'row' or 'column', got {convention!r}.")
    for i, (a, b) in enumerate(zip(ws[:-1], ws[1:])):
        if a.shape[1] != b.shape[0]:
            raise ValueError(
                f"product_singular_values: matrix {i} ({a.shape}) does not chain into matrix "
                f"{i + 1} ({b.shape}) in the {convention!r} convention."
            )
    out = []
    if suffix:
        p = None
        for w in reversed(ws):
            p = w if p is None else w @ p
            out.append(svdvals(p))
        return out[::-1]
    p = None
    for w in ws:
        p = w if p is None else p @ w
        out.append(svdvals(p))
    return out


def _spectrum(s, fn: str = "spectrum", arg: str = "s") -> jax.Array:
    """Singular values from ``s`` (a spectrum or a matrix), in float32 or wider."""
    s = check_array(s, arg, fn=fn, kind="real")
    check_finite(s, arg, fn=fn)  # eager only
    (s,) = promote_float(s)  # (no half-precision SVD, see _as_matrix)
    if s.ndim == 2:
        return svdvals(s)
    if s.ndim != 1:
        raise ValueError(f"{fn}: {arg} must be singular values [k] or a matrix [m, n], got "
                         f"shape {tuple(s.shape)}.")
    return jnp.abs(s)


def effective_rank(s: ArrayLike) -> jax.Array:
    r"""Entropy effective rank (Roy & Vetterli 2007, eq. 3).

    .. math:: \operatorname{erank} = \exp\Big(-\sum_i p_i \log p_i\Big),\qquad
              p_i = \sigma_i / \textstyle\sum_j \sigma_j

    Equals ``r`` for ``r`` equal non-zero singular values; ``1 <= erank <= rank``.

    Args:
      s: ``[k]`` singular values, or a matrix ``[m, n]`` (its singular values are used);
        half-precision inputs are computed in float32, integer ones in JAX's default float.

    Returns:
      scalar; **0 for an all-zero spectrum** (the zero matrix has rank 0).
    """
    s = _spectrum(s, "effective_rank")
    total = jnp.sum(s)
    zero = total == 0  # (not "<= 0": a NaN spectrum gives NaN, not 0, under jit too)
    p = s / jnp.where(zero, 1.0, total)
    safe = jnp.where(p > 0, p, 1.0)
    erank = jnp.exp(-jnp.sum(jnp.where(p > 0, p * jnp.log(safe), jnp.where(p == 0, 0.0, p))))
    return jnp.where(zero, 0.0, erank)


def stable_rank(m: ArrayLike) -> jax.Array:
    r"""Stable rank :math:`\|M\|_F^2 / \|M\|_2^2 = \sum_i \sigma_i^2 / \sigma_1^2`.

    Reference: Rudelson & Vershynin 2007 (J. ACM), §1.

    Args:
      m: matrix ``[m, n]`` or its singular values ``[k]``.

    Returns:
      scalar; 0 for the zero matrix.  Scale invariant in floating point too (the singular
      values are rescaled by a power of two before squaring).
    """
    # scale invariant: singular values brought to a largest one in [0.5, 1) by an exact power
    # of two, else their float32 squares under/overflow (1e-20 M gave 0.0, 1e20 M NaN)
    s = unit_scaled(_spectrum(m, "stable_rank", "m"))
    top = jnp.max(s) ** 2
    zero = top == 0  # a NaN spectrum gives NaN
    return jnp.where(zero, 0.0, jnp.sum(s * s) / jnp.where(zero, 1.0, top))


def participation_ratio(eigs: ArrayLike) -> jax.Array:
    r"""Participation ratio of a spectrum: :math:`(\sum_i\lambda_i)^2/\sum_i\lambda_i^2`.

    For a representation ``x [n, d]`` pass the covariance eigenvalues, e.g.
    ``singular_values`` of the centred ``x`` squared.

    Args:
      eigs: ``[k]`` non-negative values; half-precision inputs are computed in float32,
        integer ones in JAX's default float (float64 under x64; float64 stays float64).
        Negative entries down to ``-8 log2(k) eps max|eigs|`` (the round-off of ``eigvalsh``
        on a PSD matrix) are read as 0.

    Returns:
      scalar in ``[1, k]``; 0 for an all-zero spectrum; NaN under ``jit`` for a clearly
      negative entry (before 2026-11-29 such spectra gave values outside ``[1, k]``:
      ``[3, -1, -1]`` gave 0.09).

    Raises:
      ValueError: (eager calls) non-finite entries, or an entry below the round-off level
        above.
    """
    e = check_array(eigs, "eigs", fn="participation_ratio", kind="real")
    if e.ndim != 1:
        raise ValueError(f"participation_ratio expects a 1-D spectrum, got shape {e.shape}.")
    check_finite(e, "eigs", fn="participation_ratio")  # eager only
    (e,) = promote_float(e)  # float16 squares overflow past 256, uint8 sums wrap
    e = unit_scaled(e)  # scale invariant; float32 squares of 1e-24 underflowed (PR 0.0)
    # a spectrum is non-negative: negatives at round-off level are zeros, others invalid
    tol = 8.0 * max(1.0, math.log2(max(e.shape[0], 2))) * float(jnp.finfo(e.dtype).eps)
    valid = e >= -tol * jnp.max(jnp.abs(e), initial=0.0)
    if is_concrete(e) and not bool(jnp.all(valid)):
        raw = np.asarray(eigs, np.float64).ravel()
        raise ValueError(
            f"participation_ratio: eigs must be non-negative (eigenvalues of a PSD matrix; "
            f"round-off down to -{tol:.1e} x max|eigs| is read as 0), got "
            f"{int(np.sum(~np.asarray(valid)))} entries below that, the smallest {raw.min():.6g} "
            f"(max |eigs| {np.abs(raw).max():.6g})."
        )
    e = jnp.where(valid, jnp.where(e < 0, 0.0, e), jnp.nan)
    sq = jnp.sum(e * e)
    zero = sq == 0  # a NaN spectrum gives NaN
    return jnp.where(zero, 0.0, jnp.sum(e) ** 2 / jnp.where(zero, 1.0, sq))


def count_near_one(s: ArrayLike, tol: float = 0.1) -> jax.Array:
    """Number of singular values within ``tol`` of 1: :math:`\\#\\{i : |\\sigma_i - 1| < tol\\}`
    (the bottleneck rank read off the weights, Jacot 2023, Thm. 6).

    Args:
      s: ``[k]`` singular values (or ``[..., k]``: counted over the last axis).

    Returns:
      int array of shape ``s.shape[:-1]``.

    Raises:
      ValueError: (eager calls) a NaN/Inf entry: the spectrum of a diverged weight has no
        count, where the NaN was silently left out of it (under ``jit`` it still is; an int
        cannot be NaN: check the weights, as ``bottleneck.layer_counts_near_one`` does).
    """
    s = check_array(s, "s", fn="count_near_one", kind="real")
    check_finite(s, "s", fn="count_near_one")  # eager only
    # compared in float32 or wider: a Python tol is weakly typed and was rounded to a half-
    # precision s's dtype (bf16 0.75 with tol 0.2501, rounded to 0.25, was not counted)
    (s,) = promote_float(s)
    if s.ndim == 0:
        raise ValueError("count_near_one: s must be singular values [k] (or [..., k]), got a "
                         "scalar (shape ()).")
    check_scalar(tol, "tol", "count_near_one")  # a [k] tol compared value by value
    check_number(tol, "tol", fn="count_near_one", min_value=0.0, lo_open=True)
    return jnp.sum(jnp.abs(s - 1.0) < tol, axis=-1)
