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
    # jitted (eager, each op compiles apart): Phi and Gamma, checked against Z Z^T below
    Zs = jax.jit(lambda p: bn.representations(p, x, beta=0.5))(_rand_params(kw, [3, 5, 12, 2]))
    cost = lambda Z: jnp.sum((Z - y) ** 2) / 8  # noqa: E731
    covs = jax.jit(lambda Zs: bn.covariances(Zs, x, beta=0.5))(Zs)
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


def test_psd_pinv_at_a_zero_ridge_of_any_type(key):
    # regression: an array / numpy / traced zero ridge solved (K + 0 I) K^{-1}: NaN when K is
    # singular.  Independent route: float64 numpy pinv.
    K = jnp.diag(jnp.array([1.0, 0.0]))
    for r in (np.float32(0), jnp.array(0.0)):
        np.testing.assert_array_equal(bn.psd_pinv(K, r), np.diag([1.0, 0.0]))
    np.testing.assert_array_equal(jax.jit(bn.psd_pinv)(K, 0.0), np.diag([1.0, 0.0]))
    # L^k with a singular K_0^sigma (N = 6 samples, n_0 + 1 = 3 features + bias)
    kx, kz = jax.random.split(key)
    x = jax.random.normal(kx, (6, 2))
    Z = jax.random.normal(kz, (6, 3))
    covs = bn.covariances([Z], x)
    A = np.concatenate([np.asarray(x, np.float64), np.ones((6, 1))], 1)
    ref = 0.3 * np.sum((np.linalg.pinv(A) @ np.asarray(Z, np.float64)) ** 2)
    for r in (np.float32(0), jnp.array(0.0)):
        val = bn.covariance_loss(covs.K, covs.K_sigma, Z, cost=lambda Z: 0.0, lam=0.3, ridge=r)
        np.testing.assert_allclose(float(val), ref, rtol=1e-4)
    with pytest.raises(ValueError, match=r"covariance_loss: ridge must be >= 0.0, got -5.0"):
        bn.covariance_loss(covs.K, covs.K_sigma, Z, cost=jnp.sum, lam=0.3, ridge=-5.0)


def test_integer_inputs_are_not_wrapped_around():
    # regression: uint8 x gave uint8 kernels x x^T (200^2 wraps around mod 256)
    xu = np.array([[200, 100], [50, 255], [3, 7]], np.uint8)
    Zs = [jnp.ones((3, 4)), jnp.ones((3, 2))]
    covs = bn.covariances(Zs, xu, beta=1)
    x64 = xu.astype(np.float64)
    assert jnp.issubdtype(covs.K_sigma[0].dtype, jnp.floating)
    np.testing.assert_allclose(covs.K_sigma[0], x64 @ x64.T + 1.0, rtol=1e-6)
    # bfloat16 inputs are computed in float32 (LAPACK has no bfloat16 kernels)
    xb = jnp.asarray(xu, jnp.bfloat16)
    cost = lambda Z: jnp.sum(Z ** 2)  # noqa: E731
    np.testing.assert_allclose(
        float(bn.representation_loss(Zs, xb, cost=cost, lam=1.0, ridge=0.1)),
        float(bn.representation_loss(Zs, xb.astype(jnp.float32), cost=cost, lam=1.0,
                                     ridge=0.1)), rtol=1e-6)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_psd_pinv_of_half_precision_is_computed_in_float32(dtype):
    """LAPACK has no half-precision kernels: 'NotImplementedError: Unsupported dtype float16',
    naming no function."""
    A = np.random.default_rng(0).normal(size=(4, 3))
    K = jnp.asarray(A @ A.T, dtype)  # rank 3 of 4
    K64 = np.asarray(K, np.float64)  # the half-precision values, exactly
    K64 = (K64 + K64.T) / 2
    got = bn.psd_pinv(K)
    assert got.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(got), np.linalg.pinv(K64, hermitian=True),
                               rtol=1e-3, atol=1e-4)
    M = np.linalg.inv(K64 + 0.3 * np.eye(4))
    got = bn.psd_pinv(K, 0.3)
    assert got.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(got), M @ K64 @ M, rtol=1e-4, atol=1e-5)
