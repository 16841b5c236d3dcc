"""inspect's optional ``probe_accuracy``: the held-out accuracy of a ridge linear classifier on
each layer, checked against scikit-learn's RidgeClassifier and by hand on separable data."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from sklearn.linear_model import RidgeClassifier

from layerlab import inspect
from layerlab.inspect._report import _holdout_mask


def _model_and_data(n=60, d_in=6, C=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d_in)).astype(np.float32)
    y = (np.argmax(x[:, :C] + 0.8 * rng.normal(size=(n, C)), 1)).astype(np.int32)
    A = rng.normal(size=(d_in, 4)).astype(np.float32)       # narrow layer (d < n_fit)
    B = rng.normal(size=(d_in, 90)).astype(np.float32)      # wide layer (d > n_fit: dual form)
    model = inspect.from_features(lambda p, xb: {"narrow": jnp.tanh(xb @ A),
                                                 "wide": jax.nn.relu(xb @ B),
                                                 "dead": 0.0 * xb})
    return model, jnp.asarray(x), y


def _sklearn_acc(h, y, held, ridge_rel):
    fit = ~held
    hc = h[fit] - h[fit].mean(0)
    ss = float(np.sum(hc.astype(np.float64) ** 2))
    alpha = ridge_rel * ss / h.shape[1] if ss > 0 else 1.0
    clf = RidgeClassifier(alpha=alpha, fit_intercept=True, solver="cholesky")
    clf.fit(h[fit].astype(np.float64), y[fit])
    return float(np.mean(clf.predict(h[held].astype(np.float64)) == y[held]))


def _sklearn_lstsq_acc(h, y, held):
    from sklearn.linear_model import LinearRegression
    fit = ~held
    T = np.eye(3)[y]
    reg = LinearRegression().fit(h[fit].astype(np.float64), T[fit])
    return float(np.mean(reg.predict(h[held].astype(np.float64)).argmax(1) == y[held]))


@pytest.mark.parametrize("ridge_rel", [1e-4, 0.3, 0.0])
def test_probe_accuracy_is_sklearns_ridge_classifier_on_the_held_out_samples(ridge_rel):
    model, x, y = _model_and_data()
    cfg = inspect.InspectConfig(diagnostics=("probe_accuracy",), num_classes=3,
                                ridge_rel=ridge_rel)
    rep = inspect.layer_report(model, None, x, y, config=cfg)
    assert rep.layers == ("narrow", "wide", "dead")
    held = _holdout_mask(len(y), 0.25)
    assert held.sum() == 15 and np.array_equal(held, _holdout_mask(len(y), 0.25))
    feats = {k: np.asarray(v) for k, v in model.features(None, x).items()}
    acc = _sklearn_acc if ridge_rel else (lambda h, y, held, _: _sklearn_lstsq_acc(h, y, held))
    want = [acc(feats[k].reshape(len(y), -1), y, held, ridge_rel) for k in rep.layers]
    np.testing.assert_allclose(np.asarray(rep.layer_values["probe_accuracy"]), want, atol=1e-6)
    # the same from one-hot float targets (argmax labels), and under jit
    onehot = jax.nn.one_hot(y, 3)
    rep2 = jax.jit(lambda xx, yy: inspect.layer_report(
        model, None, xx, yy, config=inspect.InspectConfig(diagnostics=("probe_accuracy",),
                                                          ridge_rel=ridge_rel)))(x, onehot)
    np.testing.assert_allclose(rep2.layer_values["probe_accuracy"], want, atol=1e-6)


def test_probe_accuracy_separates_what_is_separable_and_not_what_is_not():
    """By hand: a layer carrying the label is read perfectly, a layer of noise near chance,
    a dead layer predicts the fit split's majority class."""
    n = 80
    y = np.arange(n) % 2
    rng = np.random.default_rng(1)
    noise = rng.normal(size=(n, 3)).astype(np.float32)
    x = jnp.asarray(np.c_[(2.0 * y - 1)[:, None] + 0.01 * noise[:, :1], noise])
    model = inspect.from_features(lambda p, xb: {"label": xb[:, :1], "noise": xb[:, 1:],
                                                 "dead": jnp.zeros_like(xb)})
    rep = inspect.layer_report(model, None, x, y, config=inspect.InspectConfig(
        diagnostics=("probe_accuracy",), num_classes=2, probe_holdout=0.5))
    acc = dict(zip(rep.layers, np.asarray(rep.layer_values["probe_accuracy"]).tolist()))
    assert acc["label"] == 1.0  # (every other sample held out would hold out one class)
    held = _holdout_mask(n, 0.5)
    maj = np.bincount(y[~held]).argmax()
    assert acc["dead"] == pytest.approx(np.mean(y[held] == maj))
    assert acc["noise"] < 0.8


