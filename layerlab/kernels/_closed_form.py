"""Infinite-width NNGP and NTK kernels of fully connected ReLU / erf networks, natively.

The network is ``depth`` hidden layers wide to infinity, in neural-tangents' NTK
parameterization (its default)::

    stax.serial(Dense(W_std=sqrt(w_var[0]), b_std=sqrt(b_var[0])), Relu(),
                Dense(W_std=sqrt(w_var[1]), b_std=sqrt(b_var[1])), Relu(), ...,
                Dense(W_std=sqrt(w_var[depth]), b_std=sqrt(b_var[depth])))

so ``depth`` activations and ``depth + 1`` dense layers; entry 0 of a per-layer variance
sequence belongs to the input layer.  The NNGP kernel is the same in the 'standard'
parameterization; the NTK here is the 'ntk'-parameterization one.

Recursion (fan-in convention, ``d`` = input dimension):

.. math::

    K^0(x, x') = \\sigma_{b,0}^2 + \\sigma_{w,0}^2\\, x^\\top x' / d, \\qquad \\Theta^0 = K^0,

    K^l = \\sigma_{b,l}^2 + \\sigma_{w,l}^2\\, \\mathbb E[\\phi(u)\\phi(u')], \\qquad
    \\Theta^l = K^l + \\sigma_{w,l}^2\\, \\mathbb E[\\phi'(u)\\phi'(u')]\\, \\Theta^{l-1},

with :math:`(u, u') \\sim \\mathcal N(0, K^{l-1})`.  For ReLU (arc-cosine kernel of
degree 1, Cho & Saul 2009) with :math:`\\cos\\theta = K_{12}/\\sqrt{K_{11}K_{22}}`:

.. math::

    \\mathbb E[\\phi\\phi'] = \\frac{\\sqrt{K_{11}K_{22}}}{2\\pi}
        (\\sin\\theta + (\\pi - \\theta)\\cos\\theta), \\qquad
    \\mathbb E[\\phi'\\phi'] = \\frac{\\pi - \\theta}{2\\pi};

for erf (Williams 1997):

.. math::

    \\mathbb E[\\phi\\phi'] = \\frac 2\\pi \\arcsin
        \\frac{2K_{12}}{\\sqrt{(1 + 2K_{11})(1 + 2K_{22})}}, \\qquad
    \\mathbb E[\\phi'\\phi'] = \\frac 4\\pi \\frac1{\\sqrt{(1 + 2K_{11})(1 + 2K_{22})
        - 4K_{12}^2}}.

Gradient safety: :math:`\\arccos` has an infinite derivative at :math:`\\pm 1` (the
diagonal, :math:`\\theta = 0`).  The ReLU map is written as a function of the cosine
``c`` with custom JVPs: :math:`J_1(c) = \\sqrt{1-c^2} + (\\pi - \\arccos c)\\, c` has the
exact, finite derivative :math:`\\pi - \\arccos c`; :math:`\\arccos` itself gets the
derivative :math:`-1/\\sqrt{1-c^2}` strictly inside ``(-1, 1)`` and 0 (a subgradient of
the kink) where ``c`` is clipped to ``+-1``.  With ``x2=None`` the cosine on the diagonal
is set to exactly 1 (its true value, with zero derivative), so diagonals are exact.

References:
  Eq. (2) of the DGL paper (layer-wise NNGP recursion); Cho & Saul 2009, "Kernel methods
  for deep learning" (arc-cosine kernels); Lee et al. 2018, "Deep neural networks as
  Gaussian processes" (NNGP recursion); Jacot et al. 2018, "Neural tangent kernel",
  Theorem 1; Arora et al. 2019, "On exact computation with an infinitely wide neural net"
  (NTK recursion); Williams 1997, "Computing with infinite networks" (erf kernel).
"""
from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from layerlab._checks import (
    check_array,
    check_finite,
    check_int,
    check_result_finite,
    is_concrete,
    nonnegative_or_nan,
)

__all__ = [
    "FCKernel",
    "fc_kernels",
    "relu_nngp",
    "relu_ntk",
    "erf_nngp",
    "erf_ntk",
]

_ACTIVATIONS = ("relu", "erf")
# Unroll the layer scan (up to 16 layers): XLA then fuses the elementwise maths of
# consecutive layers into one pass over the [n1, n2] arrays (~1.3x faster at N = 2000).
_MAX_UNROLL = 16


