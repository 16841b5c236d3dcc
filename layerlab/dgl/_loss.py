"""The Deep Gaussian Layer-wise loss (DGL) and its relatives.

All losses here take a kernel matrix (or representations) over the whole training set: the
batch *is* the maths (a Gram matrix), so these functions are not per-example and are not
meant to be ``vmap``-ed over samples (``vmap`` over independent problems is fine).

Jitter policy (``dgl_loss``): the Cholesky factor of ``A = K + eps2 I`` is computed; if it
fails (any NaN: ``A`` is not numerically positive definite), it is recomputed *once* with the
deterministic jitter ``tau * mean(diag(K)) + tiny`` added to the diagonal, where
``tau = 100 * finfo(dtype).eps`` (about 1.2e-5 in float32, 2.2e-14 in float64).  If that fails
too, the loss is NaN; so is it when a traced ``K`` is not symmetric (``max|K - K^T| > 1e-4
max|K|``, :func:`check_kernel`'s threshold: the Cholesky reads only the lower triangle).  NaN
is what a jitted function can return; to get an *error*, call
:func:`check_kernel` (host side) or call ``dgl_loss`` eagerly (outside ``jit``), which checks
its concrete inputs (a host-side O(N^3) check) and raises a ``ValueError`` saying what was
wrong.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import solve_triangular

from layerlab._checks import (
    check_array,
    check_int,
    check_key,
    check_number,
    check_result_finite,
    is_concrete,
    nonnegative_or_nan,
    promote_float,
)
from layerlab._linalg import cholesky, cpu_mapped

__all__ = [
    "check_kernel",
    "dgl_loss",
    "dgl_loss_reference",
    "dgl_features",
    "dgl_linear",
    "loo_residuals",
    "ib_pairwise_loss",
    "dgl_minibatch",
    "dgl_subsets_exact",
]


# ----------------------------------------------------------------------------- checks


def integer_labels_error(Y, name: str, where: str) -> ValueError:
    """The error for integer class labels ``[N]`` where targets are regressed on."""
    # LEGO (dgl.lego, random_features, train_end_to_end) and dgl.monitor_fn turn integer
    # labels into *plain* one-hot rows (layerlab.data.as_targets), not zero-mean ones
    return ValueError(
        f"{where}{name} is an integer array of shape {tuple(Y.shape)}: class labels here would "
        "be regressed on as numbers (0, 1, 2, ...). Pass targets [N, C]: plain one-hot "
        "(jax.nn.one_hot(y, C) or layerlab.data.as_targets(y, C), what LEGO and dgl.monitor_fn "
        "build from integer labels) or zero-mean one-hot (jax.nn.one_hot(y, C) - 1 / C, the "
        "paper's MNIST encoding); or a float [N] target for a real-valued regression.")


def _as_2d_targets(Y: jax.Array, n: int, name: str = "Y", fn: str | None = None,
                   of: str = "the kernel") -> jax.Array:
    """``Y`` as ``[N, C]`` targets; ``of`` names what its N rows must match in the message."""
    where = f"{fn}: " if fn else ""
    Y = check_array(Y, name, fn=fn, kind="real")
    if Y.ndim == 1 and jnp.issubdtype(Y.dtype, jnp.integer):
        raise integer_labels_error(Y, name, where)
    if Y.ndim == 1:
        Y = Y[:, None]
    if Y.ndim != 2 or Y.shape[0] != n or Y.shape[1] == 0:
        raise ValueError(
            f"{where}{name} must have shape (N, C) or (N,) with N = {n} rows to match "
            f"{of} and C >= 1 columns; got {Y.shape}. Pass one target row per training point "
            "(e.g. one-hot labels)."
        )
    return Y


def _check_square(K: jax.Array, fn: str) -> None:
    """``K`` is ``[N, N]`` with ``N >= 2`` (static); ``fn`` is the public function called."""
    if K.ndim != 2 or K.shape[0] != K.shape[1]:
        raise ValueError(f"{fn}: K must be a square (N, N) kernel matrix, got shape "
                         f"{tuple(K.shape)}.")
    if K.shape[0] < 2:
        raise ValueError(f"{fn}: K must have N >= 2 rows: the DGL needs at least N = 2 "
                         f"training points (leave-one-out), got shape {tuple(K.shape)}.")


_is_concrete = is_concrete  # the shared "validate when not traced" test (layerlab._checks)


def _check_scalar(v, name: str, fn: str) -> None:
    """``v`` is 0-d (static: also under ``jit``, where a vector ``eps2`` would broadcast
    into a vector "loss")."""
    if v is not None and not isinstance(v, (str, bytes)) and jnp.ndim(v) != 0:
        raise ValueError(f"{fn}: {name} must be a scalar (0-d), got shape "
                         f"{tuple(jnp.shape(v))}.")


_SYM_RTOL = 1e-4  # asymmetry allowed, relative to max |K| (check_kernel's threshold)


def _nan_if_asymmetric(K: jax.Array) -> jax.Array:
    """``K`` unchanged, or all NaN where it is asymmetric beyond :func:`check_kernel`'s
    threshold (``max|K - K^T| > 1e-4 max|K|``): the Cholesky reads only the lower triangle,
    so a traced asymmetric ``K`` gave a finite loss of another matrix.  Its value and
    gradient are unchanged otherwise (the traced half of the eager symmetry check)."""
    bad = jnp.max(jnp.abs(K - K.T)) > _SYM_RTOL * jnp.max(jnp.abs(K))
    return K + jnp.where(bad, jnp.nan, 0.0).astype(K.dtype)


def _check_flag(v, name: str, fn: str) -> bool:
    """``v`` is a bool (Python, numpy or a concrete 0-d bool array); returns it as ``bool``.
    A string or number was taken by its truthiness (``variance="no"`` added the term) and a
    traced flag failed with JAX's boolean-conversion error."""
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if (isinstance(v, (jax.Array, np.ndarray)) and v.dtype == bool and v.ndim == 0
            and is_concrete(v)):
        return bool(v)
    kind = ("a traced value (the flag selects a term of the program: pass a Python bool, "
            "static, e.g. through functools.partial or jit's static_argnames)"
            if not is_concrete(v) else f"{type(v).__name__} {v!r}")
    raise TypeError(f"{fn}: {name} must be a bool (True or False), got {kind}.")


