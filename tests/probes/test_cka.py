"""Tests for layerlab/probes/_cka.py: HSIC, CKA and kernel alignment against independent numpy
routes."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from layerlab import probes as P


def _np_linear_cka(x, y):
    x = x - x.mean(0)
    y = y - y.mean(0)
    return np.linalg.norm(y.T @ x) ** 2 / (np.linalg.norm(x.T @ x) * np.linalg.norm(y.T @ y))


def _np_hsic(k, lm):
    n = k.shape[0]
    h = np.eye(n) - np.ones((n, n)) / n
    return np.trace(k @ h @ lm @ h) / (n - 1) ** 2


def _np_unbiased_hsic_ustat(k, lm):
    """The U-statistic definition (Song et al. 2012), by brute force over index tuples."""
    n = k.shape[0]
    t1 = sum(k[i, j] * lm[i, j] for i, j in itertools.permutations(range(n), 2))
    t2 = sum(k[i, j] * lm[q, r] for i, j, q, r in itertools.permutations(range(n), 4))
    t3 = sum(k[i, j] * lm[i, q] for i, j, q in itertools.permutations(range(n), 3))
    perm = lambda m: np.prod(np.arange(n - m + 1, n + 1), dtype=float)  # noqa: E731
    return t1 / perm(2) + t2 / perm(4) - 2 * t3 / perm(3)


@pytest.fixture
def reps():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 7))
    y = np.tanh(x @ rng.normal(size=(7, 5))) + 0.3 * rng.normal(size=(40, 5))
    return x, y


@pytest.mark.parametrize("n,p,q", [(40, 7, 5), (6, 30, 20)])  # feature-space and Gram branches
def test_linear_cka_matches_feature_space_formula(x64, n, p, q):
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(n, p)), rng.normal(size=(n, q))
    y[:, :3] += x[:, :3]
    got = float(P.linear_cka(x, y))
    np.testing.assert_allclose(got, _np_linear_cka(x, y), rtol=1e-12)
    for method in ("features", "gram"):
        np.testing.assert_allclose(float(P.linear_cka(x, y, method=method)), got, rtol=1e-10)
    # third route: CKA of linear Gram matrices, and centred kernel alignment
    k, lm = x @ x.T, y @ y.T
    np.testing.assert_allclose(float(P.cka(k, lm)), got, rtol=1e-10)
    np.testing.assert_allclose(float(P.kernel_alignment(k, lm, centered=True)), got, rtol=1e-10)
    np.testing.assert_allclose(float(P.hsic(k, lm)), _np_hsic(k, lm), rtol=1e-10)


def test_linear_cka_invariances(x64, reps):
    x, y = reps
    rng = np.random.default_rng(2)
    q, _ = np.linalg.qr(rng.normal(size=(7, 7)))
    base = float(P.linear_cka(x, y))
    assert 0.1 < base < 0.99
    np.testing.assert_allclose(float(P.linear_cka(x @ q, y)), base, rtol=1e-10)  # orthogonal
    np.testing.assert_allclose(float(P.linear_cka(3.7 * x, y)), base, rtol=1e-10)  # isotropic scale
    np.testing.assert_allclose(float(P.linear_cka(x + 5.0, y)), base, rtol=1e-10)  # translation
    np.testing.assert_allclose(float(P.linear_cka(x, x)), 1.0, rtol=1e-12)
    np.testing.assert_allclose(float(P.linear_cka(x, x @ q * 0.2)), 1.0, rtol=1e-12)
    # not invariant to a non-isotropic scaling
    d = np.diag(np.linspace(0.1, 3.0, 7))
    assert abs(float(P.linear_cka(x @ d, y)) - base) > 1e-3
    # symmetric, trailing axes flattened
    np.testing.assert_allclose(float(P.linear_cka(y, x)), base, rtol=1e-12)
    np.testing.assert_allclose(float(P.linear_cka(x.reshape(40, 7, 1), y)), base, rtol=1e-12)


def test_rbf_cka_matches_numpy_and_large_bandwidth_limit(x64, reps):
    x, y = reps

    def np_rbf(a, frac):
        d2 = ((a[:, None, :] - a[None, :, :]) ** 2).sum(-1)
        return np.exp(-d2 / (2 * frac**2 * np.median(d2)))

    k, lm = np_rbf(x, 0.8), np_rbf(y, 0.8)
    want = _np_hsic(k, lm) / np.sqrt(_np_hsic(k, k) * _np_hsic(lm, lm))
    np.testing.assert_allclose(float(P.rbf_cka(x, y)), want, rtol=1e-9)
    np.testing.assert_allclose(float(P.rbf_cka(x, x)), 1.0, rtol=1e-12)
    # RBF CKA tends to linear CKA as the bandwidth grows
    np.testing.assert_allclose(
        float(P.rbf_cka(x, y, sigma_frac=300.0)), float(P.linear_cka(x, y)), rtol=1e-3
    )
    # isotropic scaling invariance (the bandwidth follows the median distance)
    np.testing.assert_allclose(float(P.rbf_cka(4.0 * x, y)), want, rtol=1e-9)


def test_unbiased_hsic_matches_u_statistic(x64):
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(7, 3)), rng.normal(size=(7, 2))
    k, lm = a @ a.T, np.exp(-((b[:, None] - b[None]) ** 2).sum(-1))
    np.testing.assert_allclose(
        float(P.unbiased_hsic(k, lm)), _np_unbiased_hsic_ustat(k, lm), rtol=1e-10
    )
    with pytest.raises(ValueError, match="n >= 4"):
        P.unbiased_hsic(k[:3, :3], lm[:3, :3])


def test_minibatch_cka_accumulates_unbiased_hsic(x64):
    rng = np.random.default_rng(4)
    xs = rng.normal(size=(3, 7, 6))
    ys = xs[..., :4] @ rng.normal(size=(4, 5)) + 0.5 * rng.normal(size=(3, 7, 5))
    grams = lambda a: [m @ m.T for m in a]  # noqa: E731
    kx, ky = grams(xs), grams(ys)
    xy = sum(_np_unbiased_hsic_ustat(k, lm) for k, lm in zip(kx, ky))
    xx = sum(_np_unbiased_hsic_ustat(k, k) for k in kx)
    yy = sum(_np_unbiased_hsic_ustat(lm, lm) for lm in ky)
    want = xy / np.sqrt(xx * yy)
    np.testing.assert_allclose(float(P.minibatch_cka(xs, ys)), want, rtol=1e-9)
    # streaming form gives the same
    s = P.minibatch_cka_init(jnp.float64)
    for a, b in zip(xs, ys):
        s = P.minibatch_cka_update(s, a, b)
    np.testing.assert_allclose(float(P.minibatch_cka_value(s)), want, rtol=1e-9)
    # a single batch is the unbiased CKA of that batch
    np.testing.assert_allclose(
        float(P.minibatch_cka(xs[:1], ys[:1])), float(P.cka(kx[0], ky[0], unbiased=True)), rtol=1e-9
    )


def test_minibatch_cka_is_close_to_full_cka_for_large_samples():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(2000, 10)).astype(np.float32)
    y = (x[:, :4] @ rng.normal(size=(4, 6)) + rng.normal(size=(2000, 6))).astype(np.float32)
    full = float(P.linear_cka(x, y))
    mb = float(jax.jit(P.minibatch_cka)(x.reshape(10, 200, 10), y.reshape(10, 200, 6)))
    assert abs(mb - full) < 0.03, (mb, full)


def test_kernel_alignment_and_change_rate_hand_cases():
    n = 5
    eye, ones = jnp.eye(n), jnp.ones((n, n))
    np.testing.assert_allclose(float(P.kernel_alignment(eye, ones)), 1 / np.sqrt(n), rtol=1e-6)
    np.testing.assert_allclose(float(P.kernel_alignment(eye, 2 * eye)), 1.0, rtol=1e-6)
    # ||2I - I|| / ||I|| = 1 ; ||(I + 11^T) - I|| / ||I|| = n / sqrt(n)
    np.testing.assert_allclose(float(P.kernel_change_rate(eye, 2 * eye)), 1.0, rtol=1e-6)
    np.testing.assert_allclose(float(P.kernel_change_rate(eye, eye + ones)), np.sqrt(n), rtol=1e-6)
    with pytest.raises(ValueError, match="square"):
        P.kernel_alignment(jnp.ones((3, 4)), jnp.ones((3, 4)))


def test_kernel_distance_is_scale_free_unlike_change_rate():
    # I vs 11^T: cosine tr(1 1^T)/(sqrt(n) n) = 1/sqrt(n), so distance 1 - 1/sqrt(n)
    n = 5
    eye, ones = jnp.eye(n), jnp.ones((n, n))
    np.testing.assert_allclose(float(P.kernel_distance(eye, ones)), 1 - 1 / np.sqrt(n),
                               rtol=1e-6)
    # a pure rescaling: distance 0, change rate |c - 1|
    rng = np.random.default_rng(0)
    a = rng.standard_normal((8, 3))
    k = a @ a.T
    for c in (0.5, 3.0):
        assert abs(float(P.kernel_distance(k, c * k))) < 1e-6
        np.testing.assert_allclose(float(P.kernel_change_rate(k, c * k)), abs(c - 1), rtol=1e-6)
    # against a numpy float64 route on a random pair
    b = a + 0.3 * rng.standard_normal((8, 3))
    k2 = b @ b.T
    want = 1 - np.sum(k * k2) / np.sqrt(np.sum(k * k) * np.sum(k2 * k2))
    with jax.enable_x64(True):
        got = float(P.kernel_distance(jnp.asarray(k), jnp.asarray(k2)))
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert want > 1e-3  # the pair is not trivially aligned


def test_cka_jit_and_vmap(reps):
    x, y = (jnp.asarray(a, jnp.float32) for a in reps)
    eager = float(P.linear_cka(x, y))
    np.testing.assert_allclose(float(jax.jit(P.linear_cka)(x, y)), eager, rtol=1e-5)
    batched = jax.vmap(P.linear_cka)(jnp.stack([x, 2 * x]), jnp.stack([y, y]))
    np.testing.assert_allclose(np.asarray(batched), [eager, eager], rtol=1e-5)
    np.testing.assert_allclose(float(jax.jit(P.rbf_cka)(x, y)), float(P.rbf_cka(x, y)), rtol=1e-5)


def test_probe_shape_errors():
    with pytest.raises(ValueError, match="same n samples"):
        P.linear_cka(jnp.ones((5, 2)), jnp.ones((6, 2)))
    with pytest.raises(ValueError, match="reshape a single feature"):
        P.linear_cka(jnp.ones(5), jnp.ones((5, 2)))
    with pytest.raises(ValueError, match="equal B and m"):
        P.minibatch_cka(jnp.ones((2, 5, 3)), jnp.ones((3, 5, 3)))


def test_rbf_cka_sigma_frac_errors_name_rbf_cka():
    """rbf_cka's bandwidth check said "gram_rbf: sigma_frac ..." (a function the user did not
    call); gram_rbf's own check still names gram_rbf."""
    x = np.random.default_rng(0).normal(size=(6, 3)).astype(np.float32)
    for bad, exc, want in ((0.0, ValueError, r"must be > 0\.0 \(a fraction of the median "
                                             r"distance\), got 0\.0"),
                           (-0.5, ValueError, r"must be > 0\.0 .*got -0\.5"),
                           (np.inf, ValueError, r"must be finite .*got inf"),
                           ("0.8", TypeError, r"must be a number")):
        with pytest.raises(exc, match=rf"^rbf_cka: sigma_frac {want}"):
            P.rbf_cka(x, x, sigma_frac=bad)
    with pytest.raises(ValueError, match=r"^gram_rbf: sigma_frac must be > 0\.0"):
        P.gram_rbf(x, sigma_frac=0.0)