class FCKernel(NamedTuple):
    """NNGP and NTK of a fully connected network.

    Attributes:
      nngp: ``[n1, n2]`` (``[n]`` with ``diagonal=True``; a leading ``[depth + 1]`` axis,
        layer 0 = input layer, with ``return_all_layers=True``).
      ntk: same shape as ``nngp``.
    """

    nngp: jax.Array
    ntk: jax.Array


# --------------------------------------------------------------------------- safe maths
# Minimax coefficients of asin(x) = x + x z P(z), z = x^2, |x| <= 1/2, for single precision
# (Cephes ``asinf``, S. L. Moshier): relative error <= 2.5e-7 over the range.
_ASIN_F32 = (4.2163199048e-2, 2.4181311049e-2, 4.5470025998e-2, 7.4953002686e-2,
             1.6666752422e-1)


def _arccos_f32(c):
    """``arccos(c)`` for ``c`` in ``[-1, 1]``, single precision, by a polynomial and one sqrt.

    XLA's CPU ``acos`` goes through ``atan2`` and runs ~25x slower than this branch-free
    form (it dominates the ReLU kernels: 36 ms vs 1.4 ms for 10^6 cosines).  Half-angle
    reduction: for ``|c| > 1/2``, ``arccos|c| = 2 asin(sqrt((1 - |c|) / 2))``; else
    ``arccos c = pi/2 - asin c``.  Max abs error 3e-7 on [-1, 1] (XLA's: 2.6e-7), relative
    error 1.1e-7 near ``c = +-1`` (``tests/kernels/test_kernels.py``).
    """
    a = jnp.abs(c)
    big = a > 0.5
    z = jnp.where(big, 0.5 * (1.0 - a), c * c)
    x = jnp.where(big, jnp.sqrt(z), c)
    poly = _ASIN_F32[0]
    for coef in _ASIN_F32[1:]:
        poly = poly * z + coef
    s = x + x * z * poly  # asin(x)
    pi = jnp.asarray(np.pi, c.dtype)
    return jnp.where(big, jnp.where(c > 0, 2.0 * s, pi - 2.0 * s), 0.5 * pi - s)


def _arccos(c):
    """``arccos`` on ``[-1, 1]``: the fast polynomial in float32 and below, XLA's in float64."""
    c = jnp.asarray(c)
    if jnp.dtype(c.dtype).itemsize <= 4 and jnp.issubdtype(c.dtype, jnp.floating):
        return _arccos_f32(c.astype(jnp.float32)).astype(c.dtype)
    return jnp.arccos(c)


def _at_edges(f, c, lo, hi):
    """``f(clip(c, -1, 1))`` with ``f(-1) = lo``, ``f(1) = hi`` put in directly, so that the
    primal itself has a finite (zero) derivative at the clip edges.  The custom JVPs below
    give the rules used by first-order autodiff; but a second derivative through a
    ``lax.scan`` (``jax.hessian`` of a kernel: forward over reverse) can differentiate the
    primal expression itself, and ``arccos``/``arcsin``/``sqrt`` have infinite derivatives
    at +-1 (``inf * 0``: NaN), reached where two rows of x coincide."""
    cc = jnp.clip(c, -1.0, 1.0)
    inside = jnp.abs(cc) < 1.0
    edge = jnp.where(cc > 0, jnp.asarray(hi, cc.dtype), jnp.asarray(lo, cc.dtype))
    return jnp.where(inside, f(jnp.where(inside, cc, 0.0)), jnp.where(jnp.isnan(c), c, edge))


@jax.custom_jvp
def _safe_arccos(c):
    return _at_edges(_arccos, c, _arccos(jnp.asarray(-1.0, c.dtype)),
                     _arccos(jnp.asarray(1.0, c.dtype)))


@_safe_arccos.defjvp
def _safe_arccos_jvp(primals, tangents):
    (c,), (dc,) = primals, tangents
    s2 = 1.0 - jnp.clip(c, -1.0, 1.0) ** 2
    inside = s2 > 0.0
    deriv = jnp.where(inside, -jax.lax.rsqrt(jnp.where(inside, s2, 1.0)), 0.0)
    return _safe_arccos(c), deriv * dc


@jax.custom_jvp
def _relu_j1(c):
    """sin(theta) + (pi - theta) cos(theta) with cos(theta) = c."""
    cc = jnp.clip(c, -1.0, 1.0)
    # _safe_arccos(c) (not of cc): the same expression as the NTK's, so XLA computes it once
    return _safe_sqrt(1.0 - cc * cc) + (jnp.pi - _safe_arccos(c)) * cc


