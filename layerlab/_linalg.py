"""Batched LAPACK calls (SVD, eigh, QR, Cholesky) that cannot wedge XLA's CPU thread pool.

jaxlib runs a batched CPU LAPACK call (``jnp.linalg.svd`` on ``[..., m, n]``, or on ``[m, n]``
under ``vmap``) as ``ParallelBatchMap`` tasks on XLA's intra-op thread pool.  When several such
calls are independent in one program (e.g. the per-layer spectra, the Jacobian SVDs and the
representation SVDs of ``bottleneck.bottleneck_diagnostics`` vmapped over a sweep's runs),
every pool thread can end up waiting for batch tasks queued behind it: the program never
finishes, with all threads idle in ``futex_wait``.  Reproduced on this 2-core CPU with jaxlib
0.10 (``bottleneck.experiments._diag_runs`` hung on its third call; see docs/bottleneck.md);
the same family as the batched-Cholesky hang of ``dgl._loss``, the vmapped-``eigh`` hang of
``gnrev.gn_direction`` (the two Gram eighs of a block, vmapped over a learning-rate sweep:
both threads of the 2-thread pool in ``lapack_ssyevd_ffi`` -> ``ParallelBatchMap`` ->
``BlockingCounter::Wait``; see docs/gnrev.md) and the Eigen-pool hangs reported upstream
(PyAutoLabs/PyAutoFit#1528, #1530).  ``lax.optimization_barrier`` does not order two such
calls: XLA drops the barrier before the thunk executor builds its dependency graph.

:func:`cpu_mapped` wraps any one-matrix LAPACK function so that under ``vmap`` on CPU it maps
over the batch (``lax.map``: one unbatched call at a time, run inline by the calling thread);
``eigh`` (differentiable), ``qr``, ``cholesky`` and ``thin_svd`` here are wrapped that way;
:func:`over_leading` applies such a function over the leading dims of a stacked ``[..., m, n]``
input the same way (one matrix at a time on CPU, the batched kernel on accelerators).

:func:`svdvals` (``[..., m, n]``, differentiable) and :func:`thin_svd` take stacked inputs too:
on CPU one matrix at a time (``lax.map``, unbatched LAPACK calls: the same flops, no nested
pool tasks), both for stacked inputs and under ``vmap``.  On accelerators the batched kernels
are kept.  Derivatives are those of ``jnp.linalg.svd`` (a ``custom_jvp`` with the standard
first-order formulas; ``svdvals`` also forward-over-reverse, not reverse-over-reverse).
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import custom_batching

Array = jax.Array


def _on_cpu() -> bool:
    return jax.default_backend() == "cpu"


def cpu_mapped(f):
    """``f`` (one ``[m, n]`` matrix -> pytree of arrays) whose ``vmap`` on CPU maps over the
    batch one matrix at a time (``lax.map``); on accelerators ``vmap`` is kept.

    Unbatched calls are ``f`` itself (the same XLA program), so wrapping costs nothing outside
    ``vmap``.  ``f`` must take exactly one argument (``custom_vmap`` traces defaults too).

    Forward mode (``jvp``, ``jacfwd``, ``hessian``) works, but ``vmap`` of a ``jvp`` whose
    matrices are batched while its tangents are not is batched by jax itself (its
    JVP-of-``custom_vmap`` rule calls ``vmap`` of ``f``), so on CPU that one combination runs
    the batched LAPACK kernel this wrapper otherwise avoids (correct values; the thread-pool
    hang described above is possible there).  Batch the tangents too, or map explicitly.
    """
    g = custom_batching.custom_vmap(f)

    @g.def_vmap
    def _rule(axis_size, in_batched, a):
        (batched,) = in_batched
        if not batched:
            # only reached from jax's JVP-of-custom_vmap rule (forward mode under vmap, the
            # primal unbatched here): ``f`` itself, not ``g``, whose JVP would enter this rule
            # again without end (RecursionError in jacfwd / hessian); see the docstring for
            # the batched-primal, unbatched-tangent case
            out = f(a)
            return out, jax.tree.map(lambda _: False, out)
        out = jax.lax.map(g, a) if _on_cpu() else jax.vmap(f)(a)
        return out, jax.tree.map(lambda _: True, out)

    return g


# one-argument wrappers: custom_vmap traces every argument, defaults included (a static
# ``symmetrize_input=True`` would become a tracer)
def _eigh(a: Array) -> tuple[Array, Array]:
    w, v = jnp.linalg.eigh(a)
    return w, v


def _qr(a: Array) -> tuple[Array, Array]:
    q, r = jnp.linalg.qr(a)
    return q, r


def _cholesky(a: Array) -> Array:
    return jnp.linalg.cholesky(a)


_eigh_mapped = cpu_mapped(_eigh)

qr = cpu_mapped(_qr)
"""Reduced ``jnp.linalg.qr`` of one matrix, mapped over ``vmap``'s batch on CPU (forward-mode
derivative only: ``jax.grad`` through it raises)."""

cholesky = cpu_mapped(_cholesky)
"""``jnp.linalg.cholesky`` of one matrix (NaN when not positive definite), mapped over
``vmap``'s batch on CPU (forward-mode derivative only: ``jax.grad`` through it raises)."""


