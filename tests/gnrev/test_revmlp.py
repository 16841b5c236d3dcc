"""Tests for layerlab.gnrev._revmlp: RevMLP forward, exact inverse, readout, bad input."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import layerlab.gnrev as g


@pytest.mark.parametrize(
    "bottleneck,first_linear,activation",
    [(16, False, jax.nn.relu), (None, True, jnp.tanh)],
)
def test_inverse_of_apply_is_identity(x64, key, bottleneck, first_linear, activation):
    p, f = g.revmlp_init(key, 6, 3, bottleneck=bottleneck, first_linear=first_linear,
                         activation=activation, dtype=jnp.float64)
    # non-zero biases so they are exercised
    p = jax.tree.map(lambda a: a + 0.3 * jax.random.normal(jax.random.key(7), a.shape), p)
    x = jax.random.normal(jax.random.key(1), (5, 6))
    y = g.revmlp_apply(p, f, x)
    assert float(jnp.max(jnp.abs(y - x))) > 0.1  # the net is not the identity
    np.testing.assert_allclose(g.revmlp_inverse(p, f, y), x, atol=1e-12)
    np.testing.assert_allclose(g.revmlp_apply(p, f, g.revmlp_inverse(p, f, x)), x, atol=1e-12)


def test_apply_matches_explicit_equations(x64, key):
    """Eqs. (14)-(15) written out by hand, samples as columns as in the paper."""
    p, f = g.revmlp_init(key, 4, 2, bottleneck=7, first_linear=True, dtype=jnp.float64)
    p = jax.tree.map(lambda a: a + 0.2 * jax.random.normal(jax.random.key(3), a.shape), p)
    x = np.asarray(jax.random.normal(jax.random.key(1), (3, 4)))
    X1, X2 = x[:, :2].T, x[:, 2:].T  # (h, n)
    for li in range(2):
        sig = (lambda z: z) if li == 0 else (lambda z: np.maximum(z, 0))
        W1, b1 = np.asarray(p["w1"][li]).T, np.asarray(p["b1"][li])[:, None]
        W2, b2 = np.asarray(p["w2"][li]).T, np.asarray(p["b2"][li])[:, None]
        V1, V2 = np.asarray(f.v1[li]).T, np.asarray(f.v2[li]).T
        X1 = X1 + W1 @ sig(V1 @ X2) + b1
        X2 = X2 + W2 @ sig(V2 @ X1) + b2
    np.testing.assert_allclose(g.revmlp_apply(p, f, x), np.concatenate([X1, X2]).T, atol=1e-12)
    hs = g.revmlp_hidden(p, f, x)
    assert hs.shape == (3, 3, 4)
    np.testing.assert_allclose(hs[0], x)
    np.testing.assert_allclose(hs[-1], np.concatenate([X1, X2]).T, atol=1e-12)


def test_init_statistics(key):
    p, f = g.revmlp_init(key, 200, 2, bottleneck=400)
    # V ~ N(0, 1/d'): variance of entries 1/400; W Xavier-uniform variance 2/(d'+h)
    np.testing.assert_allclose(jnp.var(f.v1), 1 / 400, rtol=0.05)
    np.testing.assert_allclose(jnp.var(p["w1"]), 2 / 500, rtol=0.05)
    assert float(jnp.abs(p["b1"]).max()) == 0.0


def test_xavier_normal_relu_init_variance(key):
    """Authors' init: Xavier-normal, gain sqrt(2) in ReLU blocks, 1 in a linear first block."""
    d, dp = 200, 400
    p, _ = g.revmlp_init(key, d, 3, bottleneck=dp, first_linear=True, init="xavier_normal_relu")
    w = np.asarray(p["w1"], np.float64)
    xavier = 2.0 / (dp + d // 2)
    np.testing.assert_allclose(w[0].var(), xavier, rtol=0.03)  # linear block: gain 1
    np.testing.assert_allclose(w[1:].var(), 2.0 * xavier, rtol=0.03)  # ReLU: gain^2 = 2
    # Gaussian, not uniform: kurtosis 3 (a uniform's is 1.8)
    z = w[1:].ravel() / w[1:].std()
    assert abs(np.mean(z**4) - 3.0) < 0.1
    pu, _ = g.revmlp_init(key, d, 1, bottleneck=dp)
    zu = np.asarray(pu["w1"]).ravel() / np.asarray(pu["w1"]).std()
    assert abs(np.mean(zu**4) - 1.8) < 0.05
    with pytest.raises(ValueError, match="init must be one of"):
        g.revmlp_init(key, d, 1, init="he")


def test_readout_orthonormal(key):
    P = g.readout_init(key, 12, 5)
    # float32 Gram of 12-row columns: worst-case rounding ~ n * eps32 per entry (BLAS order)
    np.testing.assert_allclose(P.T @ P, np.eye(5), atol=4 * 12 * np.finfo(np.float32).eps)
    with pytest.raises(ValueError, match="num_outputs"):
        g.readout_init(key, 4, 5)
    for c in (0, -1):
        with pytest.raises(ValueError, match=rf"^readout_init: num_outputs must be >= 1, "
                                             rf"got {c}"):
            g.readout_init(key, 4, c)
    assert g.readout_init(key, 4, np.int64(2)).shape == (4, 2)


def test_bad_inputs(key):
    with pytest.raises(ValueError, match="even"):
        g.revmlp_init(key, 5, 2)
    for d in (0, -4):  # was "dim must be even ..., got -4; pad the input": -4 is even
        with pytest.raises(ValueError, match=rf"^revmlp_init: dim must be >= 2, got {d}\.$"):
            g.revmlp_init(key, d, 2)
    with pytest.raises(TypeError, match=r"^revmlp_init: bottleneck \(a width, or None\) must "
                                        r"be an integer, got float 2\.5"):
        g.revmlp_init(key, 6, 2, bottleneck=2.5)  # was silently truncated to 2
    with pytest.raises(TypeError, match=r"^revmlp_init: depth \(blocks\) must be an integer"):
        g.revmlp_init(key, 6, 2.5)
    with pytest.raises(ValueError, match=r"^revmlp_init: depth \(blocks\) must be >= 1"):
        g.revmlp_init(key, 6, 0)
    assert g.revmlp_init(key, 6, 2, bottleneck=np.int64(4))[0]["w1"].shape == (2, 4, 3)
    p, f = g.revmlp_init(key, 6, 2, bottleneck=8)
    with pytest.raises(ValueError, match=r"shape \(n, 6\)"):
        g.revmlp_apply(p, f, jnp.ones((3, 4)))
    x = jnp.ones((3, 6)).at[1, 2].set(jnp.nan)
    with pytest.raises(ValueError, match="non-finite"):
        g.revmlp_apply(p, f, x)
    with pytest.raises(ValueError, match="non-finite"):
        g.revmlp_inverse(p, f, x)


def _numpy_forward(p, f, x):
    """Eqs. (14)-(15) in float64 NumPy (ReLU, no linear block), samples as rows."""
    p = {k: np.asarray(v, np.float64) for k, v in p.items()}
    v1, v2 = np.asarray(f.v1, np.float64), np.asarray(f.v2, np.float64)
    x = np.asarray(x, np.float64)
    h = x.shape[1] // 2
    x1, x2 = x[:, :h], x[:, h:]
    for li in range(v1.shape[0]):
        x1 = x1 + np.maximum(x2 @ v1[li], 0) @ p["w1"][li] + p["b1"][li]
        x2 = x2 + np.maximum(x1 @ v2[li], 0) @ p["w2"][li] + p["b2"][li]
    return np.concatenate([x1, x2], axis=1)


def test_bottleneck_keeps_the_parameter_dtype(key):
    """V is drawn in the net's dtype: a float32 net under x64 and a bfloat16 net have a V of
    their own dtype (it was float64 / float32, and revmlp_apply failed in its scan)."""
    p32, f32 = g.revmlp_init(key, 6, 2, bottleneck=5)
    with jax.enable_x64(True):
        p, f = g.revmlp_init(key, 6, 2, bottleneck=5)
        assert f.v1.dtype == f.v2.dtype == jnp.float32
        # the same numbers as without x64 (committed reproductions depend on them)
        np.testing.assert_array_equal(f.v1, f32.v1)
        np.testing.assert_array_equal(p["w1"], p32["w1"])
        x = jax.random.normal(jax.random.key(1), (4, 6), jnp.float32)
        y = g.revmlp_apply(p, f, x)
        assert y.dtype == jnp.float32
        np.testing.assert_allclose(y, _numpy_forward(p, f, x), rtol=1e-5, atol=1e-5)
    # V ~ N(0, 1/d'): the bfloat16 draw divided by sqrt(5), correctly rounded to bfloat16
    pb, fb = g.revmlp_init(key, 6, 2, bottleneck=5, dtype=jnp.bfloat16)
    assert fb.v1.dtype == fb.v2.dtype == jnp.bfloat16
    z = np.asarray(jax.random.normal(jax.random.split(key, 4)[2], (2, 3, 5), jnp.bfloat16),
                   np.float64)
    rel = np.abs(np.asarray(fb.v1, np.float64) - z / np.sqrt(5.0)) / np.abs(z / np.sqrt(5.0))
    assert rel.max() <= 2.0**-8  # bfloat16 unit roundoff (8 significant bits)
    xb = jax.random.normal(jax.random.key(1), (4, 6), jnp.bfloat16)
    yb = g.revmlp_apply(pb, fb, xb)
    assert yb.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(yb, np.float64), _numpy_forward(pb, fb, xb),
                               rtol=0.05, atol=0.05)