@_relu_j1.defjvp
def _relu_j1_jvp(primals, tangents):
    (c,), (dc,) = primals, tangents
    # d/dc J_1 = pi - arccos(c) exactly (the sin terms cancel); finite at c = +-1.
    return _relu_j1(c), (jnp.pi - _safe_arccos(c)) * dc


@jax.custom_jvp
def _safe_arcsin(c):
    """``arcsin`` of ``c`` clipped to ``[-1, 1]`` (rounding at large K can push the erf
    NNGP's argument past 1: NaN), with derivative ``1 / sqrt(1 - c^2)`` inside and 0 where
    the clip bites (the clip's own derivative), never inf/NaN.  Not ``pi/2 - _safe_arccos``:
    that loses the relative precision of small values (orthogonal inputs) in float32."""
    return _at_edges(jnp.arcsin, c, jnp.arcsin(jnp.asarray(-1.0, c.dtype)),
                     jnp.arcsin(jnp.asarray(1.0, c.dtype)))


@_safe_arcsin.defjvp
def _safe_arcsin_jvp(primals, tangents):
    (c,), (dc,) = primals, tangents
    inside = jnp.abs(c) < 1.0
    d = jnp.where(inside, jax.lax.rsqrt(jnp.where(inside, 1.0 - c * c, 1.0)), 0.0)
    return _safe_arcsin(c), d * dc


def _safe_sqrt(x):
    """sqrt with gradient 0 (not inf/NaN) at x <= 0; NaN stays NaN (a NaN input row must
    not turn into a finite kernel under jit)."""
    pos = x > 0.0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, x, 1.0)), jnp.where(jnp.isnan(x), x, 0.0))


@jax.custom_jvp
def _safe_div(a, b):
    """``a / b`` where ``b != 0``, else 0.  Its derivative is ``(da - q db) / b`` (``q = a/b``),
    not JAX's ``da / b - a db / b^2``: with ``b`` the product of two small norms (|x| ~ 1e-10
    in float32, ``b ~ 1e-20``) ``b^2`` underflows to 0 and the rule gave inf * 0 = NaN."""
    nz = b != 0.0
    return jnp.where(nz, a / jnp.where(nz, b, 1.0), 0.0)


@_safe_div.defjvp
def _safe_div_jvp(primals, tangents):
    (a, b), (da, db) = primals, tangents
    nz = b != 0.0
    bs = jnp.where(nz, b, 1.0)
    q = jnp.where(nz, a / bs, 0.0)
    return q, jnp.where(nz, (da - q * db) / bs, 0.0)


# ------------------------------------------------------------------ one layer, 3 modes
def _outer(a, b, mode):
    """a_i * b_j as [n1, n2] (modes 'full'/'sym') or a_i * b_i (modes 'diag'/'dsym')."""
    return a * b if mode in ("diag", "dsym") else a[:, None] * b[None, :]


def _relu_step(k11, k12, k22, mode, with_ntk):
    # sqrt(k11) sqrt(k22), not sqrt(k11 k22): in float32 the product underflows to 0 for
    # kernel values below ~1e-19 (all entries 0 without a bias) and overflows above ~2e19,
    # where each factor is still representable
    s = _outer(_safe_sqrt(k11), _safe_sqrt(k22), mode)
    # where x1_i = x2_i by construction the cosine is exactly 1, with zero derivative
    # (rounding would give 1 - O(eps) and arccos amplifies that to O(sqrt(eps))): there the
    # closed forms J_1(1) = pi, pi - arccos(1) = pi are put in directly.  J_1 and arccos are
    # not evaluated at c = 1 on that diagonal (they see c = 0 there): forward-over-reverse
    # (jax.hessian) through the lax.scan of the layers gave NaN from their rules at c = 1.
    if mode == "dsym":
        post12 = s / 2
        dot12 = jnp.full_like(s, 0.5) if with_ntk else None
        return k11 / 2, post12, k22 / 2, dot12
    c = _safe_div(k12, s)
    if mode == "sym":
        eye = jnp.eye(c.shape[0], dtype=bool)
        cs = jnp.where(eye, 0.0, c)
        post12 = jnp.where(eye, s / 2, s * _relu_j1(cs) / (2 * jnp.pi))
        dot12 = (jnp.where(eye, 0.5, (jnp.pi - _safe_arccos(cs)) / (2 * jnp.pi))
                 if with_ntk else None)
        return k11 / 2, post12, k22 / 2, dot12
    post12 = s * _relu_j1(c) / (2 * jnp.pi)
    dot12 = (jnp.pi - _safe_arccos(c)) / (2 * jnp.pi) if with_ntk else None
    return k11 / 2, post12, k22 / 2, dot12