def _numpy_linear_cka(x, y):
    x = np.asarray(x, np.float64) - np.mean(np.asarray(x, np.float64), 0)
    y = np.asarray(y, np.float64) - np.mean(np.asarray(y, np.float64), 0)
    return np.sum((y.T @ x) ** 2) / np.linalg.norm(x.T @ x) / np.linalg.norm(y.T @ y)


def test_linear_cka_small_spread_at_large_n_is_not_called_constant():
    """float32, n = 50 000, a column whose spread is 1e-3 of its mean: real variation, not a
    constant representation (the constant test once grew like n and returned 0 here)."""
    rng = np.random.default_rng(0)
    z = rng.normal(size=(50_000, 4))
    x = (10.0 + 0.01 * z).astype(np.float32)
    y = (z @ rng.normal(size=(4, 6))).astype(np.float32)
    np.testing.assert_allclose(float(P.linear_cka(x, y)), _numpy_linear_cka(x, y), rtol=2e-3)
    w = (1.0 + 1e-4 * rng.normal(size=(20_000, 3))).astype(np.float32)
    np.testing.assert_allclose(float(P.linear_cka(w, w)), 1.0, rtol=1e-3)
    # an exactly constant column still gives the documented 0
    c = np.full((50_000, 3), 0.3, np.float32)
    assert float(P.linear_cka(c, y)) == 0.0


