r"""Parameter pytrees as flat vectors: cosine similarity and relative change.

Built on ``optax.tree`` (``optax.tree.norm``, ``optax.tree.vdot``, ``optax.tree.sub``); for
the norm of a pytree call ``optax.tree.norm`` directly.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax.tree

from layerlab._checks import check_array, is_concrete, promote_float
from layerlab._types import PyTree
from layerlab.probes._scale import exponent, times_pow2


def _check_same_layout(a, b, fn: str) -> None:
    if jax.tree.structure(a) != jax.tree.structure(b):
        raise ValueError(f"{fn}: pytrees differ in structure.")
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        if jnp.shape(x) != jnp.shape(y):
            raise ValueError(
                f"{fn}: pytrees differ in leaf shapes: {jnp.shape(x)} vs {jnp.shape(y)}."
            )


def _real_leaves(t, name: str, fn: str) -> list[jax.Array]:
    """The leaves of ``t`` as arrays, each checked to hold real numbers (a complex leaf
    failed in a private helper, ``_pow2: float32 or float64 expected``, naming neither)."""
    return [check_array(x, f"{name}{jax.tree_util.keystr(path)}", fn=fn, kind="real")
            for path, x in jax.tree_util.tree_leaves_with_path(t)]


def _promoted(a, b, names: tuple[str, str], fn: str):
    """Both trees with every leaf in one float dtype: the widest of theirs and float32
    (:func:`layerlab._checks.promote_float`).  ``optax.tree.norm``/``vdot`` sum in the leaves'
    own dtype: float16 squares overflow past ~256, integer leaves overflow or wrap."""
    la, lb = _real_leaves(a, names[0], fn), _real_leaves(b, names[1], fn)
    out = promote_float(*la, *lb)
    return (jax.tree.unflatten(jax.tree.structure(a), out[:len(la)]),
            jax.tree.unflatten(jax.tree.structure(b), out[len(la):]))


def _exponent(t) -> jax.Array:
    """Binary exponent of a tree's largest ``|entry|`` (:func:`layerlab.probes._scale.exponent`)."""
    return exponent(*jax.tree.leaves(t))


def _times_pow2(t, k):
    """Every leaf times ``2^k``: exact, so norms of trees of ``1e-20`` or ``1e20`` entries
    neither underflow nor overflow in their float32 sums of squares."""
    return jax.tree.map(lambda x: times_pow2(x, k), t)


def tree_cosine_similarity(a: PyTree, b: PyTree) -> jax.Array:
    r"""Cosine similarity of pytrees read as flat vectors.

    .. math:: \cos(a, b) = \frac{\langle a, b\rangle}{\|a\|\,\|b\|}

    Args:
      a, b: pytrees of the same structure and leaf shapes.  Sums run in the widest leaf dtype
        and at least float32 (half-precision leaves are upcast, integer-only trees go to
        JAX's default float, float64 under x64; float64 stays float64).

    Returns:
      scalar in ``[-1, 1]`` (clipped there: rounding can exceed 1 for parallel trees);
      **0 when either tree is all zeros** (the cosine is 0/0 there, as
      :func:`kernel_alignment` and :func:`cka` return 0 for a zero kernel; its gradient there
      is 0, not NaN).  Under ``jit`` a NaN leaf gives NaN.
    """
    _check_same_layout(a, b, "tree_cosine_similarity")
    a, b = _promoted(a, b, ("a", "b"), "tree_cosine_similarity")
    # scale invariant in each tree: rescaled by exact powers of two (float32 trees of 1e-20
    # entries had norm 0 and cosine 0; 1e20 ones NaN)
    a, b = _times_pow2(a, -_exponent(a)), _times_pow2(b, -_exponent(b))
    sa, sb = optax.tree.norm(a, squared=True), optax.tree.norm(b, squared=True)
    zero = (sa == 0) | (sb == 0)  # (a NaN norm is not 0: NaN stays NaN)
    # safe sqrt (the where inside): sqrt'(0) = inf made the gradient at a zero tree NaN,
    # where the documented value is 0 (its gradient there is now 0)
    na, nb = jnp.sqrt(jnp.where(zero, 1.0, sa)), jnp.sqrt(jnp.where(zero, 1.0, sb))
    cos = optax.tree.vdot(a, b) / (na * nb)
    return jnp.where(zero, 0.0, jnp.clip(cos, -1.0, 1.0))  # (clip keeps NaN)


def tree_relative_change(a: PyTree, a0: PyTree) -> jax.Array:
    r"""Relative distance :math:`\|a - a_0\| / \|a_0\|` (e.g. how far weights moved from init).

    Args:
      a, a0: pytrees of the same structure and leaf shapes.  Computed in the widest leaf
        dtype and at least float32 (half-precision leaves are upcast before the difference,
        integer-only trees go to JAX's default float, float64 under x64; float64 stays float64).

    Returns:
      scalar; its gradient at ``a = a0`` is 0 (was NaN).

    Raises:
      ValueError: ``a0`` all zeros (eager calls; under ``jit`` the result is ``inf`` there,
        or NaN when ``a`` is zero too).
    """
    _check_same_layout(a, a0, "tree_relative_change")
    a, a0 = _promoted(a, a0, ("a", "a0"), "tree_relative_change")
    d = optax.tree.sub(a, a0)
    # each norm of a tree rescaled by an exact power of two, the ratio scaled back: float32
    # trees of 1e-20 entries had ||a0|| = 0 ("all leaves zero"), 1e20 ones inf / inf = NaN
    e0, ed = _exponent(a0), _exponent(d)
    den = optax.tree.norm(_times_pow2(a0, -e0))
    if is_concrete(den) and float(den) == 0.0:  # (a NaN leaf gives NaN, not this error)
        raise ValueError(
            "tree_relative_change: a0 has norm 0 (all leaves zero), so the relative change is "
            "undefined; use optax.tree.norm(optax.tree.sub(a, a0)) for the absolute change."
        )
    # safe sqrt: sqrt'(0) = inf made the gradient at a = a0 (a penalty on the distance from
    # init, at step 0) NaN; ||a - a0|| has the subgradient 0 there
    sd = optax.tree.norm(_times_pow2(d, -ed), squared=True)
    num = jnp.where(sd == 0, 0.0, jnp.sqrt(jnp.where(sd == 0, 1.0, sd)))
    return times_pow2(num / den, ed - e0)
