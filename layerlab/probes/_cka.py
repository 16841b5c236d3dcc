r"""Representation similarity and kernel comparisons: Gram matrices, HSIC, CKA (full and
minibatch), kernel alignment and kernel change rate.

Kornblith et al. 2019 (CKA), Nguyen et al. 2021 (minibatch CKA), Cristianini et al. 2002
(kernel alignment). Pure ``jnp``; shapes are checked (static under ``jit``).

Every function computes in float32 or wider: integer inputs (uint8 pixels overflow in
``x @ x.T``) and half-precision ones (bfloat16's eps ~ 8e-3 cannot resolve the centring;
float16 overflows beyond 65504 in the sums of squares) are promoted first (integers to JAX's
default float, float64 under x64), float64 stays float64.  A representation constant over
the samples (a dead layer) gives CKA 0, where CKA is 0/0, in every function here.  The
scale-invariant functions rescale their inputs by an exact power of two first
(``_scale.py``): float32 inputs of 1e-20 or 1e20 neither underflow nor overflow in the sums
of squares.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike

from layerlab._checks import (
    check_array,
    check_finite,
    check_float_dtype,
    check_number,
    check_result_finite,
    is_concrete,
    promote_float,
)
from layerlab.probes._scale import exponent, times_pow2, unit_scaled


def _features(x, name: str) -> jax.Array:
    """``x`` as ``[n, features]`` in float32 or wider: integer inputs (uint8 pixels) would
    overflow in ``x @ x.T``, and half precision (bf16 eps ~ 8e-3) cannot resolve the
    centring nor the sums of squares (float16 overflows beyond 65504)."""
    fn, _, arg = name.partition(" ")
    x = check_array(x, arg or "x", fn=fn, kind="real")
    check_finite(x, arg or "x", fn=fn)  # eager only
    if x.ndim < 2:
        raise ValueError(
            f"{name}: expected a representation of shape [n, features...], got {x.shape}; "
            "reshape a single feature to [n, 1]."
        )
    if math.prod(x.shape[1:]) == 0:
        raise ValueError(
            f"{fn}: {arg or 'x'} must have at least one feature per sample, got shape "
            f"{tuple(x.shape)}."
        )
    (x,) = promote_float(x)
    return x.reshape(x.shape[0], -1)


def _scalar(v, name: str, fn: str) -> None:
    """A bandwidth is one number: an array of them broadcast against the ``[n, n]`` distances
    (or failed to)."""
    if v is not None and np.ndim(v) != 0:
        raise ValueError(f"{fn}: {name} must be a scalar, got shape {tuple(np.shape(v))}.")


def _pair(x, y, fn: str):
    x, y = _features(x, f"{fn} x"), _features(y, f"{fn} y")
    if x.shape[0] != y.shape[0]:
        raise ValueError(
            f"{fn}: x and y must hold the same n samples, got {x.shape[0]} and {y.shape[0]}."
        )
    if x.shape[0] < 2:
        raise ValueError(f"{fn}: need at least 2 samples, got {x.shape[0]}.")
    return x, y


def _square(k, name: str) -> jax.Array:
    """A square kernel matrix in float32 or wider (see :func:`_features`)."""
    fn, _, arg = name.partition(" ")
    k = check_array(k, arg or "k", fn=fn, kind="real")
    check_finite(k, arg or "k", fn=fn)  # eager only
    if k.ndim != 2 or k.shape[0] != k.shape[1]:
        raise ValueError(f"{name}: expected a square [n, n] kernel matrix, got {k.shape}.")
    (k,) = promote_float(k)
    return k


def _same_square(k1, k2, fn: str, min_n: int = 1):
    k1, k2 = _square(k1, f"{fn} K1"), _square(k2, f"{fn} K2")
    if k1.shape != k2.shape:
        raise ValueError(f"{fn}: kernel matrices differ in shape, {k1.shape} vs {k2.shape}.")
    if k1.shape[0] < min_n:
        raise ValueError(
            f"{fn}: K1 and K2 must be [n, n] kernels of n >= {min_n} samples, got "
            f"n = {k1.shape[0]}."
        )
    return k1, k2


def _rounding_tol(k: jax.Array) -> float:
    """Relative rounding level of a kernel centred in one pass over ``n = k.shape[0]`` rows:
    ``8 log2(n) eps`` (a computed mean is off by a few eps of the entries, measured up to
    5 eps for n up to 10^6 on CPU)."""
    return 8.0 * max(1.0, math.log2(max(k.shape[0], 2))) * float(jnp.finfo(k.dtype).eps)


def _centred_kernel(k: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``H K H`` and whether ``K`` is constant at rounding level (``||HKH||_F <= tol ||K||_F``,
    :func:`_rounding_tol`): the kernel of a constant representation, whose CKA is 0/0 and
    reported as 0."""
    kc = center_gram(k)
    const = jnp.sqrt(jnp.sum(kc * kc)) <= _rounding_tol(k) * jnp.sqrt(jnp.sum(k * k))
    return kc, const


