"""Tests for layerlab/probes/_trees.py: pytree norms and similarities on hand cases."""

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
    np.testing.assert_allclose(float(P.tree_norm(a)), np.sqrt(3.0), rtol=1e-6)
    # a - b = [[0,-1],[0,1]], [2]: norm sqrt(6); ||b|| = sqrt(3)
    np.testing.assert_allclose(float(P.tree_relative_change(a, b)), np.sqrt(2.0), rtol=1e-6)
    with pytest.raises(ValueError, match="structure"):
        P.tree_cosine_similarity(a, {"w": a["w"]})
