"""Tests for layerlab.gnrev._steps: GN training dynamics (eqs. 5, 11; Theorem 4.3)."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.flatten_util import ravel_pytree

import layerlab.gnrev as g


def _problem(dtype, n=6, d=8, dp=10, depth=2, C=3, activation=jnp.tanh):
    p, f = g.revmlp_init(jax.random.key(0), d, depth, bottleneck=dp, activation=activation,
                         dtype=dtype)
    P = g.readout_init(jax.random.key(1), d, C, dtype=dtype)
    x = jax.random.normal(jax.random.key(2), (n, d), dtype)
    y = jax.random.normal(jax.random.key(3), (n, C), dtype)
    return p, f, P, x, y


@pytest.mark.filterwarnings("ignore::layerlab.gnrev.GramFloorWarning")  # requests below the floor
def test_small_lr_trajectory_matches_dense_moore_penrose_gn(x64):
    """(c) Theorem 4.3: layer-wise right inverse and dense J⁺ (eq. 5) agree to O(α)."""
    p, f, P, x, yt = _problem(jnp.float64)
    th0, unravel = ravel_pytree(p)

    def logits(th):
        return g.revmlp_logits(unravel(th), f, P, x)

    def dense_step(th, a):
        J = jax.jacfwd(lambda t: logits(t).ravel())(th)
        return th - a * jnp.linalg.pinv(J, rtol=1e-12) @ (logits(th) - yt).ravel()

    ts = g.gn_step(f, P, loss="mse", pinv=g.PinvConfig(rtol=1e-10, atol=1e-12))

    @jax.jit
    def run(a, k):
        def body(i, c):
            th, st = c
            st, _ = ts.step(st, (x, yt), jax.random.key(0))
            return dense_step(th, a), st

        st0 = ts.init(p, {"learning_rate": a, "weight_decay": jnp.zeros_like(a)})
        th, st = jax.lax.fori_loop(0, k, body, (th0, st0))
        return (g.loss_value(logits(th), yt, loss="mse"),
                g.loss_value(logits(ravel_pytree(st.params)[0]), yt, loss="mse"))

    l0 = float(g.loss_value(logits(th0), yt, loss="mse"))
    errs = []
    for a in (0.2, 0.1, 0.05):  # same function-space time T = k α = 1
        ld, ll = run(jnp.asarray(a), int(round(1 / a)))
        errs.append(abs(float(ld) - float(ll)))
        # both follow the function-space flow f - y ∝ e^{-t}: loss(T=1) ≈ e^{-2} l0
        assert abs(float(ll) - np.exp(-2) * l0) < 0.6 * a * l0
    assert errs[0] > 1e-4  # the two methods really differ at finite α ...
    r1, r2 = errs[0] / errs[1], errs[1] / errs[2]
    assert 1.6 < r1 < 2.5 and 1.6 < r2 < 2.5, errs  # ... by O(α)


@pytest.mark.filterwarnings("ignore::layerlab.gnrev.GramFloorWarning")  # requests below the floor
def test_full_batch_gn_contracts_loss_by_one_minus_alpha_squared():
    """(d) eq. 11: with an exact right inverse f − y ← (1 − α)(f − y), loss ratio (1 − α)²."""
    # ReLU features: with tanh and small pre-activations σ(xV) is nearly linear in x, so
    # [σ(xV), 1] has numerical rank ~ d/2 + 1 < n and the step cannot be exact.
    p, f, P, x, yt = _problem(jnp.float32, n=16, d=8, dp=48, depth=2, C=4,
                              activation=jax.nn.relu)
    alpha = 0.1
    ts = g.gn_step(f, P, loss="mse", learning_rate=alpha, pinv=g.PinvConfig(rtol=1e-4))

    @jax.jit
    def run(st):
        return jax.lax.scan(lambda s, _: ts.step(s, (x, yt), jax.random.key(0)), st, None,
                            length=12)

    st, m = run(ts.init(p))
    loss = np.asarray(m["loss"])
    ratios = loss[1:] / loss[:-1]
    # first-order prediction; the O(α²) curvature term (ReLU kinks) moves single steps a bit
    assert abs(np.median(ratios) - (1 - alpha) ** 2) < 0.01, ratios
    np.testing.assert_allclose(ratios, (1 - alpha) ** 2, atol=0.04)
    np.testing.assert_allclose(loss[-1] / loss[0], (1 - alpha) ** 22, rtol=0.25)
    assert float(np.max(m["residual"])) < 1e-3
    np.testing.assert_array_equal(m["min_rank"], 16)
    assert int(st.step) == 12


def test_ce_steps_gn_newton_and_adam_decrease_loss():
    """GN (gradient and Newton targets) and the optax step on the same RevMLP, CE loss."""
    n, d, C = 20, 10, 3
    p, f = g.revmlp_init(jax.random.key(0), d, 2, bottleneck=40)
    P = g.readout_init(jax.random.key(1), d, C)
    x = jax.random.normal(jax.random.key(2), (n, d))
    labels = jax.random.randint(jax.random.key(3), (n,), 0, C)
    steps = {
        "gn": g.gn_step(f, P, learning_rate=0.5, loss_after=True),
        "gn_newton": g.gn_step(f, P, learning_rate=0.1, target="newton"),
        "adam": g.revmlp_optax_step(f, P, optax.adam(1e-2), loss_after=True),
    }

    @jax.jit
    def run_all(p):
        out = {}
        for name, ts in steps.items():
            _, m = jax.lax.scan(lambda s, _, ts=ts: ts.step(s, (x, labels), jax.random.key(0)),
                                ts.init(p), None, length=8)
            out[name] = m
        return out

    out = run_all(p)
    for name, m in out.items():
        loss = np.asarray(m["loss"])
        assert loss[-1] < (0.8 if name == "adam" else 0.5) * loss[0], (name, loss)
    # GN with the gradient target on CE, α = 0.5 is a big function-space step: the
    # same-batch loss decreases every update and Fig. 3's metric is consistent
    m = out["gn"]
    assert np.all(np.asarray(m["loss_change_pct"]) < 0)
    np.testing.assert_allclose(m["loss_after"][:-1], m["loss"][1:], rtol=1e-5)
    # default truncation (1% of s_max) may drop a few directions: small, reported residual
    assert float(m["residual"][0]) < 1e-3 and np.all(np.asarray(m["residual"]) < 0.1)
    np.testing.assert_allclose(out["adam"]["loss_after"][:-1], out["adam"]["loss"][1:],
                               rtol=1e-5)


def test_gn_step_binds_the_net_as_inputs_one_program_for_every_seed():
    """``gn_step(...).step`` is a Partial of (v1, v2, readout): two nets of the same shapes
    (other seeds) train in one compiled ``fit`` chunk, each exactly as its own closure step;
    a linear first block still raises the rank warning through ``fit``."""

    import pytest

    from layerlab import loop
    from layerlab.gnrev._steps import _gn_update
    from layerlab.loop import _chunks

    x = jax.random.normal(jax.random.key(2), (6, 8))
    labels = jnp.array([0, 1, 2, 0, 1, 2])
    sizes, runs = [_chunks._run_chunk_traced._cache_size()], []
    for seed in (10, 11):
        p, f = g.revmlp_init(jax.random.key(seed), 8, 2, bottleneck=10)
        P = g.readout_init(jax.random.key(seed + 1), 8, 3)
        gn = g.gn_step(f, P, learning_rate=0.3)
        assert isinstance(gn.step, jax.tree_util.Partial)
        runs.append((p, f, P, loop.fit(gn.step, gn.init(p), (x, labels), key=jax.random.key(0),
                                       steps=4, chunk_size=4, progress=False)))
        sizes.append(_chunks._run_chunk_traced._cache_size())
    assert sizes[1] - sizes[0] == 1 and sizes[2] == sizes[1]
    opts = ("ce", "gradient", None, "average", True, False)
    for p, f, P, (st, h) in runs:
        gn = g.gn_step(f, P, learning_rate=0.3)
        sc, hc = loop.fit(lambda s, b, k, f=f, P=P: _gn_update(f, P, opts, s, b, k), gn.init(p),
                          (x, labels), key=jax.random.key(0), steps=4, chunk_size=4,
                          progress=False)
        np.testing.assert_allclose(h["train"]["loss"], hc["train"]["loss"], rtol=1e-5)
        for k in p:
            np.testing.assert_allclose(st.params[k], sc.params[k], rtol=1e-5, atol=1e-6)
    p, f = g.revmlp_init(jax.random.key(3), 8, 2, bottleneck=32, first_linear=True)
    gn = g.gn_step(f, g.readout_init(jax.random.key(4), 8, 3))
    with pytest.warns(UserWarning, match=r"n=6 exceeds the rank bound of block 0 \(linear"):
        loop.fit(gn.step, gn.init(p), (x, labels), key=jax.random.key(0), steps=1,
                 progress=False)


def test_revmlp_optax_step_binds_the_net_and_matches_its_closure():
    """``revmlp_optax_step(...).step`` is a Partial of (v1, v2, readout) too; its run equals
    the closure step's, and a second net with the same optimizer object compiles nothing."""
    from layerlab import loop
    from layerlab.gnrev._steps import _optax_closure_step
    from layerlab.loop import _chunks

    x = jax.random.normal(jax.random.key(2), (6, 8))
    labels = jnp.array([0, 1, 2, 0, 1, 2])
    opt = optax.adam(1e-2)
    sizes, runs = [_chunks._run_chunk_traced._cache_size()], []
    for seed in (20, 21):  # (the traced and static jits share one cache: count Partials only)
        p, f = g.revmlp_init(jax.random.key(seed), 8, 2, bottleneck=10)
        P = g.readout_init(jax.random.key(seed + 1), 8, 3)
        ts = g.revmlp_optax_step(f, P, opt)
        assert isinstance(ts.step, jax.tree_util.Partial)
        runs.append((p, f, P, loop.fit(ts.step, ts.init(p), (x, labels), key=jax.random.key(0),
                                       steps=3, chunk_size=3, progress=False)))
        sizes.append(_chunks._run_chunk_traced._cache_size())
    for p, f, P, (st, h) in runs:
        ref = _optax_closure_step(f, P, opt, "ce", False)
        sr, hr = loop.fit(ref.step, ref.init(p), (x, labels), key=jax.random.key(0), steps=3,
                          chunk_size=3, progress=False)
        np.testing.assert_allclose(h["train"]["loss"], hr["train"]["loss"], rtol=1e-5)
    assert sizes[1] - sizes[0] == 1 and sizes[2] == sizes[1]