def test_nan_input_gives_nan_under_jit_not_zero():
    """A diverged model's representation (NaN) must read as non-finite inside a jitted
    evaluation, not as rank 0 / CKA 0."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(12, 5)).astype(np.float32)
    bad = x.copy()
    bad[3, 2] = np.nan
    fns = {"linear_cka": lambda a: P.linear_cka(a, x), "rbf_cka": lambda a: P.rbf_cka(a, x),
           "cka": lambda a: P.cka(a @ a.T, x @ x.T),
           "stable_rank": P.stable_rank, "effective_rank": P.effective_rank,
           "participation_ratio": lambda a: P.participation_ratio(jnp.abs(a[3]))}
    for name, f in fns.items():
        assert np.isnan(float(jax.jit(f)(bad))), name
        assert np.isfinite(float(jax.jit(f)(x))), name
    # and the documented zeros stay zeros
    assert float(P.stable_rank(np.zeros((3, 4), np.float32))) == 0.0
    assert float(P.effective_rank(np.zeros(4, np.float32))) == 0.0
    assert float(P.participation_ratio(np.zeros(4, np.float32))) == 0.0
    assert float(P.cka(np.ones((5, 5)), x[:5] @ x[:5].T)) == 0.0


# ------------------------------------------------------------------- audit regressions
def _np_rbf(a, frac=0.8):
    sq = (a * a).sum(1)
    d2 = np.maximum(sq[:, None] + sq[None, :] - 2 * a @ a.T, 0.0)  # float64
    return np.exp(-d2 / (2 * frac**2 * np.median(d2)))


def _np_cka_of_kernels(k, lm):
    return _np_hsic(k, lm) / np.sqrt(_np_hsic(k, k) * _np_hsic(lm, lm))


def _np_unbiased_hsic(k, lm):
    """Song et al. 2012's closed form (the U-statistic test above checks it on small n)."""
    n = len(k)
    k, lm = k.copy(), lm.copy()
    np.fill_diagonal(k, 0)
    np.fill_diagonal(lm, 0)
    one = np.ones(n)
    return (np.trace(k @ lm) + one @ k @ one * (one @ lm @ one) / ((n - 1) * (n - 2))
            - 2 / (n - 2) * one @ k @ lm @ one) / (n * (n - 3))


def _np_minibatch_cka(xs, ys, gram):
    xy = sum(_np_unbiased_hsic(gram(a), gram(b)) for a, b in zip(xs, ys))
    xx = sum(_np_unbiased_hsic(gram(a), gram(a)) for a in xs)
    yy = sum(_np_unbiased_hsic(gram(b), gram(b)) for b in ys)
    return xy / np.sqrt(xx * yy)


def _half_precision_case(dtype):
    rng = np.random.default_rng(0)
    if dtype == "bfloat16":  # sigmoid activations: the constant test called them constant
        z = rng.normal(size=(256, 32))
        x = 1 / (1 + np.exp(-0.5 * z))
        y = 1 / (1 + np.exp(-0.5 * (z[:, :16] + 0.5 * rng.normal(size=(256, 16)))))
    else:  # float16: the sums of squares overflowed (65504)
        x = rng.normal(size=(512, 64))
        y = np.tanh(x @ rng.normal(size=(64, 32)) / 8) + 0.5 * rng.normal(size=(512, 32))
    return jnp.asarray(x, dtype), jnp.asarray(y, dtype)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_inputs_give_the_cka_of_their_values(dtype):
    """bf16 inputs gave linear/RBF CKA 0 (the constant tolerance 8 log2(n) eps is ~0.5 there);
    float16 gave 0 and NaN. The inputs' own values, in numpy float64, are the reference."""
    x, y = _half_precision_case(dtype)
    xf, yf = np.asarray(x, np.float64), np.asarray(y, np.float64)
    want = _np_linear_cka(xf, yf)
    assert 0.3 < want < 0.9
    for method in ("features", "gram"):
        np.testing.assert_allclose(float(P.linear_cka(x, y, method=method)), want, rtol=1e-4)
    np.testing.assert_allclose(float(P.cka(P.gram_linear(x), P.gram_linear(y))), want,
                               rtol=1e-4)
    np.testing.assert_allclose(float(P.rbf_cka(x, y)),
                               _np_cka_of_kernels(_np_rbf(xf), _np_rbf(yf)), rtol=1e-4)
    b = 8
    xs, ys = x.reshape(b, -1, x.shape[1]), y.reshape(b, -1, y.shape[1])
    mb = _np_minibatch_cka(xf.reshape(b, -1, x.shape[1]), yf.reshape(b, -1, y.shape[1]),
                           lambda a: a @ a.T)
    np.testing.assert_allclose(float(P.minibatch_cka(xs, ys)), mb, rtol=1e-3)
    assert P.gram_linear(x).dtype == jnp.float32


def test_integer_inputs_do_not_overflow():
    """uint8 products wrapped around in gram_linear (and so in cka of it and minibatch_cka),
    int32 squares in the RBF distances."""
    rng = np.random.default_rng(0)
    xi = rng.integers(0, 256, (20, 50)).astype(np.uint8)
    yi = rng.integers(0, 256, (20, 30)).astype(np.uint8)
    xf, yf = xi.astype(np.float64), yi.astype(np.float64)
    # entries <= 50 * 255^2 < 2^24: exact in float32
    np.testing.assert_array_equal(np.asarray(P.gram_linear(xi)), xf @ xf.T)
    want = _np_linear_cka(xf, yf)
    np.testing.assert_allclose(float(P.cka(P.gram_linear(xi), P.gram_linear(yi))), want,
                               rtol=1e-5)
    np.testing.assert_allclose(float(P.linear_cka(xi, yi)), want, rtol=1e-5)
    np.testing.assert_allclose(float(P.rbf_cka(xi, yi)),
                               _np_cka_of_kernels(_np_rbf(xf), _np_rbf(yf)), rtol=1e-5)
    mb = _np_minibatch_cka(xf.reshape(4, 5, 50), yf.reshape(4, 5, 30), lambda a: a @ a.T)
    np.testing.assert_allclose(float(P.minibatch_cka(xi.reshape(4, 5, 50),
                                                     yi.reshape(4, 5, 30))), mb, rtol=1e-4)
    big = rng.integers(-100_000, 100_000, (6, 3)).astype(np.int32)  # squares overflow int32
    d2 = ((big[:, None].astype(np.float64) - big[None]) ** 2).sum(-1)
    np.testing.assert_allclose(np.asarray(P.gram_rbf(big, sigma=1e5)),
                               np.exp(-d2 / 2e10), rtol=1e-4, atol=1e-6)


