"""Tests for layerlab.nets (mlp_init, mlp_apply) against a numpy forward pass."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from layerlab import nets


def _np_forward(params, x, act):
    h = np.asarray(x, np.float64)
    hidden = []
    for layer in params[:-1]:
        h = act(h @ np.asarray(layer["w"], np.float64) + np.asarray(layer["b"], np.float64))
        hidden.append(h)
    return h @ np.asarray(params[-1]["w"], np.float64) + np.asarray(params[-1]["b"]), hidden


def test_mlp_apply_matches_numpy(key):
    params = nets.mlp_init(key, [6, 7, 5, 3], b_std=0.3)
    x = jax.random.normal(jax.random.fold_in(key, 1), (4, 6))
    out, hidden = nets.mlp_apply(params, x, return_hidden=True)
    ref, ref_hidden = _np_forward(params, x, lambda z: np.maximum(z, 0.0))
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    assert len(hidden) == 2
    for h, r in zip(hidden, ref_hidden):
        np.testing.assert_allclose(h, r, rtol=1e-5, atol=1e-5)
    out_tanh = nets.mlp_apply(params, x, activation=jnp.tanh)
    np.testing.assert_allclose(out_tanh, _np_forward(params, x, np.tanh)[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "init,w_std,expect",
    [("glorot", None, lambda i, o: np.sqrt(2 / (i + o))), ("he", None, lambda i, o: np.sqrt(2 / i)),
     ("ntk", 1.5, lambda i, o: 1.5 / np.sqrt(i)), ("normal", 0.2, lambda i, o: 0.2),
     ("lecun", None, lambda i, o: np.sqrt(1 / i))],
)
def test_mlp_init_weight_std(key, init, w_std, expect):
    params = nets.mlp_init(key, [400, 300, 200], init=init, w_std=w_std)
    for layer, (i, o) in zip(params, [(400, 300), (300, 200)]):
        assert layer["w"].shape == (i, o) and layer["b"].shape == (o,)
        # empirical std of 1e5 Gaussian entries: relative error ~ 1/sqrt(2*1e5)
        np.testing.assert_allclose(np.std(np.asarray(layer["w"])), expect(i, o), rtol=0.02)
        assert abs(float(np.mean(np.asarray(layer["w"])))) < 0.01 * expect(i, o) * 10
        np.testing.assert_array_equal(layer["b"], 0.0)
    pb = nets.mlp_init(key, [400, 3000], b_std=0.5)
    np.testing.assert_allclose(np.std(np.asarray(pb[0]["b"])), 0.5, rtol=0.05)


def test_mlp_vmap_and_errors(key):
    params = nets.mlp_init(key, [3, 4, 2])
    x = jax.random.normal(key, (5, 3))
    per_example = jax.vmap(lambda xi: nets.mlp_apply(params, xi))(x)
    np.testing.assert_allclose(per_example, nets.mlp_apply(params, x), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="features"):
        nets.mlp_apply(params, jnp.ones((5, 4)))
    with pytest.raises(ValueError, match="sizes"):
        nets.mlp_init(key, [3])
    with pytest.raises(ValueError, match="unknown init"):
        nets.mlp_init(key, [3, 2], init="xavier")
    with pytest.raises(ValueError, match="w_std"):
        nets.mlp_init(key, [3, 2], init="normal")
    with pytest.raises(TypeError, match=r"sizes\[1\] must be an integer, got float 64.7"):
        nets.mlp_init(key, [4, 64.7, 2])  # was silently a 64-wide layer
    with pytest.raises(TypeError, match=r"sizes\[0\] must be an integer"):
        nets.mlp_init(key, [True, 2])
    with pytest.raises(ValueError, match="w_std must be finite"):
        nets.mlp_init(key, [3, 2], w_std=float("nan"))  # was NaN parameters
    assert [p["w"].shape for p in nets.mlp_init(key, [np.int64(3), 2])] == [(3, 2)]
    # a bfloat16 scale is a number (it is no numpy number: it was a TypeError)
    w16 = nets.mlp_init(key, [3, 2], w_std=jnp.bfloat16(2.0), b_std=jnp.bfloat16(0.0))
    np.testing.assert_array_equal(w16[0]["w"], nets.mlp_init(key, [3, 2], w_std=2.0)[0]["w"])


def test_mlp_apply_checks_every_hand_built_layer_naming_it(key):
    """Layer 0's w rank and every bias were unchecked: a 1-D w gave a silently wrong shape
    (6,), a bias of the wrong length a raw broadcasting error.  Checked under jit too."""
    p = nets.mlp_init(key, [4, 3, 2])
    x = jnp.ones((6, 4))
    bad = {
        r"params\[0\]\['w'\] \(layer 0\) must have rank 2, got shape \(4,\)":
            [{"w": jnp.ones(4), "b": jnp.ones(())}],
        r"params\[0\]\['b'\] \(layer 0\) must have d_out = 3 .* got shape \(5,\)":
            [{"w": p[0]["w"], "b": jnp.ones(5)}, p[1]],
        r"params\[1\]\['b'\] \(layer 1\) must have d_out = 2 .* got shape \(3,\)":
            [p[0], {"w": p[1]["w"], "b": jnp.ones(3)}],
        r"params\[1\]\['b'\] \(layer 1\) must have rank 1":
            [p[0], {"w": p[1]["w"], "b": jnp.ones((1, 2))}],
    }
    for msg, params in bad.items():
        for f in (nets.mlp_apply, jax.jit(nets.mlp_apply)):
            with pytest.raises(ValueError, match="^mlp_apply: " + msg):
                f(params, x)
    with pytest.raises(TypeError, match=r"^mlp_apply: params\[1\] \(layer 1\) must be a dict"):
        nets.mlp_apply([p[0], (p[1]["w"], p[1]["b"])], x)
    with pytest.raises(ValueError, match="^mlp_init: key is raw key data of shape \\(3,\\)"):
        nets.mlp_init(jnp.array([1, 2, 3], jnp.uint32), [4, 3])


def test_mlp_init_errors_name_mlp_init_and_the_argument(key):
    """A list b_std (a raw float() error), an int key (JAX's "invalid PRNG key data"), an
    integer dtype (JAX's normal-dtype error) are reported by mlp_init itself."""
    for exc, arg, kw in [
        (ValueError, "b_std must be a scalar", dict(b_std=[0.1, 0.2])),
        (ValueError, "w_std must be a scalar", dict(w_std=np.array([1.0, 2.0]))),
        (TypeError, r"key must be a PRNG key \(jax.random.key\(seed\)\), got int 0",
         dict(key=0)),
        (TypeError, "key must be a PRNG key", dict(key=None)),
        (ValueError, r"key must be a single PRNG key, got a key array of shape \(2,\)",
         dict(key=jax.random.split(key))),
        (TypeError, "dtype must be a floating-point dtype.*int32", dict(dtype=jnp.int32)),
        (TypeError, "dtype must be a floating-point dtype.*'abc'", dict(dtype="abc")),
    ]:
        k = kw.pop("key", key)
        with pytest.raises(exc, match="^mlp_init: " + arg):
            nets.mlp_init(k, [3, 2], **kw)
    # still accepted: a raw uint32 key (the same draws as its typed wrapper), bfloat16, and
    # a key vmapped over
    raw = jax.random.PRNGKey(0)
    np.testing.assert_array_equal(nets.mlp_init(raw, [3, 2])[0]["w"],
                                  nets.mlp_init(jax.random.wrap_key_data(raw), [3, 2])[0]["w"])
    assert nets.mlp_init(key, [3, 2], dtype=jnp.bfloat16)[0]["w"].dtype == jnp.bfloat16
    stacked = jax.vmap(lambda k: nets.mlp_init(k, [3, 2]))(jax.random.split(key, 4))
    assert stacked[0]["w"].shape == (4, 3, 2)


def test_mlp_init_torch_is_pytorchs_linear_default(key):
    """init="torch": W, b ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (torch.nn.Linear's
    reset_parameters: kaiming_uniform with a = sqrt 5 gives that bound), checked by the bounds,
    the uniform law's std bound/sqrt(3) and its flat histogram."""
    params = nets.mlp_init(key, [400, 300, 200], init="torch")
    for layer, fan_in in zip(params, (400, 300)):
        c = 1 / np.sqrt(fan_in)
        w, b = np.asarray(layer["w"]), np.asarray(layer["b"])
        assert np.abs(w).max() <= c and np.abs(b).max() <= c and np.abs(w).max() > 0.99 * c
        np.testing.assert_allclose(np.std(w), c / np.sqrt(3), rtol=0.02)
        hist, _ = np.histogram(w, bins=10, range=(-c, c))
        np.testing.assert_allclose(hist / w.size, 0.1, atol=0.01)
        assert b.std() > 0.4 * c / np.sqrt(3)  # biases drawn, not zero
    w2 = nets.mlp_init(key, [400, 300], init="torch", w_std=2.0)[0]["w"]
    np.testing.assert_allclose(np.asarray(w2), 2 * np.asarray(params[0]["w"]), rtol=1e-6)
    with pytest.raises(ValueError, match="b_std"):
        nets.mlp_init(key, [3, 2], init="torch", b_std=0.1)


@pytest.mark.parametrize("init,w_std,b_std", [("he", None, 0.0), ("glorot", 1.5, 0.3),
                                              ("normal", 0.7, 0.1)])
def test_mlp_init_draws_equal_the_eager_draws_bit_for_bit(key, init, w_std, b_std):
    # mlp_init compiles as one program; its draws must stay the bits of the eager route
    # (split per layer, then std * normal), which the committed records were initialised with
    sizes = [7, 5, 3]
    params = nets.mlp_init(key, sizes, init=init, w_std=w_std, b_std=b_std)
    for k, d_in, d_out, p in zip(jax.random.split(key, 2), sizes[:-1], sizes[1:], params):
        kw, kb = jax.random.split(k)
        std = nets._weight_std(init, d_in, d_out, w_std)
        np.testing.assert_array_equal(p["w"], std * jax.random.normal(kw, (d_in, d_out)))
        want_b = b_std * jax.random.normal(kb, (d_out,)) if b_std else np.zeros(d_out)
        np.testing.assert_array_equal(p["b"], want_b)


def test_mlp_init_scales_are_traceable(key):
    # jit/vmap over w_std and b_std (a ConcretizationTypeError when they were static
    # arguments of the compiled draws): the eager calls' parameters, to the one rounding of
    # the per-layer std taken in float32 instead of Python floats
    sizes = [4, 8, 2]
    inits = ("glorot", "he", "ntk", "normal", "torch")
    scales = np.array([0.25, 0.5, 1.0, 1 / np.sqrt(3), 2.0], np.float32)
    b_scales = np.array([0.0, 0.1, 0.5], np.float32)

    def draws(s):  # every init at one traced weight scale, and both scales traced at once
        out = {init: nets.mlp_init(key, sizes, init=init, w_std=s) for init in inits}
        out["both"] = nets.mlp_init(key, sizes, w_std=s, b_std=s)
        return out

    # vmap (under jit) and jit, each one program for every init (eagerly, each init's
    # batched draws and the scale arithmetic compiled apart: ~40 programs)
    got = jax.device_get(jax.jit(jax.vmap(draws))(scales))
    jitted = jax.jit(draws)
    for i, s in enumerate(scales):
        one = jax.device_get(jitted(s))
        for init in inits:
            want = jax.device_get(nets.mlp_init(key, sizes, init=init, w_std=float(s)))
            for lw, lg, lj in zip(want, got[init], one[init]):
                # (torch: w = u 2a - a, the std's rounding is absolute there)
                tol = dict(rtol=3e-7, atol=3e-7 * float(np.max(np.abs(lw["w"]))))
                np.testing.assert_allclose(lg["w"][i], lw["w"], **tol)
                np.testing.assert_allclose(lj["w"], lw["w"], **tol)
                np.testing.assert_array_equal(lj["b"], lw["b"])
    # (eager vmap: inside a jit the weights' draws may round differently in the last bit)
    got_b = jax.device_get(jax.vmap(lambda s: nets.mlp_init(key, sizes, b_std=s))(b_scales))
    for i, s in enumerate(b_scales):
        want = jax.device_get(nets.mlp_init(key, sizes, b_std=float(s)))
        for lw, lg in zip(want, got_b):
            np.testing.assert_array_equal(lg["w"][i], lw["w"])
            np.testing.assert_allclose(lg["b"][i], lw["b"], rtol=3e-7, atol=0)
    # a traced invalid scale cannot raise: NaN parameters, not a finite wrong init
    bad = jax.device_get(jitted(np.float32(-1.0)))
    assert all(np.all(np.isnan(layer["w"])) for init in bad for layer in bad[init])
    assert all(np.all(np.isnan(layer["b"])) for layer in bad["both"])
    with pytest.raises(ValueError, match="b_std must be 0"):
        jax.jit(lambda s: nets.mlp_init(key, sizes, init="torch", b_std=s))(0.0)


def test_mlp_init_compiles_once_for_a_sweep_of_scales(key):
    # the scales are arguments of the compiled draws, not constants in them: a sweep over
    # Python-float scales reuses one program (it compiled one per value)
    sizes = [5, 11, 3]
    nets.mlp_init(key, sizes, w_std=0.3)
    before = nets._mlp_init._cache_size()
    for s in np.linspace(0.5, 1.5, 10):
        nets.mlp_init(key, sizes, w_std=float(s))
    nets.mlp_init(key, sizes)  # the default rule (w_std=None) too
    assert nets._mlp_init._cache_size() == before