def test_public_api_edges_regression_targets_and_checks():
    """MSE regression through revmlp_optax_step trains under loop.fit's default finiteness
    check (a NaN accuracy once stopped it at step 0); bad settings are named."""
    from layerlab import loop

    key = jax.random.key(0)
    params, frozen = g.revmlp_init(key, 8, 2, bottleneck=12)
    P = jnp.eye(8)[:, :1]  # one real output
    x = jax.random.normal(jax.random.key(1), (16, 8))
    t = jnp.sin(x[:, :1])  # real-valued targets [n, 1]
    ts = g.revmlp_optax_step(frozen, P, optax.adam(1e-2), loss="mse")
    st, hist = loop.fit(ts.step, ts.init(params), (x, t), key=key, steps=5, progress=False)
    assert "accuracy" not in hist["train"] and hist["train"]["loss"][-1] < hist["train"]["loss"][0]
    with pytest.raises(ValueError, match="w_scale"):
        g.revmlp_init(key, 8, 2, w_scale=-1.0)
    assert g.PinvConfig(rtol=np.float32(0.01)).rtol == pytest.approx(0.01)
    with pytest.raises(ValueError, match="PinvConfig.rtol"):
        g.PinvConfig(rtol=True)
    gn = g.gn_step(frozen, jnp.eye(8)[:, :3], learning_rate=0.1, weight_decay=0.01)
    st = gn.init(params, {"learning_rate": 0.2})  # weight_decay from gn_step
    assert float(st.hparams["weight_decay"]) == pytest.approx(0.01)
    with pytest.raises(ValueError, match=r"unknown hparams \['lr'\]"):
        gn.init(params, {"lr": 0.2})
    labels = jnp.arange(16) % 3
    with pytest.raises(ValueError, match="one row per input row"):
        gn.step(gn.init(params), (x, labels[:3]), key)
    # label errors raised by the loss name the step the user called (they said loss_value)
    with pytest.raises(ValueError, match=r"^gn_step: integer labels must have shape \(n,\)"):
        gn.step(gn.init(params), (x, labels[:, None]), key)
    with pytest.raises(ValueError, match=r"^revmlp_loss: integer labels must have shape"):
        g.revmlp_loss(params, frozen, jnp.eye(8)[:, :3], (x, labels[:, None]))