def _erf_step(k11, k12, k22, mode, with_ntk):
    # Normalised by prod = (1 + 2 k11)(1 + 2 k22) throughout: prod (and k11 k22, k12^2 in the
    # NTK) overflows float32 from K ~ 1e19 on (|x| ~ 1e10), where rsqrt(inf) = 0 made every
    # NNGP entry 0 (the diagonal included) and dropped the NTK's derivative term; the
    # normalised terms below are <= 1 whatever the scale of K.
    a11, a22 = 1.0 + 2.0 * k11, 1.0 + 2.0 * k22
    ra11, ra22 = jax.lax.rsqrt(a11), jax.lax.rsqrt(a22)
    r12 = _outer(ra11, ra22, mode)  # 1 / sqrt(prod)
    q12 = k12 * r12  # half the arcsin argument
    post11 = (2 / jnp.pi) * _safe_arcsin(2.0 * k11 / a11)  # rounds to 1 at K ~ 1e7
    post22 = (2 / jnp.pi) * _safe_arcsin(2.0 * k22 / a22)
    # the arcsin argument is <= 1 in exact arithmetic; rounding at large K can exceed it (NaN)
    post12 = (2 / jnp.pi) * _safe_arcsin(2.0 * q12)
    # where x1_i = x2_i by construction the argument is post11's (2 k11 / a11, a correctly
    # rounded quotient): put in directly, as the ReLU step does (an argument near 1 rounded
    # by the rsqrt products is amplified by arcsin to O(sqrt(eps)) at large K)
    if mode == "sym":
        post12 = jnp.where(jnp.eye(post12.shape[0], dtype=bool), post11[:, None], post12)
    elif mode == "dsym":
        post12 = post11
    dot12 = None
    if with_ntk:
        # (prod - 4 k12^2) / prod = (1 + 2 (k11 + k22)) / prod + 4 (k11 k22 - k12^2) / prod,
        # from i = 1 / a and p = k / a (<= 1/2), p formed by the same operations as q12, so
        # that p11 = p22 = q12 for equal rows of two arrays.  The normalised Gram determinant
        # p11 p22 - q12^2 is formed from the differences p - q12: exactly 0 for such rows
        # also where XLA contracts a product and a difference into an FMA (p11 p22 - q12^2
        # then gave q12^2's rounding residual, which at K ~ 1e20 swamps the rest, ~ 1 / K).
        # It is clamped at 0 (rounding makes it negative for near-parallel pairs, and at
        # large K its cancellation is O(eps K^2) before scaling, which clamping the whole
        # difference at 1 turned into a 10 % error) and is exactly 0 where x1_i = x2_i by
        # construction
        i11, i22 = ra11 * ra11, ra22 * ra22
        p11 = k11 * i11
        p22 = k22 * i22
        pa = p11 if mode in ("diag", "dsym") else p11[:, None]
        pb = p22 if mode in ("diag", "dsym") else p22[None, :]
        det = 0.5 * ((pa + q12) * (pb - q12) + (pb + q12) * (pa - q12))
        if mode == "sym":
            det = jnp.where(jnp.eye(det.shape[0], dtype=bool), 0.0, det)
        elif mode == "dsym":
            det = jnp.zeros_like(det)
        lin = _outer(i11, i22, mode) + 2.0 * (_outer(p11, i22, mode) + _outer(i11, p22, mode))
        # the clamp only undoes rounding, so it passes derivatives straight through (its value
        # is jnp.maximum's): the exact det >= 0 has its minimum 0 where two rows coincide,
        # and jnp.maximum's zero derivative where det rounded to <= 0 there dropped det's
        # curvature from the second derivative (jax.hessian off by ~20 % at duplicate rows,
        # by the rounding's sign)
        det = _clamp_at_zero(det)
        dot12 = (4 / jnp.pi) * r12 * jax.lax.rsqrt(lin + 4.0 * det)
    return post11, post12, post22, dot12


@jax.custom_jvp
def _clamp_at_zero(d):
    """``max(d, 0)`` whose derivative is 1 everywhere (straight through; see ``_erf_step``)."""
    return jnp.maximum(d, 0.0)


