"""Tests for layerlab/probes/_trees.py: cosine similarity and relative change of pytrees, on hand
cases and against numpy on the flattened vectors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from layerlab import probes as P


def test_tree_cosine_and_relative_change():
    a = {"w": jnp.array([[1.0, 0.0], [0.0, 1.0]]), "b": jnp.array([1.0])}
    b = {"w": jnp.array([[1.0, 1.0], [0.0, 0.0]]), "b": jnp.array([-1.0])}
    # <a,b> = 1 - 1 = 0
    np.testing.assert_allclose(float(P.tree_cosine_similarity(a, b)), 0.0, atol=1e-7)
    np.testing.assert_allclose(float(P.tree_cosine_similarity(a, a)), 1.0, rtol=1e-6)
    # a - b = [[0,-1],[0,1]], [2]: norm sqrt(6); ||b|| = sqrt(3)
    np.testing.assert_allclose(float(P.tree_relative_change(a, b)), np.sqrt(2.0), rtol=1e-6)
    with pytest.raises(ValueError, match="structure"):
        P.tree_cosine_similarity(a, {"w": a["w"]})


def test_tree_probes_match_numpy_on_flat_vectors(x64):
    rng = np.random.default_rng(0)
    shapes = {"w": (4, 3), "b": (3,), "conv": (2, 2, 3, 5)}
    a = {k: rng.normal(size=s) for k, s in shapes.items()}
    b = {k: rng.normal(size=s) for k, s in shapes.items()}
    flat = lambda t: np.concatenate([t[k].ravel() for k in sorted(t)])  # noqa: E731
    fa, fb = flat(a), flat(b)
    np.testing.assert_allclose(float(P.tree_cosine_similarity(a, b)),
                               fa @ fb / (np.linalg.norm(fa) * np.linalg.norm(fb)), rtol=1e-12)
    np.testing.assert_allclose(float(P.tree_relative_change(a, b)),
                               np.linalg.norm(fa - fb) / np.linalg.norm(fb), rtol=1e-12)
    # jit-able (the zero-norm check is eager only)
    np.testing.assert_allclose(float(jax.jit(P.tree_relative_change)(a, b)),
                               np.linalg.norm(fa - fb) / np.linalg.norm(fb), rtol=1e-12)
    with pytest.raises(ValueError, match="leaf shapes"):
        P.tree_relative_change(a, {**b, "b": np.zeros(4)})


def test_tree_cosine_of_a_zero_tree_is_zero_not_nan():
    """It returned NaN (0/0) silently; 0 as kernel_alignment and cka give for zero kernels."""
    a = {"w": jnp.zeros((2, 3)), "b": jnp.zeros(3)}
    b = {"w": jnp.ones((2, 3)), "b": jnp.arange(3.0)}
    assert float(P.tree_cosine_similarity(a, b)) == 0.0
    assert float(P.tree_cosine_similarity(b, a)) == 0.0
    assert float(jax.jit(P.tree_cosine_similarity)(a, a)) == 0.0
    # a NaN leaf still gives NaN
    assert np.isnan(float(jax.jit(P.tree_cosine_similarity)({**b, "b": jnp.full(3, jnp.nan)}, b)))