def _jitter(K: jax.Array) -> jax.Array:
    tau = 100.0 * jnp.finfo(K.dtype).eps
    return tau * jnp.mean(jnp.abs(jnp.diagonal(K))) + jnp.finfo(K.dtype).tiny


def check_kernel(K: jax.typing.ArrayLike, eps2: float = 0.0,
                 Y: jax.typing.ArrayLike | None = None) -> None:
    """Raise a ``ValueError`` if ``K + eps2 I`` cannot be used by :func:`dgl_loss`.

    Host-side (not jittable) companion of the jitted loss, which can only return NaN.
    Checks: square shape, finite entries, symmetry (relative 1e-4), ``eps2 >= 0`` and that a
    Cholesky factorisation exists with at most the documented jitter.

    Args:
      K: ``[N, N]`` kernel matrix (integer kernels are checked in JAX's default float,
        float32 or float64 under x64, half-precision ones in float32: the dtypes
        :func:`dgl_loss` computes them in).
      eps2: the noise variance added to the diagonal.
      Y: optional ``[N, C]`` targets, checked for shape and finiteness.
    """
    _check_kernel(K, eps2, Y, fn="check_kernel")


def _check_kernel(K, eps2, Y, *, fn: str) -> None:
    """:func:`check_kernel`'s checks, the messages naming ``fn`` (the public function called:
    ``check_kernel``, or ``dgl_loss`` / ``loo_residuals`` checking their eager inputs)."""
    K = np.asarray(check_array(K, "K", fn=fn, kind="real", xp="np"))
    if not (np.issubdtype(K.dtype, np.floating) and K.dtype.itemsize >= 4):
        K = K.astype(np.float32)  # numpy's LAPACK has no float16/bfloat16, finfo no ints
    _check_square(K, fn)
    if not np.all(np.isfinite(K)):
        raise ValueError(
            f"{fn}: K has {np.size(K) - np.isfinite(K).sum()} non-finite entries (NaN/inf); "
            "check the representations and kernel variances that produced it."
        )
    if Y is not None:
        Yc = np.asarray(_as_2d_targets(Y, K.shape[0], fn=fn))
        if not np.all(np.isfinite(Yc)):
            raise ValueError(f"{fn}: Y has {np.size(Yc) - np.isfinite(Yc).sum()} non-finite "
                             "entries (NaN/inf).")
    _check_scalar(eps2, "eps2", fn)
    check_number(eps2, "eps2", fn=fn, min_value=0.0, what="a noise variance")
    scale = np.max(np.abs(K)) + 1e-30
    if np.max(np.abs(K - K.T)) > _SYM_RTOL * scale:
        raise ValueError(
            f"{fn}: K is not symmetric (max |K - K^T| = "
            f"{np.max(np.abs(K - K.T)):.3g}, scale {scale:.3g}); a kernel matrix must be."
        )
    A = K + float(eps2) * np.eye(K.shape[0], dtype=K.dtype)
    eps = np.finfo(K.dtype).eps
    jit = 100.0 * eps * np.mean(np.abs(np.diag(K))) + np.finfo(K.dtype).tiny
    for extra in (0.0, jit):
        try:
            np.linalg.cholesky(A + extra * np.eye(K.shape[0], dtype=K.dtype))
            return
        except np.linalg.LinAlgError:
            pass
    w = np.linalg.eigvalsh(A.astype(np.float64))
    raise ValueError(
        f"{fn}: K + eps2*I is not positive definite even with jitter {jit:.3g} (smallest "
        f"eigenvalue {w[0]:.3g}, largest {w[-1]:.3g}). Increase eps2 (e.g. to ~1e-3 of the "
        f"mean diagonal {np.mean(np.diag(K)):.3g}), use float64, or check for duplicated "
        "training points."
    )


# ----------------------------------------------------------------------------- core


def _tril_inverse(L: jax.Array) -> jax.Array:
    return solve_triangular(L, jnp.eye(L.shape[0], dtype=L.dtype), lower=True)


