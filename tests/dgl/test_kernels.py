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


def test_top_kernel_errors_name_top_kernel():
    """The variance-length error once read "w_var and b_var must be 1-D ..." without the
    function; a negative variance, a rank-1 h or a NaN h were reported as relu_nngp's x1."""
    h = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    with pytest.raises(ValueError, match=r"^top_kernel: w_var and b_var must be 1-d of equal "
                                         r"length \(depth \+ 1\), got shapes \(2,\) and \(1,\)"):
        dgl.top_kernel(h, w_var=[1.0, 2.0], b_var=[0.1])
    with pytest.raises(ValueError, match=r"^top_kernel: b_var must be >= 0\.0 .*got -0\.1"):
        dgl.top_kernel(h, w_var=[1.0], b_var=[-0.1])
    with pytest.raises(ValueError, match=r"^top_kernel: h must have rank 2, got shape \(3,\)"):
        dgl.top_kernel(h[0], w_var=[1.0], b_var=[0.1])
    with pytest.raises(ValueError, match=r"^top_kernel: h2 must have the feature dimension "
                                         r"d = 3 of h"):
        dgl.top_kernel(h, h[:, :2], w_var=[1.0], b_var=[0.1])
    with pytest.raises(ValueError, match=r"^top_kernel: h has 1 non-finite"):
        dgl.top_kernel(np.where(np.arange(15).reshape(5, 3) == 4, np.nan, h), w_var=[1.0],
                       b_var=[0.1])


def test_sample_relu_outputs_checks_its_arguments():
    """A negative or infinite variance once gave NaN samples silently (sqrt), a w_var of the
    wrong length a broadcasting error, a float width was truncated by int(); a zero variance
    (a zero weight or bias, as top_kernel allows) stays valid."""
    x = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    key = jax.random.key(0)
    kw = dict(widths=[4], w_var=[1.0, 1.0], b_var=0.1, num_samples=2)

    def f(**over):
        return dgl.sample_relu_outputs(over.pop("key", key), x, **{**kw, **over})

    for name, bad, what in (("w_var", -1.0, r"must be >= 0\.0 .*got -1\.0"),
                            ("w_var", [1.0, np.inf], r"must be finite .*got \[1\.0, inf\]"),
                            ("b_var", [0.5, np.nan], r"must be finite .*got \[0\.5, nan\]"),
                            ("w_var", [1.0, 1.0, 1.0],
                             r"must be one value for every layer \(a scalar or 1 entry\) or "
                             r"1-d with 2 entries .*got shape \(3,\)")):
        with pytest.raises(ValueError, match=rf"^sample_relu_outputs: {name} {what}"):
            f(**{name: bad})
    for over, exc, what in ((dict(widths=[2.5]), TypeError, r"widths\[0\] must be an integer"),
                            (dict(widths=[0]), ValueError, r"widths\[0\] must be >= 1, got 0"),
                            (dict(widths=4), TypeError, "widths must be a sequence"),
                            (dict(num_samples=0), ValueError, "num_samples must be >= 1"),
                            (dict(out_dim=1.5), TypeError, "out_dim must be an integer"),
                            (dict(key=3), TypeError, r"key must be a PRNG key")):
        with pytest.raises(exc, match=rf"^sample_relu_outputs: {what}"):
            f(**over)
    out = f(w_var=[1.0, 0.0], b_var=[0.1, 0.5])  # zero last-layer weights: outputs = biases
    assert out.shape == (2, 5) and np.all(np.ptp(np.asarray(out), axis=1) == 0.0)