def test_hidden_and_inverse_check_like_apply(key):
    """revmlp_hidden / revmlp_inverse refuse another dtype than the parameters' by name (a
    float64 x went through revmlp_hidden silently, float32 inputs to a float64 net failed in
    the scan), and every function refuses a frozen of another net."""
    p, f = g.revmlp_init(key, 6, 2, bottleneck=5)
    x = jax.random.normal(jax.random.key(1), (4, 6))
    with jax.enable_x64(True):
        for fn, arg in ((g.revmlp_apply, "x"), (g.revmlp_hidden, "x"), (g.revmlp_inverse, "y")):
            with pytest.raises(TypeError, match=rf"^{fn.__name__}: {arg} has dtype float64 but "
                                                r"the parameters are float32"):
                fn(p, f, x.astype(jnp.float64))
        p64, f64 = g.revmlp_init(key, 6, 2, bottleneck=5, dtype=jnp.float64)
        with pytest.raises(TypeError, match=r"^revmlp_hidden: x has dtype float32 but the "
                                            r"parameters are float64"):
            g.revmlp_hidden(p64, f64, x)
        with pytest.raises(TypeError, match=r"^revmlp_apply: frozen.v1 has dtype float64, "
                                            r"wider than the parameters' float32"):
            g.revmlp_apply(p, f64, x)
    _, f7 = g.revmlp_init(key, 6, 2, bottleneck=7)
    with pytest.raises(ValueError, match=r"^revmlp_hidden: frozen.v1 has shape \(2, 3, 7\), "
                                         r"expected \(depth=2, 3, d'=5\)"):
        g.revmlp_hidden(p, f7, x)
    hs = g.revmlp_hidden(p, f, np.asarray(x).tolist())  # lists are converted
    np.testing.assert_allclose(hs[-1], g.revmlp_apply(p, f, x), rtol=1e-6)