def test_probe_accuracy_is_optional_and_its_errors_name_the_fix():
    model, x, y = _model_and_data()
    assert "probe_accuracy" in inspect.OPTIONAL_DIAGNOSTICS
    assert "probe_accuracy" not in inspect.InspectConfig().diagnostics
    rep = inspect.layer_report(model, None, x, y, config=inspect.InspectConfig(num_classes=3,
                               diagnostics=("dgl_linear", "probe_accuracy")))
    assert "held-out" not in str(rep) and "probe_accuracy" in str(rep)
    with pytest.raises(ValueError, match=r"probe_accuracy needs class labels"):
        inspect.layer_report(model, None, x, jnp.ones((60, 1)), config=inspect.InspectConfig(
            diagnostics=("probe_accuracy",)))
    with pytest.raises(ValueError, match=r"needs at least 2 to fit"):
        inspect.layer_report(model, None, x[:3], y[:3], config=inspect.InspectConfig(
            diagnostics=("probe_accuracy",), num_classes=3, probe_holdout=0.5))
    for bad in (0.0, 1.0, -0.1, float("nan")):
        with pytest.raises(ValueError, match="probe_holdout"):
            inspect.InspectConfig(probe_holdout=bad)
    with pytest.raises(ValueError, match=r"need targets"):
        inspect.layer_report(model, None, x, None, config=inspect.InspectConfig(
            diagnostics=("probe_accuracy",)))


def test_probe_accuracy_on_a_wide_collapsed_layer_and_a_diverged_one():
    """A wide layer of rank 3 (d = 4096: the Cholesky of its ridge system gave NaN in float32)
    matches sklearn; a layer with a NaN is NaN under jit (not the share of class 0); under
    monitor, regression targets are refused when the monitor is built, not inside fit."""
    rng = np.random.default_rng(3)
    n = 80
    y = rng.integers(0, 3, n)
    z = np.eye(3)[y] + 0.3 * rng.normal(size=(n, 3))
    M = rng.normal(size=(3, 4096))
    x = jnp.asarray(z.astype(np.float32))
    model = inspect.from_features(lambda p, xb: {"wide": xb @ jnp.asarray(M, jnp.float32),
                                                 "nan": xb.at[0, 0].set(jnp.nan)})
    cfg = inspect.InspectConfig(diagnostics=("probe_accuracy",), num_classes=3)
    rep = jax.jit(lambda xx, yy: inspect.layer_report(model, None, xx, yy, config=cfg))(
        x, jnp.asarray(y))
    held = _holdout_mask(n, 0.25)
    h = np.asarray(model.features(None, x)["wide"])
    v = np.asarray(rep.layer_values["probe_accuracy"])
    assert v[0] == pytest.approx(_sklearn_acc(h, y, held, 1e-4), abs=1e-6) and v[0] > 0.6
    assert np.isnan(v[1])
    with pytest.raises(ValueError, match="probe_accuracy needs class labels"):
        inspect.monitor(model, x, jnp.ones((n, 1)), config=inspect.InspectConfig(
            diagnostics=("probe_accuracy",)))