_cholesky = cholesky  # LAPACK potrf; NaN when not pos. definite (CPU-mapped under vmap)
_leaf_tril_inv = cpu_mapped(_tril_inverse)  # LAPACK trsm against the identity


def _edges(n: int, nb: int) -> list[int]:
    return [round(i * n / nb) for i in range(nb + 1)]


def _blocked(T: jax.Array, nb: int, block: Callable[[int, int], jax.Array],
             axis: int) -> jax.Array:
    """``concatenate([block(e_j, e_{j+1}) for j], axis)`` over ``nb`` blocks of ``T``'s size."""
    e = _edges(T.shape[0], nb)
    return jnp.concatenate([block(e[j], e[j + 1]) for j in range(nb)], axis=axis)


def _mul_right_lower(F: jax.Array, T: jax.Array, nb: int) -> jax.Array:
    """``F @ T`` for lower-triangular ``T``: column block j needs only ``T[j:, j]``."""
    if nb <= 1 or T.shape[0] < 256:
        return F @ T
    return _blocked(T, nb, lambda a, b: F[:, a:] @ T[a:, a:b], axis=1)


def _mul_left_lower(T: jax.Array, F: jax.Array, nb: int) -> jax.Array:
    """``T @ F`` for lower-triangular ``T``: row block i needs only ``T[i, :i+1]``."""
    if nb <= 1 or T.shape[0] < 256:
        return T @ F
    return _blocked(T, nb, lambda a, b: T[a:b, :b] @ F[:b], axis=0)


def _tril_inv(L: jax.Array, leaf: int = 128, nb: int = 4) -> jax.Array:
    """``L^{-1}`` of lower-triangular ``L`` by recursive 2x2 blocking (LAPACK's ``trtri``
    order): ``L11^{-1}`` and ``L22^{-1}`` recursively, ``(L^{-1})_21 = -L22^{-1} L21
    L11^{-1}``.  Both products have a triangular operand and are blocked (``nb`` blocks) to
    skip its zero half: ``N^3 / 3`` flops, all but the leaves (``<= 2 leaf``, LAPACK ``trsm``)
    in matrix products, which run at the matmul rate where ``trsm`` against the identity
    does ``N^3`` flops at a lower one."""
    n = L.shape[0]
    if n <= 2 * leaf:
        return _leaf_tril_inv(L)
    h = n // 2
    Li11 = _tril_inv(L[:h, :h], leaf, nb)
    Li22 = _tril_inv(L[h:, h:], leaf, nb)
    Li21 = -_mul_left_lower(Li22, _mul_right_lower(L[h:, :h], Li11, nb), nb)
    top = jnp.concatenate([Li11, jnp.zeros((h, n - h), L.dtype)], axis=1)
    return jnp.concatenate([top, jnp.concatenate([Li21, Li22], axis=1)], axis=0)


def _factor_inv(A: jax.Array, K: jax.Array) -> jax.Array:
    """``L^{-1}`` (``L L^T = A``) with the documented one-retry jitter policy.

    The Cholesky factor is computed in a ``while_loop`` of at most two passes (the second
    with the jitter, only when the first factor has a NaN); the triangular inverse follows
    outside any control flow.  Under ``vmap`` a batched ``lax.cond`` (the previous route,
    around the whole factor-and-invert) becomes a ``select`` that always runs the retry too;
    the loop runs a second pass only if some member needs it (vmapped value + gradient of 4
    kernels at N = 1000: 1.45x faster; unbatched the same speed within noise, see
    docs/dgl.md "Performance").
    """
    n = A.shape[0]
    eye = jnp.eye(n, dtype=A.dtype)
    jit = _jitter(K).astype(A.dtype)

    def body(state):
        _, i = state
        return _cholesky(A + jnp.where(i == 0, jnp.zeros_like(jit), jit) * eye), i + 1

    def again(state):
        L, i = state
        return (i == 0) | ((i == 1) & jnp.any(jnp.isnan(jnp.diagonal(L))))

    L = jax.lax.while_loop(again, body, (jnp.zeros((n, n), A.dtype), jnp.int32(0)))[0]
    return _tril_inv(L)


def _sym_outer(S: jax.Array, nb: int) -> jax.Array:
    """``S S^T`` computing only the lower block triangle (about (nb+1)/(2 nb) of the flops)."""
    n = S.shape[0]
    if n < 512 or nb <= 1:
        return S @ S.T
    edges = [round(i * n / nb) for i in range(nb + 1)]
    blocks = [S[edges[i] : edges[i + 1]] for i in range(nb)]
    low = {}
    for i in range(nb):  # one matmul per block row: S_i [S_0 .. S_i]^T
        row = blocks[i] @ S[: edges[i + 1]].T
        for j in range(i + 1):
            low[i, j] = row[:, edges[j] : edges[j + 1]]
    rows = [
        jnp.concatenate([low[i, j] if j <= i else low[j, i].T for j in range(nb)], axis=1)
        for i in range(nb)
    ]
    return jnp.concatenate(rows, axis=0)


