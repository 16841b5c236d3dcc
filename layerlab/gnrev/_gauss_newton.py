"""Exact Gauss–Newton direction of a RevMLP: the layer-wise right inverse of Prop. 4.4.

Derivation (samples as rows; see ``_revmlp.py`` for the conventions).  Let ``y = x_L`` be the
body output and ``ε`` (``[n, d]``) the output-space target.  The blocks are invertible, so
``e_ℓ := (∂x_ℓ/∂x_L) ε`` is the change of block ``ℓ``'s output that alone moves ``y`` by ``ε``;
all ``e_ℓ`` come from ONE forward-mode pass (``jax.jvp``) through the analytic inverse started
at ``(y, ε)``, which also recomputes every activation (no stored forward pass: memory of SGD).
Perturbing only block ``ℓ``'s parameters changes its output by::

    δx1_ℓ = A1 δW1                         A1 = [σ(x2_{ℓ-1} V1), 1]   ([n, d'+1])
    δx2_ℓ = C δW1 + A2 δW2                 A2 = [σ(x1_ℓ V2), 1],  C δW1 = (σ'(z2) ⊙ (δx1 V2)) W2

so ``δx_ℓ = e_ℓ`` is solved by ``δW1 = A1⁺ e1_ℓ`` and ``δW2 = A2⁺ (e2_ℓ − C δW1)`` (Prop. 4.4;
``C δW1`` is the jvp of ``x2_ℓ`` with respect to ``W1``).  Because ``C`` depends on ``δW1``
only through ``A1 δW1``, this sequential solution is the minimum-norm solution, i.e. the
Moore–Penrose inverse of block ``ℓ``'s Jacobian ``J_ℓ = ∂y/∂θ_ℓ`` applied to ``ε`` (App. N);
it requires ``A1``, ``A2`` of full row rank ``n`` (``n <= d'+1``).  Each block alone hits
``ε``, so the average ``Δθ = (1/L) Σ_ℓ J_ℓ⁺ ε`` satisfies ``J Δθ = Σ_ℓ J_ℓ J_ℓ⁺ ε / L = ε``:
a right inverse of the full Jacobian (Theorem 4.3: same loss dynamics as ``J⁺`` up to O(α)).
"""
from __future__ import annotations

import dataclasses
import numbers
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from layerlab._checks import (
    check_array,
    check_choice,
    check_int,
    check_key,
    check_labels,
    is_concrete,
)
from layerlab._linalg import eigh, qr, thin_svd

from ._revmlp import (
    RevMLPFrozen,
    _block_inverse,
    _check_params,
    _check_x,
    _frozen_xs,
    _params_dim,
    _user_stacklevel,
    check_rank_bounds,
    revmlp_apply,
)

__all__ = [
    "COMBINE",
    "GNInfo",
    "GramFloorWarning",
    "PINV_METHODS",
    "PINV_SOLVERS",
    "PinvConfig",
    "regularized_pinv",
    "pinv_solve",
    "gn_direction",
    "gn_residual",
    "output_target",
    "loss_value",
    "softmax_newton_target",
]

PINV_METHODS = ("truncate", "damp", "noise")
PINV_SOLVERS = ("gram", "svd", "rsvd")
COMBINE = ("average", "per_block")


@dataclasses.dataclass(frozen=True)
class PinvConfig:
    """How every pseudo-inverse of the Gauss–Newton update is regularised and computed.

    Attributes:
      method: ``"truncate"`` (drop ``s <= max(rtol s_1, atol)``; §5 and App. K, the paper's
        default), ``"damp"`` (``1/(s + damping s_1)``, App. K) or ``"noise"`` (add Gaussian
        noise of std ``noise_scale * std(A)`` to ``A`` first, App. K; needs a key).
      rtol, atol: truncation tolerances (paper §5: 1% and 1e-5); ``0 <= rtol < 1``.
      damping: relative damping (App. K: 1% of ``s_1``).
      noise_scale: relative noise std (App. K: 10% of ``std(A)``).
      solver: ``"gram"`` (``eigh`` of the smaller Gram matrix; default, fastest),
        ``"svd"`` (thin SVD of ``A``) or ``"rsvd"`` (randomized SVD, Halko et al. 2011
        Alg. 4.4, as offered by the authors' code: range of ``A`` from ``A Ω`` with
        ``rank + oversample`` Gaussian probes and ``power_iters`` power iterations; exact
        when ``rank + oversample >= rank(A)``).
      rank, oversample, power_iters: randomized-SVD settings (``rank=0``: ``min(n, k)``).
    """

    method: str = "truncate"
    rtol: float = 0.01
    atol: float = 1e-5
    damping: float = 0.01
    noise_scale: float = 0.1
    solver: str = "gram"
    rank: int = 0
    oversample: int = 10
    power_iters: int = 2

    def __post_init__(self) -> None:
        if self.method not in PINV_METHODS:
            raise ValueError(f"PinvConfig.method must be one of {PINV_METHODS}, "
                             f"got {self.method!r}")
        if self.solver not in PINV_SOLVERS:
            raise ValueError(f"PinvConfig.solver must be one of {PINV_SOLVERS}, "
                             f"got {self.solver!r}")
        for name in ("rtol", "atol", "damping", "noise_scale"):
            v = getattr(self, name)
            if not (isinstance(v, numbers.Real) and not isinstance(v, bool)
                    and np.isfinite(v) and v >= 0):
                raise ValueError(f"PinvConfig.{name} must be a finite real number >= 0 (a Python "
                                 f"or numpy scalar), got {v!r}")
        if self.rtol >= 1:  # s > rtol s_1 >= s_1 keeps nothing: a zero direction
            raise ValueError(f"PinvConfig.rtol must be < 1 (a fraction of the largest singular "
                             f"value; rtol >= 1 drops every one), got {self.rtol!r}; the paper "
                             "uses 0.01.")
        for name in ("rank", "oversample", "power_iters"):  # stored as Python ints
            object.__setattr__(
                self, name, check_int(getattr(self, name), f"PinvConfig.{name}", min_value=0))