@_clamp_at_zero.defjvp
def _clamp_at_zero_jvp(primals, tangents):
    return _clamp_at_zero(primals[0]), tangents[0]


# -------------------------------------------------------------------------- validation
def _check_inputs(x1, x2, diagonal, fn, names=("x1", "x2")):
    """``fn``: the public function's name, the prefix of every message; ``names``: the
    caller's names for ``x1``/``x2``, used in every message (``("h", "h2")`` for
    ``dgl.top_kernel``)."""
    a, b = names
    x1 = check_array(x1, a, fn=fn, kind="real_number")
    x2 = check_array(x2, b, fn=fn, kind="real_number", allow_none=True)
    if x1.ndim != 2:
        raise ValueError(f"{fn}: {a} must be a [n1, d] array (rank 2; flatten images first), "
                         f"got shape {x1.shape}.")
    if x2 is not None:
        if x2.ndim != 2:
            raise ValueError(f"{fn}: {b} must be a [n2, d] array (rank 2), got shape "
                             f"{x2.shape}.")
        if x2.shape[1] != x1.shape[1]:
            raise ValueError(f"{fn}: {a} and {b} must have the same feature dimension d, got "
                             f"{a} {x1.shape} and {b} {x2.shape}.")
        if diagonal and x2.shape[0] != x1.shape[0]:
            raise ValueError(f"{fn}: diagonal=True pairs {a}[i] with {b}[i]: n1 and n2 must "
                             f"agree, got {a} {x1.shape} and {b} {x2.shape}.")
    if x1.shape[1] == 0:
        raise ValueError(f"{fn}: {a} must have feature dimension d >= 1 (a [n1, d] array), "
                         f"got shape {x1.shape}.")
    for name, x in zip(names, (x1, x2)):
        if x is not None:  # eager only (skipped under jit)
            check_finite(x, name, fn=fn, hint="clean the data first.")
    return x1, x2


def _check_variance(name: str, v, depth: int, dtype, fn: str) -> jax.Array:
    v = check_array(v, name, fn=fn, kind="real_number").astype(dtype)
    if v.ndim == 0:
        v = jnp.broadcast_to(v, (depth + 1,))
    elif v.shape != (depth + 1,):
        raise ValueError(f"{fn}: {name} must be a scalar or a sequence of length depth + 1 = "
                         f"{depth + 1} (entry 0 for the input layer), got shape {v.shape}.")
    if is_concrete(v):
        vals = np.asarray(v)
        if not np.all(np.isfinite(vals)) or np.any(vals < 0):
            raise ValueError(f"{fn}: {name} must be finite and >= 0 (it is a variance "
                             f"sigma^2), got {vals.tolist()}.")
        return v
    # traced (e.g. a learned variance): a negative or non-finite entry gives NaN, not a
    # finite wrong kernel
    return nonnegative_or_nan(v)


# ------------------------------------------------------------------------- the kernels
def _fc_recursion(x1, x2, w, b, *, mode, depth, step_fn, with_ntk, return_all_layers):
    """The layer recursion of :func:`fc_kernels` (inputs validated, ``mode`` resolved)."""
    d = x1.shape[1]
    if mode in ("diag", "dsym"):
        xa = x1 if x2 is None else x2
        dot12 = jnp.sum(x1 * xa, axis=1) / d
    elif x2 is None:
        dot12 = x1 @ x1.T / d
    else:
        dot12 = x1 @ x2.T / d
    sq1 = jnp.sum(x1 * x1, axis=1) / d
    sq2 = sq1 if (x2 is None) else jnp.sum(x2 ** 2, axis=1) / d

    k12 = b[0] + w[0] * dot12
    k11 = b[0] + w[0] * sq1
    k22 = b[0] + w[0] * sq2
    if mode == "sym":  # keep the diagonal exactly equal to k11
        k12 = jnp.where(jnp.eye(k12.shape[0], dtype=bool), k11[:, None], k12)
    ntk = k12 if with_ntk else None

    def layer(carry, wb):
        k11, k12, k22, ntk = carry
        w_l, b_l = wb
        post11, post12, post22, dot12 = step_fn(k11, k12, k22, mode, with_ntk)
        k12 = b_l + w_l * post12
        if with_ntk:
            ntk = k12 + w_l * dot12 * ntk
        new = (b_l + w_l * post11, k12, b_l + w_l * post22, ntk)
        return new, (k12, ntk)

    k0 = k12
    (k11, k12, k22, ntk), (all_nngp, all_ntk) = jax.lax.scan(
        layer, (k11, k12, k22, ntk), (w[1:], b[1:]), unroll=max(1, min(depth, _MAX_UNROLL)))
    if return_all_layers:
        out = FCKernel(jnp.concatenate([k0[None], all_nngp]),
                       jnp.concatenate([k0[None], all_ntk]) if with_ntk else None)
    else:
        out = FCKernel(k12, ntk)
    return out, sq1