def test_sample_relu_outputs_takes_a_length_1_variance_for_every_layer():
    """A length-1 w_var/b_var was broadcast to every layer before the argument checks
    (jnp.broadcast_to); the checks once refused it.  It equals the scalar (the old route)."""
    x = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    key = jax.random.key(0)
    want = dgl.sample_relu_outputs(key, x, widths=[4], w_var=1.0, b_var=0.0, num_samples=3)
    for w, b in ((jnp.array([1.0]), 0.0), (1.0, [0.0]), ([1.0], np.zeros(1))):
        got = dgl.sample_relu_outputs(key, x, widths=[4], w_var=w, b_var=b, num_samples=3)
        np.testing.assert_array_equal(got, want)
    got = dgl.sample_relu_outputs(key, x, widths=[4, 4], w_var=jnp.array([1.5]),
                                  b_var=jnp.array([0.1]), num_samples=3)
    np.testing.assert_array_equal(got, dgl.sample_relu_outputs(
        key, x, widths=[4, 4], w_var=jnp.full(3, 1.5), b_var=jnp.full(3, 0.1), num_samples=3))


def test_top_kernel_checks_h_once_and_names_itself_throughout(monkeypatch):
    """top_kernel checked h finite itself and then relu_nngp checked it again; now once, still
    naming top_kernel and h; an overflowing kernel names top_kernel (it named relu_nngp)."""
    import sys

    import layerlab._checks as checks
    import layerlab.kernels._closed_form as cf

    h = np.random.default_rng(0).normal(size=(5, 3))
    calls = []
    orig = checks.check_finite

    def counting(x, name, *a, **k):
        calls.append(name)
        return orig(x, name, *a, **k)

    monkeypatch.setattr(cf, "check_finite", counting)
    # (before: top_kernel's own check as well, in layerlab.dgl._kernels)
    monkeypatch.setattr(sys.modules["layerlab.dgl._kernels"], "check_finite", counting,
                        raising=False)
    K = dgl.top_kernel(h, w_var=[1.0, 2.0], b_var=[0.1, 0.2])
    np.testing.assert_array_equal(
        K, jax.numpy.asarray(cf.relu_nngp(h, depth=1, w_var=[1.0, 2.0], b_var=[0.1, 0.2])))
    calls.clear()
    dgl.top_kernel(h, h[:2], w_var=[1.0], b_var=[0.1])
    assert calls == ["h", "h2"]
    monkeypatch.undo()
    with pytest.raises(ValueError, match=r"^top_kernel: h has 1 non-finite"):
        dgl.top_kernel(np.where(np.arange(15).reshape(5, 3) == 4, np.inf, h), w_var=[1.0],
                       b_var=[0.1])
    with pytest.raises(ValueError, match=r"^top_kernel: h2 has 1 non-finite"):
        dgl.top_kernel(h, np.where(np.arange(6).reshape(2, 3) == 4, np.nan, h[:2]),
                       w_var=[1.0], b_var=[0.1])
    with pytest.raises(checks.NonFiniteResultError, match=r"^top_kernel: .*rescale h/h2"):
        dgl.top_kernel(np.float32(1e30) * h.astype(np.float32), w_var=[1.0, 1.0],
                       b_var=[0.1, 0.1])


def test_top_kernel_messages_name_h_and_h2():
    """Every input message of top_kernel names top_kernel and h/h2, never relu_nngp's x1/x2
    (its closed-form route once named x1/x2 in all but two of them)."""
    h = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    kw = dict(w_var=[1.0, 2.0], b_var=[0.1, 0.2])
    for exc, want, args in [
        (ValueError, r"h must have rank 2, got shape \(2, 5, 3\)", (np.stack([h, h]),)),
        (ValueError, r"h2 must have rank 2, got shape \(3,\)", (h, h[0])),
        (ValueError, r"h2 must have the feature dimension d = 3 of h, got shape \(5, 2\)",
         (h, h[:, :2])),
        (ValueError, r"h must have feature dimension d >= 1", (h[:, :0],)),
        (ValueError, r"h has 1 non-finite", (np.where(np.arange(15).reshape(5, 3) == 7,
                                                       np.inf, h),)),
        (ValueError, r"h2 has 1 non-finite", (h, np.where(np.arange(15).reshape(5, 3) == 2,
                                                           np.nan, h))),
        (TypeError, r"h2 must hold real", (h, h.astype(np.complex64))),
    ]:
        with pytest.raises(exc, match=rf"^top_kernel: {want}") as err:
            dgl.top_kernel(*args, **kw)
        assert "x1" not in str(err.value) and "x2" not in str(err.value), str(err.value)