def _gram_lower(U: jax.Array, nb: int) -> jax.Array:
    """``U^T U`` for lower-triangular ``U``: only the lower block triangle is computed (row
    block i is ``U[i:, i]^T U[i:, :i+1]``, about ``N^3 / 3`` flops), the rest mirrored."""
    n = U.shape[0]
    if n < 512 or nb <= 1:
        return U.T @ U
    e = _edges(n, nb)
    low = {}
    for i in range(nb):
        row = U[e[i] :, e[i] : e[i + 1]].T @ U[e[i] :, : e[i + 1]]
        for j in range(i + 1):
            low[i, j] = row[:, e[j] : e[j + 1]]
    rows = [
        jnp.concatenate([low[i, j] if j <= i else low[j, i].T for j in range(nb)], axis=1)
        for i in range(nb)
    ]
    return jnp.concatenate(rows, axis=0)


_NB = 8  # block count for the triangular/symmetric products in the backward pass


@jax.custom_vjp
def _dgl_core(K: jax.Array, Y: jax.Array, eps2: jax.Array, var_w: jax.Array) -> jax.Array:
    out, _ = _dgl_fwd(K, Y, eps2, var_w)
    return out


def _dgl_fwd(K, Y, eps2, var_w):
    n = K.shape[0]
    A = K + eps2 * jnp.eye(n, dtype=K.dtype)
    Li = _factor_inv(A, K)  # L^{-1}; B = Li^T Li
    b = jnp.sum(Li * Li, axis=0)  # diag(B): column norms of L^{-1}
    a = Li.T @ (Li @ Y)  # B Y
    R = a / b[:, None]  # leave-one-out residuals
    C = Y.shape[1]
    value = jnp.sum(R * R) + var_w * C * (jnp.sum(1.0 / b) - n * eps2)
    return value, (Li, Y, a, b, R, var_w)


def _dgl_bwd(res, g):
    Li, Y, a, b, R, var_w = res
    n, C = Y.shape
    G = R / b[:, None]  # (B Y)_n / B_nn^2
    w = jnp.sum(R * R, axis=1) / b + var_w * C / (2.0 * b * b)
    # dL/dK = 2 (B diag(w) B - sym(B G a^T)),  B diag(w) B = S S^T with S = B diag(sqrt w);
    # B = Li^T Li formed once (both factors triangular: N^3/3), S S^T symmetric (~N^3)
    B = _gram_lower(Li, _NB)
    S = B * jnp.sqrt(w)[None, :]
    BG = B @ G
    low = BG @ a.T
    gK = 2.0 * _sym_outer(S, _NB) - (low + low.T)  # exactly symmetric
    gK = g * gK
    gY = g * 2.0 * BG
    geps = jnp.trace(gK) - g * var_w * C * n
    return gK, gY, geps, jnp.zeros_like(var_w)


_dgl_core.defvjp(_dgl_fwd, _dgl_bwd)

# The numerical cores are jitted (the forward one program, its VJP another): called eagerly
# they ran op by op, each of their ~30 primitives compiled and dispatched on its own, and the
# jitter retry's while_loop (closures made afresh at every call) compiled again at every call.
# The argument checks stay outside (eager, before the call); under an outer jit the cores are
# inlined.
_dgl_jitted = jax.jit(_dgl_core)


@jax.jit
def _loo_core(K, Y, eps2):
    A = K + eps2 * jnp.eye(K.shape[0], dtype=K.dtype)
    Li = _factor_inv(A, K)
    b = jnp.sum(Li * Li, axis=0)
    return (Li.T @ (Li @ Y)) / b[:, None], 1.0 / b - eps2