def test_rank_bounds_reads_the_width_from_frozen(key):
    """rank_bounds(frozen) takes d' from frozen.v1 (it raised a TypeError with None); the
    bounds are the ranks numpy finds in [σ(x V), 1] for many samples; a contradicting or a
    missing width is named."""
    p, f = g.revmlp_init(key, 6, 2, bottleneck=7, first_linear=True)
    bounds = g.rank_bounds(f, None)
    assert bounds == g.rank_bounds(f, 7) == [4, 8]  # linear: min(h=3, d'=7)+1; ReLU: d'+1
    x2 = np.random.default_rng(0).normal(size=(40, 3))
    ones = np.ones((40, 1))
    v1 = np.asarray(f.v1, np.float64)
    ranks = [np.linalg.matrix_rank(np.hstack([x2 @ v1[0], ones])),
             np.linalg.matrix_rank(np.hstack([np.maximum(x2 @ v1[1], 0), ones]))]
    assert ranks == bounds
    with pytest.raises(ValueError, match=r"^rank_bounds: bottleneck=100 contradicts frozen.v1 "
                                         r"of shape \(2, 3, 7\) \(d' = 7\)"):
        g.rank_bounds(f, 100)
    _, f0 = g.revmlp_init(key, 6, 2)  # no bottleneck: d' = h = 3 is not in frozen
    with pytest.raises(ValueError, match=r"^rank_bounds: a net without bottleneck .* pass "
                                         r"bottleneck=params\['w1'\]\.shape\[1\]"):
        g.rank_bounds(f0)
    assert g.rank_bounds(f0, 3) == [4, 4]
    with pytest.raises(TypeError, match=r"^rank_bounds: bottleneck must be an integer"):
        g.rank_bounds(f0, 2.5)


def test_malformed_params_and_frozen_are_rejected(x64):
    """Only params['w1'] was validated: a wrong b2 was silently broadcast, trained, and
    given a GN step of another shape."""
    params, frozen = g.revmlp_init(jax.random.key(0), 4, 2, bottleneck=6, dtype=jnp.float64)
    x = jnp.ones((3, 4), jnp.float64)
    cases = [
        ({k: v for k, v in params.items() if k != "w2"}, frozen, ValueError,
         r"revmlp_apply: params must have exactly the keys"),
        ({**params, "b2": params["b2"][:, :1]}, frozen, ValueError,
         r"revmlp_apply: params\['b2'\] must have the shape of params\['b1'\] \(2, 2\)"),
        ({**params, "w2": params["w2"][:, :3]}, frozen, ValueError,
         r"revmlp_apply: params\['w2'\] must have the shape of params\['w1'\] \(2, 6, 2\)"),
        ({k: v[:1] for k, v in params.items()}, frozen, ValueError,
         r"revmlp_apply: params\['b1'\] has shape \(1, 2\), expected \(depth=2, h\)"),
        ([params], frozen, TypeError, r"revmlp_apply: params must be the dict"),
        (params, (frozen.v1, frozen.v2), TypeError,
         r"revmlp_apply: frozen must be the RevMLPFrozen"),
    ]
    for p, f, err, msg in cases:
        with pytest.raises(err, match=msg):
            g.revmlp_apply(p, f, x)
    with pytest.raises(ValueError, match=r"gn_direction: params\['b2'\] must have the shape"):
        g.gn_direction({**params, "b2": params["b2"][:, :1]}, frozen, x, x)
    with pytest.raises(ValueError, match=r"revmlp_inverse: params\['w2'\]"):
        g.revmlp_inverse({**params, "w2": params["w2"][:, :3]}, frozen, x)