def test_constant_column_beside_small_variation_is_not_a_constant_representation():
    """A constant column next to variation of spread 1e-6 made the whole representation
    'constant' (the test used the largest entry over all columns): linear_cka 0 for 1."""
    rng = np.random.default_rng(0)
    v = (1e-6 * rng.normal(size=(200, 8))).astype(np.float32)
    y = (v.astype(np.float64) @ rng.normal(size=(8, 5)) * 1e6
         + rng.normal(size=(200, 5))).astype(np.float32)
    for offset in (1.0, 1e4):
        xo = np.concatenate([v, np.full((200, 1), offset, np.float32)], 1)
        np.testing.assert_allclose(float(P.linear_cka(xo, v)), 1.0, rtol=1e-5)
        np.testing.assert_allclose(float(P.linear_cka(xo, y)), _np_linear_cka(
            xo.astype(np.float64), y.astype(np.float64)), rtol=1e-4)
        np.testing.assert_allclose(float(P.linear_cka(xo, y, method="gram")),
                                   float(P.linear_cka(v, y)), rtol=1e-4)
        np.testing.assert_allclose(float(P.rbf_cka(xo, v)), 1.0, rtol=1e-5)
    # translation invariance, column by column: offsets far above the spread of the others
    shift = np.array([0.0, 3.0, -50.0, 1e3, 0.0, 7.0, 0.0, 2.0], np.float32) * 1e-3
    vs = v + shift
    np.testing.assert_allclose(float(P.linear_cka(vs, y)), _np_linear_cka(
        vs.astype(np.float64), y.astype(np.float64)), rtol=1e-4)
    # a constant representation still gives 0, at any offset
    for c in (0.3, 1e4):
        assert float(P.linear_cka(np.full((200, 9), c, np.float32), y)) == 0.0
        assert float(P.rbf_cka(np.full((200, 9), c, np.float32), y)) == 0.0


def test_minibatch_cka_of_a_constant_or_dead_representation_is_zero():
    """It gave NaN (zeros; RBF on ones) or noise (-1e-6, ones) where cka/linear_cka give 0."""
    rng = np.random.default_rng(0)
    xs = rng.normal(size=(3, 8, 4)).astype(np.float32)
    const_per_batch = np.broadcast_to(np.arange(3.0, dtype=np.float32)[:, None, None], xs.shape)
    for dead in (np.zeros_like(xs), np.ones_like(xs), 0.7 * np.ones_like(xs), const_per_batch):
        for kernel in ("linear", "rbf"):
            assert float(P.minibatch_cka(dead, xs, kernel=kernel)) == 0.0, (dead[0, 0], kernel)
            assert float(P.minibatch_cka(xs, dead, kernel=kernel)) == 0.0
        assert float(jax.jit(P.minibatch_cka)(dead, xs)) == 0.0
    # a representation dead on one minibatch only: that batch adds nothing
    part = xs.copy()
    part[1] = 0.3
    ys = np.tanh(xs @ rng.normal(size=(4, 3)).astype(np.float32))
    want = _np_minibatch_cka(part.astype(np.float64), ys.astype(np.float64), lambda a: a @ a.T)
    np.testing.assert_allclose(float(P.minibatch_cka(part, ys)), want, rtol=1e-4)
    # a NaN still reads as NaN under jit
    bad = xs.copy()
    bad[0, 0, 0] = np.nan
    assert np.isnan(float(jax.jit(P.minibatch_cka)(bad, xs)))


def test_hsic_and_cka_need_two_samples_and_zero_kernels_give_zero():
    with pytest.raises(ValueError, match=r"^hsic: K1 and K2 must be \[n, n\] kernels of "
                                         r"n >= 2 samples, got n = 1\.$"):
        P.hsic(jnp.ones((1, 1)), jnp.ones((1, 1)))
    with pytest.raises(ValueError, match=r"^cka: K1 and K2 must be \[n, n\] kernels of "
                                         r"n >= 2 samples, got n = 1\.$"):
        P.cka(jnp.ones((1, 1)), jnp.ones((1, 1)))
    with pytest.raises(ValueError, match=r"^cka: .* n >= 4 samples, got n = 3\.$"):
        P.cka(jnp.eye(3), jnp.eye(3), unbiased=True)
    with pytest.raises(ValueError, match=r"^unbiased_hsic: K1 and K2 must be \[n, n\] kernels "
                                         r"of n >= 4 samples, got n = 3\.$"):  # named neither
        P.unbiased_hsic(jnp.eye(3), jnp.eye(3))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(30, 4)).astype(np.float32)
    k = x @ x.T
    # the zero kernel: alignment 0 (not NaN), like cka
    assert float(P.kernel_alignment(jnp.zeros((3, 3)), jnp.eye(3))) == 0.0
    assert float(P.kernel_alignment(np.zeros((30, 30), np.float32), k, centered=True)) == 0.0
    assert float(P.kernel_distance(jnp.zeros((3, 3)), jnp.eye(3))) == 1.0
    # constant kernels (a constant representation): centred alignment = cka = 0, exactly
    # (centring left 6e-9 of rounding in cka, and 0/0 = NaN in kernel_alignment)
    for v in (0.1, 0.3, 0.7, 1.3, 3.7):
        kc = P.gram_linear(np.full((30, 5), v, np.float32))
        assert float(P.cka(kc, k)) == 0.0, v
        assert float(P.kernel_alignment(kc, k, centered=True)) == 0.0, v
        assert float(P.cka(kc, k, unbiased=True)) == 0.0, v
    # elsewhere centred alignment is cka, against numpy
    y = np.tanh(x @ rng.normal(size=(4, 3))).astype(np.float32)
    want = _np_linear_cka(x.astype(np.float64), y.astype(np.float64))
    np.testing.assert_allclose(float(P.kernel_alignment(k, y @ y.T, centered=True)), want,
                               rtol=1e-5)
    np.testing.assert_allclose(float(P.cka(k, y @ y.T)), want, rtol=1e-5)
    # NaN stays NaN under jit
    nan_k = k.copy()
    nan_k[0, 0] = np.nan
    assert np.isnan(float(jax.jit(P.kernel_alignment)(nan_k, np.zeros_like(k))))
    assert np.isnan(float(jax.jit(P.cka)(nan_k, np.zeros_like(k))))


def test_minibatch_cka_init_refuses_integer_accumulators():
    """Integer running sums once truncated each minibatch's HSIC terms silently."""
    with pytest.raises(TypeError, match=r"^minibatch_cka_init: dtype must be a floating-point "
                                        r"dtype .*got int32\."):
        P.minibatch_cka_init(jnp.int32)


def test_cka_static_options_given_as_arrays_or_bad_types():
    k = jax.random.normal(jax.random.key(0), (6, 3))
    k2 = jax.random.normal(jax.random.key(1), (6, 2))
    K1, K2 = k @ k.T, k2 @ k2.T
    # a 0-d array flag works as the Python bool (it is a static argument of the jitted core)
    assert float(P.cka(K1, K2, unbiased=jnp.array(True))) == float(P.cka(K1, K2, unbiased=True))
    with pytest.raises(ValueError, match=r"^minibatch_cka: kernel must be 'linear' or 'rbf', "
                                         r"got \['linear'\]"):
        P.minibatch_cka(jnp.ones((2, 3, 4)), jnp.ones((2, 3, 4)), kernel=["linear"])


def _scan_minibatch_cka(state, xs, ys):
    """A user's lax.scan over minibatches with the streaming API."""
    def body(s, b):
        return P.minibatch_cka_update(s, b[0], b[1]), None
    s, _ = jax.lax.scan(body, state, (xs, ys))
    return s