class GramFloorWarning(UserWarning):
    """The ``"gram"`` solver cannot honour the requested regularisation (see
    :func:`pinv_solve`): it always drops ``s <= 10 sqrt(eps) s_1``."""


def _gram_floor(dtype) -> float:
    """Relative floor ``10 sqrt(eps)`` of the Gram solver for the factorisation dtype of a
    ``dtype`` system (half precision is factorised in float32)."""
    dt = jnp.dtype(dtype)
    if jnp.finfo(dt).bits < 32:
        dt = jnp.dtype(jnp.float32)
    return 10.0 * float(np.sqrt(float(jnp.finfo(dt).eps)))


def _warn_gram_floor(cfg: PinvConfig, dtype, fn: str) -> None:
    """Warn when ``cfg`` asks the ``"gram"`` solver for a regularisation its floor defeats:
    ``method="damp"`` (the dropped small singular values are those damping weights most: the
    result is not the damped inverse).  A truncation ``rtol`` below the floor is not warned
    about: it truncates at the floor instead, a coarser cut of the same kind (documented;
    ``experiments.EXACT_PINV``'s 0.1 % is 0.345 % in float32).  Static (config and dtype)."""
    if cfg.solver != "gram":
        return
    floor = _gram_floor(dtype)
    name = jnp.dtype(dtype).name
    if cfg.method == "damp":
        what = (f"PinvConfig(method='damp', damping={cfg.damping:g}) needs every singular "
                f"value, but the Gram solver drops s <= {floor:.3g} s_1 in {name} (squaring "
                "loses them), so the result is not the damped inverse 1/(s + damping s_1)")
    else:
        return
    warnings.warn(f"{fn}: {what}; use PinvConfig(..., solver='svd') to get the "
                  "requested regularisation.", GramFloorWarning, stacklevel=_user_stacklevel())


class GNInfo(NamedTuple):
    """Diagnostics of one Gauss–Newton direction.

    Attributes:
      rank: ``[L, 2]`` int, number of singular values kept in each pseudo-inverse
        (block ``ℓ``, half-layer 1 / 2).
      cond: ``[L, 2]``, condition number of each (regularised) pseudo-inverse: ratio of the
        largest to the smallest kept singular value (damping included for ``"damp"``).
      size: the number of rows ``n`` an exact right inverse needs as rank.
    """

    rank: jax.Array
    cond: jax.Array
    size: int


def _filter(s, method, rtol, atol, damping, floor):
    """Filtered inverse singular values ``φ(s)``, kept mask, condition number."""
    smax = jnp.max(s)
    if method == "truncate":
        thr = jnp.maximum(jnp.maximum(rtol * smax, atol), floor * smax)
        keep = s > thr
        phi = jnp.where(keep, 1.0 / jnp.where(keep, s, 1.0), 0.0)
        smin = jnp.min(jnp.where(keep, s, jnp.inf))
        cond = smax / smin
    elif method == "damp":
        thr = jnp.maximum(atol, floor * smax)
        keep = s > thr
        lam = damping * smax
        phi = jnp.where(keep, 1.0 / (jnp.where(keep, s, 1.0) + lam), 0.0)
        smin = jnp.min(jnp.where(keep, s, jnp.inf))
        cond = (smax + lam) / (smin + lam)
    else:  # noise: plain pseudo-inverse of the perturbed matrix
        thr = jnp.maximum(atol, floor * smax)
        keep = s > thr
        phi = jnp.where(keep, 1.0 / jnp.where(keep, s, 1.0), 0.0)
        smin = jnp.min(jnp.where(keep, s, jnp.inf))
        cond = smax / smin
    return phi, jnp.sum(keep).astype(jnp.int32), cond


