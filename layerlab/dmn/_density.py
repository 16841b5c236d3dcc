"""Class density matrices, their spectra, and the choice of DMN filters.

The density matrix of class ``c`` at a layer is the (uncentred) second moment of the
layer's inputs restricted to that class, normalised by the *total* number of samples
(eq. 15 of Dehmamy, Rohani & Katsaggelos, arXiv:1703.04757):

.. math::  \\rho_c = \\frac{1}{N} \\sum_{i \\in c} h_i h_i^\\top ,
   \\qquad \\sum_c \\rho_c = \\rho = \\frac{1}{N} \\sum_i h_i h_i^\\top .

Sums are additive, so ``rho_c`` can be accumulated in chunks (``density_init`` /
``density_update`` / ``density_finalize``), with ``lax.scan`` over chunks
(``streaming_class_density_matrices``), with a host loop over chunks that do not fit on
the device (``density_from_chunks``), or across devices (``sharded_class_density_matrices``).

Filter selection (``select_filters``) is host-side (numpy): the number of filters it
returns is data dependent, and array shapes in JAX must be static.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike

from layerlab import _linalg
from layerlab._checks import (
    as_device_array,
    check_array,
    check_float_dtype,
    check_int,
    check_labels,
    promote_float,
)


def _check_hy(h, y, num_classes, fn="class_density_matrices"):
    check_array(h, "h", fn=fn, kind="real")
    check_array(y, "y", fn=fn, kind=None)
    if h.ndim != 2:
        raise ValueError(f"{fn}: h must have shape (N, d); got shape {h.shape}. Flatten "
                         "features first.")
    if y.ndim != 1 or y.shape[0] != h.shape[0]:
        raise ValueError(
            f"{fn}: y must be integer labels of shape (N,) = ({h.shape[0]},); got shape "
            f"{y.shape}."
        )
    if not jnp.issubdtype(y.dtype, jnp.integer):
        raise TypeError(f"{fn}: y must hold integer class labels; got dtype {y.dtype}.")
    # eager only: labels in [0, num_classes) (one_hot would silently drop the others)
    check_labels(y, num_classes, "y", fn=fn)


def _check_samples(h, fn):
    """At least one sample: ``rho = (1/N) sum ...`` of no samples is 0/0 (NaN).  Static (the
    shape), so it holds under ``jit`` too; the running sums (``density_init`` ...
    ``density_finalize``) are the route for a possibly empty stream."""
    if h.shape[0] == 0:
        raise ValueError(f"{fn}: h must hold at least one sample (N >= 1), got shape "
                         f"{tuple(h.shape)}: the density matrix (1/N) sum_i h_i h_i^T of no "
                         "samples is undefined.")


def _check_mask(mask, n, fn):
    """``[n]`` real sample weights (static check: shape and kind)."""
    return check_array(mask, "mask", fn=fn, ndim=1, shape=(n,), kind="real")


def class_density_matrices(h: jax.Array, y: jax.Array, num_classes: int) -> jax.Array:
    """Per-class density matrices ``rho_c = (1/N) sum_{i in c} h_i h_i^T`` in one pass.

    The batch is the maths here (a sum over samples), so this function is not meant to be
    ``vmap``-ed over samples.  It is a single one-hot weighted contraction: under
    ``jax.jit`` with ``h`` and ``y`` sharded along the sample axis of an ``Auto`` mesh XLA
    reduces the partial sums across devices by itself; with ``Explicit`` mesh axes use
    ``sharded_class_density_matrices``.

    .. math::  \\rho_c = \\frac{1}{N} \\sum_{i=1}^{N} [y_i = c]\\, h_i h_i^\\top

    Args:
      h: ``[N, d]`` layer inputs (features or flattened patches), ``N >= 1`` (no samples
        raise ``ValueError``: ``rho`` would be 0/0; the running sums of ``density_init`` ...
        ``density_finalize`` give zeros for an empty stream).
      y: ``[N]`` integer class labels in ``[0, num_classes)`` (checked eagerly: a label
        outside that range raises ``ValueError``; under ``jit`` it would contribute to no
        class).
      num_classes: number of classes ``C``.

    Returns:
      ``[C, d, d]`` symmetric positive semi-definite matrices; their sum is the naive
      density matrix ``h^T h / N``.

    References:
      Eq. (15) of Dehmamy, Rohani & Katsaggelos, "Separation of time scales and direct
      computation of weights in deep neural networks", arXiv:1703.04757.
    """
    fn = "class_density_matrices"
    h = check_array(h, "h", fn=fn, kind="real")
    (h,) = promote_float(h)  # integer pixels would overflow
    y = check_array(y, "y", fn=fn, kind=None)
    _check_hy(h, y, num_classes)
    _check_samples(h, fn)
    onehot = jax.nn.one_hot(y, num_classes, dtype=h.dtype)  # [N, C]
    return _weighted_outer(onehot, h) / h.shape[0]


def _weighted_outer(w: jax.Array, h: jax.Array) -> jax.Array:
    """``sum_n w[n, c] h_n h_n^T`` as one GEMM: ``[(w * h) as [n, C*d]]^T @ h`` -> ``[C, d, d]``.

    It costs ``C`` times the FLOPs of ``h^T h`` (the price of a static-shape class split).
    """
    n, d = h.shape
    c = w.shape[1]
    hw = (w[:, :, None] * h[:, None, :]).reshape(n, c * d)
    return (hw.T @ h).reshape(c, d, d)


def naive_density_matrix(h: jax.Array) -> jax.Array:
    """Naive (class-blind) density matrix ``rho = h^T h / N``.

    .. math::  \\rho = \\frac{1}{N} \\sum_{i=1}^{N} h_i h_i^\\top = \\sum_c \\rho_c

    Args:
      h: ``[N, d]`` layer inputs, ``N >= 1``.

    Returns:
      ``[d, d]`` uncentred second-moment matrix.

    References:
      Eq. (15) of Dehmamy et al., arXiv:1703.04757 (summed over classes: "naive" DMN).
    """
    fn = "naive_density_matrix"
    h = check_array(h, "h", fn=fn, kind="real")
    if h.ndim != 2:
        raise ValueError(f"{fn}: h must have shape (N, d); got shape {h.shape}.")
    _check_samples(h, fn)
    (h,) = promote_float(h)  # integer pixels would overflow
    return h.T @ h / h.shape[0]


class DensityState(NamedTuple):
    """Running sums for the streaming density-matrix estimate.

    Attributes:
      outer: ``[C, d, d]`` sum over seen samples of ``[y_i = c] h_i h_i^T``.
      total: ``[C, d]`` sum over seen samples of ``[y_i = c] h_i`` (class sums, used to
        fix eigenvector signs).
      count: ``[C]`` number of seen samples per class.
      n: ``[]`` total number of seen samples (all classes).
    """

    outer: jax.Array
    total: jax.Array
    count: jax.Array
    n: jax.Array


def _check_sum_dtype(dtype, fn: str):
    """The accumulation dtype: float32 or float64.  Integer sums would truncate every real
    input added to them; half-precision ones are wrong past a few thousand samples: float16
    sums (``count``, ``n``, ``outer``) overflow to inf past 65504 and ``density_finalize``
    returned NaN, bfloat16 ones (8-bit mantissa) stop growing (``256 + 1 == 256``)."""
    dt = check_float_dtype(dtype, "dtype", fn=fn)
    if jnp.finfo(dt).bits < 32:
        raise TypeError(
            f"{fn}: dtype must be float32 or float64 for running sums, got {dt}: half-precision "
            "sums overflow (float16: inf past 65504 samples) or stop growing (bfloat16: "
            "256 + 1 == 256). Pass jnp.float32; density_update casts each chunk to the "
            "state's dtype, so half-precision features can be added to a float32 state.")
    return dt


def density_init(num_classes: int, d: int, dtype: DTypeLike = jnp.float32) -> DensityState:
    """Empty running sums for ``num_classes`` classes of ``d``-dimensional inputs.

    ``dtype`` is the accumulation dtype, float32 or float64: integer sums would truncate
    every real input added to them, float16 ones overflow past 65504 samples and bfloat16
    ones stop growing, so those are refused with a ``TypeError`` (:func:`density_update`
    casts its chunk to this dtype: half-precision features go into a float32 state).
    """
    fn = "density_init"
    num_classes = check_int(num_classes, "num_classes", fn=fn, min_value=1)
    d = check_int(d, "d", fn=fn, min_value=1)
    dtype = _check_sum_dtype(dtype, fn)
    def zeros(shape):  # from host, no program per shape (jnp.zeros where it would warn)
        if jax.dtypes.canonicalize_dtype(dtype) != dtype:
            return jnp.zeros(shape, dtype)
        return as_device_array(np.zeros(shape, dtype))

    return DensityState(outer=zeros((num_classes, d, d)), total=zeros((num_classes, d)),
                        count=zeros((num_classes,)), n=zeros(()))


def density_update(
    state: DensityState, h: jax.Array, y: jax.Array, mask: jax.Array | None = None
) -> DensityState:
    """Add a chunk of samples to the running sums.

    Args:
      state: the running sums (``[C, d, d]``, ``[C, d]``, ``[C]``, ``[]``).
      h: ``[n, d]`` chunk of inputs.
      y: ``[n]`` integer labels.
      mask: optional ``[n]`` weights (1 = real sample, 0 = padding).

    Returns:
      The updated ``DensityState``.
    """
    fn = "density_update"
    h = check_array(h, "h", fn=fn, kind="real")
    h = jnp.asarray(h, state.outer.dtype)
    y = check_array(y, "y", fn=fn, kind=None)
    num_classes, d = state.total.shape
    _check_hy(h, y, num_classes, fn)
    if h.shape[1] != d:
        raise ValueError(f"{fn}: h has feature dim {h.shape[1]} but the state was built for "
                         f"d={d}.")
    w = jax.nn.one_hot(y, num_classes, dtype=h.dtype)  # [n, C]
    if mask is not None:
        mask = jnp.asarray(_check_mask(mask, h.shape[0], fn), h.dtype)
        w = w * mask[:, None]
        n_new = mask.sum()
    else:
        n_new = jnp.asarray(h.shape[0], h.dtype)
    return DensityState(
        outer=state.outer + _weighted_outer(w, h),
        total=state.total + w.T @ h,
        count=state.count + w.sum(0),
        n=state.n + n_new,
    )


def density_update_grouped(
    state: DensityState, h: jax.Array, y: jax.Array, mask: jax.Array | None = None
) -> DensityState:
    """Add ``n`` groups of ``p`` samples that share a label (e.g. the patches of one image).

    Each group's Gram matrix ``G_g = sum_p h_{gp} h_{gp}^T`` is one batched GEMM
    (``n p d^2`` FLOPs, the cost of the naive ``h^T h``), then ``outer_c += sum_g [y_g = c] G_g``
    costs only ``n C d^2``: no ``C``-fold overhead when labels are per image.

    Args:
      state: the running sums.
      h: ``[n, p, d]`` groups of samples.
      y: ``[n]`` integer label of each group.
      mask: optional ``[n]`` group weights (1 = real, 0 = padding).

    Returns:
      The updated ``DensityState`` (each group counts ``p`` samples).
    """
    fn = "density_update_grouped"
    h = check_array(h, "h", fn=fn, kind="real")
    h = jnp.asarray(h, state.outer.dtype)
    num_classes, d = state.total.shape
    if h.ndim != 3 or h.shape[2] != d:
        raise ValueError(f"{fn}: h must be [n, p, d={d}] groups of samples; got shape "
                         f"{h.shape}.")
    # static: rank 1, integer dtype, one label per group; eager only: labels in [0, C)
    # (one_hot would count a label outside it in no class)
    y = check_labels(y, num_classes, "y", fn=fn, n=h.shape[0])
    p = h.shape[1]
    w = jax.nn.one_hot(y, num_classes, dtype=h.dtype)
    if mask is not None:
        w = w * jnp.asarray(_check_mask(mask, h.shape[0], fn), h.dtype)[:, None]
    grams = jnp.einsum("npi,npj->nij", h, h)
    return DensityState(
        outer=state.outer + jnp.einsum("nc,nij->cij", w, grams),
        total=state.total + w.T @ h.sum(1),
        count=state.count + p * w.sum(0),
        n=state.n + p * w.sum(),
    )


def density_merge(a: DensityState, b: DensityState) -> DensityState:
    """Combine the running sums of two disjoint parts of a data set (sums are additive)."""
    return jax.tree_util.tree_map(jnp.add, a, b)


def density_finalize(state: DensityState) -> jax.Array:
    """``[C, d, d]`` class density matrices ``outer / N`` from the running sums (eq. 15)."""
    return state.outer / jnp.maximum(state.n, 1.0)


def streaming_class_density_matrices(
    h: jax.Array, y: jax.Array, num_classes: int, *, chunk_size: int
) -> jax.Array:
    """``class_density_matrices`` accumulated by ``lax.scan`` over chunks of samples.

    Only a ``[chunk_size, C, d]``-sized intermediate is live at a time; the last chunk is
    zero-padded and masked.  Equal (to rounding) to ``class_density_matrices(h, y, C)``.

    Args:
      h: ``[N, d]`` inputs, ``N >= 1``.
      y: ``[N]`` integer labels.
      num_classes: ``C``.
      chunk_size: samples per scan step (static).

    Returns:
      ``[C, d, d]`` class density matrices.

    References:
      Eq. (15) of Dehmamy et al., arXiv:1703.04757.
    """
    fn = "streaming_class_density_matrices"
    h = check_array(h, "h", fn=fn, kind="real")
    (h,) = promote_float(h)  # integer pixels would overflow (and the scan carry is float)
    y = check_array(y, "y", fn=fn, kind=None)
    _check_hy(h, y, num_classes, fn)
    _check_samples(h, fn)
    chunk_size = check_int(chunk_size, "chunk_size", fn=fn, min_value=1)
    n, d = h.shape
    n_chunks = -(-n // chunk_size)
    pad = n_chunks * chunk_size - n
    hp = jnp.pad(h, ((0, pad), (0, 0))).reshape(n_chunks, chunk_size, d)
    yp = jnp.pad(y, (0, pad)).reshape(n_chunks, chunk_size)
    mp = (jnp.arange(n_chunks * chunk_size) < n).astype(h.dtype).reshape(n_chunks, chunk_size)

    def body(state, chunk):
        hc, yc, mc = chunk
        return density_update(state, hc, yc, mc), None

    state, _ = jax.lax.scan(body, density_init(num_classes, d, h.dtype), (hp, yp, mp))
    return density_finalize(state)


def density_from_chunks(
    chunks: Iterable[tuple[jax.Array, jax.Array]],
    num_classes: int,
    d: int,
    *,
    update: Callable[..., DensityState] = density_update,
    dtype: DTypeLike = jnp.float32,
) -> DensityState:
    """Accumulate running sums over a host-side iterable of ``(h, y)`` chunks.

    For data sets larger than device memory: each chunk is moved to the device, added, and
    dropped.  Pass ``update=jax.jit(density_update)`` to compile the update once per chunk
    shape (this library does not jit for you).

    Args:
      chunks: iterable of ``([n_k, d], [n_k])`` pairs.
      num_classes: ``C``.
      d: feature dimension.
      update: the update function (``density_update`` or a jitted version of it).
      dtype: accumulation dtype, float32 or float64 (as in :func:`density_init`).

    Returns:
      The final ``DensityState``; ``density_finalize`` turns it into ``[C, d, d]``.
    """
    dtype = _check_sum_dtype(dtype, "density_from_chunks")
    state = density_init(num_classes, d, dtype)
    for hc, yc in chunks:
        state = update(state, hc, yc)
    return state


def sharded_class_density_matrices(
    h: jax.Array, y: jax.Array, num_classes: int, *, mesh: jax.sharding.Mesh, axis_name: str
) -> jax.Array:
    """Class density matrices with the sample axis split over a mesh axis.

    Each device sums its own shard, then the ``[C, d, d]`` partial sums are ``psum``-ed over
    ``axis_name`` and divided by the global ``N``.  ``N`` must be divisible by the size of
    the mesh axis.  Call it under ``jax.jit``.

    Args:
      h: ``[N, d]`` inputs (sharded or not along axis 0).
      y: ``[N]`` integer labels.
      num_classes: ``C``.
      mesh: a ``jax.sharding.Mesh``.
      axis_name: the mesh axis carrying the data (samples).

    Returns:
      ``[C, d, d]`` class density matrices, replicated.

    References:
      Eq. (15) of Dehmamy et al., arXiv:1703.04757.
    """
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    fn = "sharded_class_density_matrices"
    h = check_array(h, "h", fn=fn, kind="real")
    (h,) = promote_float(h)  # integer pixels would overflow in the products
    y = check_array(y, "y", fn=fn, kind=None)
    _check_hy(h, y, num_classes, fn)
    _check_samples(h, fn)
    size = mesh.shape[axis_name]
    if h.shape[0] % size:
        raise ValueError(
            f"N={h.shape[0]} is not divisible by the {size} devices of mesh axis {axis_name!r};"
            " pad the data (or use streaming_class_density_matrices with a mask)."
        )
    n_total = h.shape[0]

    def local(hs, ys):
        w = jax.nn.one_hot(ys, num_classes, dtype=hs.dtype)
        part = _weighted_outer(w, hs)
        return jax.lax.psum(part, axis_name) / n_total

    explicit = dict(zip(mesh.axis_names, mesh.axis_types))[axis_name] == AxisType.Explicit
    place = jax.reshard if explicit else jax.lax.with_sharding_constraint
    h = place(h, NamedSharding(mesh, P(axis_name, None)))
    y = place(y, NamedSharding(mesh, P(axis_name)))
    return jax.shard_map(
        local, mesh=mesh, in_specs=(P(axis_name, None), P(axis_name)), out_specs=P()
    )(h, y)


_eigh_stacked = _linalg.over_leading(_linalg.eigh, "density_eigh")


def density_eigh(rho: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Eigen-decomposition of (a batch of) density matrices, eigenvalues descending.

    .. math::  \\rho = V \\operatorname{diag}(\\lambda) V^\\top,
       \\quad \\lambda_1 \\ge \\lambda_2 \\ge \\dots

    Args:
      rho: ``[..., d, d]`` symmetric matrices.

    Returns:
      ``(eigvals [..., d], eigvecs [..., d, d])``; ``eigvecs[..., :, a]`` is the unit
      eigenvector of ``eigvals[..., a]``.  Signs are arbitrary (see ``fix_signs``).  In
      float32 for half-precision ``rho`` (LAPACK has no bfloat16/float16 eigh), in JAX's
      default float for integer ``rho`` (float32; float64 under x64), in ``rho``'s dtype
      otherwise.
    """
    rho = jnp.asarray(rho)
    if rho.ndim < 2 or rho.shape[-1] != rho.shape[-2]:
        raise ValueError(f"rho must be [..., d, d] square matrices; got shape {rho.shape}.")
    (rho,) = promote_float(rho)  # float32 and float64 unchanged
    # one matrix at a time on CPU, also under vmap (layerlab._linalg: concurrent batched
    # LAPACK calls can deadlock XLA's CPU pool); the batched kernel on accelerators
    lam, vec = _eigh_stacked(rho)
    return lam[..., ::-1], vec[..., ::-1]