def test_gn_step_checks_its_settings_at_construction_and_warns_at_the_call(key):
    """A readout of another width, an unknown combine or a non-PinvConfig pinv are refused by
    gn_step itself (they failed, or passed, at the first step); a float64 readout for a
    float32 net is named at the step; the rank warning points at the caller's line."""
    p, f = g.revmlp_init(key, 6, 2, bottleneck=3)
    P = g.readout_init(jax.random.key(1), 6, 2)
    with pytest.raises(ValueError, match=r"^gn_step: readout must have shape \(6, C\) .* got "
                                         r"\(5, 2\)"):
        g.gn_step(f, jnp.ones((5, 2)))
    with pytest.raises(ValueError, match=r"^revmlp_optax_step: readout must have shape"):
        g.revmlp_optax_step(f, jnp.ones((5, 2)), optax.sgd(0.1))
    with pytest.raises(ValueError, match=r"^gn_step: combine must be one of"):
        g.gn_step(f, P, combine="bogus")
    with pytest.raises(TypeError, match=r"^gn_step: pinv must be a PinvConfig"):
        g.gn_step(f, P, pinv="damp")
    x = jax.random.normal(jax.random.key(2), (8, 6))  # n = 8 > d' + 1 = 4: inexact, warns
    labels = jnp.arange(8) % 2
    p0, f0 = g.revmlp_init(key, 6, 2)  # no bottleneck: the width is checked at the step
    gn0 = g.gn_step(f0, g.readout_init(jax.random.key(1), 4, 2))  # orthonormal, d = 4
    with pytest.raises(ValueError, match=r"^gn_step: readout must have shape \(6, C\)"):
        gn0.step(gn0.init(p0), (x, labels), key)
    with jax.enable_x64(True):
        gn64 = g.gn_step(f, P.astype(jnp.float64))
        with pytest.raises(TypeError, match=r"^gn_step: readout has dtype float64 but the "
                                            r"parameters are float32; cast it with "
                                            r"readout\.astype\(jnp\.float32\)"):
            gn64.step(gn64.init(p), (x, labels), key)
    gn = g.gn_step(f, P, residual=False)
    with pytest.warns(UserWarning, match="rank bound") as rec:
        jax.eval_shape(gn.step, gn.init(p), (x, labels), key)  # warns at trace time
    assert [r.filename for r in rec] == [__file__]


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_min_rank_metric_is_exact_above_256_in_half_precision(dtype):
    """``min_rank`` is logged in float32 whatever the params dtype: in bfloat16 (8 significant
    bits) a rank of 301 was logged as 300.0.  The true rank is n = 301 (full row rank,
    n <= d' + 1 = 601), as gn_direction's int32 GNInfo reports it."""
    p, f = g.revmlp_init(jax.random.key(0), 16, 1, bottleneck=600, dtype=dtype)
    P = g.readout_init(jax.random.key(1), 16, 4, dtype=dtype)
    n = 301
    x = jax.random.normal(jax.random.key(2), (n, 16), dtype)
    lab = jnp.arange(n) % 4
    cfg = g.PinvConfig(solver="svd", rtol=1e-4, atol=0.0)
    gn = g.gn_step(f, P, pinv=cfg)

    @jax.jit  # the step and its reference in one program (eagerly, op by op: ~65 programs)
    def step_and_direction(p, x, lab):
        _, m = gn.step(gn.init(p), (x, lab), jax.random.key(0))
        eps = g.output_target(g.revmlp_apply(p, f, x) @ P, lab) @ P.T
        _, info = g.gn_direction(p, f, x, eps.astype(dtype), pinv=cfg, return_info=True)
        return m, info

    m, info = step_and_direction(p, x, lab)
    assert m["min_rank"].dtype == jnp.float32
    assert int(np.min(np.asarray(info.rank))) == n
    assert float(m["min_rank"]) == n