def test_minibatch_cka_update_keeps_a_bfloat16_state_in_a_scan():
    """A bfloat16 state came back float32 (the inputs were upcast, the state not): lax.scan
    refused the carry ('carry input and carry output must have equal types')."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, 16, 6))
    y = np.tanh(x[..., :3] @ rng.normal(size=(3, 3))) + 0.3 * rng.normal(size=(8, 16, 3))
    xs, ys = jnp.asarray(x, jnp.bfloat16), jnp.asarray(y, jnp.bfloat16)
    s = jax.jit(_scan_minibatch_cka)(P.minibatch_cka_init(jnp.bfloat16), xs, ys)
    assert all(leaf.dtype == jnp.bfloat16 for leaf in s[:3])  # the sums
    assert s.ex.dtype == s.ey.dtype == jnp.int32  # their exponents
    want = _np_minibatch_cka(np.asarray(xs, np.float64), np.asarray(ys, np.float64),
                             lambda a: a @ a.T)
    assert 0.2 < want < 0.95
    np.testing.assert_allclose(float(P.minibatch_cka_value(s)), want, rtol=2e-2)  # bf16 sums
    np.testing.assert_allclose(float(P.minibatch_cka(xs, ys)), want, rtol=1e-4)


def test_minibatch_cka_update_keeps_a_float32_state_fed_float64_data(x64):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(6, 20, 5))
    y = x[..., :2] @ rng.normal(size=(2, 4)) + 0.5 * rng.normal(size=(6, 20, 4))
    s = jax.jit(_scan_minibatch_cka)(P.minibatch_cka_init(jnp.float32), x, y)
    assert all(leaf.dtype == jnp.float32 for leaf in s[:3])  # the sums
    assert s.ex.dtype == s.ey.dtype == jnp.int32  # their exponents
    want = _np_minibatch_cka(x, y, lambda a: a @ a.T)
    np.testing.assert_allclose(float(P.minibatch_cka_value(s)), want, rtol=1e-6)
    s64 = jax.jit(_scan_minibatch_cka)(P.minibatch_cka_init(jnp.float64), x, y)
    assert all(leaf.dtype == jnp.float64 for leaf in s64[:3])  # the sums
    assert s64.ex.dtype == s64.ey.dtype == jnp.int32  # their exponents
    np.testing.assert_allclose(float(P.minibatch_cka_value(s64)), want, rtol=1e-12)
    np.testing.assert_allclose(float(P.minibatch_cka(x, y)), want, rtol=1e-12)


def test_gradient_beside_a_constant_kernel_is_finite_and_matches_differences(x64):
    """CKA (and centred kernel alignment) against a constant kernel is 0 by the zero-kernel
    convention, in a whole neighbourhood of the other kernel and of the constant's scale:
    its gradient is 0. It was NaN (sqrt'(0) = inf times the zero cotangent in the cosine's
    denominator). Elsewhere the gradient still matches central differences."""
    rng = np.random.default_rng(3)
    y = jnp.asarray(np.tanh(rng.normal(size=(8, 3))))
    const = jnp.ones((8, 8))
    fns = {"cka": P.cka,
           "kernel_alignment(centered)": lambda a, b: P.kernel_alignment(a, b, centered=True)}

    def fd(f, v, h=1e-6):
        v = np.asarray(v, np.float64)
        out = np.zeros(v.shape)
        for i in np.ndindex(v.shape):
            d = np.zeros(v.shape)
            d[i] = h
            out[i] = (float(f(jnp.asarray(v + d))) - float(f(jnp.asarray(v - d)))) / (2 * h)
        return out

    for name, f in fns.items():
        for g_of, at in ((lambda b, f=f: f(const, b @ b.T), y),          # the other kernel
                         (lambda c, f=f: f(c[0] * const, y @ y.T), jnp.ones(1) * 2.0),
                         (lambda b, f=f: f(b @ b.T, const), y)):          # either argument
            g = jax.grad(g_of)(at)
            assert bool(jnp.all(jnp.isfinite(g))), name
            np.testing.assert_allclose(g, fd(g_of, at), atol=1e-9, err_msg=name)
            assert float(g_of(at)) == 0.0
        # away from the degenerate case: the same gradient as before, by a second route
        x = jnp.asarray(rng.normal(size=(8, 4)))
        def g_of(a, f=f):
            return f(a @ a.T, y @ y.T)
        np.testing.assert_allclose(jax.grad(g_of)(x), fd(g_of, x), rtol=1e-6, atol=1e-9,
                                   err_msg=name)


def _np_unbiased_hsic(k, lm):
    """Song et al. 2012's closed form in float64 numpy (Nguyen et al. 2021, eq. 3)."""
    n = k.shape[0]
    k, lm = k.astype(np.float64).copy(), lm.astype(np.float64).copy()
    np.fill_diagonal(k, 0.0)
    np.fill_diagonal(lm, 0.0)
    one = np.ones(n)
    return (np.trace(k @ lm) + (one @ k @ one) * (one @ lm @ one) / ((n - 1) * (n - 2))
            - 2.0 / (n - 2) * (one @ k @ lm @ one)) / (n * (n - 3))


def _np_unbiased_cka(k, lm):
    return _np_unbiased_hsic(k, lm) / np.sqrt(_np_unbiased_hsic(k, k) *
                                              _np_unbiased_hsic(lm, lm))


def test_unbiased_hsic_is_invariant_to_centring_the_kernels(x64):
    """What lets unbiased cka work on H K H: HSIC_1(HKH, HLH) = HSIC_1(K, L) (float64)."""
    rng = np.random.default_rng(11)
    a, b = rng.normal(size=(7, 3)) + 2.0, rng.normal(size=(7, 2))
    k, lm = a @ a.T, np.exp(-((b[:, None] - b[None]) ** 2).sum(-1))
    h = np.eye(7) - 1.0 / 7
    want = _np_unbiased_hsic_ustat(k, lm)  # brute force over index tuples
    for kk, ll in ((k, lm), (h @ k @ h, lm), (k, h @ lm @ h), (h @ k @ h, h @ lm @ h)):
        np.testing.assert_allclose(_np_unbiased_hsic_ustat(kk, ll), want, rtol=1e-12)
        np.testing.assert_allclose(float(P.unbiased_hsic(kk, ll)), want, rtol=1e-12)
    np.testing.assert_allclose(float(P.cka(k, lm, unbiased=True)), _np_unbiased_cka(k, lm),
                               rtol=1e-12)


