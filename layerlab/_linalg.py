"""Batched SVD that cannot wedge XLA's CPU thread pool.

jaxlib runs a batched CPU LAPACK call (``jnp.linalg.svd`` on ``[..., m, n]``, or on ``[m, n]``
under ``vmap``) as ``ParallelBatchMap`` tasks on XLA's intra-op thread pool.  When several such
calls are independent in one program (e.g. the per-layer spectra, the Jacobian SVDs and the
representation SVDs of ``bottleneck.bottleneck_diagnostics`` vmapped over a sweep's runs),
every pool thread can end up waiting for batch tasks queued behind it: the program never
finishes, with all threads idle in ``futex_wait``.  Reproduced on this 2-core CPU with jaxlib
0.10 (``bottleneck.experiments._diag_runs`` hung on its third call; see docs/bottleneck.md);
the same family as the batched-Cholesky hang fixed in ``dgl._loss`` and the Eigen-pool hangs
reported upstream (PyAutoLabs/PyAutoFit#1528, #1530).

On CPU :func:`svdvals` (and the thin SVD its derivative uses) maps over the batch one
matrix at a time (``lax.map``, unbatched LAPACK calls: the same flops, no nested pool tasks),
both for batched inputs and under ``vmap`` (a ``custom_vmap`` rule).  On accelerators the
batched kernels are kept.  Derivatives are those of ``jnp.linalg.svd`` (a ``custom_jvp`` with
the standard first-order formulas).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import custom_batching

Array = jax.Array


def _on_cpu() -> bool:
    return jax.default_backend() == "cpu"


def _map_matrices(f, a: Array):
    """Apply ``f`` (one ``[m, n]`` matrix -> pytree) over the leading dims of ``a``."""
    if a.ndim == 2:
        return f(a)
    batch = a.shape[:-2]
    out = jax.lax.map(f, a.reshape((-1,) + a.shape[-2:]))
    return jax.tree.map(lambda o: o.reshape(batch + o.shape[1:]), out)


@custom_batching.custom_vmap
def _svdvals_raw(a: Array) -> Array:
    if _on_cpu():
        return _map_matrices(lambda m: jnp.linalg.svd(m, compute_uv=False), a)
    return jnp.linalg.svd(a, compute_uv=False)


@_svdvals_raw.def_vmap
def _svdvals_raw_vmap(axis_size, in_batched, a):
    (batched,) = in_batched
    return _svdvals_raw(a), batched


@custom_batching.custom_vmap
def _svd_raw(a: Array) -> tuple[Array, Array, Array]:
    def one(m):
        u, s, vt = jnp.linalg.svd(m, full_matrices=False)
        return u, s, vt

    return _map_matrices(one, a) if _on_cpu() else one(a)


@_svd_raw.def_vmap
def _svd_raw_vmap(axis_size, in_batched, a):
    (batched,) = in_batched
    return _svd_raw(a), (batched, batched, batched)


@jax.custom_jvp
def svdvals(a: Array) -> Array:
    """Singular values of ``a [..., m, n]``, descending: ``[..., min(m, n)]``.

    Equals ``jnp.linalg.svd(a, compute_uv=False)``; on CPU computed one matrix at a time (see
    the module docstring), also under ``vmap``.  Differentiable: ``ds_i = u_i^T da v_i``.
    """
    return _svdvals_raw(a)


@svdvals.defjvp
def _svdvals_jvp(primals, tangents):
    (a,), (da,) = primals, tangents
    u, s, vt = _svd_raw(a)
    ds = jnp.einsum("...ji,...jk,...ik->...i", u, da, vt)
    return s, ds

