"""Tests for layerlab.dgl._kernels: top-network NNGP, MF variances, Monte-Carlo and FIT."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from layerlab import dgl
from layerlab.kernels import stax


def test_top_kernel_linear_and_stax(x64):
    rng = np.random.default_rng(0)
    h = jnp.asarray(rng.normal(size=(7, 4)))
    # depth 0: the linear classifier alone, K = b + w h.h'/d (fan-in convention)
    K0 = dgl.top_kernel(h, w_var=jnp.array([3.0]), b_var=jnp.array([0.5]))
    np.testing.assert_allclose(K0, 0.5 + 3.0 * h @ h.T / 4, rtol=1e-12)
    # two ReLU layers: same as the neural-tangents stax kernel of that top network
    w, b = [2.0, 1.5, 1.2], [0.1, 0.2, 0.05]
    layers = []
    for i in range(3):
        layers.append(stax.Dense(1, W_std=np.sqrt(w[i]), b_std=np.sqrt(b[i])))
        if i < 2:
            layers.append(stax.Relu())
    kernel_fn = stax.serial(*layers)[2]
    K = dgl.top_kernel(h, w_var=jnp.array(w), b_var=jnp.array(b))
    np.testing.assert_allclose(K, dgl.stax_kernel_fn(kernel_fn)(h), rtol=1e-6)


def test_mf_variances_recover_known(x64):
    key = jax.random.key(1)
    k1, k2, k3, k4 = jax.random.split(key, 4)
    d = 400
    params = [
        {"w": jnp.sqrt(2.0 / 50) * jax.random.normal(k1, (50, d)),
         "b": jnp.sqrt(0.3) * jax.random.normal(k2, (d,))},
        {"w": jnp.sqrt(1.5 / d) * jax.random.normal(k3, (d, 300)),
         "b": jnp.sqrt(0.05) * jax.random.normal(k4, (300,))},
    ]
    v = dgl.mf_variances(params)
    np.testing.assert_allclose(v.w_var, [2.0, 1.5], rtol=0.03)
    np.testing.assert_allclose(v.b_var, [0.3, 0.05], rtol=0.2)


def test_mc_covariance_matches_nngp_and_fit_recovers(x64):
    """Wide random nets: sampled covariance == NNGP within sampling noise; FIT started from
    wrong variances recovers the kernel; narrow nets deviate (finite-width effect)."""
    rng = np.random.default_rng(2)
    x = jnp.asarray(rng.normal(size=(8, 5)))
    w, b = jnp.array([2.0, 2.0, 1.0]), jnp.array([0.1, 0.1, 0.1])
    f = dgl.sample_relu_outputs(jax.random.key(3), x, widths=[128, 128], w_var=w, b_var=b,
                                num_samples=1000, out_dim=4)
    Kmc, se = dgl.mc_covariance(f)
    Kth = dgl.top_kernel(x, w_var=w, b_var=b)
    z = np.sqrt(np.mean(((Kth - Kmc) / se) ** 2))
    assert z < 2.0, z
    start = dgl.LayerVariances(w * jnp.array([1.6, 0.7, 1.3]), b * 2.0)
    Kstart = dgl.top_kernel(x, w_var=start.w_var, b_var=start.b_var)
    fitted = jax.jit(lambda K: dgl.fit_variances(x, K, start, steps=250, lr=0.08))(Kmc)
    Kfit = dgl.top_kernel(x, w_var=fitted.w_var, b_var=fitted.b_var)
    rel = lambda K: float(jnp.linalg.norm(K - Kth) / jnp.linalg.norm(Kth))  # noqa: E731
    assert rel(Kstart) > 0.2
    assert rel(Kfit) < 0.05, rel(Kfit)


def test_sampling_and_mc_covariance_promote_integer_and_half_precision_inputs():
    """Integer or half-precision inputs are sampled in float32 (ints once failed in
    ``jax.random.normal``, float16 gave an infinite covariance, bfloat16 a biased one): the
    same samples as the float32 input (small integers are exact in every dtype); float16
    samples' covariance and standard errors equal float64 numpy ones."""
    x = np.random.default_rng(0).integers(0, 4, size=(5, 3))
    w, b = [1.5, 1.5], [0.1, 0.1]
    kw = dict(widths=[20], w_var=w, b_var=b, num_samples=256)
    ref = np.asarray(dgl.sample_relu_outputs(jax.random.key(0), x.astype(np.float32), **kw))
    for xx in (x.astype(np.int32), x.astype(np.float16), jnp.asarray(x, jnp.bfloat16)):
        f = dgl.sample_relu_outputs(jax.random.key(0), xx, **kw)
        assert f.dtype == jnp.float32
        np.testing.assert_array_equal(np.asarray(f), ref)
    s16 = ref.astype(np.float16)  # summed in float16: 3 digits, inf past 65504 (S = 20000)
    K, se = dgl.mc_covariance(jnp.asarray(s16))
    assert K.dtype == jnp.float32
    s = s16.astype(np.float64)
    np.testing.assert_allclose(np.asarray(K), s.T @ s / len(s), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(se), np.sqrt(np.var(
        s[:, :, None] * s[:, None, :], axis=0, ddof=1) / len(s)), rtol=1e-3, atol=1e-6)
    with pytest.raises(ValueError, match=r"sample_relu_outputs: x must have rank 2"):
        dgl.sample_relu_outputs(jax.random.key(0), x[0], **kw)