def test_unbiased_cka_of_offset_features_is_accurate_in_float32():
    """Unbiased cka summed the raw Grams: for features with an offset (sigmoid units,
    10 + 0.1 z) the float32 sums 1^T K~ 1 cancelled (0.88755 for 0.88718, 0.0 for 0.2693).
    It now runs on the centred kernels (test above): float32 agrees with float64."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(128, 20))
    h1 = 1.0 / (1.0 + np.exp(-x @ (2.0 * rng.normal(size=(20, 64)) / np.sqrt(20))))
    h2 = 1.0 / (1.0 + np.exp(-h1 @ (2.0 * rng.normal(size=(64, 64)) / 8.0)))
    h1, h2 = h1.astype(np.float32), h2.astype(np.float32)
    a, b = h1.astype(np.float64), h2.astype(np.float64)
    got = float(P.cka(P.gram_linear(h1), P.gram_linear(h2), unbiased=True))
    np.testing.assert_allclose(got, _np_unbiased_cka(a @ a.T, b @ b.T), rtol=1e-5)
    z = rng.normal(size=(64, 32))
    y = (np.tanh(z[:, :8] @ rng.normal(size=(8, 5))) + 0.3 * rng.normal(size=(64, 5)))
    for off in (0.0, 1.0, 10.0):
        k = np.asarray(P.gram_linear((off + 0.1 * z).astype(np.float32)))
        lm = np.asarray(P.gram_linear(y.astype(np.float32)))
        want = _np_unbiased_cka(k.astype(np.float64), lm.astype(np.float64))  # same inputs
        assert want > 0.26
        np.testing.assert_allclose(float(P.cka(k, lm, unbiased=True)), want, rtol=1e-5)


def _np_gram_rbf(x, sigma=None, frac=0.8):
    x = np.asarray(x, np.float64)
    d2 = ((x[:, None] - x[None]) ** 2).sum(-1)  # differences first: no cancellation
    s2 = sigma ** 2 if sigma is not None else frac ** 2 * np.median(d2)
    return np.exp(-d2 / (2.0 * s2))


@pytest.mark.parametrize("offset", [0.0, 10.0, 100.0, 1000.0])
def test_gram_rbf_is_translation_invariant_in_float32(offset):
    """|a|^2 + |b|^2 - 2 a.b on uncentred rows: offset 100 put K 0.18 off, 1000 gave NaN.
    gram_rbf now centres the columns first: float32 matches float64 numpy (differences
    taken before squaring) on the same float32 rows, and the diagonal is exactly 1."""
    rng = np.random.default_rng(2)
    x = (offset + 0.1 * rng.normal(size=(64, 32))).astype(np.float32)
    for kw in ({}, {"sigma": 0.5}):
        k = np.asarray(P.gram_rbf(x, **kw))
        np.testing.assert_allclose(k, _np_gram_rbf(x, **kw), rtol=0, atol=1e-5)
        assert np.all(np.diagonal(k) == 1.0)
        np.testing.assert_array_equal(k, k.T)
    k0 = np.asarray(P.gram_rbf((0.1 * rng.normal(size=(64, 32))).astype(np.float32)))
    assert np.all(np.diagonal(k0) == 1.0)


def test_gram_rbf_median_bandwidth_is_scale_free_and_defined_on_constant_x():
    """Median bandwidth: float32 rows of 1e-20 / 1e20 under/overflowed in the squared
    distances (NaN kernels), a constant x gave a NaN kernel (0/0 bandwidth; every bandwidth
    gives K = 1 there), and a zero median distance with distinct samples came back as NaN
    without a word."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(8, 3)).astype(np.float32)
    k1 = np.asarray(P.gram_rbf(x))
    np.testing.assert_allclose(k1, _np_gram_rbf(x), rtol=0, atol=1e-6)
    for scale in (1e-20, 1e20):
        np.testing.assert_array_equal(np.asarray(P.gram_rbf(x * np.float32(scale))),
                                      np.asarray(P.gram_rbf(x * np.float32(scale / 2 ** 60
                                                            if scale > 1 else scale * 2 ** 60))))
        np.testing.assert_allclose(np.asarray(P.gram_rbf(x * np.float32(scale))), k1,
                                   rtol=0, atol=1e-6)
    const = np.tile(x[:1], (8, 1))  # (its column means round: 0.1-like entries)
    np.testing.assert_array_equal(np.asarray(P.gram_rbf(const)), np.ones((8, 8), np.float32))
    g = jax.grad(lambda v: P.gram_rbf(v).sum())(const)
    np.testing.assert_array_equal(g, np.zeros_like(g))
    dup = np.repeat(x[:2], [7, 1], axis=0)  # 50 of 64 squared distances are 0
    with pytest.raises(ValueError, match=r"^gram_rbf: x has a zero median pairwise distance"):
        P.gram_rbf(dup)
    np.testing.assert_allclose(np.asarray(P.gram_rbf(dup, sigma=1.0)),
                               _np_gram_rbf(dup, sigma=1.0), rtol=0, atol=1e-6)


def test_rbf_minibatch_cka_with_a_zero_bandwidth_minibatch_says_so():
    """3 of 4 samples equal in one minibatch: median distance 0, bandwidth 0, kernel 0/0.
    minibatch_cka returned NaN silently and minibatch_cka_update blamed the data ("K1 has
    10 non-finite entries; clean or impute"); now both name the argument and the minibatch,
    as rbf_cka reports a zero median distance.  Under jit the result is NaN."""
    from layerlab._checks import NonFiniteResultError

    rng = np.random.default_rng(7)
    xs = rng.normal(size=(4, 4, 6)).astype(np.float32)
    ys = rng.normal(size=(4, 4, 3)).astype(np.float32)
    bad = xs.copy()
    bad[2, 2:] = bad[2, 1]  # minibatch 2: a, b, b, b
    with pytest.raises(NonFiniteResultError, match=r"^minibatch_cka: .*xs has a zero median "
                       r"pairwise distance in minibatch 2 \(xs\[2\]\).*kernel='linear'"):
        P.minibatch_cka(bad, ys, kernel="rbf")
    with pytest.raises(NonFiniteResultError, match=r"ys has a zero median pairwise distance "
                                                   r"in minibatch 2"):
        P.minibatch_cka(ys, bad, kernel="rbf")
    assert np.isnan(float(jax.jit(P.minibatch_cka, static_argnames="kernel")(
        bad, ys, kernel="rbf")))
    s = P.minibatch_cka_update(P.minibatch_cka_init(), xs[0], ys[0], kernel="rbf")
    with pytest.raises(ValueError, match=r"^minibatch_cka_update: x has a zero median pairwise "
                                         r"distance in this minibatch") as info:
        P.minibatch_cka_update(s, bad[2], ys[2], kernel="rbf")
    assert "impute" not in str(info.value)
    # the linear kernel is defined there, and a constant minibatch still adds 0
    assert np.isfinite(float(P.minibatch_cka(bad, ys)))
    const = xs.copy()
    const[2] = 1.0
    assert np.isfinite(float(P.minibatch_cka(const, ys, kernel="rbf")))


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_minibatch_cka_refuses_non_finite_inputs_eagerly(bad):
    """The finiteness check ran only inside the jitted core (skipped on tracers): NaN/Inf
    inputs returned nan.  Now checked eagerly, as linear_cka and minibatch_cka_update do."""
    rng = np.random.default_rng(8)
    xs = rng.normal(size=(4, 4, 6)).astype(np.float32)
    ys = rng.normal(size=(4, 4, 3)).astype(np.float32)
    xs_bad = xs.copy()
    xs_bad[1, 2, 3] = bad
    for kernel in ("linear", "rbf"):
        with pytest.raises(ValueError, match=r"^minibatch_cka: xs has 1 non-finite \(NaN/Inf\) "
                                             r"entries out of 96"):
            P.minibatch_cka(xs_bad, ys, kernel=kernel)
        with pytest.raises(ValueError, match=r"^minibatch_cka: ys has 1 non-finite"):
            P.minibatch_cka(ys, xs_bad, kernel=kernel)
    assert np.isnan(float(jax.jit(P.minibatch_cka)(xs_bad, ys)))  # traced: NaN