def _cosine(a: jax.Array, b: jax.Array, a_zero, b_zero) -> jax.Array:
    """Frobenius cosine of ``a`` and ``b``; 0 where either is flagged zero (0/0); a NaN input
    stays NaN (under ``jit`` it cannot raise)."""
    degenerate = a_zero | b_zero
    prod = jnp.sum(a * a) * jnp.sum(b * b)
    # safe sqrt (the double where): sqrt'(0) = inf would turn the zero cotangent of a
    # degenerate pair into NaN gradients; a NaN product stays NaN
    den = jnp.sqrt(jnp.where(degenerate & ~jnp.isnan(prod), 1.0, prod))
    out = jnp.sum(a * b) / den
    return jnp.where(degenerate & ~jnp.isnan(den), 0.0, out)


# ---------------------------------------------------------------------------- kernels
def gram_linear(x: ArrayLike) -> jax.Array:
    """Linear Gram matrix :math:`K = X X^\\top`.

    Args:
      x: ``[n, ...]`` (trailing axes flattened).

    Returns:
      ``[n, n]``.
    """
    x = _features(x, "gram_linear")
    return x @ x.T


def _sq_dists(x: jax.Array) -> jax.Array:
    """Squared distances of the rows of a *column-centred* ``x`` by ``|a|^2 + |b|^2 - 2 a.b``:
    clamped at 0 (rounding can make the difference negative) and exactly 0 on the diagonal.
    On uncentred rows the three terms ~ ``|offset|^2`` cancel: float32 rows ``100 + 0.1 z``
    lost 18 % of the kernel, ``1000 + 0.1 z`` gave NaN."""
    sq = jnp.sum(x * x, axis=1)
    d2 = jnp.maximum(sq[:, None] + sq[None, :] - 2.0 * (x @ x.T), 0.0)
    return jnp.where(jnp.eye(x.shape[0], dtype=bool), 0.0, d2)


def _centred(x: jax.Array) -> jax.Array:
    """Column-centred ``x``, in two passes (the first computed mean is off by a few eps of the
    offset; see :func:`_centre_columns`): distances are translation invariant, their
    ``|a|^2 + |b|^2 - 2 a.b`` form is not."""
    xc = x - jnp.mean(x, axis=0, keepdims=True)
    return xc - jnp.mean(xc, axis=0, keepdims=True)


def _rbf_gram(xc: jax.Array, sigma_frac, sigma=None, *,
              const=False) -> tuple[jax.Array, jax.Array]:
    """RBF Gram matrix of the centred rows ``xc`` and its bandwidth ``sigma^2`` (absolute
    ``sigma``, else ``sigma_frac^2`` times the median squared distance): the one kernel of
    :func:`gram_rbf`, :func:`rbf_cka` and the minibatch RBF CKA.

    ``const`` (a boolean scalar): the caller's verdict that the representation is constant
    (its own test: :func:`gram_rbf` rows exactly equal, :func:`rbf_cka` every column within
    4 eps, :func:`_centre_columns`).  There the kernel is all ones (every distance is 0, so
    every bandwidth gives ``exp(0)``) and is computed with the bandwidth 1, not the median
    one, which is 0: ``0/0`` would make the gradient NaN, not 0."""
    d2 = _sq_dists(xc)
    s2 = sigma**2 if sigma is not None else sigma_frac**2 * jnp.median(d2)
    return jnp.where(const, 1.0, jnp.exp(-d2 / (2.0 * jnp.where(const, 1.0, s2)))), s2


def _zero_bandwidth_eagerly(s2, const) -> bool:
    """Whether an eagerly computed median bandwidth ``s2`` is 0 on a representation that is
    not constant (the kernel 0/0, NaN); False under ``jit``, where it cannot be read."""
    return is_concrete(s2) and float(s2) == 0.0 and not bool(const)


def gram_rbf(x: ArrayLike, *, sigma_frac: float = 0.8, sigma: ArrayLike | None = None) -> jax.Array:
    r"""RBF Gram matrix with a median-heuristic bandwidth.

    .. math:: K_{ij} = \exp\!\big(-\|x_i-x_j\|^2 / (2\sigma^2)\big),\qquad
              \sigma^2 = \text{sigma\_frac}^2 \cdot \operatorname{median}_{i,j}\|x_i-x_j\|^2

    (median over all ``n^2`` entries, diagonal included, as in Kornblith et al. 2019's
    reference implementation, §3 "RBF CKA", where ``sigma_frac`` is the fraction of the
    median distance).  The distances are computed from the column-centred ``x``, so the
    kernel is translation invariant in floating point too (before 2026-11-29 float32 rows
    ``100 + 0.1 z`` were 0.18 off and ``1000 + 0.1 z`` NaN), and the diagonal is exactly 1.
    With the median bandwidth the kernel is scale invariant, and ``x`` is first rescaled by an
    exact power of two (``_scale.py``): float32 rows of 1e-20 or 1e20 give the scale-1 kernel
    (their squared distances under/overflowed: NaN).

    Args:
      x: ``[n, ...]``.
      sigma_frac: bandwidth as a fraction of the median pairwise distance.
      sigma: absolute bandwidth (overrides ``sigma_frac``).

    Returns:
      ``[n, n]``; with the median bandwidth, **all ones for a constant** ``x`` (every distance
      is 0, so every bandwidth gives ``exp(0)``; as :func:`rbf_cka` uses it), where it was NaN.

    Raises:
      ValueError: (eager calls, median bandwidth) a zero median distance while some samples
        differ (more than half of the ``n^2`` squared distances are 0): the bandwidth is 0 and
        the kernel 0/0 (NaN under ``jit``); pass ``sigma``.
    """
    x = _features(x, "gram_rbf")
    _scalar(sigma, "sigma", "gram_rbf")
    _scalar(sigma_frac, "sigma_frac", "gram_rbf")
    if sigma is None:
        check_number(sigma_frac, "sigma_frac", fn="gram_rbf", min_value=0.0, lo_open=True,
                     what="a fraction of the median distance")
    else:
        check_number(sigma, "sigma", fn="gram_rbf", min_value=0.0, lo_open=True)
        return _rbf_gram(_centred(x), sigma_frac, sigma)[0]
    # scale free: an exact power of two keeps the squared distances in range (1e-20 rows
    # underflowed to a zero median, 1e20 ones overflowed: NaN kernels)
    flat = jnp.all(x == x[:1])  # a constant x: every distance 0, K = 1 for any bandwidth
    k, s2 = _rbf_gram(unit_scaled(_centred(x)), sigma_frac, const=flat)
    if _zero_bandwidth_eagerly(s2, flat):
        raise ValueError(
            f"gram_rbf: x has a zero median pairwise distance (more than half of its "
            f"{x.shape[0]}^2 squared distances are 0: most samples coincide), so the "
            "median-heuristic bandwidth is 0 and the kernel 0/0; pass sigma.")
    return k


