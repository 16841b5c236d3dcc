"""Tests for layerlab.bottleneck._covariances (paper A: Sec. 3.2, Prop. 3)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from layerlab import bottleneck as bn


def _rand_params(key, sizes):
    ks = jax.random.split(key, len(sizes) - 1)
    Ws = [jax.random.normal(k, (m, n + 1)) / np.sqrt(n + 1)
          for k, n, m in zip(ks, sizes[:-1], sizes[1:])]
    return bn.to_mlp_params(Ws, 0.5)


@pytest.mark.parametrize("ridge", [0.0, 0.1])
def test_covariance_loss_of_gamma_equals_representation_loss(key, x64, ridge):
    kx, kw, ky = jax.random.split(key, 3)
    x = jax.random.normal(kx, (3, 8)).T
    y = jax.random.normal(ky, (2, 8)).T
    Zs = bn.representations(_rand_params(kw, [3, 5, 12, 2]), x, beta=0.5)
    cost = lambda Z: jnp.sum((Z - y) ** 2) / 8  # noqa: E731
    covs = bn.covariances(Zs, x, beta=0.5)
    np.testing.assert_allclose(covs.K_sigma[0], x @ x.T + 0.25, atol=1e-12)
    for K, Z in zip(covs.K, Zs):  # kernels over the samples, [N, N]
        np.testing.assert_allclose(K, Z @ Z.T, atol=1e-12)
    lk = jax.jit(lambda c, z: bn.covariance_loss(c.K, c.K_sigma, z, cost=cost, lam=0.2,
                                                 ridge=ridge))(covs, Zs[-1])
    lr = jax.jit(lambda Z: bn.representation_loss(Z, x, cost=cost, lam=0.2, beta=0.5,
                                                  ridge=ridge))(Zs)
    np.testing.assert_allclose(lk, lr, rtol=1e-9)


def test_covariance_loss_names_a_transposed_output():
    K = [jnp.eye(4)]
    with pytest.raises(ValueError, match=r"Z_L must be \[N, n_L\] = \[4, \?\]"):
        bn.covariance_loss(K, K + K, jnp.ones((2, 4)), cost=jnp.sum, lam=0.1)