SCALES = [1e-20, 1e-12, 1e-6, 1e6, 1e12, 1e20]


def test_scale_invariant_kernel_probes_hold_at_extreme_scales_in_float32():
    """Each is invariant to rescaling its inputs, but float32 sums of squares under/overflow:
    minibatch CKA of 1e-10 x gave 0.0 for 0.323 and of 1e9 x NaN; cka of gram_linear(s x)
    0.0 at s = 1e-12 and 1e12; uncentred kernel_alignment inf at 1e-12.  Inputs are now
    rescaled by an exact power of two: float64 numpy on the same float32 inputs holds to
    1e-5 wherever float32 represents them (Grams of 1e-20 x do not: 1e-40)."""
    rng = np.random.default_rng(9)
    x = rng.normal(size=(64, 6))
    y = np.tanh(x @ rng.normal(size=(6, 4))) + 0.3 * rng.normal(size=(64, 4))
    f32 = lambda a: np.asarray(a, np.float32)  # noqa: E731
    f64 = lambda a: np.asarray(a, np.float64)  # noqa: E731
    ys = f32(y.reshape(4, 16, 4))
    lm = f32(y @ y.T)

    def np_mb(xs, ys, gram):
        kx, ky = [gram(a) for a in f64(xs)], [gram(b) for b in f64(ys)]
        xy = sum(_np_unbiased_hsic(k, lm) for k, lm in zip(kx, ky))
        return xy / np.sqrt(sum(_np_unbiased_hsic(k, k) for k in kx) *
                            sum(_np_unbiased_hsic(lm, lm) for lm in ky))

    def np_cka(k, lm):
        kc, lc = _np_centre(f64(k)), _np_centre(f64(lm))
        return np.sum(kc * lc) / (np.linalg.norm(kc) * np.linalg.norm(lc))

    def np_ka(k, lm):
        k, lm = f64(k), f64(lm)
        return np.sum(k * lm) / (np.linalg.norm(k) * np.linalg.norm(lm))

    ref = float(P.minibatch_cka(f32(x.reshape(4, 16, 6)), ys))
    for s in SCALES:
        xs = f32(s * x.reshape(4, 16, 6))
        got = float(P.minibatch_cka(xs, ys))
        np.testing.assert_allclose(got, np_mb(xs, ys, lambda a: a @ a.T), rtol=1e-5,
                                   err_msg=f"minibatch linear, scale {s}")
        np.testing.assert_allclose(got, ref, rtol=1e-5)
        np.testing.assert_allclose(float(P.minibatch_cka(xs, ys, kernel="rbf")),
                                   np_mb(xs, ys, _np_gram_rbf), rtol=1e-5,
                                   err_msg=f"minibatch rbf, scale {s}")
        if abs(np.log10(s)) <= 12:  # s^2 |x|^2 must be a float32 number
            k = f32(P.gram_linear(f32(s * x)))
            assert np.all(np.isfinite(k)) and np.any(k != 0)
            np.testing.assert_allclose(float(P.cka(k, lm)), np_cka(k, lm), rtol=1e-5,
                                       err_msg=f"cka, scale {s}")
            np.testing.assert_allclose(float(P.cka(k, lm, unbiased=True)),
                                       _np_unbiased_cka(f64(k), f64(lm)), rtol=1e-5,
                                       err_msg=f"unbiased cka, scale {s}")
            np.testing.assert_allclose(float(P.kernel_alignment(k, lm)), np_ka(k, lm),
                                       rtol=1e-5, err_msg=f"kernel_alignment, scale {s}")
            np.testing.assert_allclose(float(P.kernel_alignment(k, lm, centered=True)),
                                       np_cka(k, lm), rtol=1e-5)
    # a streamed linear minibatch of ordinary size is the stack's value
    st = P.minibatch_cka_init()
    for a, b in zip(f32(x.reshape(4, 16, 6)), ys):
        st = P.minibatch_cka_update(st, a, b)
    np.testing.assert_allclose(float(P.minibatch_cka_value(st)), ref, rtol=1e-6)


def _np_centre(k):
    h = np.eye(k.shape[0]) - 1.0 / k.shape[0]
    return h @ k @ h


def test_cka_gradient_at_a_small_scale_is_finite_and_matches_differences(x64):
    """The power-of-two rescaling is a constant for autodiff: d cka(s K, L)/dK at s = 1e-200
    (float64 squares underflow there) is the scale-1 gradient / s, and that one matches
    central differences."""
    rng = np.random.default_rng(10)
    a, b = rng.normal(size=(7, 3)), rng.normal(size=(7, 2))
    k, lm = a @ a.T, b @ b.T + 0.5
    f = lambda kk: P.cka(kk, lm)  # noqa: E731
    g = np.asarray(jax.grad(f)(k))
    fd = np.zeros_like(k)
    for i in np.ndindex(k.shape):
        e = np.zeros_like(k)
        e[i] = 1e-6
        fd[i] = (float(f(k + e)) - float(f(k - e))) / 2e-6
    np.testing.assert_allclose(g, fd, atol=1e-8)
    s = 1e-200
    gs = np.asarray(jax.grad(f)(s * k))
    assert np.all(np.isfinite(gs))
    np.testing.assert_allclose(gs * s, g, rtol=1e-9, atol=1e-12)


def test_kernel_change_rate_zero_k_prev_refused_and_scale_safe():
    """A zero k_prev gave inf (both zero: nan) eagerly, like tree_relative_change's undefined
    case, which refuses it: now refused eagerly, inf under jit (NaN when both are zero).
    The norms are rescaled by exact powers of two: float32 kernels of 1e-20 and 1e20 entries
    give the float64 numpy ratio."""
    rng = np.random.default_rng(15)
    a = rng.normal(size=(8, 3))
    k0, k1 = a @ a.T, a @ a.T + 0.3 * np.outer(a[:, 0], a[:, 0])
    want = np.linalg.norm(k1 - k0) / np.linalg.norm(k0)
    for s in (1e-20, 1e-10, 1.0, 1e10, 1e20):
        got = P.kernel_change_rate((s * k0).astype(np.float32), (s * k1).astype(np.float32))
        np.testing.assert_allclose(float(got), want, rtol=1e-5, err_msg=f"scale {s}")
    z = np.zeros((8, 8), np.float32)
    with pytest.raises(ValueError, match=r"^kernel_change_rate: k_prev is all zeros"):
        P.kernel_change_rate(z, k1.astype(np.float32))
    assert np.isposinf(float(jax.jit(P.kernel_change_rate)(z, k1.astype(np.float32))))
    assert np.isnan(float(jax.jit(P.kernel_change_rate)(z, z)))