def test_gn_step_refuses_a_readout_without_orthonormal_columns():
    """``PᵀP = I`` is what makes the body target ``ε Pᵀ`` move the logits by ``ε``: a ``2 P``
    readout was accepted, its step was 4α on the logits and the residual still read ~1e-14.
    The deviation is measured in numpy float64 (2P: 3; a Gaussian P: O(sqrt(d)))."""
    p, f = g.revmlp_init(jax.random.key(0), 8, 2, bottleneck=16)
    P = g.readout_init(jax.random.key(1), 8, 3)
    Pn = np.asarray(P, np.float64)
    assert np.max(np.abs(Pn.T @ Pn - np.eye(3))) < 1e-5
    g.gn_step(f, P)  # accepted
    g.gn_step(f, P.astype(jnp.bfloat16))  # the float32 readout rounded: accepted
    gauss = jax.random.normal(jax.random.key(2), (8, 3))
    for bad in (2 * P, gauss):
        bn = np.asarray(bad, np.float64)
        dev = np.max(np.abs(bn.T @ bn - np.eye(3)))
        assert dev > 0.5
        with pytest.raises(ValueError, match=rf"gn_step: readout must have orthonormal columns"
                                             rf".*= {dev:.3g}.*readout_init\(key, 8, 3\)"):
            g.gn_step(f, bad)
    # traced readouts are not checked (the step still runs)
    jax.jit(lambda r: g.gn_step(f, r).init(p).step)(P)