def center_gram(k: ArrayLike) -> jax.Array:
    r"""Double centring :math:`H K H` with :math:`H = I - \tfrac1n 11^\top`.

    Args:
      k: ``[n, n]``.

    Returns:
      ``[n, n]``.
    """
    k = _square(k, "center_gram")
    k = k - jnp.mean(k, axis=0, keepdims=True)
    return k - jnp.mean(k, axis=1, keepdims=True)


def hsic(k1: ArrayLike, k2: ArrayLike) -> jax.Array:
    r"""Biased HSIC estimator (Gretton et al. 2005):
    :math:`\operatorname{tr}(K H L H) / (n-1)^2`, the quantity CKA normalises (Kornblith et al.
    2019, eq. 3).

    Args:
      k1, k2: ``[n, n]`` kernel matrices :math:`K, L`.

    Returns:
      scalar :math:`\operatorname{tr}(KHLH) / (n-1)^2`.

    Raises:
      ValueError: fewer than 2 samples (the estimate divides by ``(n-1)^2``).
    """
    k1, k2 = _same_square(k1, k2, "hsic", min_n=2)
    n = k1.shape[0]
    return jnp.sum(center_gram(k1) * center_gram(k2)) / (n - 1) ** 2


def unbiased_hsic(k1: ArrayLike, k2: ArrayLike) -> jax.Array:
    r"""Unbiased HSIC estimator (Song et al. 2012, JMLR; Nguyen et al. 2021, eq. 3).

    .. math:: \mathrm{HSIC}_1(K, L) = \frac{1}{n(n-3)}\Big[\operatorname{tr}(\tilde K\tilde L)
              + \frac{1^\top\tilde K 1\; 1^\top\tilde L 1}{(n-1)(n-2)}
              - \frac{2}{n-2}\, 1^\top \tilde K\tilde L 1\Big]

    with :math:`\tilde K, \tilde L` = ``K, L`` with zeroed diagonals.

    Args:
      k1, k2: ``[n, n]`` kernel matrices :math:`K, L`, ``n >= 4``.

    Returns:
      scalar.
    """
    k1, k2 = _same_square(k1, k2, "unbiased_hsic", min_n=4)  # (it divides by n (n - 3))
    n = k1.shape[0]
    eye = jnp.eye(n, dtype=bool)
    kt = jnp.where(eye, 0.0, k1)
    lt = jnp.where(eye, 0.0, k2)
    ksum, lsum = kt.sum(axis=0), lt.sum(axis=1)  # 1^T K~ and L~ 1
    trace = jnp.sum(kt * lt.T)
    return (
        trace + ksum.sum() * lsum.sum() / ((n - 1) * (n - 2)) - 2.0 / (n - 2) * (ksum @ lsum)
    ) / (n * (n - 3))


def cka(k1: ArrayLike, k2: ArrayLike, *, unbiased: bool = False) -> jax.Array:
    r"""Centred kernel alignment of two Gram matrices (Kornblith et al. 2019, eq. 4).

    .. math:: \mathrm{CKA}(K, L) = \frac{\mathrm{HSIC}(K, L)}
              {\sqrt{\mathrm{HSIC}(K, K)\,\mathrm{HSIC}(L, L)}}

    Args:
      k1, k2: ``[n, n]`` Gram matrices :math:`K, L`.
      unbiased: use :func:`unbiased_hsic` instead of :func:`hsic`.

    Returns:
      scalar in ``[0, 1]`` (biased); the unbiased estimate may leave that range slightly.
      **0 when either kernel is constant** (``H K H = 0`` up to rounding: the kernel of a
      constant representation, e.g. the zero kernel), where CKA is 0/0.

    Raises:
      ValueError: fewer than 2 samples (4 with ``unbiased=True``); non-finite inputs (eager
        calls only; under ``jit`` a NaN input gives NaN).
    """
    unbiased = bool(unbiased)  # a static argument of the jitted core: a Python bool
    k1, k2 = _same_square(k1, k2, "cka", min_n=4 if unbiased else 2)
    return _cka_core(k1, k2, unbiased=unbiased)