def fix_signs(eigvecs: jax.Array, means: jax.Array) -> jax.Array:
    """Flip eigenvectors so that each has a non-negative overlap with its data's mean.

    ReLU(v.h) and ReLU(-v.h) are different filters, so the arbitrary sign returned by
    ``eigh`` must be fixed.  We choose ``v . mu >= 0`` (the filter fires on the average
    input of the class it came from); ties (``v . mu == 0``) keep a positive largest entry.

    Args:
      eigvecs: ``[..., d, k]`` eigenvectors in columns.
      means: ``[..., d]`` the mean input of each matrix's data.

    Returns:
      ``[..., d, k]`` eigenvectors with fixed signs.
    """
    eigvecs = jnp.asarray(eigvecs)
    means = jnp.asarray(means)
    overlap = jnp.einsum("...dk,...d->...k", eigvecs, means)
    idx = jnp.argmax(jnp.abs(eigvecs), axis=-2)  # [..., k]
    big = jnp.take_along_axis(eigvecs, idx[..., None, :], axis=-2)[..., 0, :]
    tie = jnp.abs(overlap) <= 1e-6 * jnp.linalg.norm(means, axis=-1, keepdims=True)
    s = jnp.where(tie, jnp.sign(big), jnp.sign(overlap))
    s = jnp.where(s == 0, 1.0, s)
    return eigvecs * s[..., None, :]