# One compiled program per configuration and shapes: called eagerly (and differentiated
# eagerly, e.g. jax.hessian of a kernel) the recursion ran op by op, each primitive (and
# each derivative's scan) compiled and dispatched on its own -- 164 compiles for one eager
# jax.hessian of a depth-2 kernel.  Under an outer jit it is inlined as before.
@functools.partial(jax.jit, static_argnames=("mode", "depth", "step_fn", "with_ntk",
                                             "return_all_layers"))
def _fc_core(x1, x2, w, b, *, mode, depth, step_fn, with_ntk, return_all_layers):
    return jax.checkpoint(functools.partial(
        _fc_recursion, mode=mode, depth=depth, step_fn=step_fn, with_ntk=with_ntk,
        return_all_layers=return_all_layers))(x1, x2, w, b)


def fc_kernels(
    x1: ArrayLike,
    x2: ArrayLike | None = None,
    *,
    depth: int,
    w_var: ArrayLike | Sequence[float],
    b_var: ArrayLike | Sequence[float],
    activation: str = "relu",
    diagonal: bool = False,
    return_all_layers: bool = False,
    with_ntk: bool = True,
) -> FCKernel:
    """NNGP and NTK of an infinitely wide fully connected ReLU or erf network.

    See the module docstring for the recursion.  The layer loop is a ``lax.scan``, so
    compiling beyond 16 layers costs no more (up to 16 are unrolled for speed).

    Args:
      x1: ``[n1, d]`` inputs.
      x2: ``[n2, d]`` inputs, or ``None`` for ``x2 = x1`` (exact diagonal).
      depth: number of hidden (activation) layers, ``>= 0``.
      w_var: weight variance :math:`\\sigma_w^2`, a scalar or ``[depth + 1]`` per layer.
      b_var: bias variance :math:`\\sigma_b^2`, a scalar or ``[depth + 1]`` per layer.
      activation: ``"relu"`` or ``"erf"``.
      diagonal: if True return only :math:`K(x1_i, x2_i)`, shape ``[n]`` (``x2`` None:
        the variances :math:`K(x_i, x_i)`), at ``O(n)`` cost.
      return_all_layers: if True stack the kernels of every layer, ``K^0 .. K^depth``,
        along a new leading axis of size ``depth + 1``.
      with_ntk: if False skip the NTK recursion (``ntk`` is then ``None``); about half
        the work when only the NNGP is needed.

    Symmetric kernels: pass ``x2=None`` (or omit it) for ``K(x1, x1)``.  Passing the same
    array twice, ``fc_kernels(x, x)``, is recognised only eagerly (the same Python object);
    under ``jit``/``vmap`` the two arguments are distinct tracers and it is computed as a
    cross kernel, with a float32 error near the diagonal that grows with depth: ~1e-4
    relative per ReLU layer, at most ``2e-4 * depth`` (ReLU NTK at unit-scale inputs,
    measured 3e-4 at depth 3, 9e-4 at depth 8; the erf NTK's is ``O(eps * K^0)``, below).

    Precision: ``x2=None`` (or ``x2`` the same array object as ``x1``, eagerly) gives exact
    diagonals.
    Between distinct but nearly parallel inputs (equal rows of two different arrays
    included) float32 loses relative precision: ``O(sqrt(eps))`` for ReLU (``arccos`` near
    1) and ``O(eps * K^0)`` for the erf NTK, whose ``1 + 2(k11 + k22) + 4 (k11 k22 - k12^2)``
    needs the first layer's Gram determinant, which cancels at ``O(eps K^2)`` (about 2 % at
    ``K^0 ~ 1e5``, inputs of raw pixel scale).  Standardise such inputs or use float64.

    Gradients with respect to the inputs (ReLU NTK, float32): between nearly parallel inputs
    the rounded cosine also corrupts the gradient of the factor ``pi - theta``, a cone in
    ``x - x'`` with a finite slope.  Its relative error is about ``0.3 * depth * eps /
    theta^2`` (``theta`` the angle of the pair at the input layer, ``eps = 1.2e-7``), at
    most ``depth * eps / theta^2``: ~5e-6 at ``theta = 0.1``, 5e-4 at 0.01, 5e-2 at 1e-3
    (depth 3); below ``theta ~ 1e-3`` the cone's part is lost, silently (40-80 % of the
    gradient).  At exactly equal inputs, where the cone has no derivative, the gradient
    returned is the smooth part's (the cone's contribution 0).  The ReLU NNGP and the erf
    kernels keep ~1e-7.  For gradients at nearly parallel inputs use float64.

    Returns:
      ``FCKernel(nngp, ntk)``, each ``[n1, n2]`` (``[n]`` if ``diagonal``), with a leading
      ``[depth + 1]`` axis if ``return_all_layers``.

    Examples:
      With ``w_var = 2`` and no bias a ReLU layer keeps ``K(x, x)`` and adds it to the NTK:

      >>> import jax, jax.numpy as jnp
      >>> from layerlab.kernels import fc_kernels
      >>> x = jax.random.normal(jax.random.key(0), (4, 3))                 # [n, d]
      >>> k = fc_kernels(x, depth=2, w_var=2.0, b_var=0.0)
      >>> k.nngp.shape, k.ntk.shape
      ((4, 4), (4, 4))
      >>> k0 = 2.0 * jnp.sum(x * x, axis=1) / 3                             # K^0(x, x)
      >>> bool(jnp.allclose(jnp.diag(k.nngp), k0, rtol=1e-5))
      True
      >>> bool(jnp.allclose(jnp.diag(k.ntk), 3 * k0, rtol=1e-5))          # depth + 1 terms
      True

    References:
      Eq. (2) of the DGL paper; Lee et al. 2018; Jacot et al. 2018 Thm. 1; Arora et al. 2019.
    """
    return _fc_kernels(x1, x2, depth=depth, w_var=w_var, b_var=b_var, activation=activation,
                       diagonal=diagonal, return_all_layers=return_all_layers,
                       with_ntk=with_ntk, fn="fc_kernels")