# The numerical cores below are jitted: called eagerly (the common use, on stored
# representations) they ran op by op, each of their ~30-60 primitives compiled and
# dispatched on its own.  The argument checks stay outside (eager, before the call); under
# an outer jit the cores are inlined.
@functools.partial(jax.jit, static_argnames="unbiased")
def _cka_core(k1, k2, *, unbiased):
    # CKA is invariant to rescaling either kernel: bring each to a largest entry in [0.5, 1)
    # (an exact power of two), else its float32 sums of squares under/overflow (the Grams of
    # 1e-12 x or 1e12 x gave CKA 0.0)
    k1, k2 = unit_scaled(k1), unit_scaled(k2)
    (k1c, k1_const), (k2c, k2_const) = _centred_kernel(k1), _centred_kernel(k2)
    degenerate = k1_const | k2_const
    if not unbiased:  # HSIC(K, L) (n-1)^2 = <HKH, HLH>: CKA is their cosine
        return _cosine(k1c, k2c, k1_const, k2_const)
    # HSIC_1 is invariant to double centring (HSIC_1(HKH, L) = HSIC_1(K, L)), and on the
    # centred kernels its sums do not cancel: on raw Grams of offset features (sigmoid
    # units, x = 10 + 0.1 z) the float32 terms of 1^T K~ 1 ~ n^2 offset^2 cancelled to the
    # rounding level (0.0 for 0.2068)
    prod = unbiased_hsic(k1c, k1c) * unbiased_hsic(k2c, k2c)
    ok = (prod > 0) & ~degenerate
    out = unbiased_hsic(k1c, k2c) / jnp.sqrt(jnp.where(ok, prod, 1.0))
    # 0/0 (a constant representation) is 0; a NaN input stays NaN (under jit it cannot raise)
    return jnp.where(ok, out, jnp.where(jnp.isnan(prod), jnp.nan, 0.0))


def linear_cka(x: ArrayLike, y: ArrayLike, *, method: str = "auto") -> jax.Array:
    r"""Linear CKA between two representations of the same ``n`` samples (Kornblith et al. 2019,
    eq. 4 with linear kernels, rewritten in feature space by their eq. 1).

    .. math:: \mathrm{CKA}_{lin}(X, Y) = \frac{\|Y_c^\top X_c\|_F^2}
              {\|X_c^\top X_c\|_F\,\|Y_c^\top Y_c\|_F}

    with :math:`X_c, Y_c` the column-centred representations. Computed in feature space
    (``O(n (pq + p^2 + q^2))``) or, when cheaper (``n`` small against the feature
    dimensions), through the ``n x n`` Gram matrices, ``O(n^2 (p + q))``; the forms are
    equal. Invariant to orthogonal transforms and isotropic scaling of either argument;
    ``linear_cka(x, x) = 1``.

    Args:
      x: ``[n, p...]``, y: ``[n, q...]`` (trailing axes flattened).
      method: ``"auto"`` (the cheaper form), ``"features"`` or ``"gram"``.

    Returns:
      scalar in ``[0, 1]``; **0 when either representation is constant over the samples**
      (CKA is 0/0 there: a constant representation shares no variation with anything).
      Constancy is judged column by column (a column whose centred entries are at the
      rounding level of its own entries is constant): a constant column adds nothing, so
      ``linear_cka(x, y)`` is unchanged by appending a constant column to ``x`` or by
      translating ``x``.

    Raises:
      ValueError: fewer than 2 samples; non-finite inputs (eager calls only).
    """
    x, y = _pair(x, y, "linear_cka")
    if method not in ("auto", "features", "gram"):
        raise ValueError(
            f"linear_cka: method must be 'auto', 'features' or 'gram', got {method!r}."
        )
    return check_result_finite(_linear_cka_core(x, y, method=method), "linear CKA",
                               fn="linear_cka")


@functools.partial(jax.jit, static_argnames="method")
def _linear_cka_core(x, y, *, method):
    x, x_const = _centre_scaled(x)
    y, y_const = _centre_scaled(y)
    degenerate = x_const | y_const
    n, p, q = x.shape[0], x.shape[1], y.shape[1]
    # pick the cheaper of the two equal forms: n^2 (p + q) flops (Gram) vs n (pq + p^2 + q^2)
    use_gram = n * (p + q) < p * q + p * p + q * q if method == "auto" else method == "gram"
    if use_gram:  # Gram form: ||Yc^T Xc||^2 = <Kc, Lc>_F
        k1, k2 = x @ x.T, y @ y.T
        num, den = jnp.sum(k1 * k2), jnp.sqrt(jnp.sum(k1 * k1) * jnp.sum(k2 * k2))
    else:
        xy, xx, yy = y.T @ x, x.T @ x, y.T @ y
        num, den = jnp.sum(xy * xy), jnp.sqrt(jnp.sum(xx * xx) * jnp.sum(yy * yy))
    return jnp.where(degenerate, 0.0, num / jnp.where(degenerate, 1.0, den))