def dgl_loss(
    K: jax.typing.ArrayLike,
    Y: jax.typing.ArrayLike,
    *,
    eps2: float | jax.Array,
    variance: bool = False,
) -> jax.Array:
    r"""Deep Gaussian Layer-wise loss: summed squared leave-one-out GP residuals.

    .. math::
       B = (K + \varepsilon^2 I)^{-1},\qquad
       \mathcal L_{DGL} = \sum_n \frac{\lVert (B Y)_n \rVert^2}{B_{nn}^2}
       \;\Big[\; + \; C \sum_n \big(B_{nn}^{-1} - \varepsilon^2\big)\ \text{if variance}\Big]

    ``(B Y)_n / B_nn`` is the residual of GP regression trained on the other N-1 points,
    evaluated at point n; ``1/B_nn - eps2`` is the leave-one-out posterior variance of the
    latent function at x_n (one per output, hence the factor C).

    Computed from one Cholesky factor ``L`` of ``K + eps2 I``: ``L^{-1}`` by a triangular solve,
    ``B Y = L^{-T}(L^{-1} Y)`` and ``diag B`` = column norms of ``L^{-1}``; ``B`` is never
    formed in the forward pass.  The gradient is analytic (``jax.custom_vjp``):
    ``dL/dK = 2 B diag(w) B - (B G)(BY)^T - (BY)(B G)^T`` with ``G_n = (BY)_n / B_nn^2`` and
    ``w_n = |(BY)_n|^2 / B_nn^3 (+ C / (2 B_nn^2))``, using triangular/symmetric blocked
    products.  Differentiable in ``K`` (hence in the representations that produce it), ``Y``
    and ``eps2``.  See the module docstring for the jitter policy (NaN under ``jit`` when
    ``K + eps2 I`` is not positive definite even with jitter; ``ValueError`` when eager).
    Second derivatives: ``jax.hessian`` (forward over reverse) works; reverse over reverse
    (``grad(grad(...))``) and pure forward mode (``jacfwd``) do not, as the gradient is a
    ``custom_vjp``.

    Args:
      K: ``[N, N]`` symmetric positive semi-definite kernel over the training points.
      Y: ``[N, C]`` targets (e.g. zero-mean one-hot) or ``[N]``.
      eps2: noise variance ``eps^2 >= 0`` added to the diagonal (scalar).
      variance: add the leave-one-out predictive variance term (eqs. A4-A5); a bool
        (static: a string, number or traced flag is a ``TypeError``).

    Returns:
      Scalar loss.

    Examples:
      With ``K = 0`` every point is predicted as 0 (``B = I / eps2``), so the loss is the
      summed squared targets; a kernel that matches the targets predicts them well:

      >>> import jax.numpy as jnp
      >>> from layerlab import dgl
      >>> Y = jnp.array([[1.0, -1.0], [-1.0, 1.0], [1.0, -1.0]])       # [N, C]
      >>> float(dgl.dgl_loss(jnp.zeros((3, 3)), Y, eps2=1.0))
      6.0
      >>> bool(dgl.dgl_loss(Y @ Y.T, Y, eps2=0.1) < 0.01)
      True

    References:
      Eq. (3) and App. A eqs. (A4), (A5), (A7) of Ben-David & Ringel, "The role of a layer in
      deep neural networks: a Gaussian Process perspective" (2019).
    """
    K = check_array(K, "K", fn="dgl_loss", kind="real")
    _check_square(K, "dgl_loss")
    Y = _as_2d_targets(Y, K.shape[0], fn="dgl_loss")
    _check_scalar(eps2, "eps2", "dgl_loss")
    check_number(eps2, "eps2", fn="dgl_loss", min_value=0.0, what="a noise variance")
    variance = _check_flag(variance, "variance", "dgl_loss")
    dtype = jnp.result_type(K.dtype, Y.dtype, jnp.float32)
    K = K.astype(dtype)
    Y = Y.astype(dtype)
    if _is_concrete(K, Y, eps2):
        _check_kernel(K, float(eps2), Y, fn="dgl_loss")
    else:  # traced: an asymmetric K gives NaN, not the loss of its lower triangle
        K = _nan_if_asymmetric(K)
    # traced (a learned or swept eps2): a negative or non-finite value gives NaN, not a finite
    # wrong loss (eager: the ValueError above)
    eps2 = nonnegative_or_nan(jnp.asarray(eps2, dtype))
    return _dgl_jitted(K, Y, eps2, jnp.asarray(1.0 if variance else 0.0, dtype))


def dgl_features(
    H: jax.Array,
    Y: jax.Array,
    kernel_fn: Callable[[jax.Array], jax.Array],
    *,
    eps2: jax.typing.ArrayLike | None = None,
    eps_rel: jax.typing.ArrayLike | None = None,
    variance: bool = False,
) -> jax.Array:
    r"""DGL of representations: ``dgl_loss(kernel_fn(H), Y)`` with absolute or relative noise.

    .. math::
       \mathcal L(H) = \mathcal L_{DGL}\big(K = k_{top}(H),\,Y;\ \varepsilon^2\big),\qquad
       \varepsilon^2 = \texttt{eps2}\ \text{or}\
       \texttt{eps\_rel}\cdot\overline{\operatorname{diag} K}

    The relative form makes the loss invariant to an overall rescaling of the kernel.

    Args:
      H: ``[N, ...]`` representations of the trainee layer.  Y: ``[N, C]`` targets.
      kernel_fn: ``H -> K [N, N]`` (:func:`top_kernel_fn`, :func:`stax_kernel_fn`, ...).
      eps2: absolute noise variance; or eps_rel: relative to the mean of ``diag K``
        (exactly one of the two).
      variance: include the LOO variance term.

    Returns:
      Scalar loss (eq. 3 of Ben-David & Ringel 2019).
    """
    if (eps2 is None) == (eps_rel is None):
        raise ValueError("dgl_features: pass exactly one of eps2= (absolute) or eps_rel=.")
    if not callable(kernel_fn):
        raise TypeError(f"dgl_features: kernel_fn must be callable H -> K [N, N], got "
                        f"{type(kernel_fn).__name__}.")
    n = jnp.shape(H)[0] if jnp.ndim(H) else None
    if n is not None:  # before the kernel is built, and named as this function's (was dgl_loss's)
        _as_2d_targets(Y, n, fn="dgl_features", of="H's rows")
    K = kernel_fn(H)
    if jnp.ndim(K) != 2 or jnp.shape(K) != (n, n):  # (else dgl_loss would blame its own "K")
        raise ValueError(f"dgl_features: kernel_fn(H) must return the [N, N] kernel of H's "
                         f"N = {n} rows; got shape {tuple(jnp.shape(K))} for H of shape "
                         f"{tuple(jnp.shape(H))}.")
    if eps_rel is not None:
        _check_scalar(eps_rel, "eps_rel", "dgl_features")
        check_number(eps_rel, "eps_rel", fn="dgl_features", min_value=0.0,
                     what="a noise variance relative to the mean diagonal of K")
        eps2 = nonnegative_or_nan(eps_rel) * jnp.mean(jnp.diagonal(K))  # traced < 0: NaN
    return dgl_loss(K, Y, eps2=eps2, variance=variance)