@pytest.mark.parametrize("sx,sy", [(1e10, 1.0), (1e-12, 1.0), (1e8, 1e-9), (1e15, 1e-20)])
def test_minibatch_cka_update_linear_keeps_float32_sums_in_range(sx, sy):
    """The streaming linear update was not rescaled (minibatch_cka rescaled its stack): in
    float32, HSIC of features of 1e10 overflowed (NaN) and of 1e-12 underflowed (CKA 0.0),
    already from 1e8 / 1e-9 (xx * yy overflowed or underflowed in minibatch_cka_value).
    The float64 numpy value of the same minibatches is the reference, at every scale, and a
    later minibatch far larger or smaller than the first keeps its weight."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=(4, 16, 5))
    y = x[..., :3] @ rng.normal(size=(3, 4)) + 0.5 * rng.normal(size=(4, 16, 4))
    want = _np_minibatch_cka(x, y, lambda a: a @ a.T)
    assert 0.3 < want < 0.9
    xs, ys = (x * sx).astype(np.float32), (y * sy).astype(np.float32)
    s = P.minibatch_cka_init()
    for a, b in zip(xs, ys):
        s = P.minibatch_cka_update(s, a, b)
    assert all(np.isfinite(float(v)) and float(v) != 0.0 for v in s[:3])
    np.testing.assert_allclose(float(P.minibatch_cka_value(s)), want, rtol=1e-5)
    s = jax.jit(_scan_minibatch_cka)(P.minibatch_cka_init(), xs, ys)  # traced: the same
    np.testing.assert_allclose(float(P.minibatch_cka_value(s)), want, rtol=1e-5)
    np.testing.assert_allclose(float(P.minibatch_cka(xs, ys)), want, rtol=1e-5)
    # minibatches of very different sizes: each weighs as its values say (the small ones'
    # terms are negligible next to the large ones', not rescaled to count alike)
    w = np.array([1.0, 1e6, 1e-6, 1.0])[:, None, None]
    want_w = _np_minibatch_cka(x * w, y, lambda a: a @ a.T)
    s = P.minibatch_cka_init()
    for a, b in zip((x * w * sx).astype(np.float32), ys):
        s = P.minibatch_cka_update(s, a, b)
    np.testing.assert_allclose(float(P.minibatch_cka_value(s)), want_w, rtol=1e-5)
    assert abs(want_w - want) > 1e-3  # (the weighting matters)


def test_minibatch_cka_state_built_from_three_sums_holds_them_unscaled():
    """A state built by hand from three sums (the fields before the exponents) reads them
    as they are (ex = ey = 0): continuing from the true sums of the first minibatches gives
    the value of the whole stream."""
    rng = np.random.default_rng(6)
    x = rng.normal(size=(3, 12, 4))
    y = np.tanh(x @ rng.normal(size=(4, 3))) + 0.3 * rng.normal(size=(3, 12, 3))
    want = _np_minibatch_cka(x, y, lambda a: a @ a.T)

    def hs(a, b):
        return _np_unbiased_hsic(a @ a.T, b @ b.T)

    s = P.MinibatchCKAState(hs(x[0], y[0]), hs(x[0], x[0]), hs(y[0], y[0]))
    for a, b in zip(x[1:].astype(np.float32), y[1:].astype(np.float32)):
        s = P.minibatch_cka_update(s, a, b)
    np.testing.assert_allclose(float(P.minibatch_cka_value(s)), want, rtol=1e-5)
    assert float(P.minibatch_cka_value(P.MinibatchCKAState(0.0, 0.0, 0.0))) == 0.0


def test_integer_inputs_are_computed_in_the_default_float_under_x64(x64):
    """int64 features and kernels gave float32 results under x64 (promote_float added
    float32 to their dtypes); now float64, equal to numpy's float64 values."""
    rng = np.random.default_rng(11)
    x = rng.integers(-50, 51, size=(12, 4))
    y = rng.integers(-50, 51, size=(12, 3)) + x[:, :3] // 2
    xf, yf = x.astype(np.float64), y.astype(np.float64)
    k, lm = xf @ xf.T, yf @ yf.T
    d2 = ((xf[:, None, :] - xf[None, :, :]) ** 2).sum(-1)
    k_rbf = np.exp(-d2 / (2 * 0.8**2 * np.median(d2)))
    hsic_kl = _np_hsic(k, lm)
    dk, dl = k - np.diag(np.diag(k)), np.abs(lm)
    want = {
        "gram_linear": (P.gram_linear(x), k),
        "gram_rbf": (P.gram_rbf(x), k_rbf),
        "gram_rbf sigma": (P.gram_rbf(x, sigma=30.0), np.exp(-d2 / (2 * 30.0**2))),
        "center_gram": (P.center_gram(k.astype(np.int64)), _np_centred(k)),
        "hsic": (P.hsic(k.astype(np.int64), lm.astype(np.int64)), hsic_kl),
        "cka": (P.cka(k.astype(np.int64), lm.astype(np.int64)),
                hsic_kl / np.sqrt(_np_hsic(k, k) * _np_hsic(lm, lm))),
        "linear_cka": (P.linear_cka(x, y), _np_linear_cka(xf, yf)),
        "kernel_alignment": (P.kernel_alignment(dk.astype(np.int64), dl.astype(np.int64)),
                             np.sum(dk * dl) / np.linalg.norm(dk) / np.linalg.norm(dl)),
        "kernel_change_rate": (P.kernel_change_rate(k.astype(np.int64), lm.astype(np.int64)),
                               np.linalg.norm(lm - k) / np.linalg.norm(k)),
    }
    for name, (got, ref) in want.items():
        assert got.dtype == jnp.float64, name
        np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-12, atol=1e-12, err_msg=name)
    # the RBF CKA of the integer x against itself is 1 to float64 precision (float32 before)
    got = P.rbf_cka(x, x)
    assert got.dtype == jnp.float64
    np.testing.assert_allclose(float(got), 1.0, rtol=1e-13)
    # outside x64 the same inputs stay float32
    with jax.enable_x64(False):
        assert P.linear_cka(jnp.asarray(x), jnp.asarray(y)).dtype == jnp.float32


def _np_centred(k):
    n = k.shape[0]
    h = np.eye(n) - np.ones((n, n)) / n
    return h @ k @ h
