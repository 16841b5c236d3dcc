"""layerlab.inspect._report: the report equals the per-paper functions and numpy references."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from layerlab import dgl, inspect, nets, probes

N, SIZES = 48, [10, 16, 12, 3]


@pytest.fixture(scope="module")
def mlp_case():
    k1, k2, k3 = jax.random.split(jax.random.key(1), 3)
    params = nets.mlp_init(k1, SIZES, init="he")
    params_ref = nets.mlp_init(k2, SIZES, init="he")
    x = jax.random.normal(k3, (N, SIZES[0]))
    labels = jnp.arange(N) % 3
    y = jax.nn.one_hot(labels, 3) - 1.0 / 3
    return params, params_ref, x, labels, y


def _np_centred_sv(h):
    h = np.asarray(h, np.float64)
    return np.linalg.svd(h - h.mean(0), compute_uv=False)


def test_mlp_report_equals_paper_functions(mlp_case):
    params, params_ref, x, labels, y = mlp_case
    model = inspect.from_mlp()
    cfg = inspect.InspectConfig(num_classes=3, ridge_rel=0.0, ntk_method="jacobian")
    ref = jax.jit(lambda p: inspect.make_reference(model, p, x, config=cfg))(params_ref)
    rep = jax.jit(lambda p: inspect.layer_report(model, p, x, labels, reference=ref,
                                                 config=cfg))(params)
    assert rep.layers == ("hidden_1", "hidden_2")
    assert rep.weights == ("0/w", "1/w", "2/w")
    _, hidden = nets.mlp_apply(params, x, return_hidden=True)
    _, hidden_ref = nets.mlp_apply(params_ref, x, return_hidden=True)
    lv = {k: np.asarray(v) for k, v in rep.layer_values.items()}

    @jax.jit
    def direct(params):  # the per-paper functions, called directly (one compile)
        _, hs = nets.mlp_apply(params, x, return_hidden=True)
        mon = dgl.monitor_fn(x, y, eps_rel=cfg.eps_rel)(type("S", (), {"params": params})())
        return ([dgl.dgl_linear(h, y) / N for h in hs],
                [mon[f"dgl_{i + 1}"] for i in range(len(hs))],  # MF top network, eq. 3
                [probes.linear_cka(h, hr) for h, hr in zip(hs, hidden_ref)])

    d_lin, d_nngp, d_cka = direct(params)
    for i, h in enumerate(hidden):
        # DGL@Linear: dgl.dgl_linear, and least squares in float64 (eq. 6: residual of Y on H)
        np.testing.assert_allclose(lv["dgl_linear"][i], d_lin[i], rtol=1e-5)
        H, Y = np.asarray(h, np.float64), np.asarray(y, np.float64)
        resid = Y - H @ np.linalg.lstsq(H, Y, rcond=None)[0]
        np.testing.assert_allclose(lv["dgl_linear"][i], np.sum(resid**2) / N, rtol=2e-3)
        # DGL under the NNGP of the remaining layers = dgl.monitor_fn's per-layer values
        np.testing.assert_allclose(lv["dgl_nngp"][i], d_nngp[i], rtol=1e-4)
        # CKA: probes.linear_cka and the numpy formula
        np.testing.assert_allclose(lv["cka"][i], d_cka[i], rtol=1e-5)
        a = H - H.mean(0)
        b = np.asarray(hidden_ref[i], np.float64)
        b = b - b.mean(0)
        want = np.sum((b.T @ a) ** 2) / (np.linalg.norm(a.T @ a) * np.linalg.norm(b.T @ b))
        np.testing.assert_allclose(lv["cka"][i], want, rtol=1e-4)
        # ranks of the centred representation, numpy
        s = _np_centred_sv(h)
        p = s / s.sum()
        np.testing.assert_allclose(lv["effective_rank"][i], np.exp(-np.sum(p * np.log(p))),
                                   rtol=1e-4)
        np.testing.assert_allclose(lv["stable_rank"][i], np.sum(s**2) / s[0] ** 2, rtol=1e-4)
    # weight spectra, numpy
    for j, layer in enumerate(params):
        s = np.linalg.svd(np.asarray(layer["w"], np.float64), compute_uv=False)
        np.testing.assert_allclose(rep.spectra[j], s, rtol=1e-4)
        np.testing.assert_allclose(rep.weight_values["spectral_norm"][j], s[0], rtol=1e-5)
        np.testing.assert_allclose(rep.weight_values["weight_stable_rank"][j],
                                   np.sum(s**2) / s[0] ** 2, rtol=1e-4)
        assert rep.weight_values["near_one"][j] == np.sum(np.abs(s - 1.0) < cfg.near_one_tol)
    # NTK: alignments of the explicit J J^T (numpy) with the reference NTK and with Y Y^T
    jac = jax.jit(jax.jacrev(lambda q: nets.mlp_apply(q, x)))

    def ntk(p):
        J = jac(p)
        J = np.concatenate([np.asarray(j, np.float64).reshape(N, 3, -1)
                            for j in jax.tree.leaves(J)], axis=-1)
        return np.einsum("iap,jap->ij", J, J)

    K, K0 = ntk(params), ntk(params_ref)
    np.testing.assert_allclose(rep.model_values["ntk_alignment"],
                               np.sum(K * K0) / (np.linalg.norm(K) * np.linalg.norm(K0)),
                               rtol=1e-4)
    C = np.eye(N) - 1.0 / N
    Kc, Lc = C @ K @ C, C @ (np.asarray(y, np.float64) @ np.asarray(y, np.float64).T) @ C
    want = np.sum(Kc * Lc) / (np.linalg.norm(Kc) * np.linalg.norm(Lc))
    np.testing.assert_allclose(rep.model_values["ntk_target_alignment"], want, rtol=1e-3)
    assert float(rep.model_values["nonfinite_layers"]) == 0.0
    # the flat metrics (what an eval_fn returns) carry every value under "diagnostic/name"
    m = rep.metrics()
    assert m["cka/hidden_2"] == rep.layer_values["cka"][1]
    assert m["near_one/1/w"] == rep.weight_values["near_one"][1]
    assert "hidden_1" in rep.table() and "ntk_alignment" in rep.table()


def test_self_reference_and_default_ridge(mlp_case):
    params, _, x, _, y = mlp_case
    model = inspect.from_mlp()
    cfg = inspect.InspectConfig(diagnostics=("dgl_linear", "cka", "ntk_alignment"),
                                ntk_samples=12)
    ref = jax.jit(lambda p: inspect.make_reference(model, p, x, config=cfg))(params)
    assert ref.ntk.shape == (12, 12)

    @jax.jit
    def both(p):
        _, hs = nets.mlp_apply(p, x, return_hidden=True)
        want = [dgl.dgl_linear(h, y, eps2=cfg.ridge_rel * jnp.sum(h * h) / h.shape[1]) / N
                for h in hs]  # the documented default ridge
        return inspect.layer_report(model, p, x, y, reference=ref, config=cfg), want

    rep, want = both(params)
    np.testing.assert_allclose(rep.layer_values["cka"], 1.0, atol=1e-5)
    np.testing.assert_allclose(rep.model_values["ntk_alignment"], 1.0, atol=1e-5)
    np.testing.assert_allclose(rep.layer_values["dgl_linear"], want, rtol=1e-5)
    # without a reference, the reference diagnostics are skipped
    rep2 = inspect.layer_report(model, params, x, y,
                                config=inspect.InspectConfig(diagnostics=("cka", "stable_rank")))
    assert set(rep2.layer_values) == {"stable_rank"}


def test_ntk_samples_above_n_warns_and_uses_all(mlp_case):
    params, _, x, _, _ = mlp_case
    model = inspect.from_mlp()
    cfg = inspect.InspectConfig(diagnostics=("ntk_alignment",), ntk_samples=x.shape[0] + 5)
    with pytest.warns(UserWarning, match=f"ntk_samples = {x.shape[0] + 5} exceeds the "
                      f"{x.shape[0]} probe samples"):
        ref = inspect.make_reference(model, params, x, config=cfg)
    assert ref.ntk.shape == (x.shape[0], x.shape[0])


def test_default_top_network_is_documented_relu_nngp(mlp_case):
    params, _, x, _, y = mlp_case
    top = inspect.TopNetwork(depth=2, w_var=1.5, b_var=0.1)
    cfg = inspect.InspectConfig(diagnostics=("dgl_nngp",), top=top, eps_rel=0.1)
    feats = inspect.from_features(lambda p, xx: {"a": jnp.tanh(xx @ p)})
    W = jax.random.normal(jax.random.key(3), (SIZES[0], 7))
    rep = jax.jit(lambda W: inspect.layer_report(feats, W, x, y, config=cfg))(W)
    kfn = dgl.top_kernel_fn(jnp.full((3,), 1.5), jnp.full((3,), 0.1))
    want = jax.jit(lambda W: dgl.dgl_features(jnp.tanh(x @ W), y, kfn, eps_rel=0.1) / N)(W)
    np.testing.assert_allclose(rep.layer_values["dgl_nngp"][0], want, rtol=1e-5)
    assert set(rep.layer_values) == {"dgl_nngp"} and not rep.weight_values


def test_bad_inputs_raise_clear_errors(mlp_case):
    params, _, x, _, y = mlp_case
    model = inspect.from_mlp()
    bad_n = inspect.from_features(lambda p, xx: {"ok": xx, "short": xx[:-1]})
    with pytest.raises(ValueError, match=r"features: representation 'short'.*n = 48"):
        inspect.layer_report(bad_n, params, x, y)
    nan = inspect.from_features(lambda p, xx: {"h": xx.at[0, 0].set(jnp.nan)})
    with pytest.raises(ValueError, match=r"representation 'h' has 1 non-finite"):
        inspect.layer_report(nan, params, x, y)
    with pytest.raises(ValueError, match=r"layers: unknown layer name\(s\) \['hidden_9'\]"):
        inspect.layer_report(model, params, x, y,
                             config=inspect.InspectConfig(layers=("hidden_1", "hidden_9")))
    with pytest.raises(ValueError, match="y: integer labels"):
        inspect.layer_report(model, params, x, jnp.arange(N) % 3)
    c3 = inspect.InspectConfig(num_classes=3, diagnostics=("dgl_linear",))
    for bad in (jnp.arange(N) % 4, jnp.arange(N) % 3 - 1):  # label 3, label -1: no silent 0-rows
        with pytest.raises(ValueError, match=r"y must be integer class labels in \[0, 3\)"):
            inspect.layer_report(model, params, x, bad, config=c3)
    with pytest.raises(ValueError, match=r"y: integer array of shape \(48, 1\)"):
        inspect.layer_report(model, params, x, (jnp.arange(N) % 3)[:, None], config=c3)
    with pytest.raises(ValueError, match=r"n = 48, got \(5,\)"):  # the shape as given
        inspect.layer_report(model, params, x, (jnp.arange(N) % 3)[:5], config=c3)
    with pytest.raises(ValueError, match="y: the diagnostics"):
        inspect.layer_report(model, params, x)
    with pytest.raises(TypeError, match=r"representation 'blk' is a dict; return a flat dict"):
        inspect.layer_report(inspect.from_features(lambda p, xx: {"blk": {"a": xx}}), params, x, y)
    with pytest.raises(TypeError, match=r"representation 'pair' is a tuple"):
        inspect.layer_report(inspect.from_features(lambda p, xx: {"pair": (xx, xx)}), params, x, y)
    with pytest.raises(TypeError, match="must return a dict"):
        inspect.layer_report(inspect.from_features(lambda p, xx: xx), params, x, y)
    with pytest.raises(ValueError, match="unknown diagnostics"):
        inspect.InspectConfig(diagnostics=("cka", "dgl"))
    ref = inspect.Reference({"other": x}, None)
    with pytest.raises(ValueError, match=r"reference: no representation for layer 'hidden_1'"):
        inspect.layer_report(model, params, x, y, reference=ref)
    with pytest.raises(ValueError, match=r"ridge_rel=0 .* needs d < n"):
        inspect.layer_report(model, params, x[:8], y[:8],
                             config=inspect.InspectConfig(ridge_rel=0.0,
                                                          diagnostics=("dgl_linear",)))
    # under jit a diverged model cannot raise: it is counted instead
    rep = jax.jit(lambda p: inspect.layer_report(nan, p, x, y,
                                                 config=inspect.InspectConfig(
                                                     diagnostics=("stable_rank",))))(params)
    assert float(rep.model_values["nonfinite_layers"]) == 1.0


def test_dgl_linear_wide_representation_equals_direct(x64):
    # d > n: the report works on the n-dimensional row space; the value is dgl_linear's own
    h = jax.random.normal(jax.random.key(4), (12, 30)) ** 2
    y = jax.nn.one_hot(jnp.arange(12) % 3, 3) - 1.0 / 3
    cfg = inspect.InspectConfig(diagnostics=("dgl_linear",), ridge_rel=1e-2)
    rep = inspect.layer_report(inspect.from_features(lambda p, xx: {"h": h}), None,
                               jnp.zeros((12, 1)), y, config=cfg)
    want = dgl.dgl_linear(h, y, eps2=1e-2 * jnp.sum(h * h) / 30) / 12
    np.testing.assert_allclose(rep.layer_values["dgl_linear"][0], want, rtol=1e-9)


def test_conv_reduction_options():
    h = jax.random.normal(jax.random.key(0), (6, 4, 5, 3))
    feats = inspect.from_features(lambda p, xx: {"conv": h})
    x = jnp.zeros((6, 2))
    for conv, want in (("mean", h.mean((1, 2))), ("max", h.max((1, 2))),
                       ("flatten", h.reshape(6, -1))):
        reps = inspect.representations(feats, None, x, config=inspect.InspectConfig(conv=conv))
        np.testing.assert_allclose(reps["conv"], want, rtol=1e-6)
    with pytest.raises(ValueError, match="conv must be one of"):
        inspect.InspectConfig(conv="avg")


def test_config_checked_when_made():
    """Every setting raises at InspectConfig(...), naming the field, not at report time."""
    C = inspect.InspectConfig
    with pytest.raises(TypeError, match=r"diagnostics must be a tuple of names, got str 'cka' "
                       r"\(wrap it: \('cka',\)\)"):
        C(diagnostics="cka")
    with pytest.raises(TypeError, match=r"layers must be a tuple of names, got str 'hidden_1'"):
        C(layers="hidden_1")
    assert C(diagnostics=["cka"], layers=["hidden_1"]).layers == ("hidden_1",)  # any sequence
    for kw, err, msg in (
            (dict(ntk_samples=4.0), TypeError, "InspectConfig: ntk_samples must be an integer"),
            (dict(ntk_samples=1), ValueError, "InspectConfig: ntk_samples must be >= 2"),
            (dict(ntk_method="vp"), ValueError, r"InspectConfig: ntk_method must be one of"),
            (dict(near_one_tol=0.0), ValueError, r"InspectConfig: near_one_tol must be > 0"),
            (dict(eps_rel=0.0), ValueError, r"InspectConfig: eps_rel must be > 0"),
            (dict(ridge_rel=-1.0), ValueError, r"InspectConfig: ridge_rel must be >= 0"),
            (dict(near_one_tol=[0.1, 0.2]), ValueError,
             r"InspectConfig: near_one_tol must be a scalar, got shape \(2,\)"),
            (dict(eps_rel=np.ones(3)), ValueError,
             r"InspectConfig: eps_rel must be a scalar, got shape \(3,\)"),
            (dict(num_classes=3.0), TypeError, r"InspectConfig: num_classes must be an int"),
            (dict(top=inspect.TopNetwork(depth=-1)), ValueError, r"top.depth must be >= 0"),
    ):
        with pytest.raises(err, match=msg):
            C(**kw)


def test_argument_errors_name_the_argument(mlp_case):
    import flax.linen as nn

    params, _, x, labels, y = mlp_case
    model = inspect.from_mlp()
    cfg = inspect.InspectConfig(diagnostics=("cka", "stable_rank"))
    ref = inspect.make_reference(model, params, x[:10], config=cfg)
    with pytest.raises(ValueError, match=r"reference: built on a probe batch of \[10\] samples, "
                       r"but x has n = 48; pass make_reference"):
        inspect.layer_report(model, params, x, y, reference=ref, config=cfg)
    with pytest.raises(ValueError, match=r"x: the probe batch needs at least 2 samples"):
        inspect.layer_report(model, params, x[:1], y[:1], config=cfg)
    with pytest.raises(ValueError, match=r"x: the probe batch needs at least 2 samples"):
        inspect.make_reference(model, params, x[:1], config=cfg)
    # representations computes no diagnostic: one sample is a valid batch there
    one = inspect.representations(model, params, x[:1])
    full = inspect.representations(model, params, x)
    assert one.keys() == full.keys()
    for k in one:
        np.testing.assert_allclose(one[k], full[k][:1], rtol=1e-5, atol=1e-6)
    with pytest.raises(TypeError, match=r"y: boolean array of shape \(48,\)"):
        inspect.layer_report(model, params, x, labels == 0,
                             config=inspect.InspectConfig(diagnostics=("dgl_linear",)))
    with pytest.raises(TypeError, match=r"model: a flax.linen module; wrap it .*from_linen"):
        inspect.layer_report(nn.Dense(3), {"params": {}}, x, y, config=cfg)


def test_bad_x_and_y_values_are_refused_naming_them(mlp_case):
    """A probe batch that is not an array (None, a string, a ragged list) or holds NaN, and
    targets that are not an array, are complex (the imaginary part was dropped: dgl_linear
    0, "perfectly decodable") or hold NaN (the error blamed H's columns or an internal K2)
    are refused naming x / y, by every entry point, before the model runs."""
    params, _, x, labels, y = mlp_case
    model = inspect.from_mlp()
    cfg = inspect.InspectConfig(diagnostics=("dgl_linear", "ntk_target_alignment"))
    xn = np.array(x).copy()
    xn[3, 1] = np.nan
    yn = np.array(y).copy()
    yn[0, 0] = np.nan
    calls = {
        "layer_report": lambda xx, yy: inspect.layer_report(model, params, xx, yy, config=cfg),
        "make_reference": lambda xx, yy: inspect.make_reference(model, params, xx),
        "representations": lambda xx, yy: inspect.representations(model, params, xx),
        "monitor": lambda xx, yy: inspect.monitor(model, xx, yy, config=cfg),
    }
    for fn, call in calls.items():
        for bad in (None, "abc", [[1.0, 2.0], [3.0]]):
            with pytest.raises(TypeError, match=rf"^{fn}: x must be an array"):
                call(bad, y)
        with pytest.raises(ValueError, match=rf"^{fn}: x has 1 non-finite"):
            call(xn, y)
    for fn in ("layer_report", "monitor"):
        call = calls[fn]
        for bad in ("abc", [[1.0, 2.0], [3.0]]):
            with pytest.raises(TypeError, match=rf"^{fn}: y must be an array"):
                call(x, bad)
        with pytest.raises(TypeError, match=rf"^{fn}: y must hold real targets .*complex"):
            call(x, 1j * np.asarray(y))
        with pytest.raises(ValueError, match=rf"^{fn}: y has 1 non-finite"):
            call(x, yn)
    # the same clean inputs report finite numbers (the checks refuse nothing valid)
    rep = calls["layer_report"](x, y)
    assert np.all(np.isfinite(np.asarray(rep.layer_values["dgl_linear"])))


@pytest.mark.parametrize("wide", [False, True])
def test_dgl_linear_of_a_dead_layer_is_the_zero_predictors(wide):
    """An all-zero layer: DGL@Linear = sum(Y^2) / n (the zero predictor's loss, dgl_nngp's
    value too), eager and under jit, with a finite gradient (d > n takes the row-space
    route)."""
    n, d = 16, (24 if wide else 8)
    x = jax.random.normal(jax.random.key(0), (n, 5))
    W = jax.random.normal(jax.random.key(1), (5, d))

    def feats(p, xx):
        h = jax.nn.relu(xx @ p)
        return {"h": h, "dead": jax.nn.relu(h - 1e4)}

    labels = jnp.arange(n) % 3
    Y = np.asarray(jax.nn.one_hot(labels, 3) - 1 / 3)
    cfg = inspect.InspectConfig(num_classes=3, diagnostics=("dgl_linear", "dgl_nngp"))

    def report(p):
        return inspect.layer_report(feats, p, x, labels, config=cfg)

    for rep in (report(W), jax.jit(report)(W)):
        assert rep.layers == ("h", "dead")
        np.testing.assert_allclose(rep.layer_values["dgl_linear"][1], np.sum(Y**2) / n,
                                   rtol=1e-6)
        np.testing.assert_allclose(rep.layer_values["dgl_nngp"][1], np.sum(Y**2) / n, rtol=1e-5)
        assert 0 < rep.layer_values["dgl_linear"][0] < np.sum(Y**2) / n
    # no NaN from the unselected branch in derivatives (forward mode: the d > n route's QR
    # has no reverse-mode rule)
    t = jax.jit(lambda p: jax.jvp(lambda q: report(q).layer_values["dgl_linear"], (p,),
                                  (jnp.ones_like(p),))[1])(W)
    assert np.all(np.isfinite(np.asarray(t))) and float(t[1]) == 0.0


def test_float_labels_with_num_classes_are_refused(mlp_case):
    """With num_classes, float labels [n] / [n, 1] are refused (they were one regression
    target: another dgl_linear, no warning), as are float [n, C] targets with C !=
    num_classes; without num_classes a float [n] is one regression target, as documented."""
    params, _, x, labels, y = mlp_case
    model = inspect.from_mlp()
    c3 = inspect.InspectConfig(num_classes=3, diagnostics=("dgl_linear",))
    for bad in (labels.astype(jnp.float32), np.asarray(labels, np.float64),
                labels.astype(jnp.float32)[:, None]):
        with pytest.raises(TypeError, match=r"y: expected integer class labels \[n\] with "
                           r"InspectConfig\(num_classes=3\).*got a float.*cast to int"):
            inspect.layer_report(model, params, x, bad, config=c3)
    with pytest.raises(ValueError, match=r"y: float targets of shape \(48, 4\) have C = 4 "
                       r"columns, but InspectConfig\(num_classes=3\)"):
        inspect.layer_report(model, params, x, jax.nn.one_hot(labels, 4), config=c3)
    # one-hot targets [n, 3] with num_classes=3 still work; so do float targets without it
    ok = inspect.layer_report(model, params, x, y, config=c3).layer_values["dgl_linear"]
    free = inspect.InspectConfig(diagnostics=("dgl_linear",))
    reg = inspect.layer_report(model, params, x, labels.astype(jnp.float32),
                               config=free).layer_values["dgl_linear"]
    _, hs = nets.mlp_apply(params, x, return_hidden=True)
    for i, h in enumerate(hs):  # least squares in float64: Y on H (ridge 1e-4, ~ exact)
        H = np.asarray(h, np.float64)
        for Y, got in ((np.asarray(y, np.float64), ok[i]),
                       (np.asarray(labels, np.float64)[:, None], reg[i])):
            resid = Y - H @ np.linalg.lstsq(H, Y, rcond=None)[0]
            np.testing.assert_allclose(got, np.sum(resid**2) / N, rtol=2e-3)


def test_multi_input_x_reference_and_config_types_are_refused(mlp_case):
    """x as a dict / tuple (a multi-input model's batch), params passed as reference= and a
    dict as config=: TypeErrors naming the argument and the fix (were jnp.asarray errors or
    bare AttributeErrors), in layer_report, make_reference, representations and monitor."""
    params, params_ref, x, labels, y = mlp_case
    model = inspect.from_mlp()
    cfg = inspect.InspectConfig(num_classes=3, diagnostics=("dgl_linear", "cka"))
    for xs, kind in (({"a": x, "b": x}, r"dict \{'a': \[48, 10\], 'b': \[48, 10\]\}"),
                     ((x, x), r"tuple \(\[48, 10\], \[48, 10\]\)"), ([x, x], "list")):
        for call in (lambda: inspect.layer_report(model, params, xs, labels, config=cfg),
                     lambda: inspect.make_reference(model, params, xs, config=cfg),
                     lambda: inspect.representations(model, params, xs),
                     lambda: inspect.monitor(model, xs, labels, config=cfg)):
            with pytest.raises(TypeError, match=rf"x must be a single probe batch array "
                               rf"\[n, \.\.\.\].*got a {kind}.*from_features"):
                call()
    for ref in (params_ref, {"params": params_ref}):
        with pytest.raises(TypeError, match=rf"reference must be an inspect.Reference or None, "
                           rf"got {type(ref).__name__}; build it with make_reference"):
            inspect.layer_report(model, params, x, labels, reference=ref, config=cfg)
        with pytest.raises(TypeError, match=r"reference must be an inspect.Reference"):
            inspect.monitor(model, x, labels, reference=ref, config=cfg)
    for call in (lambda c: inspect.layer_report(model, params, x, labels, config=c),
                 lambda c: inspect.make_reference(model, params, x, config=c),
                 lambda c: inspect.representations(model, params, x, config=c),
                 lambda c: inspect.monitor(model, x, labels, config=c)):
        with pytest.raises(TypeError, match=r"config must be an inspect.InspectConfig, got "
                           r"dict; build it with InspectConfig\(\.\.\.\)"):
            call({"num_classes": 3})
    # monitor checks its targets when made (was: the error came from inside loop.fit)
    with pytest.raises(TypeError, match=r"y: expected integer class labels"):
        inspect.monitor(model, x, labels.astype(jnp.float32), config=cfg)


@pytest.mark.parametrize("n", [16, 64])
def test_collapsed_constant_layer_has_rank_zero(n):
    """Every row the same non-zero vector (a dead layer plus a bias): effective and stable
    rank 0, eager and under jit (one centring pass left a rounding offset: rank 1), while
    a layer varying by 1e-3 around the same offset keeps its numpy ranks."""
    x = jax.random.normal(jax.random.key(0), (n, 3))
    V = jax.random.normal(jax.random.key(1), (16, 16))
    b = 3 * jax.random.normal(jax.random.key(2), (16,))
    z = 1e-3 * jax.random.normal(jax.random.key(3), (n, 16))

    def feats(p, xx):
        h = jax.nn.relu(xx @ jnp.ones((3, 16)) - 100.0) @ V + p[None]  # every row = p
        return {"collapsed": h, "nearly": h + z}

    cfg = inspect.InspectConfig(diagnostics=("effective_rank", "stable_rank"))
    s = _np_centred_sv(np.asarray(b, np.float64)[None] + np.asarray(z, np.float64))
    p = s / s.sum()
    for rep in (inspect.layer_report(feats, b, x, config=cfg),
                jax.jit(lambda q: inspect.layer_report(feats, q, x, config=cfg))(b)):
        assert float(rep.layer_values["effective_rank"][0]) == 0.0
        assert float(rep.layer_values["stable_rank"][0]) == 0.0
        np.testing.assert_allclose(rep.layer_values["effective_rank"][1],
                                   np.exp(-np.sum(p * np.log(p))), rtol=1e-3)
        np.testing.assert_allclose(rep.layer_values["stable_rank"][1],
                                   np.sum(s**2) / s[0] ** 2, rtol=1e-3)


def test_config_numpy_scalars_stay_hashable_and_empty_layers_refused():
    C = inspect.InspectConfig
    c = C(num_classes=jnp.int32(3), ntk_samples=np.int64(8), ridge_rel=jnp.float32(1e-3))
    assert (type(c.num_classes), type(c.ntk_samples), type(c.ridge_rel)) == (int, int, float)
    assert c.num_classes == 3 and c.ntk_samples == 8 and c.ridge_rel == np.float32(1e-3)
    assert hash(c) == hash(C(num_classes=3, ntk_samples=8, ridge_rel=float(np.float32(1e-3))))
    with pytest.raises(ValueError, match=r"InspectConfig: layers must name at least one layer, "
                       r"got \(\)"):
        C(layers=())


def test_tanh_mlp_does_not_get_the_relu_top_kernel(mlp_case):
    """from_mlp(activation=jnp.tanh): dgl_nngp is no longer the ReLU MF NNGP of the layers
    above (layerlab.kernels has no tanh kernel); it is the configured TopNetwork's, as for a
    model without top variances.  ReLU keeps the MF top network (dgl.monitor_fn's value)."""
    params, _, x, _, y = mlp_case
    cfg = inspect.InspectConfig(diagnostics=("dgl_nngp",))
    tanh = inspect.from_mlp(activation=jnp.tanh)
    assert tanh.top_variances is None and inspect.from_mlp().top_variances is not None
    rep = jax.jit(lambda p: inspect.layer_report(tanh, p, x, y, config=cfg))(params)

    @jax.jit
    def direct(p):
        _, hs = nets.mlp_apply(p, x, activation=jnp.tanh, return_hidden=True)
        v = dgl.mf_variances(p)
        default = dgl.top_kernel_fn(jnp.full((2,), 2.0), jnp.zeros((2,)))  # TopNetwork()
        return ([dgl.dgl_features(h, y, default, eps_rel=cfg.eps_rel) / N for h in hs],
                [dgl.dgl_features(h, y, dgl.top_kernel_fn(v.w_var[i + 1:], v.b_var[i + 1:]),
                                  eps_rel=cfg.eps_rel) / N for i, h in enumerate(hs)])

    want, relu_mf = direct(params)
    np.testing.assert_allclose(rep.layer_values["dgl_nngp"], want, rtol=1e-5)
    # hidden_2: the ReLU MF top network is the linear readout alone, 0.832 (the old value);
    # the default TopNetwork (one hidden ReLU layer) gives 1.161.  (hidden_1's MF top, two
    # He-initialised layers with zero biases, is close to the default one: both 1.165.)
    np.testing.assert_allclose(rep.layer_values["dgl_nngp"][1], 1.1611, rtol=1e-3)
    np.testing.assert_allclose(relu_mf[1], 0.8319, rtol=1e-3)


def test_single_sample_x_without_batch_axis_blames_x(mlp_case):
    """x[0] of shape (10,) with y [48]: the error was 'features: representation 'hidden_1' has
    shape (16,); expected [n, ...] with n = 10 samples', after running the model.  Now x and
    y's sample counts are compared first and a 1-D x is named as a sample without its batch
    axis; a 1-D x stays valid (one scalar per sample), so without y it is the features error,
    with the same hint."""
    params, _, x, labels, _ = mlp_case

    def not_run(p, xx):
        raise AssertionError("the model ran")

    cfg = inspect.InspectConfig(num_classes=3, diagnostics=("dgl_linear",))
    msg = (r"^x: the probe batch has n = 10 samples \(the rows of x, shape \(10,\)\), but y "
           r"has 48 \(shape \(48,\)\).*batch axis: x\[None\]")
    with pytest.raises(ValueError, match=msg):
        inspect.layer_report(inspect.from_features(not_run), params, x[0], labels, config=cfg)
    with pytest.raises(ValueError, match=msg):
        inspect.monitor(inspect.from_features(not_run), x[0], labels, config=cfg)
    with pytest.raises(ValueError, match=r"^y: expected \[n\] labels .* n = 48, got \(5,\)"):
        inspect.monitor(inspect.from_features(not_run), x, labels[:5], config=cfg)
    with pytest.raises(ValueError, match=r"representation 'hidden_1' has shape \(16,\).*x has "
                                         r"shape \(10,\): a single sample without its batch "
                                         r"axis\? .*x\[None\]"):
        inspect.representations(inspect.from_mlp(), params, x[0])