def loo_residuals(K: jax.typing.ArrayLike, Y: jax.typing.ArrayLike, *,
                  eps2: jax.typing.ArrayLike) -> tuple:
    r"""Leave-one-out GP regression residuals and variances, ``((BY)_n / B_nn, 1/B_nn - eps2)``.

    Args:
      K: ``[N, N]`` kernel. Y: ``[N, C]`` targets. eps2: noise variance (scalar).

    Returns:
      ``(r [N, C], v [N])``: ``r_n = y_n - mean_{-n}(x_n)`` and the latent LOO variance.

    Not differentiable in reverse mode (the one-retry jitter loop around the Cholesky, see the
    module docstring); forward mode (``jax.jvp``, ``jax.jacfwd``) works.  For reverse mode
    differentiate :func:`dgl_loss`, whose VJP is analytic.  Checks its
    inputs when called eagerly, as :func:`dgl_loss` does.

    References:
      App. A eqs. (A4)-(A5) of Ben-David & Ringel (2019).
    """
    K = check_array(K, "K", fn="loo_residuals", kind="real")
    _check_square(K, "loo_residuals")
    K, Y = promote_float(K, _as_2d_targets(Y, K.shape[0], fn="loo_residuals"))
    _check_scalar(eps2, "eps2", "loo_residuals")
    check_number(eps2, "eps2", fn="loo_residuals", min_value=0.0, what="a noise variance")
    if _is_concrete(K, Y, eps2):
        _check_kernel(K, float(eps2), Y, fn="loo_residuals")
    else:  # traced: an asymmetric K gives NaN (see dgl_loss)
        K = _nan_if_asymmetric(K)
    return _loo_core(K, Y, nonnegative_or_nan(eps2))  # traced eps2 < 0: NaN


def dgl_loss_reference(K: jax.typing.ArrayLike, Y: jax.typing.ArrayLike, *,
                       eps2: jax.typing.ArrayLike, variance: bool = False) -> jax.Array:
    """Naive DGL forming ``B = inv(K + eps2 I)`` explicitly (reference/benchmark baseline only).

    Same formula as :func:`dgl_loss` (eq. 3 of Ben-David & Ringel 2019); gradients come from
    autodiff through ``jnp.linalg.inv``.  O(N^3) with a larger constant and less stable.
    """
    K = jnp.asarray(K)
    K, Y = promote_float(K, _as_2d_targets(Y, K.shape[0], fn="dgl_loss_reference"))
    B = jnp.linalg.inv(K + eps2 * jnp.eye(K.shape[0], dtype=K.dtype))
    b = jnp.diagonal(B)
    R = (B @ Y) / b[:, None]
    out = jnp.sum(R * R)
    if variance:
        out = out + Y.shape[1] * jnp.sum(1.0 / b - eps2)
    return out


# ----------------------------------------------------------------------------- linear


def dgl_linear(H: jax.typing.ArrayLike, Y: jax.typing.ArrayLike, *,
               eps2: jax.typing.ArrayLike = 0.0) -> jax.Array:
    r"""DGL@Linear: the DGL of the linear-classifier kernel ``K = H H^T`` for ``d << N``.

    .. math::
       \mathcal L = \sum_n |l_n|^2
       - \sum_{nm} (l_n\cdot l_m)\,[H(H^TH + \varepsilon^2 I)^{-1}H^T]_{nm}
       = \operatorname{tr} Y^T Y
       - \operatorname{tr}\big(Y^T H (\Sigma + \varepsilon^2 I)^{-1} H^T Y\big)

    With ``eps2 = 0`` this is eq. (6): the residual of least-squares regression of ``Y`` on
    ``H``, invariant under ``H -> H A`` for any invertible ``A`` (GL(d)).  It is the
    ``eps -> 0`` limit of ``dgl_loss(H H^T, Y)`` up to the leverages ``P_nn ~ d/N``:
    ``dgl_loss -> sum_n |((I-P)Y)_n|^2 / (1 - P_nn)^2`` with ``P = H Sigma^{-1} H^T``, so the two
    agree to relative O(d/N).  Cost O(N d^2), through a Cholesky of the ``d x d`` matrix
    ``Sigma + eps2 I``.

    Args:
      H: ``[N, d]`` representations (pre-classifier layer), ``d < N``.
      Y: ``[N, C]`` targets.
      eps2: ridge ``eps^2 >= 0``.

    Returns:
      Scalar loss.

    References:
      Eq. (6) and App. C eq. (C8) of Ben-David & Ringel (2019).
    """
    H = check_array(H, "H", fn="dgl_linear", kind="real")
    if H.ndim != 2:
        raise ValueError(f"dgl_linear: H must be [N, d] representations (rank 2), got shape "
                         f"{tuple(H.shape)}.")
    _check_scalar(eps2, "eps2", "dgl_linear")
    check_number(eps2, "eps2", fn="dgl_linear", min_value=0.0, what="a ridge")
    n, d = H.shape
    if d >= n and _is_concrete(eps2) and float(eps2) == 0.0:
        raise ValueError(
            f"dgl_linear with eps2=0 needs d < N (got d={d}, N={n}): H^T H is singular. "
            "Use eps2 > 0 or dgl_loss(H @ H.T, Y, eps2=...)."
        )
    H, Y = promote_float(H, _as_2d_targets(Y, n, fn="dgl_linear", of="H's rows"))
    S = H.T @ H + eps2 * jnp.eye(d, dtype=H.dtype)
    c = jax.scipy.linalg.cho_factor(S, lower=True)
    HY = H.T @ Y
    out = jnp.sum(Y * Y) - jnp.sum(HY * jax.scipy.linalg.cho_solve(c, HY))
    return check_result_finite(  # eager only
        out, "DGL@Linear", fn="dgl_linear",
        hint="H^T H + eps2 I is singular: H has linearly dependent (e.g. constant) columns, "
             "rank < d. Pass eps2 > 0 or drop the redundant features.")