def pinv_solve(
    a: jax.Array,
    e: jax.Array,
    config: PinvConfig | None = None,
    *,
    key: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Regularised pseudo-inverse solve ``A_reg⁺ e`` via the SVD ``A = U S Wᵀ``.

    .. math::
        A_{\\rm reg}^+ e = W\\,\\mathrm{diag}(φ(s))\\,U^\\top e,\\qquad
        φ(s) = \\begin{cases} 1/s\\ [s > \\max(r_{tol} s_1, a_{tol})] & \\text{truncate}\\\\
        1/(s + δ s_1) & \\text{damp} \\\\ 1/s \\text{ of } A + ξ,\\ ξ\\sim\\mathcal N(0, (c\\,
        \\mathrm{std} A)^2) & \\text{noise}\\end{cases}

    ``solver="gram"`` (default, fast) diagonalises the smaller Gram matrix ``A Aᵀ``
    (``n <= k``) or ``AᵀA`` with ``eigh`` and uses ``A⁺ = Aᵀ U diag(φ/s) Uᵀ``; singular values
    below ``10 sqrt(eps) s_1`` (3.45e-3 s_1 in float32, 1.5e-7 s_1 in float64) are always
    dropped there, since squaring loses them.  An ``rtol`` below the floor therefore truncates
    at the floor (``experiments.EXACT_PINV``'s ``rtol=1e-3`` cuts at 3.45e-3 s_1 in float32);
    ``method="damp"``, which weights the small singular values most, is defeated by it and
    warns (:class:`GramFloorWarning`, once per call or trace): use ``solver="svd"`` there.
    ``solver="svd"`` uses a thin SVD of ``A`` (slower, more accurate); ``solver="rsvd"`` a
    randomized SVD (:class:`PinvConfig`).  Both SVD solvers drop, for ``"truncate"`` and
    ``"noise"``, singular values ``s <= max(n, k) eps s_1`` (numerically zero; numpy's
    ``pinv`` default), so ``rtol=0, atol=0`` means "no truncation beyond that floor" and
    matches ``numpy.linalg.pinv``.  Every factorisation comes from ``layerlab._linalg``:
    under ``vmap`` on CPU it runs one matrix at a time, because two concurrent batched LAPACK
    calls (the two Gram ``eigh`` of a block, vmapped over a learning-rate sweep) deadlock
    XLA:CPU's 2-thread intra-op pool (jaxlib 0.10.2; docs/gnrev.md).  The ``"gram"`` solver is
    differentiable; ``"svd"`` and ``"rsvd"`` are not.

    Half precision: a ``bfloat16`` or ``float16`` system is solved in float32 (the
    factorisations have no half-precision kernels, and the Gram solver's squared singular
    values would lose all but the largest few) and ``x`` is cast back to the inputs' dtype;
    ``cond`` stays float32 (float16 overflows at 65504).  The noise of ``"noise"`` and the
    ``"rsvd"`` probes are then float32 draws too.

    Args:
      a: ``[n, k]`` matrix.
      e: ``[n, m]`` right-hand sides, or one right-hand side ``[n]``.
      config: :class:`PinvConfig` (default: truncation at ``rtol=1%``, ``atol=1e-5``, Gram
        solver); ``"noise"`` draws ``jax.random.normal(key, a.shape)``.
      key: PRNG key for ``method="noise"`` (and the ``"rsvd"`` sketch; a fixed key when
        ``None``).

    Returns:
      ``(x, rank, cond)``: ``x`` ``[k, m]`` (``[k]`` for ``e`` of shape ``[n]``), ``rank``
      (int scalar, kept singular values) and ``cond`` (scalar, condition number of the
      regularised inverse).

    References:
      App. K of Buffelli et al. 2024 (pseudo-inverse regularisations).
    """
    return _solve(a, e, config, check_key(key, fn="pinv_solve", allow_none=True), warn=True)


def _solve(a, e, config, key, *, warn: bool):
    """:func:`pinv_solve`; ``warn=False`` skips the :class:`GramFloorWarning` (its caller
    warned once already)."""
    cfg = PinvConfig() if config is None else config
    if not isinstance(cfg, PinvConfig):
        raise TypeError(f"pinv_solve: config must be a PinvConfig, got {type(cfg).__name__}.")
    a = check_array(a, "a", fn="pinv_solve", ndim=2, kind="float")
    e = check_array(e, "e", fn="pinv_solve", ndim=(1, 2), kind="real")
    if a.size == 0:
        raise ValueError(f"pinv_solve: a must have at least one row and one column, got shape "
                         f"{tuple(a.shape)}.")
    if e.shape[0] != a.shape[0]:
        raise ValueError(
            f"pinv_solve: e must have one row per row of a (a has shape {tuple(a.shape)}: "
            f"e of shape ({a.shape[0]},) or ({a.shape[0]}, m)), got shape {tuple(e.shape)}.")
    out = jnp.result_type(a.dtype, e.dtype)
    # bfloat16 / float16: factorise in float32 (see above), decided per array (a bfloat16 `a`
    # with a float32 `e` has a float32 result type but no half-precision factorisation)
    if jnp.finfo(a.dtype).bits < 32:
        a = a.astype(jnp.float32)
    if jnp.issubdtype(e.dtype, jnp.floating) and jnp.finfo(e.dtype).bits < 32:
        e = e.astype(jnp.float32)
    if warn:
        _warn_gram_floor(cfg, a.dtype, "pinv_solve")
    vec = e.ndim == 1  # one right-hand side: solve it as a column, return a vector
    x, rank, cond = _pinv_solve(a, e[:, None] if vec else e, cfg, key)
    return (x[:, 0] if vec else x).astype(out), rank, cond


def _block_solve(a, e, cfg: PinvConfig, key):
    """:func:`pinv_solve` inside :func:`gn_direction` (inputs checked and warned there)."""
    return _solve(a, e, cfg, key, warn=False)


def _pinv_solve(a, e, cfg: PinvConfig, key):
    """:func:`pinv_solve` on checked ``a`` ``[n, k]`` and ``e`` ``[n, m]``."""
    method, rtol, atol, damping = cfg.method, cfg.rtol, cfg.atol, cfg.damping
    solver = cfg.solver
    if method == "noise":
        if key is None:
            raise ValueError("pinv_solve: PinvConfig(method='noise') needs a PRNG key "
                             "(key=jax.random.key(...)).")
        a = a + cfg.noise_scale * jnp.std(a) * jax.random.normal(key, a.shape, a.dtype)
    n, k = a.shape
    eps = float(jnp.finfo(a.dtype).eps)
    # numerical-zero floor of the SVD solvers (numpy.linalg.pinv's: max(n, k) eps s_1), a
    # minimum cutoff of the plain pseudo-inverses ("truncate", "noise") whatever rtol/atol;
    # far below the default rtol = 1%, so it only acts for rtol, atol ~ 0
    svd_floor = 0.0 if method == "damp" else max(n, k) * eps
    if solver == "svd":
        u, s, wt = thin_svd(a)
        phi, rank, cond = _filter(s, method, rtol, atol, damping, svd_floor)
        return wt.T @ (phi[:, None] * (u.T @ e)), rank, cond
    if solver == "rsvd":
        sketch = jax.random.key(0) if key is None else jax.random.fold_in(key, 1)
        u, s, wt = _randomized_svd(a, cfg, sketch)
        phi, rank, cond = _filter(s, method, rtol, atol, damping, svd_floor)
        return wt.T @ (phi[:, None] * (u.T @ e)), rank, cond
    floor = 10.0 * np.sqrt(eps)
    if n <= k:
        lam, u = eigh(a @ a.T)
        s = _safe_sqrt_eig(lam)
        phi, rank, cond = _filter(s, method, rtol, atol, damping, floor)
        coef = jnp.where(phi > 0, phi / jnp.where(phi > 0, s, 1.0), 0.0)
        return a.T @ (u @ (coef[:, None] * (u.T @ e))), rank, cond
    lam, w = eigh(a.T @ a)
    s = _safe_sqrt_eig(lam)
    phi, rank, cond = _filter(s, method, rtol, atol, damping, floor)
    coef = jnp.where(phi > 0, phi / jnp.where(phi > 0, s, 1.0), 0.0)
    return w @ (coef[:, None] * (w.T @ (a.T @ e))), rank, cond


def _safe_sqrt_eig(lam):
    """``sqrt(max(lam, 0))`` of Gram eigenvalues with a finite derivative everywhere.

    A rank-deficient ``a`` has (numerically) zero Gram eigenvalues; ``sqrt`` has an infinite
    derivative there, and ``inf * 0`` (the zero cotangent of a dropped direction) gives NaN
    gradients.  Non-positive eigenvalues map to ``s = 0`` with a zero derivative.
    """
    pos = lam > 0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, lam, 1.0)), 0.0)


def _randomized_svd(a, cfg: PinvConfig, key):
    """Thin randomized SVD ``a ≈ U diag(s) Wᵀ`` (Halko, Martinsson, Tropp 2011, Alg. 4.4)."""
    n, k = a.shape
    r = min(n, k) if cfg.rank == 0 else min(n, k, cfg.rank + cfg.oversample)
    at = n > k  # sketch the smaller side: range of a (n <= k) or of aᵀ
    m = a.T if at else a
    omega = jax.random.normal(key, (m.shape[1], r), a.dtype)
    q, _ = qr(m @ omega)
    for _ in range(cfg.power_iters):
        q, _ = qr(m.T @ q)
        q, _ = qr(m @ q)
    ub, s, wt = thin_svd(q.T @ m)
    u = q @ ub
    if at:  # m = aᵀ = u s wt  ->  a = wtᵀ s uᵀ
        return wt.T, s, u.T
    return u, s, wt


def regularized_pinv(
    a: jax.Array, config: PinvConfig | None = None, *, key: jax.Array | None = None
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Dense regularised pseudo-inverse ``[k, n]`` of ``a`` ``[n, k]`` (see :func:`pinv_solve`).

    Returns ``(a_pinv, rank, cond)``.
    """
    a = check_array(a, "a", fn="regularized_pinv", ndim=2, kind="float")
    key = check_key(key, fn="regularized_pinv", allow_none=True)
    return pinv_solve(a, jnp.eye(a.shape[0], dtype=a.dtype), config, key=key)


def _check_pinv(pinv, fn: str) -> PinvConfig:
    """``pinv`` as a :class:`PinvConfig` (``None``: the default one)."""
    if pinv is None:
        return PinvConfig()
    if not isinstance(pinv, PinvConfig):
        raise TypeError(f"{fn}: pinv must be a PinvConfig (e.g. PinvConfig(method='damp')) "
                        f"or None, got {pinv!r}.")
    return pinv


def _act_jvp(z, dz, linear, activation):
    """Tangent of ``σ`` (or identity in a linear block) at ``z`` along ``dz``."""
    _, t = jax.jvp(activation, (z,), (dz,))
    return jnp.where(linear, dz, t)


def gn_direction(
    params: dict,
    frozen: RevMLPFrozen,
    x: jax.Array,
    target: jax.Array,
    *,
    y: jax.Array | None = None,
    pinv: PinvConfig | None = None,
    combine: str = "average",
    key: jax.Array | None = None,
    return_info: bool = False,
) -> dict | tuple[dict, GNInfo]:
    """Exact Gauss–Newton direction: the layer-wise right inverse of the body Jacobian.

    .. math::
        ΔW^{(1)}_\\ell = \\tfrac1L A_1^+\\, e^{(1)}_\\ell,\\quad
        ΔW^{(2)}_\\ell = \\tfrac1L A_2^+\\big(e^{(2)}_\\ell - C_\\ell\\, L ΔW^{(1)}_\\ell\\big),
        \\quad e_\\ell = \\frac{\\partial x_\\ell}{\\partial x_L} ε

    with ``A1 = [σ(x2_{ℓ-1} V1), 1]``, ``A2 = [σ(x1_ℓ V2), 1]`` and ``C_ℓ`` the Jacobian of
    ``x2_ℓ`` with respect to ``W1_ℓ``.  With exact pseudo-inverses (``n <= d'+1``, nothing
    truncated), ``jvp(revmlp_apply, params)[delta] == target`` and each block's
    ``L * delta_ℓ`` is the Moore–Penrose solution ``J_ℓ⁺ ε`` of that block's Jacobian.  The GN
    step is ``params - α * delta``.

    **Step-size convention** (``combine``): ``"average"`` (default) is Eqs. 16–17 as written,
    the average ``(1/L) Σ_ℓ J_ℓ⁺ ε`` of the block solutions, a right inverse (``J·delta = ε``),
    so ``α`` is the function-space step of Eq. 11.  ``"per_block"`` is the authors' code:
    every block takes its full solution ``J_ℓ⁺ ε`` (``J·delta = L ε``), so the same update needs
    ``α_per_block = α_average / L``; their learning rates (0.1 mini-batch and 0.5 full batch on
    MNIST, 1.0 on CIFAR-10) are in this convention.

    Cost ``O(L n d d' + L n² d')`` (Gram matrices), memory of a forward pass.  A bfloat16 or
    float16 net takes its pseudo-inverses in float32 (:func:`pinv_solve`); ``delta`` has the
    parameters' dtype.

    Args:
      params: trainable pytree (``[L, ...]`` stacked), from :func:`revmlp_init`.
      frozen: :class:`RevMLPFrozen`.
      x: ``[n, d]`` inputs (samples as rows, ``n >= 1``), in the parameters' dtype.
      target: ``[n, d]`` output-space error ``ε`` (e.g. ``∇_f L`` mapped through the readout:
        ``ε_logits Pᵀ``), in the parameters' dtype (cast it with ``.astype``).
      y: optional ``[n, d]`` body output ``revmlp_apply(params, frozen, x)`` if already known.
      pinv: :class:`PinvConfig` (regularisation of App. K and solver; default truncation at
        1% / 1e-5 with the Gram solver, as in §5).
      combine: ``"average"`` (Eqs. 16–17) or ``"per_block"`` (authors' code, ``L ×``).
      key: PRNG key (needed for ``PinvConfig(method="noise")``).
      return_info: also return :class:`GNInfo` (rank/condition of every pseudo-inverse).

    Returns:
      ``delta`` with the structure of ``params`` (or ``(delta, GNInfo)``).

    Examples:
      With ``n <= d' + 1`` samples the direction hits the target exactly (``J delta = eps``):

      >>> import jax
      >>> from layerlab import gnrev
      >>> params, frozen = gnrev.revmlp_init(jax.random.key(0), dim=4, depth=2, bottleneck=16)
      >>> x = jax.random.normal(jax.random.key(1), (4, 4))       # n = 4 samples as rows
      >>> eps = jax.random.normal(jax.random.key(2), (4, 4))     # output-space target
      >>> direction = jax.jit(lambda p: gnrev.gn_direction(p, frozen, x, eps))
      >>> delta = direction(params)
      >>> delta["w1"].shape == params["w1"].shape
      True
      >>> float(gnrev.gn_residual(params, frozen, x, delta, eps)) < 1e-3
      True

    References:
      Prop. 4.4, Theorem 4.3, Eqs. (5), (14)–(15) and App. N of Buffelli et al. 2024.
    """
    fn = "gn_direction"
    x, target, dim, dtype = _check_net_x_target(params, frozen, x, target, fn)
    if x.shape[0] == 0:
        raise ValueError(f"gn_direction: x must hold at least one sample (row), got shape "
                         f"{tuple(x.shape)}.")
    if y is not None:
        y = _check_x(y, dim, "y", dtype=dtype, fn=fn)
        if y.shape != x.shape:
            raise ValueError(f"gn_direction: y (the body output of x) must have the shape of x "
                             f"{tuple(x.shape)}, got {tuple(y.shape)}.")
    cfg = _check_pinv(pinv, fn)
    check_choice(combine, "combine", COMBINE, fn=fn)
    key = check_key(key, fn=fn, allow_none=True)
    _warn_gram_floor(cfg, dtype, fn)
    if cfg.method == "noise" and key is None:
        raise ValueError("gn_direction: PinvConfig(method='noise') needs "
                         "key=jax.random.key(...).")
    n = x.shape[0]
    depth = frozen.depth
    check_rank_bounds(n, frozen, params["w1"].shape[1])
    if y is None:
        y = revmlp_apply(params, frozen, x)
    needs_key = cfg.method == "noise" or cfg.solver == "rsvd"
    keys = jax.random.split(key, (depth, 2)) if (key is not None and needs_key) else None
    act = frozen.activation
    h = dim // 2
    share = depth if combine == "average" else 1
    ones = jnp.ones((n, 1), x.dtype)

    def body(carry, xs):
        yc, ec = carry
        p, f, k = xs

        def inv(yy):
            xp, (a1, a2) = _block_inverse(p, f, yy, act)
            return xp, (a1, a2)

        xp, ep, (a1, a2) = jax.jvp(inv, (yc,), (ec,), has_aux=True)
        e1, e2 = ec[:, :h], ec[:, h:]
        A1 = jnp.concatenate([a1, ones], axis=1)
        A2 = jnp.concatenate([a2, ones], axis=1)
        k1 = k2 = None
        if k is not None:
            k1, k2 = k[0], k[1]
        d1, r1, c1 = _block_solve(A1, e1, cfg, k1)
        # correction: jvp of x2_ℓ w.r.t. W1_ℓ along d1, = (σ'(z2) ⊙ (δx1 V2)) W2
        dx1 = A1 @ d1
        z2 = yc[:, :h] if f["v2"] is None else yc[:, :h] @ f["v2"]
        dz2 = dx1 if f["v2"] is None else dx1 @ f["v2"]
        cdx = _act_jvp(z2, dz2, f["linear"], act) @ p["w2"]
        d2, r2, c2 = _block_solve(A2, e2 - cdx, cfg, k2)
        out = {
            "w1": d1[:-1] / share,
            "b1": d1[-1] / share,
            "w2": d2[:-1] / share,
            "b2": d2[-1] / share,
        }
        return (xp, ep), (out, jnp.stack([r1, r2]), jnp.stack([c1, c2]))

    _, (delta, ranks, conds) = lax.scan(
        body, (y, target), (params, _frozen_xs(frozen), keys), reverse=True
    )
    delta = {k: delta[k].astype(params[k].dtype) for k in params}
    if return_info:
        return delta, GNInfo(rank=ranks, cond=conds, size=n)
    return delta


def _check_net_x_target(params, frozen, x, target, fn):
    """The RevMLP, ``x`` and ``target`` checked for ``fn``: ``(x, target, dim, dtype)``."""
    dim = _params_dim(params, frozen, fn)
    dtype = params["b1"].dtype
    _check_params(params, frozen, dim, fn=fn)
    x = _check_x(x, dim, dtype=dtype, fn=fn)
    target = _check_x(target, dim, "target", dtype=dtype, fn=fn)
    if target.shape != x.shape:
        raise ValueError(f"{fn}: target must have the shape of x {tuple(x.shape)} (one "
                         f"output-space error per sample), got {tuple(target.shape)}.")
    return x, target, dim, dtype


def gn_residual(
    params: dict, frozen: RevMLPFrozen, x: jax.Array, delta: dict, target: jax.Array
) -> jax.Array:
    """Certificate that an update hit its target: ``‖J Δθ − ε‖ / ‖ε‖`` with one jvp.

    Args:
      params, frozen: the RevMLP.
      x: ``[n, d]`` inputs, in the parameters' dtype.
      delta: update direction: a dict with the keys, shapes and dtype of ``params`` (as
        :func:`gn_direction` returns it).
      target: ``[n, d]`` output-space target ``ε`` (the shape of ``x``), in the parameters'
        dtype.

    Returns:
      scalar relative residual (0 for an exact right inverse).  For a zero target it is 0
      when ``J Δθ`` is zero too and ``inf`` otherwise.

    References:
      Theorem 4.3 of Buffelli et al. 2024 (right-inverse property ``J J^⊣ = I``).
    """
    fn = "gn_residual"
    x, target, _, _ = _check_net_x_target(params, frozen, x, target, fn)
    if not isinstance(delta, dict) or set(delta) != set(params):
        got = sorted(map(str, delta)) if isinstance(delta, dict) else type(delta).__name__
        raise TypeError(f"{fn}: delta must be a dict with the keys of params "
                        f"{sorted(params)} (the direction gn_direction returns), got {got}.")
    for k in sorted(params):
        d = check_array(delta[k], f"delta['{k}']", fn=fn, kind="float")
        if tuple(d.shape) != tuple(params[k].shape):
            raise ValueError(f"{fn}: delta['{k}'] must have the shape of params['{k}'] "
                             f"{tuple(params[k].shape)}, got {tuple(d.shape)}.")
        if d.dtype != params[k].dtype:
            raise TypeError(f"{fn}: delta['{k}'] has dtype {d.dtype} but the parameters are "
                            f"{params[k].dtype}; cast it with .astype (gn_direction returns "
                            "the parameters' dtype).")
    _, jd = jax.jvp(lambda p: revmlp_apply(p, frozen, x), (params,), (delta,))
    r, t = jnp.linalg.norm(jd - target), jnp.linalg.norm(target)
    # a zero target: 0 when J delta is zero too, else inf (no relative error is defined; a
    # floor such as 1e-30 turned any nonzero J delta into a huge finite number)
    return jnp.where(t > 0, r / jnp.where(t > 0, t, 1), jnp.where(r > 0, jnp.inf, 0.0))


def _as_targets(labels, num_outputs, dtype, *, fn, loss=None):
    """``labels`` as ``[n, C]`` targets of ``dtype`` (int labels one-hot encoded).

    For ``loss="ce"`` real-valued targets must be probability rows (checked eagerly, see
    :func:`_check_simplex`).
    """
    labels = check_array(labels, "labels", fn=fn, kind="real")
    if jnp.issubdtype(labels.dtype, jnp.integer):
        if labels.ndim != 1:
            raise ValueError(f"{fn}: integer labels must have shape (n,), got shape "
                             f"{tuple(labels.shape)}; pass [n] class indices or [n, C] "
                             "real targets.")
        # eager only: labels in [0, C) (one_hot would give an all-zero row otherwise)
        check_labels(labels, num_outputs, "labels", fn=fn)
        return jax.nn.one_hot(labels, num_outputs, dtype=dtype)
    shape = tuple(labels.shape)  # as passed: a real [n] vector is read as [n, 1] below
    if labels.ndim == 1:
        labels = labels[:, None]
    if labels.ndim != 2 or labels.shape[1] != num_outputs:
        hint = ("; a real [n] vector is one target per sample (a one-output readout): for "
                "class indices pass integers, e.g. labels.astype(jnp.int32)"
                if len(shape) == 1 else "")
        raise ValueError(
            f"{fn}: labels must be [n] integer class labels or [n, {num_outputs}] real targets "
            f"(one column per readout output), got shape {shape} and dtype "
            f"{labels.dtype}{hint}."
        )
    y = labels.astype(dtype)
    if loss == "ce":
        _check_simplex(y, "labels", fn)
    return y


def _check_simplex(y, name, fn):
    """Eager only: the rows of real CE targets ``y`` are non-negative and sum to 1.

    The softmax cross-entropy gradient is ``Σ_c y_c · softmax(f) − y``; the functions here
    use ``softmax(f) − y``, which is that only on the simplex.  Rows that do not sum to 1
    (a zero-mean one-hot, ``2 · onehot``) would silently give a wrong gradient and Newton
    target.  Tolerance: ``1e-3`` (float32 and below) or ``1e-6`` (float64), at least ``C`` times
    the dtype's epsilon (rounding soft labels to bfloat16).  Under ``jit``
    (traced ``y``) the check is skipped: the requirement is the caller's.
    """
    if not is_concrete(y) or y.size == 0:
        return
    yn = np.asarray(y, dtype=np.float64)
    if not np.all(np.isfinite(yn)):
        return  # reported as non-finite elsewhere / NaN propagates
    # a row of C entries rounded to y's dtype moves its sum by up to ~C eps / 2 (bfloat16
    # soft labels 1/3 sum to 1 +- 2e-3): the tolerance grows with it
    eps = float(jnp.finfo(y.dtype).eps)
    tol = max(1e-3 if jnp.finfo(y.dtype).bits <= 32 else 1e-6, y.shape[-1] * eps)
    dev = float(np.max(np.abs(yn.sum(axis=-1) - 1.0)))
    neg = float(np.min(yn))
    if dev > tol or neg < -tol:
        raise ValueError(
            f"{fn}: for loss='ce' real-valued {name} must be probability rows (non-negative, "
            f"each row summing to 1), got max |row sum - 1| = {dev:.3g} and min entry "
            f"{neg:.3g}; pass integer labels [n], one-hot rows, or soft labels on the "
            "simplex (e.g. not a zero-mean or scaled one-hot encoding).")


def softmax_newton_target(logits: jax.Array, y: jax.Array) -> jax.Array:
    """Function-space Newton target ``H⁺ ∇_f L`` of softmax cross-entropy, exactly.

    .. math::
        H = \\mathrm{diag}(p) - p p^\\top,\\ g = p - y,\\quad
        H^+ g = r̄\\,\\mathbf 1 - r,\\ r = y / p

    ``H`` is singular along ``1`` (and ``g ⊥ 1`` when ``Σ_c y_c = 1``); ``D⁻¹ g`` solves
    ``H u = g`` and removing its mean projects onto ``1^⊥``, the range of ``H``: that is
    the minimum-norm solution, i.e. the Moore–Penrose one (needs ``p_c > 0``).  A class with
    ``y_c = 0`` contributes ``r_c = 0`` exactly, also when its ``p_c`` underflows to 0 (a
    confident prediction, e.g. a logit margin of 90 in float32).

    Args:
      logits: ``[n, C]``.
      y: ``[n, C]`` target probabilities (one-hot or soft, rows summing to 1).

    Returns:
      ``[n, C]`` Newton target per sample.

    References:
      Eq. (19) of Buffelli et al. 2024.
    """
    logits = check_array(logits, "logits", fn="softmax_newton_target", kind="float")
    y = check_array(y, "y", fn="softmax_newton_target", kind="real")
    if y.shape != logits.shape:
        raise ValueError(f"softmax_newton_target: y must have the shape of logits "
                         f"{tuple(logits.shape)} (target probabilities per class), got "
                         f"{tuple(y.shape)}.")
    _check_simplex(y, "y", "softmax_newton_target")
    logp = jax.nn.log_softmax(logits, axis=-1)
    # y_c = 0 gives r_c = 0 even where p_c underflows (0 * exp(-logp) = 0 * inf = NaN);
    # the inner where keeps the gradient finite too
    has = y != 0
    r = jnp.where(has, y * jnp.exp(jnp.where(has, -logp, 0.0)), 0.0)
    return jnp.mean(r, axis=-1, keepdims=True) - r


def output_target(
    logits: jax.Array, labels: jax.Array, *, loss: str = "ce", target: str = "gradient"
) -> jax.Array:
    """Output-space target ``ε``: the gradient (Eq. 5) or Newton step (Eq. 19) per sample.

    .. math::
        ε = \\nabla_f \\tilde L = f - y\\ (\\text{mse}),\\quad ε = \\mathrm{softmax}(f) - y\\
        (\\text{ce}),\\quad ε_{\\rm Newton} = H^+ \\nabla_f \\tilde L

    ``L̃`` is the **sum** over samples (not the mean) so that ``α`` is a function-space step:
    ``f ← f − α ε``.  For MSE ``H = I`` and both targets agree.

    Args:
      logits: ``[n, C]`` network outputs (after the readout).
      labels: ``[n]`` int class labels, or ``[n, C]`` real targets (a real ``[n]`` vector
        is ``[n, 1]``: one output only, ``C = 1``).  For ``loss="ce"`` real targets must be
        probability rows (non-negative, summing to 1: one-hot or soft labels), else the
        gradient ``softmax(f) − y`` is wrong; checked eagerly (ValueError), not under
        ``jit`` (the caller's requirement there).
      loss: ``"ce"`` (softmax cross-entropy) or ``"mse"`` (squared error).
      target: ``"gradient"`` (Eq. 5, the authors' choice) or ``"newton"`` (Eq. 19).

    Returns:
      ``[n, C]`` target.

    References:
      Eqs. (5) and (19) of Buffelli et al. 2024.
    """
    check_choice(target, "target", ("gradient", "newton"), fn="output_target")
    check_choice(loss, "loss", ("ce", "mse"), fn="output_target")
    logits = check_array(logits, "logits", fn="output_target", ndim=2, kind="float")
    y = _as_targets(labels, logits.shape[1], logits.dtype, fn="output_target", loss=loss)
    if y.shape[0] != logits.shape[0]:
        raise ValueError(f"output_target: labels have {y.shape[0]} rows but logits "
                         f"{logits.shape[0]}; pass one label per sample.")
    if loss == "mse":
        return logits - y
    if loss == "ce":
        if target == "newton":
            return softmax_newton_target(logits, y)
        return jax.nn.softmax(logits, axis=-1) - y
    raise ValueError(f"loss must be 'ce' or 'mse', got {loss!r}")


def loss_value(logits: jax.Array, labels: jax.Array, *, loss: str = "ce") -> jax.Array:
    """Mean loss over samples: ``½ mean ‖f − y‖²`` (mse) or mean softmax cross-entropy (ce).

    Args:
      logits: ``[n, C]``.
      labels: ``[n]`` int labels or ``[n, C]`` real targets (a real ``[n]`` vector only for
        ``C = 1``; for ``"ce"``: probability rows, checked eagerly as in
        :func:`output_target`).
      loss: ``"ce"`` or ``"mse"``.

    Returns:
      scalar.
    """
    return _loss_value(logits, labels, loss=loss, fn="loss_value")


def _loss_value(logits, labels, *, loss, fn):
    """:func:`loss_value`, its errors naming ``fn`` (the public function the user called)."""
    logits = check_array(logits, "logits", fn=fn, ndim=2, kind="float")
    check_choice(loss, "loss", ("ce", "mse"), fn=fn)
    y = _as_targets(labels, logits.shape[1], logits.dtype, fn=fn, loss=loss)
    if y.shape[0] != logits.shape[0]:
        raise ValueError(f"{fn}: labels have {y.shape[0]} rows but logits "
                         f"{logits.shape[0]}; pass one label per sample.")
    if loss == "mse":
        return 0.5 * jnp.mean(jnp.sum((logits - y) ** 2, axis=-1))
    if loss == "ce":
        return -jnp.mean(jnp.sum(y * jax.nn.log_softmax(logits, axis=-1), axis=-1))
    raise ValueError(f"loss must be 'ce' or 'mse', got {loss!r}")