def test_gn_step_non_finite_messages_name_the_params_and_the_forward_pass():
    """NaN parameters were reported as "gn_direction: target has ... non-finite ... clean the
    data"; now the step names ``state.params``, and an overflowing forward pass (finite
    parameters scaled by 1e20: the body output overflows) names the forward pass."""
    p, f = g.revmlp_init(jax.random.key(0), 8, 2, bottleneck=16)
    P = g.readout_init(jax.random.key(1), 8, 3)
    x = jax.random.normal(jax.random.key(2), (6, 8))
    lab = jnp.arange(6) % 3
    gn = g.gn_step(f, P)
    pn = {**p, "w1": p["w1"].at[0, 0, 0].set(jnp.nan)}
    with pytest.raises(ValueError, match=r"^gn_step: state\.params has 1 non-finite .*diverged"):
        gn.step(gn.init(pn), (x, lab), jax.random.key(0))
    with pytest.raises(ValueError, match=r"^gn_step: .*target ε Pᵀ has .*forward pass"):
        gn.step(gn.init({**p, "w1": p["w1"] * 1e20, "w2": p["w2"] * 1e20}), (x, lab),
                jax.random.key(0))


def test_gn_step_checks_the_step_key():
    """step(state, batch, key=3) with a noise pinv reached jax.random (its raw "invalid PRNG
    key data"); it now names gn_step's key, typed and legacy keys give the same step, and a
    step whose pinv needs no key still takes None."""
    p, f = g.revmlp_init(jax.random.key(0), 8, 2, bottleneck=16)
    P = g.readout_init(jax.random.key(1), 8, 3)
    x = jax.random.normal(jax.random.key(2), (6, 8))
    lab = jnp.arange(6) % 3
    noisy = g.gn_step(f, P, pinv=g.PinvConfig(method="noise"))
    for gn in (noisy, g.gn_step(f, P)):
        with pytest.raises(TypeError, match=r"^gn_step: key must be a PRNG key "
                                            r"\(jax.random.key\(seed\)\), got int 3\.$"):
            gn.step(gn.init(p), (x, lab), 3)
    raw = jax.random.PRNGKey(5)
    plain = g.gn_step(f, P)

    @jax.jit  # the four steps in one program (eagerly, each op compiled apart: ~80 programs)
    def four_steps(p):
        a, _ = noisy.step(noisy.init(p), (x, lab), raw)
        b, _ = noisy.step(noisy.init(p), (x, lab), jax.random.wrap_key_data(raw))
        c, _ = plain.step(plain.init(p), (x, lab), None)
        d, _ = plain.step(plain.init(p), (x, lab), raw)
        return a.params, b.params, c.params, d.params

    a, b, c, d = four_steps(p)
    jax.tree.map(np.testing.assert_array_equal, a, b)
    jax.tree.map(np.testing.assert_array_equal, c, d)
