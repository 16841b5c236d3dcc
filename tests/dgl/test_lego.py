"""Tests for layerlab.dgl._lego: classifier closed form, monitoring values, DGL layer training."""
import dataclasses
import re
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from layerlab import data, dgl, loop, nets, probes


class State(NamedTuple):
    params: Any


def _task(n=96, d=6, c=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype(np.float32)
    labels = np.argmax(x[:, :c] + 0.3 * rng.normal(size=(n, c)), axis=1)
    y = np.eye(c, dtype=np.float32)[labels] - 1.0 / c
    return jnp.asarray(x), jnp.asarray(y), labels


def test_fit_classifier_is_least_squares(x64):
    x, y, _ = _task()
    x, y = x.astype(jnp.float64), y.astype(jnp.float64)
    p = dgl.fit_classifier(x, y, ridge_rel=0.0)
    Ht = np.concatenate([np.asarray(x), np.ones((x.shape[0], 1))], 1)
    W = np.linalg.lstsq(Ht, np.asarray(y), rcond=None)[0]
    np.testing.assert_allclose(p["w"], W[:-1], rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(p["b"], W[-1], rtol=1e-6, atol=1e-8)


def test_monitor_fn_values(x64):
    x, y, _ = _task()
    x, y = x.astype(jnp.float64), y.astype(jnp.float64)
    params = nets.mlp_init(jax.random.key(1), [6, 16, 16, 3], init="he", b_std=0.1,
                           dtype=jnp.float64)
    state = State(params)
    out = jax.jit(dgl.monitor_fn(x, y, eps_rel=0.1))(state)
    v = dgl.mf_variances(params)
    hs = dgl.hidden_representations(params, x)
    for i in range(3):
        K = np.asarray(dgl.top_kernel(hs[i], w_var=v.w_var[i:], b_var=v.b_var[i:]))
        e = 0.1 * np.mean(np.diag(K))
        B = np.linalg.inv(K + e * np.eye(96))
        want = np.sum((B @ np.asarray(y) / np.diag(B)[:, None]) ** 2) / 96
        np.testing.assert_allclose(out[f"dgl_{i}"], want, rtol=1e-6)
    f = nets.mlp_apply(params, x)
    np.testing.assert_allclose(out["mse"], np.mean(np.sum((f - y) ** 2, 1)), rtol=1e-10)


def test_train_layer_dgl_decreases_loss_and_lego_runs():
    x, y, labels = _task(n=128)
    p0 = nets.mlp_init(jax.random.key(2), [6, 32, 3], init="he")
    v = dgl.mf_variances(p0)
    cfg = dgl.LegoConfig(steps=60, lr=1e-2, batch_size=None, eps_rel=0.05)
    top = dgl.LayerVariances(v.w_var[1:], v.b_var[1:])
    before = float(dgl.layer_dgl(p0[0], x, y, top, eps_rel=0.05))
    params, hists = dgl.lego(jax.random.key(3), p0, x, y, v, cfg, progress=False)
    after = float(dgl.layer_dgl(params[0], x, y, top, eps_rel=0.05))
    assert after < 0.8 * before, (before, after)
    np.testing.assert_allclose(hists[0]["train"]["loss"][0], before, rtol=1e-4)
    acc_lego = float(probes.accuracy(nets.mlp_apply(params, x), labels))
    acc_rand = float(probes.accuracy(nets.mlp_apply(dgl.random_features(p0, x, y), x), labels))
    assert acc_lego >= acc_rand - 0.02



def test_lego_refuses_variances_of_another_depth():
    """``lego`` needs one variance per dense layer of ``params_init``: those of a deeper net
    once gave a wrong top network silently, a shallower net's a depth error from deep inside."""
    x, _, labels = _task(n=24)
    p1 = nets.mlp_init(jax.random.key(0), [6, 8, 3], init="he")
    p3 = nets.mlp_init(jax.random.key(0), [6, 8, 8, 8, 3], init="he")
    cfg = dgl.LegoConfig(steps=1, batch_size=None)
    for params, v, k in ((p1, dgl.mf_variances(p3), 2), (p3, dgl.mf_variances(p1), 4)):
        with pytest.raises(ValueError, match=(
                rf"lego: variances\.w_var and variances\.b_var must be 1-d with "
                rf"len\(params_init\) = {k} entries .* got w_var of shape \({6 - k},\), "
                rf"b_var of shape \({6 - k},\)")):
            dgl.lego(jax.random.key(1), params, x, labels, v, cfg, progress=False)
    v1 = dgl.mf_variances(p1)
    with pytest.raises(ValueError, match=r"b_var of shape \(3,\)"):
        dgl.lego(jax.random.key(1), p1, x, labels,
                 dgl.LayerVariances(v1.w_var, jnp.zeros(3)), cfg, progress=False)


def test_fit_classifier_refuses_integer_labels_and_fits_their_one_hot(x64):
    """Integer labels ``[N]`` were once regressed on as numbers; now refused by name, as in
    ``dgl_loss``.  Their one-hot targets (``data.as_targets``, what ``lego`` builds) give
    numpy's least-squares classifier."""
    x, _, labels = _task(n=24)
    p1 = nets.mlp_init(jax.random.key(0), [6, 8, 3], init="he")
    h = np.asarray(dgl.hidden_representations(p1, x)[-1], np.float64)
    with pytest.raises(ValueError, match=r"fit_classifier: y is an integer array of shape "
                                         r"\(24,\): class labels"):
        dgl.fit_classifier(h, labels)
    with pytest.raises(ValueError, match=r"fit_classifier: y must have one row per row of h "
                                         r"\(24\), got shape \(23, 3\)"):
        dgl.fit_classifier(h, np.eye(3)[labels][:23])
    p = dgl.fit_classifier(jnp.asarray(h), data.as_targets(labels, 3, dtype=jnp.float64),
                           ridge_rel=0.0)
    W = np.linalg.lstsq(np.concatenate([h, np.ones((24, 1))], 1), np.eye(3)[labels],
                        rcond=None)[0]
    np.testing.assert_allclose(p["w"], W[:-1], atol=1e-8)
    np.testing.assert_allclose(p["b"], W[-1], atol=1e-8)


def test_monitor_fn_and_layer_dgl_refuse_negative_eps_rel():
    """A negative ``eps_rel`` once gave all-NaN ``dgl_l`` values silently; ``eps_rel = 0``
    stays allowed (the jitter policy)."""
    x, _, labels = _task(n=24)
    p1 = nets.mlp_init(jax.random.key(0), [6, 8, 3], init="he")
    with pytest.raises(ValueError, match=r"monitor_fn: eps_rel must be >= 0\.0 .*got -0\.05"):
        dgl.monitor_fn(x, labels, eps_rel=-0.05)
    v = dgl.mf_variances(p1)
    with pytest.raises(ValueError, match=r"layer_dgl: eps_rel must be >= 0\.0 .*got -0\.05"):
        jax.jit(lambda p: dgl.layer_dgl(p, x, jax.nn.one_hot(labels, 3), v, eps_rel=-0.05))(
            p1[0])
    out = jax.jit(dgl.monitor_fn(x, labels, eps_rel=0.0))(State(p1))  # eps2 = 0: allowed
    assert all(np.isfinite(float(a)) for a in out.values())


def test_layer_dgl_checks_its_arguments():
    """A layer of the wrong width, integer labels, a non-LayerVariances top or a negative
    variance once failed inside jnp.matmul / top_kernel / dgl_loss (naming those), or gave a
    NaN loss; a vector eps_rel once made a vector "loss"."""
    x, y, labels = _task(n=8)
    p1 = nets.mlp_init(jax.random.key(0), [6, 4, 3], init="he")
    v = dgl.mf_variances(p1)
    for args, kw, exc, what in (
            ((p1[0], x[:, :5], y, v), {}, ValueError,
             r"h_prev must have the layer's d_prev = 6 features .*got shape \(8, 5\)"),
            ((p1[0], x, labels, v), {}, ValueError, r"y is an integer array of shape \(8,\)"),
            ((p1[0], x, y[:7], v), {}, ValueError, r"y must have shape \(N, C\) or \(N,\) "
                                                   r"with N = 8 rows"),
            ((p1[0], x, y, (v.w_var, v.b_var)), {}, TypeError,
             r"top must be a LayerVariances"),
            ((p1[0], x, y, dgl.LayerVariances(v.w_var, -v.b_var - 1.0)), {}, ValueError,
             r"top\.b_var must be >= 0\.0"),
            ((p1[0], x, y, dgl.LayerVariances(v.w_var, v.b_var[:1])), {}, ValueError,
             r"top\.b_var must be 1-d with 2 entries"),
            (({"w": p1[0]["w"]}, x, y, v), {}, TypeError,
             r"layer must be a dict \{'w': \[d_in, d_out\], 'b': \[d_out\]\}, got \['w'\]"),
            ((p1, x, y, v), {}, TypeError, r"layer must be a dict .*got list"),
            (({"w": p1[0]["w"][0], "b": p1[0]["b"]}, x, y, v), {}, ValueError,
             r"layer\['w'\] must have rank 2"),
            ((p1[0], x, y, v), dict(eps_rel=jnp.full(3, 0.05)), ValueError,
             r"eps_rel must be a scalar \(0-d\)")):
        with pytest.raises(exc, match=rf"^layer_dgl: {what}"):
            dgl.layer_dgl(*args, **{"eps_rel": 0.05, **kw})
    # under jit the static checks run at trace time
    with pytest.raises(ValueError, match=r"^layer_dgl: h_prev must have"):
        jax.jit(lambda p: dgl.layer_dgl(p, x[:, :5], y, v, eps_rel=0.05))(p1[0])


def _old_layer_dgl(layer, h_prev, y, w_var, b_var, eps_rel):
    """layer_dgl's formula before the argument checks (e7a38b7): top_kernel on the raw
    variances."""
    h = jax.nn.relu(h_prev @ layer["w"] + layer["b"][None, :])
    K = dgl.top_kernel(h, w_var=w_var, b_var=b_var)
    return dgl.dgl_loss(K, y, eps2=eps_rel * jnp.mean(jnp.diagonal(K))) / h.shape[0]


def test_layer_dgl_and_train_layer_dgl_take_scalar_top_variances():
    """A 0-d top (one layer: the linear classifier alone) was taken before the argument
    checks, as top_kernel takes it (jnp.atleast_1d); the checks once refused it ("top.w_var
    must be 1-d")."""
    x, y, _ = _task(n=16)
    p1 = nets.mlp_init(jax.random.key(0), [6, 4, 3], init="he")
    for top in (dgl.LayerVariances(1.0, 0.0), dgl.LayerVariances(jnp.float32(2.0), 0.1),
                dgl.LayerVariances(jnp.array(1.5), jnp.array([0.2]))):
        got = dgl.layer_dgl(p1[0], x, y, top, eps_rel=0.05)
        want = _old_layer_dgl(p1[0], x, y, top.w_var, top.b_var, 0.05)
        assert got.shape == ()
        np.testing.assert_allclose(got, want, rtol=1e-6)
    cfg = dgl.LegoConfig(steps=3, lr=1e-2, batch_size=None, eps_rel=0.05)
    p_s, h_s = dgl.train_layer_dgl(jax.random.key(1), p1[0], x, y,
                                   dgl.LayerVariances(1.0, 0.0), cfg, progress=False)
    p_v, h_v = dgl.train_layer_dgl(jax.random.key(1), p1[0], x, y,
                                   dgl.LayerVariances(jnp.array([1.0]), jnp.array([0.0])),
                                   cfg, progress=False)
    np.testing.assert_array_equal(h_s["train"]["loss"], h_v["train"]["loss"])
    for k in ("w", "b"):
        np.testing.assert_array_equal(p_s[k], p_v[k])
    # a scalar never worked in fit_variances or lego: still the 1-d rule there
    with pytest.raises(ValueError, match=r"^fit_variances: init\.w_var must be 1-d with at "
                                         r"least one entry .*got shape \(\)"):
        dgl.fit_variances(x, x @ x.T, dgl.LayerVariances(1.0, 0.0))
    with pytest.raises(ValueError, match=r"^lego: variances\.w_var and variances\.b_var must "
                                         r"be 1-d"):
        dgl.lego(jax.random.key(1), p1, x, y,
                 dgl.LayerVariances(1.0, 0.0), cfg, progress=False)
    # lengths must still agree
    with pytest.raises(ValueError, match=r"^layer_dgl: top\.b_var must be 1-d with 1 entry "
                                         r"\(one variance per dense layer\), got shape "
                                         r"\(2,\)"):
        dgl.layer_dgl(p1[0], x, y, dgl.LayerVariances(1.0, jnp.zeros(2)), eps_rel=0.05)


def test_train_layer_dgl_checks_its_arguments_naming_itself():
    """Its input errors once named layer_dgl (the checks ran only inside the loss, while fit
    compiled it); now they run once before training, naming train_layer_dgl."""
    x, y, labels = _task(n=8)
    p1 = nets.mlp_init(jax.random.key(0), [6, 4, 3], init="he")
    v = dgl.mf_variances(p1)
    top = dgl.LayerVariances(v.w_var[1:], v.b_var[1:])
    cfg = dgl.LegoConfig(steps=1, batch_size=None)
    key = jax.random.key(1)
    for args, exc, what in (
            ((p1, x, y, top, cfg), TypeError, r"layer must be a dict .*got list"),
            ((p1[0], x[:, :5], y, top, cfg), ValueError,
             r"h_prev must have the layer's d_prev = 6 features .*got shape \(8, 5\)"),
            ((p1[0], x, labels, top, cfg), ValueError, r"y is an integer array of shape \(8,\)"),
            ((p1[0], x, y[:7], top, cfg), ValueError, r"y must have shape \(N, C\) or \(N,\)"),
            ((p1[0], x, y, (top.w_var, top.b_var), cfg), TypeError,
             r"top must be a LayerVariances"),
            ((p1[0], x, y, dgl.LayerVariances(top.w_var, -top.b_var - 1.0), cfg), ValueError,
             r"top\.b_var must be >= 0\.0"),
            ((p1[0], x, y, top, {"steps": 1}), TypeError, r"cfg must be a LegoConfig")):
        with pytest.raises(exc, match=rf"^train_layer_dgl: {what}"):
            dgl.train_layer_dgl(key, *args, progress=False)


def test_lego_checks_key_params_width_and_variance_values():
    """An int key, params that are no MLP, inputs of the wrong width (a matmul error deep in
    the first layer's loop) and negative variances (a NaN loss after compiling) are refused
    by lego before any training."""
    x, y, labels = _task(n=8)
    p1 = nets.mlp_init(jax.random.key(0), [6, 4, 3], init="he")
    v = dgl.mf_variances(p1)
    cfg = dgl.LegoConfig(steps=1, batch_size=None)
    key = jax.random.key(1)
    for args, exc, what in (
            ((0, p1, x, labels, v), TypeError, r"key must be a PRNG key"),
            ((key, p1[0], x, labels, v), TypeError, r"params_init must be a list of layers"),
            ((key, [p1[1], p1[0]], x, labels, v), ValueError,
             r"params_init\[1\]\['w'\] has d_in = 6 rows but params_init\[0\]\['w'\] has "
             r"d_out = 3 columns"),
            ((key, p1, x[:, :5], labels, v), ValueError,
             r"x must have the net's d_in = 6 features .*got shape \(8, 5\)"),
            ((key, p1, x, labels, dgl.LayerVariances(v.w_var.at[1].set(-1.0), v.b_var)),
             ValueError, r"variances\.w_var must be >= 0\.0"),
            ((key, p1, x, labels, dgl.LayerVariances(v.w_var, v.b_var.at[0].set(jnp.inf))),
             ValueError, r"variances\.b_var must be finite")):
        with pytest.raises(exc, match=rf"^lego: {what}"):
            dgl.lego(*args, cfg, progress=False)


def _ridge_ref(h, y, ridge_rel=1e-4):
    """fit_classifier's closed form in float64 numpy."""
    h, y = np.asarray(h, np.float64), np.asarray(y, np.float64)
    Ht = np.concatenate([h, np.ones((h.shape[0], 1))], 1)
    lam = ridge_rel * (h**2).sum() / h.shape[1] + 1e-12
    W = np.linalg.solve(Ht.T @ Ht + lam * np.eye(Ht.shape[1]), Ht.T @ y)
    return W[:-1], W[-1]


@pytest.mark.parametrize("hdt, ydt", [(np.uint8, np.float32), (np.int32, np.float32),
                                       (jnp.bfloat16, jnp.bfloat16), (jnp.float16, np.float32)])
def test_fit_classifier_promotes_integer_and_half_precision_features(hdt, ydt):
    """uint8 features wrapped in H^T H (w off by 1e3x); bfloat16/float16 reached LAPACK
    ('NotImplementedError: Unsupported dtype bfloat16') or overflowed in float16."""
    rng = np.random.default_rng(0)
    h8 = rng.integers(0, 256, (40, 8))
    h = h8 if np.issubdtype(hdt, np.integer) else h8 / 255
    y = np.eye(3)[rng.integers(0, 3, 40)]
    h, y = jnp.asarray(np.asarray(h, np.float64), hdt), jnp.asarray(y, ydt)
    p = dgl.fit_classifier(h, y)
    assert p["w"].dtype == jnp.float32 and p["b"].dtype == jnp.float32
    w_ref, b_ref = _ridge_ref(h.astype(jnp.float32), y.astype(jnp.float32))
    np.testing.assert_allclose(np.asarray(p["w"]), w_ref, rtol=1e-3,
                               atol=1e-3 * np.abs(w_ref).max())
    np.testing.assert_allclose(np.asarray(p["b"]), b_ref, rtol=1e-3,
                               atol=1e-3 * np.abs(b_ref).max())


def test_float16_lego_trains_with_a_larger_adam_eps():
    """float16 LEGO always failed: AdamW's eps (optax's 1e-8) is 0 in float16 and the first
    update divided by zero; LegoConfig had no eps option."""
    x, _, labels = _task(n=32)
    p0 = nets.mlp_init(jax.random.key(0), [6, 8, 3], dtype=jnp.float16)
    x16 = x.astype(jnp.float16)
    with pytest.raises(ValueError, match=r"LegoConfig: adam_eps must be >= 0.0"):
        dgl.LegoConfig(adam_eps=-1.0)
    cfg = dgl.LegoConfig(steps=4, batch_size=None)
    assert cfg.adam_eps == 1e-8  # optax's default: float32 results unchanged
    with pytest.raises(loop.NonFiniteError, match=r"LegoConfig\(adam_eps=1e-4\)"):
        dgl.lego(jax.random.key(1), p0, x16, labels, dgl.mf_variances(p0), cfg, progress=False)
    cfg = dgl.LegoConfig(steps=4, batch_size=None, adam_eps=1e-4)
    params, hists = dgl.lego(jax.random.key(1), p0, x16, labels, dgl.mf_variances(p0), cfg,
                             progress=False)
    assert params[0]["w"].dtype == jnp.float16
    assert np.isfinite(hists[0]["train"]["loss"]).all()
    assert all(bool(jnp.isfinite(a).all()) for a in jax.tree_util.tree_leaves(params))


def test_layer_dgl_traced_negative_eps_rel_gives_nan():
    """Under jit a traced eps_rel cannot raise: a negative one gives NaN (it gave a finite
    wrong loss); a valid one the eager value."""
    x, y, _ = _task(n=16)
    p1 = nets.mlp_init(jax.random.key(0), [6, 4, 3], init="he")
    v = dgl.mf_variances(p1)
    top = dgl.LayerVariances(v.w_var[1:], v.b_var[1:])
    f = jax.jit(lambda e: dgl.layer_dgl(p1[0], x, y, top, eps_rel=e))
    assert bool(jnp.isnan(f(-0.05)))
    np.testing.assert_allclose(f(0.05), dgl.layer_dgl(p1[0], x, y, top, eps_rel=0.05),
                               rtol=1e-6)


def test_classifier_stage_checks_ridge_params_and_inputs():
    """fit_classifier once fitted with a negative ridge_rel (a finite wrong classifier), met a
    vector one with a broadcasting error and NaN features with a NaN classifier;
    random_features met a malformed net with an AttributeError and a transposed x with "y
    must have 4 rows"; monitor_fn met a vector eps_rel with dgl_loss's "eps2".  Each now
    names the function and the argument, before any computation."""
    x = np.ones((12, 4), np.float32)
    y = np.eye(2, dtype=np.float32)[np.arange(12) % 2]
    p0 = [{"w": np.ones((4, 3), np.float32), "b": np.zeros(3, np.float32)},
          {"w": np.ones((3, 2), np.float32), "b": np.zeros(2, np.float32)}]
    cases = [
        (lambda: dgl.fit_classifier(x, y, ridge_rel=-1.0),
         r"^fit_classifier: ridge_rel must be >= 0\.0 .*got -1\.0"),
        (lambda: dgl.fit_classifier(x, y, ridge_rel=np.ones(2)),
         r"^fit_classifier: ridge_rel must be a scalar \(0-d\), got shape \(2,\)"),
        (lambda: dgl.fit_classifier(np.where(x > 0, np.nan, x), y),
         r"^fit_classifier: h .*(NaN|finite)"),
        (lambda: dgl.random_features(p0, x, y, ridge_rel=-1.0),
         r"^random_features: ridge_rel must be >= 0\.0"),
        (lambda: dgl.random_features(p0, x.T, np.arange(12) % 2),
         r"^random_features: x must have the net's d_in = 4 features .*got shape \(4, 12\)"),
        (lambda: dgl.random_features([{"w": 1}], x, y), r"^random_features: params_init\[0\]"),
        (lambda: dgl.monitor_fn(x, y, eps_rel=np.ones(2)),
         r"^monitor_fn: eps_rel must be a scalar \(0-d\)"),
    ]
    for f, msg in cases:
        with pytest.raises((ValueError, TypeError), match=msg):
            f()


def test_train_end_to_end_checks_x_against_the_net():
    """A transposed x once met "y must have 4 rows" (the message blamed y); x's width is
    checked against the net first now."""
    p0 = [{"w": np.ones((4, 2), np.float32), "b": np.zeros(2, np.float32)}]
    x = np.ones((12, 4), np.float32)
    with pytest.raises(ValueError, match=r"^train_end_to_end: x must have the net's d_in = 4 "
                                         r"features .*got shape \(4, 12\)"):
        dgl.train_end_to_end(jax.random.key(0), p0, x.T, np.arange(12) % 2,
                             optimizer=None, steps=1, progress=False)


def test_traced_negative_ridge_gives_nan_and_monitor_checks_variance_when_built():
    """Under the caller's jit a negative ``ridge_rel`` gave a finite wrong classifier (the eager
    check cannot see it); ``monitor_fn(variance="no")`` was accepted and failed at its first
    evaluation, mid-training, naming dgl_loss."""
    h = jax.random.normal(jax.random.key(0), (12, 4))
    y = jax.nn.one_hot(jnp.arange(12) % 3, 3)
    fit = jax.jit(lambda r: dgl.fit_classifier(h, y, ridge_rel=r))
    assert bool(jnp.all(jnp.isfinite(fit(0.1)["w"])))
    assert bool(jnp.all(jnp.isnan(fit(-1.0)["w"])))
    with pytest.raises(TypeError, match="monitor_fn: variance"):
        dgl.monitor_fn(h, y, eps_rel=0.1, variance="no")


def _counting_fit(monkeypatch, stop_at=None):
    """Wrap ``_lego.fit`` so each call's chunk ends ``[(desc, t)]`` are recorded (a finished run
    restored from its checkpoint runs no chunk); ``stop_at=(desc, t)`` raises
    ``KeyboardInterrupt`` after that chunk (and its checkpoint), as a killed run stops."""
    from layerlab.dgl import _lego

    ends: list[tuple[str, int]] = []
    real = loop.fit  # not _lego.fit: that may be an earlier wrapper

    def fit(*args, desc, **kw):
        ends.append((desc, -1))  # the call itself

        def callback(t, state, metrics):
            ends.append((desc, int(t)))
            if (desc, int(t)) == stop_at:
                raise KeyboardInterrupt

        return real(*args, desc=desc, callback=callback, **kw)

    monkeypatch.setattr(_lego, "fit", fit)
    return ends


def _lego_problem():
    """A tiny 2-ReLU-layer LEGO run with mini-batches (so the per-layer keys matter)."""
    x, _, labels = _task(n=24, d=5)
    p0 = nets.mlp_init(jax.random.key(4), [5, 6, 4, 3], init="he")
    cfg = dgl.LegoConfig(steps=4, lr=1e-2, batch_size=8, eps_rel=0.1)
    return jax.random.key(5), p0, x, labels, dgl.mf_variances(p0), cfg


def test_lego_resumes_an_interrupted_run_to_the_uninterrupted_result(tmp_path, monkeypatch):
    """Stopped inside layer 2 (after its step-2 checkpoint), a rerun restores layer 1 without
    training it, continues layer 2 from step 2 with its AdamW state and returns exactly the
    params and histories of an uninterrupted run without checkpoints."""
    key, p0, x, labels, v, cfg = _lego_problem()
    want, want_h = dgl.lego(key, p0, x, labels, v, cfg, progress=False)
    kw = dict(progress=False, checkpoint_dir=tmp_path / "ck", checkpoint_every=2)
    _counting_fit(monkeypatch, stop_at=("DGL layer 2/2", 2))
    with pytest.raises(KeyboardInterrupt):
        dgl.lego(key, p0, x, labels, v, cfg, **kw)
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["layer_1", "layer_2"]
    ends = _counting_fit(monkeypatch)
    got, got_h = dgl.lego(key, p0, x, labels, v, cfg, **kw)
    # layer 1: called, no chunk run; layer 2: only its steps 3-4
    assert ends[:2] == [("DGL layer 1/2", -1), ("DGL layer 2/2", -1)], ends
    assert [t for _, t in ends[2:]] in ([4], [3, 4]), ends
    for a, b in zip(jax.tree_util.tree_leaves(want), jax.tree_util.tree_leaves(got),
                    strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    for hw, hg in zip(want_h, got_h, strict=True):
        np.testing.assert_array_equal(hw["step"], hg["step"])
        np.testing.assert_array_equal(hw["train"]["loss"], hg["train"]["loss"])
    # a third call: every layer finished, nothing trains, the same result
    ends = _counting_fit(monkeypatch)
    again, _ = dgl.lego(key, p0, x, labels, v, cfg, **kw)
    assert ends == [("DGL layer 1/2", -1), ("DGL layer 2/2", -1)], ends
    np.testing.assert_array_equal(np.asarray(again[1]["w"]), np.asarray(want[1]["w"]))


def test_lego_refuses_the_checkpoint_of_another_run(tmp_path):
    """A checkpoint_dir written with another cfg, params_init, data shape or key is refused
    before training (naming checkpoint_dir and the layer), never reused."""
    key, p0, x, labels, v, cfg = _lego_problem()
    cfg = dataclasses.replace(cfg, steps=2)
    ck = tmp_path / "ck"
    dgl.lego(key, p0, x, labels, v, cfg, progress=False, checkpoint_dir=ck)
    p_other = nets.mlp_init(jax.random.key(9), [5, 6, 4, 3], init="he")
    for what, args in (
            ("cfg", (key, p0, x, labels, v, dataclasses.replace(cfg, lr=2e-2))),
            ("cfg.ridge_rel", (key, p0, x, labels, v, dataclasses.replace(cfg, ridge_rel=0.1))),
            ("params_init", (key, p_other, x, labels, v, cfg)),
            ("data shape", (key, p0, x[:16], labels[:16], v, cfg)),
            ("key", (jax.random.key(6), p0, x, labels, v, cfg))):
        with pytest.raises(loop.CheckpointMismatchError,
                           match=rf"^lego: checkpoint_dir {re.escape(str(ck))} holds the "
                                 r"checkpoints of another LEGO run \(layer 1 of 2 differs"):
            dgl.lego(*args, progress=False, checkpoint_dir=ck)
    # the same run still resumes (finished: returned as it was)
    dgl.lego(key, p0, x, labels, v, cfg, progress=False, checkpoint_dir=ck)


def test_lego_and_train_layer_dgl_check_the_checkpoint_arguments(tmp_path):
    key, p0, x, labels, v, cfg = _lego_problem()
    y = data.as_targets(labels, 3)
    top = dgl.LayerVariances(v.w_var[1:], v.b_var[1:])
    calls = {"lego": lambda **kw: dgl.lego(key, p0, x, labels, v, cfg, progress=False, **kw),
             "train_layer_dgl": lambda **kw: dgl.train_layer_dgl(key, p0[0], x, y, top, cfg,
                                                                 progress=False, **kw)}
    for fn, call in calls.items():
        for kw, exc, what in (
                (dict(checkpoint_dir=tmp_path, checkpoint_every=0), ValueError,
                 r"checkpoint_every must be >= 1, got 0"),
                (dict(checkpoint_dir=tmp_path, checkpoint_every=1.5), TypeError,
                 r"checkpoint_every must be an integer"),
                (dict(checkpoint_dir=tmp_path, checkpoint_every=True), TypeError,
                 r"checkpoint_every must be an integer"),
                (dict(checkpoint_every=2), ValueError,
                 r"checkpoint_every=2 given without checkpoint_dir"),
                (dict(checkpoint_dir=3), TypeError,
                 r"checkpoint_dir must be a path \(str or os.PathLike of a str\), got int"),
                (dict(checkpoint_dir=b"ck"), TypeError,
                 r"checkpoint_dir must be a path .*got bytes \(decode it first"),
                # "" was taken as the current directory (lego: ./layer_1)
                (dict(checkpoint_dir=""), ValueError, r"checkpoint_dir is empty")):
            with pytest.raises(exc, match=rf"^{fn}: {what}"):
                call(**kw)
    assert not any(tmp_path.iterdir())  # refused before anything was written