def test_init_refuses_integer_and_complex_dtypes(key):
    """An integer dtype once reached JAX's random draws ("dtype argument to `uniform` must
    be a float dtype"), naming neither the function nor the argument."""
    for dt in (jnp.int32, jnp.uint8, jnp.complex64):
        name = jnp.dtype(dt).name
        with pytest.raises(TypeError, match=rf"^revmlp_init: dtype must be a floating-point "
                                            rf"dtype .*got {name}\."):
            g.revmlp_init(key, 4, 2, bottleneck=3, dtype=dt)
        with pytest.raises(TypeError, match=rf"^readout_init: dtype must be a floating-point "
                                            rf"dtype .*got {name}\."):
            g.readout_init(key, 4, 2, dtype=dt)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_readout_init_in_half_precision_is_the_float32_readout_rounded(key, dtype):
    """XLA has no half-precision QR: readout_init(..., bfloat16) once failed with a
    NotImplementedError naming nothing.  It is drawn and factored in float32, then cast."""
    P = g.readout_init(key, 12, 5, dtype)
    assert P.dtype == dtype and P.shape == (12, 5)
    np.testing.assert_array_equal(np.asarray(P.astype(jnp.float32)),
                                  np.asarray(g.readout_init(key, 12, 5).astype(dtype)
                                             .astype(jnp.float32)))
    # orthonormal columns to the dtype's precision
    P32 = np.asarray(P.astype(jnp.float32))
    np.testing.assert_allclose(P32.T @ P32, np.eye(5), atol=12 * float(jnp.finfo(dtype).eps))


@pytest.mark.parametrize("init", ["xavier_uniform", "xavier_normal_relu"])
def test_revmlp_init_w_scale_is_traceable(init):
    # jit/vmap over w_scale (a ConcretizationTypeError from its eager check): the eager
    # parameters, to the one rounding of the scale taken in float32; a traced w_scale <= 0
    # gives NaN weights (eagerly: the ValueError)
    key = jax.random.key(3)
    scales = jnp.asarray([0.5, 1.0, 2.0])
    kw = dict(dim=8, depth=2, bottleneck=6, init=init)
    got = jax.vmap(lambda s: g.revmlp_init(key, w_scale=s, **kw)[0])(scales)
    for i, s in enumerate(scales):
        want = g.revmlp_init(key, w_scale=float(s), **kw)[0]
        one = jax.jit(lambda s: g.revmlp_init(key, w_scale=s, **kw)[0])(s)
        for n in want:
            tol = dict(rtol=3e-7, atol=3e-7 * float(jnp.max(jnp.abs(want[n]))))
            np.testing.assert_allclose(got[n][i], want[n], **tol)
            np.testing.assert_allclose(one[n], want[n], **tol)
    bad = jax.jit(lambda s: g.revmlp_init(key, w_scale=s, **kw)[0])(0.0)
    assert bool(jnp.all(jnp.isnan(bad["w1"])))
    with pytest.raises(ValueError, match="w_scale must be a positive factor"):
        g.revmlp_init(key, w_scale=0.0, **kw)


@pytest.mark.parametrize("fn,init", [("revmlp_init", lambda k: g.revmlp_init(k, 4, 2,
                                                                           bottleneck=6)),
                                     ("readout_init", lambda k: g.readout_init(k, 4, 2))])
def test_key_must_be_a_prng_key_typed_or_legacy(fn, init):
    """key=3 (a seed, not a key) gave JAX's "invalid PRNG key data ... Got 3", naming neither
    the function nor the argument; a legacy uint32[2] key gives the typed key's draws."""
    for bad in (3, None, jnp.zeros(2)):
        with pytest.raises(TypeError, match=rf"^{fn}: key must be a PRNG key "
                                            r"\(jax.random.key\(seed\)\), got "):
            init(bad)
    raw = jax.random.PRNGKey(3)
    typed = jax.random.wrap_key_data(raw)
    jax.tree.map(np.testing.assert_array_equal, jax.tree.leaves(init(raw)),
                 jax.tree.leaves(init(typed)))