def _fc_kernels(x1, x2, *, depth, w_var, b_var, activation, diagonal, return_all_layers,
                with_ntk, fn, names=("x1", "x2")) -> FCKernel:
    """:func:`fc_kernels`, its error messages prefixed by ``fn`` (the public function called),
    the inputs called ``names`` in every message."""
    if activation not in _ACTIVATIONS:
        raise ValueError(f"{fn}: activation must be one of {_ACTIVATIONS}, got "
                         f"{activation!r}.")
    depth = check_int(depth, "depth", fn=fn, min_value=0)
    if x2 is x1:  # fc_kernels(x, x): the exact-diagonal route of x2 = None
        x2 = None
    x1, x2 = _check_inputs(x1, x2, diagonal, fn, names)
    # half-precision inputs are computed in float32; integer inputs in the default float
    # (float64 with jax_enable_x64, as before 2026-11-29: raw uint8 pixels are where the
    # precision matters)
    dtype = jnp.result_type(x1.dtype, *(() if x2 is None else (x2.dtype,)), float)
    if jnp.finfo(dtype).bits < 32:
        dtype = jnp.float32
    x1 = x1.astype(dtype)
    w = _check_variance("w_var", w_var, depth, dtype, fn)
    b = _check_variance("b_var", b_var, depth, dtype, fn)
    x2 = None if x2 is None else x2.astype(dtype)
    step_fn = _relu_step if activation == "relu" else _erf_step
    # The recursion is elementwise and cheap (~2 passes over [n1, n2] per layer) but keeps
    # several [n1, n2] residuals for the backward pass.  Recomputing it there instead
    # (jax.checkpoint) saves that memory and, on CPU, avoids an XLA scheduling pathology: a
    # DGL loss on this kernel took 0.46 s for value + gradient with the residuals kept and
    # 0.25 s with them recomputed (N = 1000, d = 20, depth 2; docs/kernels.md).
    out, sq1 = _fc_core(x1, x2, w, b, mode=("dsym" if x2 is None else "diag") if diagonal
                        else ("sym" if x2 is None else "full"), depth=depth, step_fn=step_fn,
                        with_ntk=with_ntk, return_all_layers=return_all_layers)
    # eager only: an overflow (inputs of huge norm) is an error, not a result
    return check_result_finite(
        out, f"{activation} kernels of depth {depth}", fn=fn,
        hint=lambda: f"the inputs' squared norms overflow the dtype (max |{names[0]}_i|^2 / "
                     f"d = {float(jnp.max(sq1)):.3g}); rescale {'/'.join(names)} (e.g. "
                     "layerlab.data.standardize) or use float64.")