# ----------------------------------------------------------------------------- IB


def _bhattacharyya(r2: jax.Array, eta) -> jax.Array:
    return jnp.exp(-r2 / (8.0 * eta))


def ib_pairwise_loss(
    H: jax.typing.ArrayLike,
    Y: jax.typing.ArrayLike,
    *,
    beta: float,
    eta: float,
    overlap: Callable[[jax.Array, float], jax.Array] | None = None,
) -> jax.Array:
    r"""Pairwise information-bottleneck layer loss, for comparison with the DGL.

    .. math::
       \mathcal L_{IB} = \sum_{n,m} \big[\beta\,(1 - l_n\cdot l_m) - 1\big]\,
       \Delta S_\eta(|h_n - h_m|)

    ``Delta S_eta`` is the pairwise overlap of the representations smeared by isotropic
    Gaussian noise of variance ``eta``; by default the Bhattacharyya coefficient
    ``exp(-|h_n - h_m|^2 / (8 eta))`` (our choice of profile; pass ``overlap(r2, eta)``, a
    function of the *squared* distance, to use another).  Minimising it merges points
    (compression, the ``-1``) except across labels (relevance, ``beta``).  O(N^2 d).

    Args:
      H: ``[N, d]`` representations.  Y: ``[N, C]`` one-hot labels (``l_n . l_m = 1`` iff same
        class).  beta: relevance weight.  eta: noise variance (``> 0``; checked eagerly).
      overlap: optional profile ``(r2 [N, N], eta) -> [N, N]``.

    Returns:
      Scalar loss.

    References:
      Eq. (8) and App. B of Ben-David & Ringel (2019).
    """
    H = check_array(H, "H", fn="ib_pairwise_loss", kind="real")
    if H.ndim != 2:
        raise ValueError(f"ib_pairwise_loss: H must be [N, d] representations (rank 2), got "
                         f"shape {tuple(H.shape)}.")
    _check_scalar(eta, "eta", "ib_pairwise_loss")
    check_number(eta, "eta", fn="ib_pairwise_loss", min_value=0.0, lo_open=True,
                 what="the variance of the smearing noise")
    H, Y = promote_float(H, _as_2d_targets(Y, H.shape[0], fn="ib_pairwise_loss",
                                             of="H's rows"))
    sq = jnp.sum(H * H, axis=1)
    r2 = jnp.maximum(sq[:, None] + sq[None, :] - 2.0 * (H @ H.T), 0.0)
    prof = (overlap or _bhattacharyya)(r2, eta)
    coef = beta * (1.0 - Y @ Y.T) - 1.0
    return jnp.sum(coef * prof)


# ----------------------------------------------------------------------------- mini-batch


