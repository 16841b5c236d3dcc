r"""Exact power-of-two rescaling for the scale-invariant probes (private helper).

CKA, kernel alignment, stable rank, participation ratio, the tree cosine and relative change
are invariant to rescaling their inputs, but their sums of squares are not safe in float32:
entries of ``1e-20`` square to ``1e-40`` (below float32's smallest normal number, flushed to
zero on CPU) and entries of ``1e20`` square to ``inf``.  Multiplying by ``2^{-e}``, with
``e`` the binary exponent of the largest ``|entry|``, brings that entry into ``[0.5, 1)``;
a multiplication by a power of two is exact (no rounding) unless it over- or underflows, so
inputs of ordinary size give bit-identical results, and the factor is a constant for
autodiff (the exponent is an integer: the functions' gradients are those of the
scale-invariant formula).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax


def _pow2(k: jax.Array, dtype) -> jax.Array:
    """Exactly ``2^k`` in ``dtype`` (float32 or float64) for an integer ``k`` whose power is a
    normal number (built from its bits: ``2.0 ** k`` goes through ``pow``)."""
    dtype = jnp.dtype(dtype)
    if dtype == jnp.float64:
        bits = (k.astype(jnp.int64) + 1023) << 52
        return lax.bitcast_convert_type(bits, jnp.float64)
    if dtype == jnp.float32:
        bits = (k.astype(jnp.int32) + 127) << 23
        return lax.bitcast_convert_type(bits, jnp.float32)
    raise TypeError(f"_pow2: float32 or float64 expected, got {dtype}.")  # pragma: no cover


def exponent(*xs: jax.Array) -> jax.Array:
    """Integer ``e`` with ``max |entry| = f 2^e``, ``f`` in ``[0.5, 1)``, over all ``xs``;
    0 when that maximum is 0 or non-finite (no rescaling: a NaN/Inf result stays so)."""
    maxima = [jnp.max(jnp.abs(x)) for x in xs if jnp.size(x)]
    if not maxima:
        return jnp.zeros((), jnp.int32)
    _, e = jnp.frexp(jnp.max(jnp.stack(maxima)) if len(maxima) > 1 else maxima[0])
    return e


def times_pow2(x: jax.Array, k: jax.Array) -> jax.Array:
    """``x 2^k``, exact unless the result over- or underflows.  Applied as two factors
    ``2^{k//2}`` and ``2^{k - k//2}``, each a normal number for any exponent of a float32 or
    float64 value (``2^{-e}`` alone is subnormal for the largest floats, ``e = 128``)."""
    k = jnp.asarray(k, jnp.int32)
    # both factors' exponents within the dtype's normal range (_pow2 builds normal numbers
    # only): |k| up to ~2x the largest exponent (a ratio of two extreme numbers); past that
    # clip the result over/underflows anyway, as 2^k itself would
    fi = jnp.finfo(x.dtype)
    k = jnp.clip(k, 2 * int(fi.minexp), 2 * (int(fi.maxexp) - 1))
    half = k // 2
    return x * _pow2(half, x.dtype) * _pow2(k - half, x.dtype)


def unit_scaled(x: jax.Array) -> jax.Array:
    """``x`` times the power of two that brings its largest ``|entry|`` into ``[0.5, 1)``
    (``x`` unchanged when it is zero or has a NaN/Inf entry)."""
    return times_pow2(x, -exponent(x))
