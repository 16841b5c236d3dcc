"""layerlab._linalg: the CPU-safe batched SVD equals numpy's, batched, under vmap and jit, and
its gradient is that of jnp.linalg.svd (float64 finite differences).

The hang it prevents is timing-dependent (a thread-pool deadlock), so no test here can
reproduce it reliably; the reproducer and its measurements are in docs/bottleneck.md."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from layerlab._linalg import svdvals


def _mats(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (4, 6, 3), (2, 3, 4, 4)])
def test_svdvals_equals_numpy_for_plain_and_batched_inputs(shape):
    a = _mats(shape)
    np.testing.assert_allclose(np.asarray(svdvals(jnp.asarray(a, jnp.float32))),
                               np.linalg.svd(a, compute_uv=False), rtol=2e-5, atol=2e-5)


def test_svdvals_under_nested_vmap_and_jit():
    a = _mats((3, 2, 6, 4), seed=1)
    f = jax.jit(jax.vmap(jax.vmap(svdvals)))
    np.testing.assert_allclose(np.asarray(f(jnp.asarray(a, jnp.float32))),
                               np.linalg.svd(a, compute_uv=False), rtol=2e-5, atol=2e-5)


def test_svdvals_gradient_matches_finite_differences_in_float64():
    with jax.enable_x64(True):
        a = jnp.asarray(_mats((2, 5, 3), seed=3))
        w = jnp.asarray([[1.0, -0.5, 2.0], [0.3, 1.5, -1.0]])

        def f(m):
            return jnp.sum(svdvals(m) * w)

        g = jax.grad(f)(a)
        e = jnp.asarray(_mats((2, 5, 3), seed=4))
        h = 1e-6
        fd = (f(a + h * e) - f(a - h * e)) / (2 * h)
        assert float(jnp.sum(g * e)) == pytest.approx(float(fd), rel=1e-7)
        # the same gradient as differentiating jnp.linalg.svd directly
        g_ref = jax.grad(lambda m: jnp.sum(jnp.linalg.svd(m, compute_uv=False) * w))(a)
        np.testing.assert_allclose(np.asarray(g), np.asarray(g_ref), atol=1e-12)