class Filters(NamedTuple):
    """DMN filters chosen from one or more spectra.

    Attributes:
      w: ``[d, k]`` unit filters in columns (a dense layer's kernel).
      eigvals: ``[k]`` the eigenvalue each filter came with.
      source: ``[k]`` the class (spectrum index) each filter came from.
      index: ``[k]`` the filter's rank within its own spectrum.
    """

    w: np.ndarray
    eigvals: np.ndarray
    source: np.ndarray
    index: np.ndarray


THRESHOLD_RULES = ("crossing", "below")
CORRELATIONS = ("cosine", "pearson")
ORDERS = ("eigenvalue", "class")


def energies(eigvals: ArrayLike) -> np.ndarray:
    """The authors' "energy" of each eigenvector, ``E_a = -log(lambda_a / sum_b lambda_b)``.

    Low energy = a likely (prevalent) feature; the paper's SI Fig. 7 plots the spectrum this
    way.  Non-positive eigenvalues get ``+inf``.

    Args:
      eigvals: ``[..., d]`` eigenvalues (any order).

    Returns:
      ``[..., d]`` float64 energies.
    """
    lam = np.asarray(eigvals, np.float64)
    tot = np.clip(lam, 0.0, None).sum(-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        e = -np.log(lam / np.where(tot > 0, tot, 1.0))
    return np.where(lam > 0, e, np.inf)


def num_components(eigvals: ArrayLike, var_fraction: float, *, rule: str = "crossing") -> int:
    """How many leading eigenvectors a variance threshold keeps (eigenvalues descending).

    * ``rule="crossing"``: the smallest ``k`` with ``sum(lambda[:k]) >= var_fraction *
      sum(lambda)`` (the eigenvector that crosses ``var_fraction`` is kept, so at least that
      fraction is explained; at least 1).
    * ``rule="below"``: every ``k`` with ``sum(lambda[:k]) <= var_fraction * sum(lambda)``
      (the authors' code: cumulative energy at most ``var_fraction``; may be 0).

    Args:
      eigvals: ``[d]`` eigenvalues, descending.
      var_fraction: fraction of the trace, in ``(0, 1]``.
      rule: ``"crossing"`` or ``"below"``.

    Returns:
      ``k`` in ``[1, d]`` (``crossing``) or ``[0, d]`` (``below``).
    """
    lam = np.asarray(eigvals, np.float64)
    if lam.ndim != 1:
        raise ValueError(f"num_components: eigvals must be 1-d; got shape {lam.shape}.")
    if not np.all(np.isfinite(lam)):
        raise ValueError(f"num_components: eigvals must be finite, got {lam.tolist()[:8]}"
                         f"{' ...' if lam.size > 8 else ''} ({int(np.sum(~np.isfinite(lam)))} "
                         "NaN/inf); check the input data.")
    lam = np.clip(lam, 0.0, None)
    if not 0.0 < var_fraction <= 1.0:
        raise ValueError(f"var_fraction must be in (0, 1]; got {var_fraction}.")
    if rule not in THRESHOLD_RULES:
        raise ValueError(f"rule must be one of {THRESHOLD_RULES}; got {rule!r}.")
    if np.any(np.diff(lam) > 1e-12 * max(lam[0], 1e-30)):
        raise ValueError("eigvals must be sorted in descending order (use density_eigh).")
    tot = lam.sum()
    if tot <= 0:
        return 1 if rule == "crossing" else 0
    cum = np.cumsum(lam) / tot
    if rule == "below":
        return int(np.sum(cum <= var_fraction + 1e-12))
    return int(min(np.searchsorted(cum, var_fraction - 1e-12) + 1, lam.size))


def _entry_fractions(lam: np.ndarray, rule: str) -> np.ndarray:
    """``[C, d]``: the smallest ``var_fraction`` at which ``num_components(lam[c], .,
    rule=rule)`` keeps eigenvector ``a`` of class ``c`` (``rule="below"``: its cumulative
    trace-normalised energy; ``"crossing"``: that of the eigenvectors before it)."""
    lam = np.clip(lam, 0.0, None)
    tot = lam.sum(axis=1, keepdims=True)
    cum = np.cumsum(lam, axis=1) / np.where(tot > 0, tot, 1.0)
    if rule == "crossing":
        cum = np.concatenate([np.zeros_like(cum[:, :1]), cum[:, :-1]], axis=1)
    return cum


def filter_correlation(a: ArrayLike, b: ArrayLike, measure: str = "cosine") -> float:
    """Similarity of two filters: ``|a . b| / (|a| |b|)`` (``"cosine"``) or the absolute
    Pearson correlation of their entries (``"pearson"``, ``numpy.corrcoef``; the authors')."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    if measure == "cosine":
        return float(abs(a @ b) / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-300))
    if measure == "pearson":
        a, b = a - a.mean(), b - b.mean()
        return float(abs(a @ b) / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-300))
    raise ValueError(f"measure must be one of {CORRELATIONS}; got {measure!r}.")


def select_filters(
    eigvals: ArrayLike,
    eigvecs: ArrayLike,
    *,
    num_filters: int | None = None,
    var_fraction: float | None = None,
    cutoff: float | None = 0.9,
    threshold: str = "crossing",
    correlation: str = "cosine",
    within_class: bool = False,
    order: str = "eigenvalue",
) -> Filters:
    """Choose DMN filters from per-class spectra, dropping duplicates.

    1. **Candidates**: from each class ``c`` its leading eigenvectors, as many as
       ``num_components(lambda_c, var_fraction, rule=threshold)`` (all ``d`` if
       ``var_fraction`` is None: the fixed-count mode, top ``num_filters``).
    2. **Order**: ``"eigenvalue"`` visits all candidates by decreasing eigenvalue (so the
       normalisation of ``rho_c`` matters: eq. 15 divides by the total ``N``);
       ``"class"`` visits class 0's candidates (descending), then class 1's, ... (the
       authors' code).
    3. **Duplicates**: a candidate is dropped when its ``correlation`` (``"cosine"`` =
       ``|v_a . v_b|``, ``"pearson"`` = ``|corrcoef(v_a, v_b)|``) with an already kept
       filter exceeds ``cutoff``; only kept filters of *other* classes count unless
       ``within_class`` (the authors compare all pairs).  The first of a duplicate pair in
       visiting order is kept.
    4. **Cap**: selection stops after ``num_filters`` kept filters (if given).  With
       ``order="class"`` the width is not a cut of the class order (that would keep class
       0's filters first, all of them in the fixed-count mode): if more than
       ``num_filters`` survive steps 1-3, the kept ones are those that enter first as Var
       grows — candidates visited by the cumulative trace-normalised energy at which the
       threshold rule admits them (classes in order on ties), the first ``num_filters``
       non-duplicates.  The fixed-count mode under the class order is thus "the smallest
       Var that keeps ``num_filters`` filters" (the authors' class code has no fixed count).

    Eigenvectors whose eigenvalue is exactly zero or negative (a class without samples; the
    round-off-negative part of a null space) are never candidates; a null space whose
    eigenvalues round to tiny positive values (fewer patches than ``d``) is not detected —
    use ``var_fraction`` there.

    With a single spectrum (``eigvals`` ``[d]``, naive PCA) this is "the top
    ``num_filters`` eigenvectors" or "the top ones explaining ``var_fraction``".

    Args:
      eigvals: ``[C, d]`` (or ``[d]``) eigenvalues, each row descending.
      eigvecs: ``[C, d, d]`` (or ``[d, d]``) unit eigenvectors in columns.
      num_filters: maximum number of filters to keep (the architecture token's width), an
        integer ``>= 1``.
      var_fraction: per-class fraction of variance (trace) to keep, in ``(0, 1]`` ("Var.").
      cutoff: correlation above which a candidate counts as a duplicate ("Cutoff"); None
        disables de-duplication.
      threshold: ``"crossing"`` or ``"below"`` (see ``num_components``); checked also
        without ``var_fraction`` (the class order's cap uses it).
      correlation: ``"cosine"`` or ``"pearson"``.
      within_class: also compare candidates with kept filters of their own class.
      order: ``"eigenvalue"`` or ``"class"``.

    Returns:
      ``Filters`` with ``w`` ``[d, k]`` in the dtype of ``eigvecs`` (float32 or float64).

    References:
      Sec. "Creating trained network layers" and Table 2 ("Var.", "Cutoff") of Dehmamy et
      al., arXiv:1703.04757; the authors' ``layer2.get_eigs``/``truncate``
      (github.com/nimadehmamy/DMN).
    """
    out_dtype = np.float64 if np.asarray(eigvecs).dtype == np.float64 else np.float32
    lam = np.asarray(eigvals, np.float64)
    vec = np.asarray(eigvecs, np.float64)
    if lam.ndim == 1:
        lam, vec = lam[None], vec[None]
    if vec.ndim != 3 or vec.shape[:2] != lam.shape or vec.shape[1] != vec.shape[2]:
        raise ValueError(
            f"eigvecs must be [C, d, d] matching eigvals [C, d]; got {vec.shape} and {lam.shape}."
        )
    fn = "select_filters"
    if num_filters is None and var_fraction is None:
        raise ValueError(f"{fn}: give num_filters, var_fraction, or both.")
    num_filters = check_int(num_filters, "num_filters", fn=fn, min_value=1, allow_none=True)
    if threshold not in THRESHOLD_RULES:  # used by the class order's cap even without Var
        raise ValueError(f"{fn}: threshold must be one of {THRESHOLD_RULES}; got "
                         f"{threshold!r}.")
    if cutoff is not None and not 0.0 < cutoff <= 1.0:
        raise ValueError(f"cutoff must be in (0, 1] or None; got {cutoff}.")
    if correlation not in CORRELATIONS:
        raise ValueError(f"correlation must be one of {CORRELATIONS}; got {correlation!r}.")
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}; got {order!r}.")
    if not np.all(np.isfinite(lam)) or not np.all(np.isfinite(vec)):
        raise ValueError("eigvals/eigvecs contain NaN or inf; check the input data.")
    n_cls, d = lam.shape
    cands = []
    for c in range(n_cls):
        k = (num_components(lam[c], var_fraction, rule=threshold)
             if var_fraction is not None else d)
        # a zero (or round-off negative) eigenvalue's eigenvector is an arbitrary direction
        # of the null space (a class with no samples, or fewer patches than d): never a filter
        cands += [(lam[c, a], c, a) for a in range(k) if lam[c, a] > 0]
    if order == "eigenvalue":
        cands.sort(key=lambda t: (-t[0], t[1], t[2]))

    def greedy(cands, cap):
        kept: list[tuple[float, int, int]] = []
        for lam_a, c, a in cands:
            if cap is not None and len(kept) >= cap:
                break
            v = vec[c, :, a]
            dup = cutoff is not None and any(
                (within_class or c2 != c)
                and filter_correlation(v, vec[c2, :, a2], correlation) > cutoff
                for _, c2, a2 in kept
            )
            if not dup:
                kept.append((lam_a, c, a))
        return kept

    if order == "class" and num_filters is not None:
        # The class order has no cap of its own (the authors' width is what survives Var
        # and Cutoff); cutting it at a width would keep class 0's filters first (all of
        # them in the fixed-count mode).  Within a width the kept filters are those that
        # enter first as Var grows: candidates by the cumulative trace-normalised energy
        # at which the threshold rule admits them, classes in order on ties.
        kept = greedy(cands, None) if var_fraction is not None else None
        if kept is None or len(kept) > num_filters:
            entry = _entry_fractions(lam, threshold)
            cands = sorted(cands, key=lambda t: (entry[t[1], t[2]], t[1], t[2]))
            kept = greedy(cands, num_filters)
    else:
        kept = greedy(cands, num_filters)
    w = (np.stack([vec[c, :, a] for _, c, a in kept], axis=1) if kept
         else np.zeros((d, 0)))
    return Filters(
        w=w.astype(out_dtype),
        eigvals=np.array([t[0] for t in kept], np.float64),
        source=np.array([t[1] for t in kept], np.int32),
        index=np.array([t[2] for t in kept], np.int32),
    )


def data_fraction_indices(
    key: jax.Array, y: ArrayLike, fraction: float, *, sampling: str = "stratified"
) -> np.ndarray:
    """Indices of a random ``fraction`` of a data set (Table 2's "Input").

    Args:
      key: PRNG key.
      y: ``[N]`` integer labels.
      fraction: in ``(0, 1]``.
      sampling: ``"stratified"`` (each class keeps ``ceil(fraction * N_c)`` samples) or
        ``"random"`` (a plain random subset of ``int(fraction * N)`` samples, the authors'
        ``argsort(rand(N))[:int(frac * N)]``).

    Returns:
      ``[M]`` sorted int indices.
    """
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction must be in (0, 1]; got {fraction}.")
    if sampling not in ("stratified", "random"):
        raise ValueError(f"sampling must be 'stratified' or 'random'; got {sampling!r}.")
    y = np.asarray(y)
    perm = np.asarray(jax.random.permutation(key, y.shape[0]))
    if sampling == "random":
        return np.sort(perm[: max(int(fraction * y.shape[0]), 1)])
    out = []
    for c in np.unique(y):
        idx = perm[y[perm] == c]
        out.append(idx[: int(np.ceil(fraction * idx.size))])
    return np.sort(np.concatenate(out))
