r"""Parameter pytrees as flat vectors: norm, cosine similarity, relative change."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from layerlab._checks import is_concrete

__all__ = ["tree_norm", "tree_cosine_similarity", "tree_relative_change"]


def _leaves(tree):
    return [jnp.asarray(a) for a in jax.tree.leaves(tree)]


def _tree_dot(a, b) -> jax.Array:
    la, lb = _leaves(a), _leaves(b)
    if jax.tree.structure(a) != jax.tree.structure(b):
        raise ValueError("pytrees differ in structure.")
    for x, y in zip(la, lb):
        if x.shape != y.shape:
            raise ValueError(f"pytrees differ in leaf shapes: {x.shape} vs {y.shape}.")
    return sum((jnp.vdot(x, y) for x, y in zip(la, lb)), jnp.zeros(()))


def tree_norm(tree) -> jax.Array:
    r"""Global Euclidean norm :math:`\sqrt{\sum_{\text{leaves}} \|a\|_F^2}`."""
    return jnp.sqrt(sum((jnp.sum(a * a) for a in _leaves(tree)), jnp.zeros(())))


def tree_cosine_similarity(a, b) -> jax.Array:
    r"""Cosine similarity of pytrees (flat vectors): :math:`\langle a,b\rangle/(\|a\|\|b\|)`."""
    return _tree_dot(a, b) / (tree_norm(a) * tree_norm(b))


def tree_relative_change(a, a0) -> jax.Array:
    r"""Relative distance :math:`\|a - a_0\| / \|a_0\|` (e.g. how far weights moved from init).

    Raises ``ValueError`` when ``a0`` is all zeros (eager calls; under ``jit`` the result is
    ``inf`` there, or NaN when ``a`` is zero too).
    """
    _tree_dot(a, a0)  # structure / shape check
    den = tree_norm(a0)
    if is_concrete(den) and not float(den) > 0:
        raise ValueError(
            "tree_relative_change: a0 has norm 0 (all leaves zero), so the relative change is "
            "undefined; use tree_norm(a - a0) for the absolute change."
        )
    return tree_norm(jax.tree.map(lambda x, y: x - y, a, a0)) / den
