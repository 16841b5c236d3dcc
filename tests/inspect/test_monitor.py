"""layerlab.inspect._monitor and _plots: reports during loop.fit, compiled once; figures."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from layerlab import inspect, loop, nets

N, SIZES = 64, [6, 12, 10, 3]
CFG = inspect.InspectConfig(diagnostics=("dgl_linear", "cka", "stable_rank", "near_one"),
                            num_classes=3)


def _problem():
    kx, kp = jax.random.split(jax.random.key(0))
    x = jax.random.normal(kx, (N, SIZES[0]))
    labels = (x[:, 0] > 0).astype(jnp.int32) + (x[:, 1] > 0.5).astype(jnp.int32)
    params0 = nets.mlp_init(kp, SIZES, init="he")

    def loss_fn(params, batch):
        xb, yb = batch
        return optax.softmax_cross_entropy_with_integer_labels(nets.mlp_apply(params, xb),
                                                               yb).mean()

    return x, labels, params0, loop.optax_step(loss_fn, optax.adam(1e-2))


def test_monitor_compiles_once_and_matches_reports(tmp_path):
    x, labels, params0, ts = _problem()
    model = inspect.from_mlp()
    ref = jax.jit(lambda p: inspect.make_reference(model, p, x[:32], config=CFG))(params0)
    mon = inspect.monitor(model, x[:32], labels[:32], reference=ref, config=CFG,
                          extra=lambda s: {"wnorm": optax.tree.norm(s.params)})
    eval_fn = chex.assert_max_traces(mon.eval_fn, n=1)  # a retrace would raise
    state, hist = loop.fit(ts.step, ts.init(params0), (x, labels), key=jax.random.key(1),
                           steps=30, batch_size=16, eval_fn=eval_fn, eval_every=10,
                           eval_at_start=True, progress=False)
    h = mon.history(hist, state.params)
    np.testing.assert_array_equal(h.steps, [0, 10, 20, 30])
    assert h.layers == ("hidden_1", "hidden_2") and h.weights == ("0/w", "1/w", "2/w")
    assert h.layer_values["dgl_linear"].shape == (4, 2)
    assert h.weight_values["near_one"].shape == (4, 3)
    assert h.extra["wnorm"].shape == (4,)
    # the first entry is the initial model (CKA to itself = 1); the last is the final report
    np.testing.assert_allclose(h.layer_values["cka"][0], 1.0, atol=1e-5)
    # the last entry is the final model's report: recomputed in float64 numpy
    P = [{k: np.asarray(v, np.float64) for k, v in layer.items()} for layer in state.params]
    P0 = [{k: np.asarray(v, np.float64) for k, v in layer.items()} for layer in params0]
    xp = np.asarray(x[:32], np.float64)
    Y = np.eye(3)[np.asarray(labels[:32])] - 1.0 / 3

    def hiddens(params):
        hs, hh = [], xp
        for layer in params[:-1]:
            hh = np.maximum(hh @ layer["w"] + layer["b"], 0.0)
            hs.append(hh)
        return hs

    for i, (hh, h0) in enumerate(zip(hiddens(P), hiddens(P0))):
        d = hh.shape[1]
        eps2 = CFG.ridge_rel * np.sum(hh * hh) / d
        coef = np.linalg.solve(hh.T @ hh + eps2 * np.eye(d), hh.T @ Y)
        want = (np.sum(Y * Y) - np.sum((hh.T @ Y) * coef)) / 32
        np.testing.assert_allclose(h.layer_values["dgl_linear"][-1, i], want, rtol=2e-3)
        a, b = hh - hh.mean(0), h0 - h0.mean(0)
        cka = np.sum((b.T @ a) ** 2) / (np.linalg.norm(a.T @ a) * np.linalg.norm(b.T @ b))
        np.testing.assert_allclose(h.layer_values["cka"][-1, i], cka, rtol=1e-4)
        s = np.linalg.svd(a, compute_uv=False)
        np.testing.assert_allclose(h.layer_values["stable_rank"][-1, i], np.sum(s**2) / s[0] ** 2,
                                   rtol=1e-4)
    for j, layer in enumerate(P):
        s = np.linalg.svd(layer["w"], compute_uv=False)
        assert h.weight_values["near_one"][-1, j] == np.sum(np.abs(s - 1.0) < CFG.near_one_tol)
    assert not np.allclose(h.layer_values["cka"][-1], 1.0)  # training moved the layers
    r = h.report(2)
    assert r.layers == h.layers and r.layer_values["cka"].shape == (2,)
    final = jax.jit(lambda p: inspect.layer_report(
        inspect.from_mlp(), p, x[:32], labels[:32],
        config=inspect.InspectConfig(diagnostics=("stable_rank", "near_one"))))(state.params)
    p1 = inspect.plot_report(final, tmp_path / "report.png", title="t")
    p2 = inspect.plot_history(h, tmp_path / "history.png", extra="wnorm")
    for p in (p1, p2):
        assert (tmp_path / p).stat().st_size > 1000


def test_history_errors():
    x, labels, params0, _ = _problem()
    mon = inspect.monitor(inspect.from_mlp(), x, labels,
                          config=inspect.InspectConfig(diagnostics=("stable_rank",)))
    with pytest.raises(ValueError, match="fit_history: no evaluations"):
        mon.history({"step": np.arange(3)}, params0)
    with pytest.raises(KeyError, match="stable_rank/hidden_1"):
        mon.history({"eval_step": np.arange(2), "eval": {}}, params0)


def test_plots_leave_the_backend_alone_and_draw_model_only_reports(tmp_path):
    """No matplotlib.use / pyplot: the caller's backend stays; a report of model-level
    diagnostics only (the NTK alignments) is drawn as one panel (was: zero rows)."""
    import matplotlib
    import matplotlib.pyplot as plt

    x, labels, params0, _ = _problem()
    model = inspect.from_mlp()
    cfg = inspect.InspectConfig(diagnostics=inspect.MODEL_DIAGNOSTICS, num_classes=3,
                                ntk_method="jacobian", ntk_samples=8)
    ref = jax.jit(lambda p: inspect.make_reference(model, p, x[:16], config=cfg))(params0)
    rep = jax.jit(lambda p: inspect.layer_report(model, p, x[:16], labels[:16], reference=ref,
                                                 config=cfg))(params0)
    assert not rep.layer_values and not rep.weight_values
    old = matplotlib.get_backend()
    try:
        matplotlib.use("svg")
        n_figs = len(plt.get_fignums())
        paths = [inspect.plot_report(rep, tmp_path / "model.png", title="t"),
                 inspect.plot_report(rep, tmp_path / "model.pdf")]
        h = inspect.History(np.arange(2), (), (), {}, {},
                            {k: np.stack([v, v]) for k, v in rep.model_values.items()})
        paths.append(inspect.plot_history(h, tmp_path / "hist.png"))
        assert matplotlib.get_backend() == "svg"
        assert len(plt.get_fignums()) == n_figs  # nothing left in pyplot's registry
    finally:
        matplotlib.use(old)
    with open(paths[0], "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    for p in paths:
        assert (tmp_path / p).stat().st_size > 1000


def test_history_of_a_runs_fit_keeps_the_runs_axis(tmp_path):
    """fit(runs=True): eval metrics are [E, R]; the History keeps R ([E, R, L]), from the
    stacked final params or one run's, and each run's last entry is its own report."""
    x, labels, params0, ts = _problem()
    model = inspect.from_mlp()
    cfg = inspect.InspectConfig(diagnostics=("cka", "stable_rank", "spectral_norm"))
    ref = jax.jit(lambda p: inspect.make_reference(model, p, x[:24], config=cfg))(params0)
    mon = inspect.monitor(model, x[:24], labels[:24], reference=ref, config=cfg,
                          extra=lambda s: {"wnorm": optax.tree.norm(s.params)})
    R = 3
    states = jax.vmap(lambda k: ts.init(nets.mlp_init(k, SIZES, init="he")))(
        jax.random.split(jax.random.key(5), R))
    state, hist = loop.fit(ts.step, states, (x, labels), key=jax.random.key(1), steps=10,
                           batch_size=16, eval_fn=mon.eval_fn, eval_every=5, runs=True,
                           progress=False)
    one_run = jax.tree.map(lambda a: a[0], state.params)
    for p in (state.params, one_run):
        h = mon.history(hist, p)
        assert h.runs == R and h.layers == ("hidden_1", "hidden_2")
        assert h.layer_values["cka"].shape == (2, R, 2)
        assert h.weight_values["spectral_norm"].shape == (2, R, 3)
        assert h.extra["wnorm"].shape == (2, R)
    report = jax.jit(lambda p: inspect.layer_report(model, p, x[:24], labels[:24],
                                                    reference=ref, config=cfg))  # one compile
    for r in range(R):
        params_r = jax.tree.map(lambda a, r=r: a[r], state.params)
        want = report(params_r)
        got = h.report(1, run=r)
        for d in want.layer_values:
            np.testing.assert_allclose(got.layer_values[d], want.layer_values[d], rtol=1e-4)
        np.testing.assert_allclose(h.run(r).weight_values["spectral_norm"][1],
                                   want.weight_values["spectral_norm"], rtol=1e-4)
    assert h.run(1).runs is None and h.run(1).layer_values["cka"].shape == (2, 2)
    with pytest.raises(ValueError, match="holds 3 runs; pass run=r"):
        h.report(0)
    with pytest.raises(ValueError, match=r"params: the fit history holds 3 runs"):
        mon.history(hist, jax.tree.map(lambda a: jnp.stack([a, a]), params0))  # R = 2
    p = inspect.plot_history(h, tmp_path / "runs.png", extra="wnorm")
    assert (tmp_path / p).stat().st_size > 1000


def test_history_keeps_other_scalar_eval_metrics():
    """History.extra holds monitor(extra=...) metrics and also the scalar metrics an eval_fn
    wrapping monitor.eval_fn returns beside the report's (a test loss), equal to the loss
    recomputed at the initial and final params."""
    x, labels, params0, ts = _problem()
    x_te, y_te = x[32:], labels[32:]
    cfg = inspect.InspectConfig(diagnostics=("stable_rank",))
    mon = inspect.monitor(inspect.from_mlp(), x[:32], labels[:32], config=cfg,
                          extra=lambda s: {"wnorm": optax.tree.norm(s.params)})

    def test_loss(p):
        return optax.softmax_cross_entropy_with_integer_labels(nets.mlp_apply(p, x_te),
                                                               y_te).mean()

    def eval_fn(state):
        return {**mon.eval_fn(state), "test_loss": test_loss(state.params)}

    state, hist = loop.fit(ts.step, ts.init(params0), (x[:32], labels[:32]),
                           key=jax.random.key(1), steps=20, batch_size=16, eval_fn=eval_fn,
                           eval_every=10, eval_at_start=True, progress=False)
    h = mon.history(hist, state.params)
    assert sorted(h.extra) == ["test_loss", "wnorm"]
    assert h.extra["test_loss"].shape == (3,)
    np.testing.assert_allclose(h.extra["test_loss"][0], test_loss(params0), rtol=1e-5)
    np.testing.assert_allclose(h.extra["test_loss"][-1], test_loss(state.params), rtol=1e-5)
    np.testing.assert_allclose(h.extra["wnorm"][-1], optax.tree.norm(state.params), rtol=1e-5)