def _centre_columns(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Column-centred ``x`` with its constant columns set to exactly 0, and whether every
    column is constant (a constant representation: CKA is 0/0 there).

    Centred twice: the first computed mean is off by a few eps of the column's offset
    (measured up to 5 eps for n up to 10^6 on CPU), which for a float32 column ``1 + 1e-6 z``
    is a tenth of its spread and biases CKA; the second pass leaves ~eps^2 of the offset.
    Column ``j`` is then constant when its entries lie within a few units in the last place
    of one another, ``max_i |x_ij - mean_j| <= 4 eps max_i |x_ij|``: an exactly constant
    column (its residue is ~eps^2) or one varying by rounding alone (a saturated unit).
    Judged column by column, so a large or offset column does not hide the variation of
    another (a constant column of 1 beside one of spread 1e-6 is one constant and one
    varying column, where a test on the largest entry of all called the whole representation
    constant); a column's own offset enters only its own test, to the precision its values
    are stored with, so translating ``x`` leaves CKA unchanged.  Zeroing the constant
    columns drops their rounding residue, which CKA would otherwise read as variation."""
    xc = x - jnp.mean(x, axis=0, keepdims=True)
    xc = xc - jnp.mean(xc, axis=0, keepdims=True)
    tol = 4.0 * float(jnp.finfo(x.dtype).eps)
    col_const = jnp.max(jnp.abs(xc), axis=0) <= tol * jnp.max(jnp.abs(x), axis=0)
    return jnp.where(col_const[None, :], 0.0, xc), jnp.all(col_const)


def _centre_scaled(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """:func:`_centre_columns` of ``x``, brought to a largest entry of 1 (CKA is scale
    invariant): divided by ``max|x|`` before centring (``1e30``-sized inputs do not overflow)
    and by the largest centred entry after it (a small variation beside a large offset
    column does not underflow in the sums of squares of products)."""
    # not _scale.py's powers of two: dividing by the max rounds, and linear_cka / rbf_cka (and
    # the committed records) would move in the last bits; the minibatch sums use _scale.py
    scale = jnp.max(jnp.abs(x))
    xc, const = _centre_columns(x / jnp.where(scale > 0, scale, 1.0))
    spread = jnp.max(jnp.abs(xc))
    return xc / jnp.where(spread > 0, spread, 1.0), const


def rbf_cka(x: ArrayLike, y: ArrayLike, *, sigma_frac: float = 0.8) -> jax.Array:
    """CKA with RBF kernels of median-heuristic bandwidth (Kornblith et al. 2019, §3).

    Args:
      x: ``[n, p...]``, y: ``[n, q...]``.
      sigma_frac: bandwidth as a fraction of each representation's median distance
        (see :func:`gram_rbf`).

    Returns:
      scalar in ``[0, 1]``; 0 when either representation is constant over the samples.
    """
    x, y = _pair(x, y, "rbf_cka")
    # checked here, eagerly: inside the jitted core it is traced (one program for any value)
    _scalar(sigma_frac, "sigma_frac", "rbf_cka")
    check_number(sigma_frac, "sigma_frac", fn="rbf_cka", min_value=0.0, lo_open=True,
                 what="a fraction of the median distance")
    return check_result_finite(_rbf_cka_core(x, y, sigma_frac), "RBF CKA",
                               fn="rbf_cka",
                               hint="a representation has a zero median distance (more than "
                                    "half of the samples coincide); use linear_cka.")


@jax.jit
def _rbf_cka_core(x, y, sigma_frac):
    x, x_const = _centre_scaled(x)
    y, y_const = _centre_scaled(y)
    degenerate = x_const | y_const
    # a constant representation has a zero median distance (0/0 bandwidth): K = 1
    kx = _rbf_gram(x, sigma_frac, const=x_const)[0]  # (x, y centred above)
    ky = _rbf_gram(y, sigma_frac, const=y_const)[0]
    return jnp.where(degenerate, 0.0, cka(kx, ky))


# ----------------------------------------------------------------------- minibatch CKA
_NO_SCALE = -(1 << 20)  # the exponent of "no minibatch with variation yet": below any float's


class MinibatchCKAState(NamedTuple):
    """Running sums of unbiased HSIC over minibatches (all scalars), kept in float range.

    The linear-kernel sums are stored divided by exact powers of two, ``2^{-4 ex}`` etc.,
    where ``ex`` (``ey``) is the largest binary exponent of a centred ``x`` (``y``) entry seen
    so far (``_scale.exponent``): every minibatch's features are multiplied by ``2^{-ex}``
    before their HSIC terms are taken, and the sums are rescaled when ``ex`` grows.  Powers
    of two are exact, so every minibatch keeps its weight and :func:`minibatch_cka_value`
    (in which the factors cancel) is unchanged, but float32 features of 1e10 or 1e-12 no
    longer overflow or underflow (HSIC scales as the 4th power of the features).  The RBF
    kernel is scale free (``ex = ey`` stay unused).
    """

    xy: jax.Array  # sum_b HSIC_1(K_b, L_b) 2^{-2 ex - 2 ey}
    xx: jax.Array  # sum_b HSIC_1(K_b, K_b) 2^{-4 ex}
    yy: jax.Array  # sum_b HSIC_1(L_b, L_b) 2^{-4 ey}
    # int32 exponents; minibatch_cka_init sets _NO_SCALE (no minibatch yet); a state built
    # by hand from three sums has ex = ey = 0: sums as they are
    ex: jax.Array | int = 0
    ey: jax.Array | int = 0


def minibatch_cka_init(dtype: DTypeLike = jnp.float32) -> MinibatchCKAState:
    """Zero accumulator for :func:`minibatch_cka_update`.

    ``dtype``: floating-point dtype of the running sums (integer sums would truncate the
    HSIC terms added to them).  :func:`minibatch_cka_update` keeps it (the HSIC terms are
    computed in float32 or wider and rounded into it), so the state can be a ``lax.scan``
    carry; a bfloat16 state holds the sums to ~2 significant digits, a float16 one to ~3.
    """
    dtype = check_float_dtype(dtype, "dtype", fn="minibatch_cka_init")
    z = jnp.zeros((), dtype)
    e = jnp.full((), _NO_SCALE, jnp.int32)
    return MinibatchCKAState(z, z, z, e, e)


def minibatch_cka_update(
    state: MinibatchCKAState, x: ArrayLike, y: ArrayLike, *, kernel: str = "linear"
) -> MinibatchCKAState:
    """Add one minibatch ``(x [m, p...], y [m, q...])``, ``m >= 4``, to the running sums.

    ``kernel``: ``"linear"`` or ``"rbf"`` (median bandwidth per minibatch; called eagerly, the
    rbf path checks that bandwidth on the host, one device sync per minibatch: in a long
    streaming loop jit the update, as :func:`minibatch_cka` does).  Features are
    centred per minibatch first (unbiased HSIC is invariant to it) and columns constant at
    rounding level are zeroed (as in :func:`linear_cka`); a minibatch on which a
    representation is constant adds exactly 0 to every sum it enters.

    With ``kernel="linear"`` the features are multiplied by a power of two kept in the state
    (the largest binary exponent seen so far, :class:`MinibatchCKAState`), so the sums weight
    every minibatch alike and float32 features of any size neither overflow nor underflow
    (they did from ~1e8 and ~1e-9 on).

    The HSIC terms are computed in float32 or wider (the wider of ``x``'s and ``y``'s) and
    added in the wider of that and the state's dtype; the returned state has the dtypes of
    ``state`` (a ``lax.scan`` carry keeps its type: a bfloat16 state from
    ``minibatch_cka_init(jnp.bfloat16)``, or a float32 one fed float64 data under x64).
    """
    x, y = _pair(x, y, "minibatch_cka_update")
    _check_minibatch_size(x.shape[0], "minibatch_cka_update", f"x {x.shape}, y {y.shape}")
    if kernel not in ("linear", "rbf"):
        raise ValueError(
            f"minibatch_cka_update: kernel must be 'linear' or 'rbf', got {kernel!r}."
        )
    # centred at the scale 2^-ax (2^-ay); bx (by): exponent of the largest centred entry
    (x, x_const, ax, bx), (y, y_const, ay, by) = _centre_exponent(x), _centre_exponent(y)
    ex, ey = state.ex, state.ey
    if kernel == "linear":
        # the running exponents: the largest seen so far; the old sums are rescaled to them
        # (exactly, or to 0 when negligible) and this minibatch's features brought there
        ex_new, ey_new = jnp.maximum(ex, bx), jnp.maximum(ey, by)
        x, y = times_pow2(x, ax - ex_new), times_pow2(y, ay - ey_new)
        dx, dy = ex_new - ex, ey_new - ey
        state = MinibatchCKAState(_rescaled(state.xy, -2 * (dx + dy)),
                                  _rescaled(state.xx, -4 * dx), _rescaled(state.yy, -4 * dy))
        ex, ey = ex_new, ey_new
        k1, k2 = x @ x.T, y @ y.T
    else:  # a constant minibatch has a zero median distance (0/0 bandwidth): zeroed below
        # (the median-bandwidth kernel is invariant to rescaling each minibatch)
        (k1, s1), (k2, s2) = _rbf_gram(unit_scaled(x), 0.8), _rbf_gram(unit_scaled(y), 0.8)
        for arg, s2_, const in (("x", s1, x_const), ("y", s2, y_const)):
            if _zero_bandwidth_eagerly(s2_, const):
                raise ValueError(_zero_bandwidth("minibatch_cka_update", arg,
                                                 "this minibatch"))
    k1 = jnp.where(x_const, 0.0, k1)
    k2 = jnp.where(y_const, 0.0, k2)
    return MinibatchCKAState(
        _add_kept(state.xy, unbiased_hsic(k1, k2)),
        _add_kept(state.xx, unbiased_hsic(k1, k1)),
        _add_kept(state.yy, unbiased_hsic(k2, k2)),
        jnp.asarray(ex, jnp.int32), jnp.asarray(ey, jnp.int32),
    )


def _centre_exponent(x: jax.Array):
    """``(xc, const, a, b)``: :func:`_centre_columns` of ``x 2^{-a}``, ``a = exponent(x)``
    (huge entries do not overflow in the column means; exact: the centred values are those
    of ``x`` times ``2^{-a}``), whether it is constant, and ``b`` the binary exponent of the
    largest centred entry of ``x`` itself (``_NO_SCALE`` when every centred entry is 0)."""
    a = exponent(x)
    xc, const = _centre_columns(times_pow2(x, -a))
    b = jnp.where(jnp.max(jnp.abs(xc)) == 0, _NO_SCALE, exponent(xc) + a)
    return xc, const, a, b.astype(jnp.int32)


def _rescaled(acc, k):
    """A running sum times ``2^k`` in its own dtype (exact, or 0 when negligible); computed
    in float32 or wider (``times_pow2`` builds float32/float64 powers only)."""
    acc = jnp.asarray(acc)  # (a hand-built state may hold Python numbers)
    wide = jnp.promote_types(acc.dtype, jnp.float32)
    return times_pow2(acc.astype(wide), k).astype(acc.dtype)


def _add_kept(acc, term):
    """``acc + term`` in the wider dtype, returned in ``acc``'s (a Python number as before)."""
    keep = getattr(acc, "dtype", None)
    if keep is None:
        return acc + term
    dt = jnp.result_type(keep, term.dtype)
    return (acc.astype(dt) + term.astype(dt)).astype(keep)


def minibatch_cka_value(state: MinibatchCKAState) -> jax.Array:
    r"""CKA from accumulated sums (Nguyen et al. 2021, eq. 2):
    :math:`\sum_b \mathrm{HSIC}_1(K_b,L_b) /
    \sqrt{\sum_b \mathrm{HSIC}_1(K_b,K_b)\sum_b \mathrm{HSIC}_1(L_b,L_b)}`.

    0 when either self-sum is ``<= 0`` (a representation constant on every minibatch: 0/0,
    as :func:`cka` returns); NaN sums stay NaN."""
    prod = state.xx * state.yy
    ok = prod > 0
    out = state.xy / jnp.sqrt(jnp.where(ok, prod, 1.0))
    return jnp.where(ok, out, jnp.where(jnp.isnan(prod), jnp.nan, 0.0))


def minibatch_cka(xs: ArrayLike, ys: ArrayLike, *, kernel: str = "linear") -> jax.Array:
    r"""Minibatch CKA from stacked minibatches (Nguyen et al. 2021, "Do wide and deep networks
    learn the same things?", ICLR 2021, §3.1 eq. 2): unbiased HSIC accumulated over ``B``
    minibatches with
    ``lax.scan``; an unbiased estimate of population CKA whose bias does not grow with the
    number of minibatches.

    Args:
      xs: ``[B, m, p...]``, ys: ``[B, m, q...]``, ``m >= 4``; any real dtype (computed in
        float32 or wider).
      kernel: ``"linear"`` or ``"rbf"``.

    Returns:
      scalar; 0 when either representation is constant on every minibatch (see
      :func:`minibatch_cka_value`).
    """
    xs = check_array(xs, "xs", fn="minibatch_cka", kind="real")
    ys = check_array(ys, "ys", fn="minibatch_cka", kind="real")
    if xs.ndim < 3 or ys.ndim < 3 or xs.shape[:2] != ys.shape[:2]:
        raise ValueError(
            f"minibatch_cka expects xs [B, m, p...] and ys [B, m, q...] with equal B and m, got "
            f"{xs.shape} and {ys.shape}."
        )
    if not isinstance(kernel, str) or kernel not in ("linear", "rbf"):
        raise ValueError(f"minibatch_cka: kernel must be 'linear' or 'rbf', got {kernel!r}.")
    if xs.shape[0] == 0:
        raise ValueError(f"minibatch_cka: xs and ys must hold at least one minibatch, got "
                         f"B = 0 (shapes {xs.shape} and {ys.shape}).")
    _check_minibatch_size(xs.shape[1], "minibatch_cka", f"xs {xs.shape}, ys {ys.shape}")
    for arg, a in (("xs", xs), ("ys", ys)):
        if math.prod(a.shape[2:]) == 0:
            raise ValueError(f"minibatch_cka: {arg} must have at least one feature per "
                             f"sample, got shape {tuple(a.shape)}.")
    check_finite(xs, "xs", fn="minibatch_cka")  # eager only (inside the core: NaN)
    check_finite(ys, "ys", fn="minibatch_cka")
    xs, ys = promote_float(xs, ys)
    return check_result_finite(_minibatch_cka_core(xs, ys, kernel=kernel), "minibatch CKA",
                               fn="minibatch_cka",
                               hint=lambda: _minibatch_nan_cause(xs, ys, kernel))


def _check_minibatch_size(m: int, fn: str, shapes: str) -> None:
    if m < 4:
        raise ValueError(f"{fn}: each minibatch must hold m >= 4 samples (unbiased HSIC "
                         f"divides by m (m - 3)), got m = {m} ({shapes}).")


def _zero_bandwidth(fn: str, arg: str, where: str) -> str:
    return (f"{fn}: {arg} has a zero median pairwise distance in {where} (at least half of "
            f"its m^2 squared distances are 0: most samples coincide, e.g. one-hot labels), "
            "so the RBF median-heuristic bandwidth is 0 and the kernel 0/0; use "
            "kernel='linear' or larger minibatches.")


def _minibatch_nan_cause(xs, ys, kernel: str) -> str:
    """Why a minibatch CKA of finite inputs came out NaN (evaluated only then): the first
    minibatch whose RBF bandwidth is 0, as :func:`rbf_cka` reports a zero median distance."""
    if kernel == "rbf":
        for arg, a in (("xs", xs), ("ys", ys)):
            for b in range(a.shape[0]):
                xc, const = _centre_columns(a[b].reshape(a.shape[1], -1))
                if not bool(const) and float(_rbf_gram(unit_scaled(xc), 0.8)[1]) == 0.0:
                    return _zero_bandwidth("minibatch_cka", arg,
                                           f"minibatch {b} ({arg}[{b}])").partition(": ")[2]
    return "check the inputs' scale and degenerate cases."


@functools.partial(jax.jit, static_argnames="kernel")
def _minibatch_cka_core(xs, ys, *, kernel):
    # no rescaling of the stack here: minibatch_cka_update keeps its sums in range itself
    # (in float32 the HSIC terms of 1e-10 x once underflowed, CKA 0.0 for 0.323, and of 1e9 x
    # overflowed, NaN), by the same exact powers of two a stack-wide factor would apply

    def body(state, xy):
        return minibatch_cka_update(state, xy[0], xy[1], kernel=kernel), None

    state, _ = jax.lax.scan(body, minibatch_cka_init(xs.dtype), (xs, ys))
    return minibatch_cka_value(state)


# ----------------------------------------------------------------- kernel comparisons
def kernel_alignment(k1: ArrayLike, k2: ArrayLike, *, centered: bool = False) -> jax.Array:
    r"""Kernel alignment: the Frobenius cosine of two kernel matrices (Cristianini et al. 2002).

    .. math:: A(K_1, K_2) = \frac{\langle K_1, K_2\rangle_F}{\|K_1\|_F\,\|K_2\|_F}

    With ``centered=True`` both are first double-centred (:func:`center_gram`), which gives
    CKA (Cortes et al. 2012): the same number as :func:`cka`, 0 included.

    Args:
      k1, k2: ``[n, n]``.

    Returns:
      scalar in ``[-1, 1]``; **0 when either kernel is zero** (with ``centered=True``: constant,
      as in :func:`cka`), where the cosine is 0/0.  Under ``jit`` a NaN input gives NaN.
    """
    k1, k2 = _same_square(k1, k2, "kernel_alignment")
    k1, k2 = unit_scaled(k1), unit_scaled(k2)  # scale invariant: see _cka_core
    if centered:
        (k1, k1_zero), (k2, k2_zero) = _centred_kernel(k1), _centred_kernel(k2)
    else:
        k1_zero, k2_zero = jnp.all(k1 == 0), jnp.all(k2 == 0)
    return _cosine(k1, k2, k1_zero, k2_zero)


def kernel_distance(k1: ArrayLike, k2: ArrayLike) -> jax.Array:
    r"""Kernel distance of Fort et al. (2020): one minus the kernel alignment.

    .. math:: S(K_1, K_2) = 1 - \frac{\langle K_1, K_2\rangle_F}{\|K_1\|_F\,\|K_2\|_F}

    Invariant to rescaling either kernel, so it measures a change of the kernel's *shape*
    (which directions of function space are fast), not of its overall size; between kernels of
    consecutive epochs it is Fort et al.'s kernel velocity (their Eq. 4), the NTK "rate of
    change" of Fig. 4a of Buffelli et al. (2024), whose code compares kernels by the same
    cosine.  Computed as ``1 - A`` in the input's precision; for ``A`` near 1 use float64
    inputs (float32 resolves distances down to ~1e-7).

    Args:
      k1, k2: ``[n, n]``.

    Returns:
      scalar in ``[0, 2]``; 1 when either kernel is zero (:func:`kernel_alignment` is 0).
    """
    return 1.0 - kernel_alignment(k1, k2)


def kernel_change_rate(k_prev: ArrayLike, k_next: ArrayLike) -> jax.Array:
    r"""Relative change between consecutive kernels: :math:`\|K_{t+1}-K_t\|_F / \|K_t\|_F`.

    Sensitive to the kernel's overall scale (``K -> 2K`` gives 1): a network whose NTK only
    grows in size registers as changing; :func:`kernel_distance` is the scale-free measure.
    Both norms are taken after an exact power-of-two rescaling (float32 kernels of 1e-20 or
    1e20 entries neither underflow nor overflow).

    Args:
      k_prev, k_next: ``[n, n]`` kernel matrices.

    Returns:
      scalar.

    Raises:
      ValueError: kernels not square or of different shapes; (eager calls only) non-finite
        entries, or ``k_prev`` all zeros, where the relative change is undefined (as in
        :func:`tree_relative_change`; under ``jit`` the result is ``inf`` there, NaN when
        ``k_next`` is zero too).
    """
    k_prev = _square(k_prev, "kernel_change_rate k_prev")
    k_next = _square(k_next, "kernel_change_rate k_next")
    if k_prev.shape != k_next.shape:
        raise ValueError(f"kernel_change_rate: k_prev and k_next must have the same shape, "
                         f"got {k_prev.shape} and {k_next.shape}.")
    k_prev, k_next = promote_float(k_prev, k_next)
    if is_concrete(k_prev) and not bool(jnp.any(k_prev != 0)):
        raise ValueError(
            "kernel_change_rate: k_prev is all zeros, so the relative change is undefined; "
            "use jnp.linalg.norm(k_next - k_prev) for the absolute change."
        )
    d = k_next - k_prev
    e0, ed = exponent(k_prev), exponent(d)
    ratio = jnp.linalg.norm(times_pow2(d, -ed).ravel()) / jnp.linalg.norm(
        times_pow2(k_prev, -e0).ravel())
    return times_pow2(ratio, ed - e0)
