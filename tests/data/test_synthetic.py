"""Synthetic tasks: teacher networks and low-dimensional latents."""

import jax
import numpy as np
import pytest

from layerlab import data as D


def _np_forward(params, x, act):
    h = np.asarray(x, np.float64)
    for i, layer in enumerate(params):
        h = h @ np.asarray(layer["w"], np.float64) + np.asarray(layer["b"], np.float64)
        if i < len(params) - 1:
            h = act(h)
    return h


def test_teacher_targets_are_the_teacher_network(key):
    ds, params = D.teacher(key, 64, (50, 10, 10, 10), return_params=True)
    assert ds.x.shape == (64, 50) and ds.y.shape == (64, 10) and ds.num_classes == 0
    assert [p["w"].shape for p in params] == [(50, 10), (10, 10), (10, 10)]
    np.testing.assert_allclose(
        ds.y, _np_forward(params, ds.x, lambda a: np.maximum(a, 0)), rtol=1e-4, atol=1e-5
    )
    # fan-in scaling with the ReLU gain sqrt(2): Var W = 2 / fan_in
    np.testing.assert_allclose(np.var(np.asarray(params[0]["w"])) * 50, 2.0, rtol=0.2)
    # inputs are standard Gaussian
    assert abs(ds.x.mean()) < 0.05 and abs(ds.x.std() - 1) < 0.05
    noisy = D.teacher(key, 64, (50, 10, 10, 10), noise=0.5)
    resid = noisy.y - ds.y
    assert 0.4 < resid.std() < 0.6


def test_teacher_splits_share_the_teacher():
    tr = D.load("teacher", n=32, seed=3, widths=(5, 4, 2), activation="tanh")
    te = D.load("teacher", "test", n=16, seed=3, widths=(5, 4, 2), activation="tanh")
    _, params = D.teacher(jax.random.key(3), 1, (5, 4, 2), activation="tanh", return_params=True)
    for ds in (tr, te):
        np.testing.assert_allclose(ds.y, _np_forward(params, ds.x, np.tanh), rtol=1e-4, atol=1e-5)
    assert not np.allclose(tr.x[:16], te.x)  # different inputs
    np.testing.assert_array_equal(
        D.load("teacher", n=32, seed=3, widths=(5, 4, 2), activation="tanh").x, tr.x
    )
    with pytest.raises(TypeError, match="unknown option"):
        D.load("teacher", depth=3)


def test_latent_is_a_function_of_a_k_dim_latent(key):
    ds, info = D.latent(key, 50, k=2, d_in=8, d_out=3, hidden=16, return_latent=True)
    z = info["z"]
    assert z.shape == (50, 2) and ds.x.shape == (50, 8) and ds.y.shape == (50, 3)
    np.testing.assert_allclose(ds.x, _np_forward(info["g"], z, np.tanh), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ds.y, _np_forward(info["h"], z, np.tanh), rtol=1e-4, atol=1e-5)
    # with a linear generator, x and y span exactly k dimensions
    lin = D.latent(key, 50, k=2, d_in=8, d_out=3, hidden=16, activation="linear")
    s = np.linalg.svd(lin.x - lin.x.mean(0), compute_uv=False)
    assert s[1] > 1e-2 * s[0] and s[2] < 1e-5 * s[0]
    te = D.load("latent", "test", n=10, seed=0, k=3, d_in=6, d_out=2)
    assert te.x.shape == (10, 6) and te.split == "test"


def test_load_synthetic_accepts_a_key_as_seed():
    """load("teacher"|"latent", seed=jax.random.key(0)) raised 'key accepts a scalar seed,
    but was given a PRNG key' although the docstring allows a key."""
    for name in ("teacher", "latent"):
        ref = D.load(name, "val", n=6, seed=4)
        for seed in (jax.random.key(4), jax.random.PRNGKey(4)):
            got = D.load(name, "val", n=6, seed=seed)
            np.testing.assert_array_equal(got.x, ref.x)
            np.testing.assert_array_equal(got.y, ref.y)
    with pytest.raises(TypeError, match=r"^load: seed must be an integer, got float 1\.5\.$"):
        D.load("teacher", n=4, seed=1.5)
    with pytest.raises(ValueError, match=r"^load: seed must be a single PRNG key, got a key "
                                         r"array of shape \(2,\)\.$"):
        D.load("teacher", n=4, seed=jax.random.split(jax.random.key(0)))
    with pytest.raises(TypeError, match=r"^load: n must be an integer, got float 10\.0\.$"):
        D.load("teacher", n=10.0)
    with pytest.raises(ValueError, match=r"^load: n must be >= 1, got 0\.$"):
        D.load("latent", n=0)


@pytest.mark.parametrize("name", ["teacher", "latent"])
@pytest.mark.parametrize("dtype", [np.float16, np.float64, jax.numpy.bfloat16])
def test_load_returns_synthetic_tasks_in_the_asked_dtype(name, dtype):
    """``load("teacher" | "latent", dtype=...)`` ignored ``dtype`` (always float32); the
    values are the float32 task's, cast."""
    ref = D.load(name, n=8, seed=2)
    ds = D.load(name, n=8, seed=2, dtype=dtype)
    assert ds.x.dtype == np.dtype(dtype) and ds.y.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(ds.x, ref.x.astype(dtype))
    np.testing.assert_array_equal(ds.y, ref.y.astype(dtype))
    assert ref.x.dtype == ref.y.dtype == np.float32


def test_teacher_noise_is_traced_and_array_scales_work(key):
    """A sweep over the noise compiles one program (it was a static jit argument: one
    compile, ~3 s, per value), and the noise enters as y = f(x) + noise * eps exactly; a 0-d
    array scale is the same teacher as its Python float (an unhashable static argument made
    jit fail)."""
    from layerlab.data import _synthetic
    base = D.teacher(key, 16, (3, 4, 2), noise=0.0, return_params=True)
    n0 = _synthetic._teacher_draw._cache_size()
    ys = [D.teacher(key, 16, (3, 4, 2), noise=s).y for s in (0.1, 0.2, 0.35)]
    assert _synthetic._teacher_draw._cache_size() == n0
    eps = (ys[1] - base[0].y) / 0.2  # the same draw: noise scales one fixed eps
    np.testing.assert_allclose(ys[0], base[0].y + 0.1 * eps, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ys[2], base[0].y + 0.35 * eps, rtol=1e-5, atol=1e-5)
    assert np.std(eps) > 0.5
    arr = D.teacher(key, 16, (3, 4, 2), w_std=np.float32(1.5), b_std=jax.numpy.asarray(0.5))
    flt = D.teacher(key, 16, (3, 4, 2), w_std=1.5, b_std=0.5)
    np.testing.assert_array_equal(arr.y, flt.y)


@pytest.mark.parametrize("noise", [-0.5, float("nan")])
def test_teacher_refuses_a_negative_or_nan_noise(key, noise):
    with pytest.raises(ValueError, match="teacher: noise"):
        D.teacher(key, 8, (3, 2), noise=noise)