def test_mf_variances_checks_the_layer_structure():
    """A dict, an empty list, layers that do not chain or a bias of the wrong size once gave
    a KeyError, a numpy stack error or silently wrong variances."""
    p = [{"w": jnp.ones((3, 4)), "b": jnp.ones(4)}, {"w": jnp.ones((4, 2)), "b": jnp.ones(2)}]
    for params, exc, what in (
            (p[0], TypeError, r"params must be a list of layers"),
            ([], ValueError, r"params must hold at least one layer, got an empty list"),
            ([p[0], p[0]], ValueError, r"params\[1\]\['w'\] has d_in = 3 rows but "
                                       r"params\[0\]\['w'\] has d_out = 4 columns"),
            ([{"w": jnp.ones((3, 4)), "b": jnp.ones(3)}], ValueError,
             r"params\[0\]\['b'\] must have d_out = 4 entries"),
            ([{"W": jnp.ones((3, 4))}], TypeError, r"params\[0\] must be a dict .*got \['W'\]"),
            ([{"w": jnp.ones(3), "b": jnp.ones(3)}], ValueError,
             r"params\[0\]\['w'\] must have rank 2")):
        with pytest.raises(exc, match=rf"^mf_variances: {what}"):
            dgl.mf_variances(params)


def test_fit_variances_checks_its_arguments():
    """A K_target of the wrong shape once broadcast, an all-zero one gave NaN (0/0), a
    negative lr ascended, LayerVariances of scalars failed deep inside; an integer K_target
    (it made the fitted log-scales an integer array) is fitted in float32."""
    x = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    v = dgl.LayerVariances(jnp.array([1.0, 1.0]), jnp.array([0.1, 0.1]))
    K = np.asarray(dgl.top_kernel(x, w_var=v.w_var, b_var=v.b_var))
    for args, kw, exc, what in (
            ((x, K[:4], v), {}, ValueError, r"K_target must have shape \[5, 5\], got \(4, 5\)"),
            ((x, 0 * K, v), {}, ValueError, r"K_target is all zero"),
            ((x, np.where(K > 1, np.nan, K), v), {}, ValueError, r"K_target has \d+ non-finite"),
            ((x[0], K, v), {}, ValueError, r"x must have rank 2"),
            ((x, K, (1.0, 0.1)), {}, TypeError, r"init must be a LayerVariances"),
            ((x, K, dgl.LayerVariances(1.0, 0.1)), {}, ValueError,
             r"init\.w_var must be 1-d .*got shape \(\)"),
            ((x, K, dgl.LayerVariances(jnp.ones(2), jnp.ones(3))), {}, ValueError,
             r"init\.b_var must be 1-d with 2 entries"),
            ((x, K, dgl.LayerVariances(-jnp.ones(2), jnp.ones(2))), {}, ValueError,
             r"init\.w_var must be >= 0\.0"),
            ((x, K, v), dict(lr=-0.05), ValueError, r"lr must be > 0\.0"),
            ((x, K, v), dict(steps=2.5), TypeError, r"steps must be an integer"),
            ((x, K, v), dict(ridge=-1.0), ValueError, r"ridge must be >= 0\.0")):
        with pytest.raises(exc, match=rf"^fit_variances: {what}"):
            dgl.fit_variances(*args, **kw)
    Ki = np.round(10 * K).astype(np.int32)
    fitted = jax.eval_shape(lambda: dgl.fit_variances(x, Ki, v, steps=1))  # traced, not run
    assert fitted.w_var.dtype == fitted.b_var.dtype == jnp.float32