def dgl_minibatch(
    key: jax.Array,
    H: jax.Array,
    Y: jax.Array,
    kernel_fn: Callable[[jax.Array], jax.Array],
    *,
    batch_size: int,
    num_batches: int = 1,
    eps2: jax.typing.ArrayLike,
    variance: bool = False,
) -> jax.Array:
    r"""Mini-batch DGL estimator: mean DGL of random subsets, rescaled to N points.

    .. math::
       \hat{\mathcal L} = \frac{N}{B}\,\frac{1}{M}\sum_{j=1}^{M} \mathcal L_{DGL}(S_j),\qquad
       S_j \subset \{1..N\},\ |S_j| = B \text{ uniformly without replacement}

    An *unbiased estimator of the subset loss* ``(N/B) E_S[L_DGL(S)]`` (the loss whose
    leave-one-out residuals use B-1 other points), **not** of the full ``L_DGL`` over all N
    points: with fewer points GP regression is worse, so the subset loss is larger; it is the
    natural training target when N is too large for an O(N^3) step.  In training loops the
    shared loop's random batches play the role of ``S_j`` (``num_batches = 1``).

    Args:
      key: PRNG key. H: ``[N, d]`` representations. Y: ``[N, C]`` targets.
      kernel_fn: ``H_S [B, d] -> K_S [B, B]``.
      batch_size: B. num_batches: M subsets averaged. eps2: noise variance.
      variance: include the variance term.

    Returns:
      Scalar estimate.

    References:
      Eq. (3) of Ben-David & Ringel (2019); the subset estimator is ours (documented here).
    """
    key = check_key(key, "key", fn="dgl_minibatch")
    H = check_array(H, "H", fn="dgl_minibatch", kind="real")  # a numpy H is indexed traced
    if H.ndim < 1:
        raise ValueError(f"dgl_minibatch: H must be [N, ...] representations; got {H.shape}.")
    n = H.shape[0]
    Y = _as_2d_targets(Y, n, fn="dgl_minibatch", of="H's rows")
    check_int(batch_size, "batch_size", fn="dgl_minibatch", min_value=2, max_value=n)
    check_int(num_batches, "num_batches", fn="dgl_minibatch", min_value=1)
    _check_scalar(eps2, "eps2", "dgl_minibatch")
    check_number(eps2, "eps2", fn="dgl_minibatch", min_value=0.0, what="a noise variance")
    eps2 = nonnegative_or_nan(eps2)  # traced eps2 < 0: NaN
    keys = jax.random.split(key, num_batches)

    def one(k):
        idx = jax.random.choice(k, n, (batch_size,), replace=False)
        return dgl_loss(kernel_fn(H[idx]), Y[idx], eps2=eps2, variance=variance)

    out = (n / batch_size) * jnp.mean(jax.vmap(one)(keys))
    # inside vmap dgl_loss cannot check its kernels: an eager call says so on a NaN here
    return check_result_finite(
        out, "mini-batch DGL", fn="dgl_minibatch",
        hint="a subset's kernel K_S + eps2 I is not positive definite (or H / Y hold NaN); "
             "check it with dgl.check_kernel(kernel_fn(H[idx]), eps2, Y[idx]) on a subset, "
             "or raise eps2.")


_MAX_SUBSETS = 100_000  # dgl_subsets_exact: enumerating more is no "tiny N" any more


def dgl_subsets_exact(H: jax.Array, Y: jax.Array, kernel_fn: Callable[[jax.Array], jax.Array], *,
                      batch_size: int, eps2: jax.typing.ArrayLike,
                      variance: bool = False) -> jax.Array:
    """Exact ``(N/B) E_S[L_DGL(S)]`` by enumerating all subsets (tiny N only; for tests).

    The expectation that :func:`dgl_minibatch` estimates, over all ``C(N, B)`` subsets
    ``S`` of ``B`` points.

    Args:
      H: ``[N, ...]`` representations.  Y: ``[N, C]`` targets.
      kernel_fn: ``H_S [B, ...] -> K_S [B, B]``.
      batch_size: ``B``, an integer with ``2 <= B <= N`` (the DGL of a subset is a
        leave-one-out loss over its ``B`` points) and ``C(N, B) <= 100000`` (more subsets
        are refused: estimate the expectation with :func:`dgl_minibatch`).
      eps2: noise variance (a scalar ``>= 0``).  variance: include the variance term.

    Returns:
      Scalar.
    """
    fn = "dgl_subsets_exact"
    H = check_array(H, "H", fn=fn, kind="real")
    if H.ndim < 1:
        raise ValueError(f"{fn}: H must be [N, ...] representations, got shape "
                         f"{tuple(H.shape)}.")
    n = H.shape[0]
    Y = _as_2d_targets(Y, n, fn=fn, of="H's rows")
    if not callable(kernel_fn):
        raise TypeError(f"{fn}: kernel_fn must be callable H_S -> K_S [B, B], got "
                        f"{type(kernel_fn).__name__}.")
    batch_size = check_int(batch_size, "batch_size", fn=fn)
    if not 2 <= batch_size <= n:
        raise ValueError(
            f"{fn}: batch_size must be in [2, N = {n}] (the subset size B: at least 2 points "
            f"for a leave-one-out loss, at most the N points of H), got {batch_size}.")
    count = math.comb(n, batch_size)
    if count > _MAX_SUBSETS:
        raise ValueError(
            f"{fn}: batch_size={batch_size} with N={n} points would enumerate C({n}, "
            f"{batch_size}) = {count} subsets (more than {_MAX_SUBSETS}); the exact expectation "
            "is for tiny N only: estimate it with dgl_minibatch(key, H, Y, kernel_fn, "
            "batch_size=..., num_batches=...).")
    _check_scalar(eps2, "eps2", fn)
    check_number(eps2, "eps2", fn=fn, min_value=0.0, what="a noise variance")
    idx = jnp.asarray(list(itertools.combinations(range(n), batch_size)))
    vals = jax.vmap(
        lambda i: dgl_loss(kernel_fn(H[i]), Y[i], eps2=eps2, variance=variance)
    )(idx)
    # inside vmap dgl_loss cannot check its kernels: an eager call says so on a NaN here
    return check_result_finite(
        (n / batch_size) * jnp.mean(vals), "exact subset DGL", fn=fn,
        hint="a subset's kernel K_S + eps2 I is not positive definite (or H / Y hold NaN); "
             "check it with dgl.check_kernel(kernel_fn(H[idx]), eps2, Y[idx]) on a subset, "
             "or raise eps2.")