_FORMULAS = {
    ("nngp", "relu"): "K^l = b_l + w_l sqrt(K11 K22) / (2 pi) (sin t + (pi - t) cos t),"
                      " cos t = K12 / sqrt(K11 K22)",
    ("ntk", "relu"): "Theta^l = K^l + w_l (pi - t) / (2 pi) Theta^{l-1}",
    ("nngp", "erf"): "K^l = b_l + w_l (2 / pi) arcsin(2 K12 / sqrt((1 + 2 K11)(1 + 2 K22)))",
    ("ntk", "erf"): "Theta^l = K^l + w_l (4 / pi) / sqrt((1 + 2 K11)(1 + 2 K22) - 4 K12^2)"
                    " Theta^{l-1}",
}
_REFS = {
    "relu": "Cho & Saul 2009 (arc-cosine kernel, degree 1)",
    "erf": "Williams 1997 (erf kernel)",
    "nngp": "Lee et al. 2018 (NNGP recursion)",
    "ntk": "Jacot et al. 2018 Thm. 1; Arora et al. 2019 (NTK recursion)",
}


def _doc(kind: str, act: str) -> str:
    name = "NNGP" if kind == "nngp" else "NTK"
    layer = "Relu" if act == "relu" else "Erf"
    return f"""{name} kernel of an infinitely wide fully connected {act} network.

    .. math::

        K^0 = b_0 + w_0\\, x^\\top x' / d, \\qquad
        {_FORMULAS[(kind, act)]}

    Equals neural-tangents' ``kernel_fn(x1, x2, '{kind}')`` of
    ``stax.serial(Dense(W_std=sqrt(w_0), b_std=sqrt(b_0)), {layer}(), ...)`` with
    ``depth`` activations and ``depth + 1`` Dense layers (NTK parameterization); see
    :func:`fc_kernels` and the module docstring.

    Args:
      x1: ``[n1, d]`` inputs.
      x2: ``[n2, d]`` inputs or ``None`` (``x2 = x1``, exact diagonal).  For the symmetric
        kernel pass ``None`` (or omit it): the same array passed twice is recognised only
        eagerly (the same object); under ``jit``/``vmap`` it is computed as a cross kernel,
        with a float32 error near the diagonal of ~1e-4 relative per ReLU layer (at most
        ``2e-4 * depth``).  Float32 input gradients of the ReLU NTK between nearly parallel
        inputs lose precision, up to all of the ``pi - theta`` cone's part below an angle of
        ~1e-3 (bound in :func:`fc_kernels`); use float64 there.
      depth: number of {act} layers (int >= 0).
      w_var: weight variance, scalar or ``[depth + 1]`` (entry 0: input layer).
      b_var: bias variance, scalar or ``[depth + 1]``.
      diagonal: return only ``K(x1_i, x2_i)``, shape ``[n]``.
      return_all_layers: stack ``K^0 .. K^depth`` on a leading ``[depth + 1]`` axis.

    Returns:
      ``[n1, n2]`` kernel matrix (``[n]`` if ``diagonal``; leading ``[depth + 1]`` axis
      if ``return_all_layers``).

    References:
      Eq. (2) of the DGL paper; {_REFS[act]}; {_REFS[kind]}.
    """


def _make(kind: str, act: str):
    def fn(x1: ArrayLike, x2: ArrayLike | None = None, *, depth: int,
           w_var: ArrayLike | Sequence[float], b_var: ArrayLike | Sequence[float],
           diagonal: bool = False, return_all_layers: bool = False) -> jax.Array:
        out = _fc_kernels(x1, x2, depth=depth, w_var=w_var, b_var=b_var, activation=act,
                          diagonal=diagonal, return_all_layers=return_all_layers,
                          with_ntk=kind == "ntk", fn=name)
        return getattr(out, kind)

    name = f"{act}_{kind}"
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = _doc(kind, act)
    return fn


relu_nngp = _make("nngp", "relu")
relu_ntk = _make("ntk", "relu")
erf_nngp = _make("nngp", "erf")
erf_ntk = _make("ntk", "erf")
