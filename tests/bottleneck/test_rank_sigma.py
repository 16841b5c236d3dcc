"""Tests for layerlab.bottleneck._rank_sigma (paper A: eq. 4.1, Lemma 10)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from layerlab import bottleneck as bn


def test_rank_sigma_bounds_and_caratheodory(key, x64):
    Z = jax.random.normal(key, (40, 3)).T          # [N, n] = [3, 40]: 40 neurons, 3 samples
    covs_before = (Z @ Z.T, jax.nn.relu(Z) @ jax.nn.relu(Z).T)
    Zr = bn.caratheodory_reduce(Z)
    assert Zr.shape[0] == 3 and Zr.shape[1] <= 3 * 4 < 40
    np.testing.assert_allclose(Zr @ Zr.T, covs_before[0], atol=1e-8)
    Sr = np.maximum(Zr, 0)
    np.testing.assert_allclose(Sr @ Sr.T, covs_before[1], atol=1e-8)
    b = bn.rank_sigma_bounds(Z)
    assert b["lower"] == 3 and b["upper"] == 12 and b["N_times_N_plus_1"] == 12
    assert b["width"] == 40 and b["lower"] <= Zr.shape[1] <= b["upper"]
    assert bn.neuron_pairs(Z).shape == (40, 12)
    # a single ray: Rank_sigma = 1 exactly, bounds tight
    z = jnp.abs(jax.random.normal(key, (3, 1)))
    rays = jnp.concatenate([z, 2 * z, 0.5 * z], axis=1)
    b1 = bn.rank_sigma_bounds(rays)
    assert b1["lower"] == 1 and b1["upper"] == 1
    assert bn.caratheodory_reduce(rays).shape == (3, 1)


def test_rays_have_rank_sigma_one_without_x64(key):
    # regression: with jax_enable_x64 off the activation ran in float32 while the ranks use
    # 1e-9 / 1e-10 tolerances: four neurons on one ray (mixed signs) got Rank_sigma bounds 2
    # and a Caratheodory reduction to 3 neurons.  Independent route: float64 numpy.
    rng = np.random.default_rng(0)
    z = np.abs(rng.standard_normal(3)) * np.array([1, -1, 1])
    Zp = np.stack([z, 0.7 * z, 1.3 * z, 0.3 * z], 1)              # [N, n] = [3, 4]
    assert not jax.config.jax_enable_x64
    b = bn.rank_sigma_bounds(Zp)
    assert (b["lower"], b["upper"], b["rank_K"], b["rank_K_sigma"]) == (1, 1, 1, 1)
    Zr = bn.caratheodory_reduce(Zp)
    assert Zr.shape == (3, 1)
    np.testing.assert_allclose(Zr @ Zr.T, Zp @ Zp.T, rtol=1e-12)
    Sr, Sp = np.maximum(Zr, 0), np.maximum(Zp, 0)
    np.testing.assert_allclose(Sr @ Sr.T, Sp @ Sp.T, rtol=1e-12)
    assert np.linalg.matrix_rank(bn.neuron_pairs(Zp), tol=1e-9) == 1


def test_the_caratheodory_upper_bound_needs_a_positively_homogeneous_activation():
    """Regression: for tanh the pairs (z z^T, tanh(z) tanh(z)^T) are no cone, yet the conic
    bound was reported.  Closed form, N = 1: five neurons z = 3 give K^sigma = 5 tanh(3)^2 =
    4.951 > 4 while every term tanh(z)^2 < 1, so Rank_sigma >= 5; the old upper bound was
    rank[pairs] = 1 (and caratheodory_reduce returned one neuron, K^sigma 0.99999)."""
    Z = np.full((1, 5), 3.0)                                  # [N, n] = [1, 5]
    ks = 5 * np.tanh(3.0) ** 2
    assert ks > 4 and np.all(np.tanh(Z) ** 2 < 1)             # so Rank_sigma(tanh) >= 5
    b = bn.rank_sigma_bounds(Z, activation=jnp.tanh)
    assert (b["lower"], b["upper"], b["homogeneous"]) == (1, 5, False)
    assert b["upper"] >= int(np.ceil(ks))
    with pytest.raises(ValueError, match=r"caratheodory_reduce: activation must be positively "
                                         r"homogeneous"):
        bn.caratheodory_reduce(Z, activation="tanh")
    # ReLU, leaky ReLU, linear: one neuron sqrt(5) * 3 realises the pair exactly
    for act in (jax.nn.relu, "leaky_relu", "linear"):
        b = bn.rank_sigma_bounds(Z, activation=act)
        assert (b["lower"], b["upper"], b["homogeneous"]) == (1, 1, True)
        Zr = bn.caratheodory_reduce(Z, activation=act)
        np.testing.assert_allclose(Zr, [[np.sqrt(5) * 3.0]], rtol=1e-12)