@jax.custom_jvp
def eigh(a: Array) -> tuple[Array, Array]:
    """``jnp.linalg.eigh`` of one symmetric ``[n, n]`` matrix: ``(w [n] ascending, v [n, n])``.

    Under ``vmap`` on CPU one matrix at a time (see the module docstring).  Differentiable
    with ``jnp.linalg.eigh``'s first-order formulas (input and tangent symmetrised):
    ``dw = diag(Vᵀ dA V)``, ``dV = V (F ∘ Vᵀ dA V)``, ``F_ij = 1/(w_j − w_i)`` (``i ≠ j``).
    """
    return _eigh_mapped(a)


@eigh.defjvp
def _eigh_jvp(primals, tangents):
    (a,), (da,) = primals, tangents
    w, v = _eigh_mapped(a)
    da = (da + jnp.swapaxes(da, -1, -2)) / 2
    hi = jax.lax.Precision.HIGHEST  # as jax's own eigh jvp (TF32 would cost digits on GPU)
    vdv = jnp.matmul(jnp.matmul(jnp.swapaxes(v, -1, -2), da, precision=hi), v, precision=hi)
    eye = jnp.eye(a.shape[-1], dtype=a.dtype)
    f = 1.0 / (eye + w[..., None, :] - w[..., :, None]) - eye
    return (w, v), (jnp.diagonal(vdv, axis1=-2, axis2=-1),
                    jnp.matmul(v, f * vdv, precision=hi))


def over_leading(g, name: str = "a"):
    """``g`` (one ``[m, n]`` matrix -> pytree) applied over the leading dims of ``a [..., m, n]``.

    ``jax.vmap(g)`` over the flattened batch: with ``g`` from :func:`cpu_mapped` that is one
    unbatched call at a time on CPU (``lax.map``) and the batched kernel on accelerators; a
    2-d ``a`` is ``g(a)`` itself.  Under ``vmap`` the same holds (the rule of ``g``).
    """
    def h(a: Array):
        a = jnp.asarray(a)
        if a.ndim == 2:
            return g(a)
        if a.ndim < 2:
            raise ValueError(f"{name}: the input must be [..., m, n] (at least 2-d); got shape "
                             f"{a.shape}.")
        batch = a.shape[:-2]
        out = jax.vmap(g)(a.reshape((math.prod(batch),) + a.shape[-2:]))
        return jax.tree.map(lambda o: o.reshape(batch + o.shape[1:]), out)

    return h


def _svdvals_one(a: Array) -> Array:
    return jnp.linalg.svd(a, compute_uv=False)


def _svd_one(a: Array) -> tuple[Array, Array, Array]:
    u, s, vt = jnp.linalg.svd(a, full_matrices=False)
    return u, s, vt


_svdvals_raw = over_leading(cpu_mapped(_svdvals_one), "svdvals")
_svd_raw = over_leading(cpu_mapped(_svd_one), "thin_svd")

thin_svd = _svd_raw
"""``jnp.linalg.svd(a, full_matrices=False)`` -> ``(u, s, vt)``, one matrix at a time on CPU
(batched inputs and under ``vmap``; forward-mode derivative only)."""


@jax.custom_jvp
def svdvals(a: Array) -> Array:
    """Singular values of ``a [..., m, n]``, descending: ``[..., min(m, n)]``.

    Equals ``jnp.linalg.svd(a, compute_uv=False)``; on CPU computed one matrix at a time (see
    the module docstring), also under ``vmap``.  Real or complex ``a``.

    Derivatives: first order in forward and reverse mode (``jvp``, ``grad``, ``jacrev``,
    ``jacfwd``), ``ds_i = Re(u_i^H da v_i)``, and second order forward-over-reverse
    (``jax.hessian``, ``jacfwd(grad)``), as ``jnp.linalg.svd``'s.  Not reverse-over-reverse
    (``jacrev(jacrev)``, ``grad`` of a ``grad``): the rule's factors ``u, v`` come from
    :func:`thin_svd`, which has no reverse-mode rule (JAX raises "Linearization failed").
    """
    return _svdvals_raw(a)


@svdvals.defjvp
def _svdvals_jvp(primals, tangents):
    (a,), (da,) = primals, tangents
    u, s, vt = _svd_raw(a)
    # u_i^H da v_i with v_i = conj(vt[i, :]): no conj on a real input; the real part keeps
    # the tangent real like s for a complex one
    ds = jnp.real(jnp.einsum("...ji,...jk,...ik->...i", jnp.conj(u), da, jnp.conj(vt)))
    return s, ds

