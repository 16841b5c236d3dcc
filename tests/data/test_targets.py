"""Integer labels and one-hot rows are accepted consistently by the training entry points.

Each check compares the integer-label call with the same call on explicit one-hot rows
(``jax.nn.one_hot``, an independent route): identical results, and clear errors naming the
argument for out-of-range labels or wrong shapes."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from layerlab import bottleneck as bn
from layerlab import data, dgl, dmn, gnrev, loop, nets, probes


@pytest.fixture(scope="module")
def digits17():
    tr = data.load("digits", "train", classes=(1, 7), n=120, seed=0)
    return data.flatten(tr.x), tr.y


def test_as_targets_and_as_labels():
    y = np.array([0, 2, 1])
    np.testing.assert_array_equal(data.as_targets(y, 3), np.eye(3)[y])
    np.testing.assert_array_equal(data.as_labels(np.eye(3)[y], 3), y)
    with pytest.raises(ValueError, match=r"^as_targets: y must be integer labels in \[0, 3\), "
                                         r"got values in \[0, 3\]\.$"):
        data.as_targets(np.array([0, 3]), 3)
    with pytest.raises(ValueError, match=r"^as_labels: labels must be integer labels in "
                                         r"\[0, 3\), got values in \[-1, 0\]"):
        data.as_labels(np.array([-1, 0]), 3)
    with pytest.raises(TypeError, match=r"^as_targets: y of shape \[N\] must hold integer"):
        data.as_targets(np.array([0.0, 1.0]), 2)
    with pytest.raises(ValueError, match=r"^as_targets: y as targets \[N, C\] must have C = 4 "
                                         r"columns"):
        data.as_targets(np.zeros((2, 3)), 4)
    with pytest.raises(ValueError, match=r"^as_targets: y must have 5 rows \(one per sample\), "
                                         r"got shape \(3,\)"):
        data.as_targets(y, 3, n=5)
    # traceable: under jit only shapes are checked
    out = jax.jit(lambda v: data.as_targets(v, 3))(jnp.asarray(y))
    np.testing.assert_array_equal(out, np.eye(3)[y])


def test_dgl_entry_points_integer_labels_equal_one_hot(digits17):
    x, y = digits17
    key = jax.random.key(0)
    p0 = nets.mlp_init(key, [64, 8, 2], init="he")
    oh = jax.nn.one_hot(y, 2)
    kw = dict(optimizer=optax.adam(1e-2), steps=20, batch_size=40, progress=False)
    pi, _ = dgl.train_end_to_end(key, p0, x, y, **kw)
    po, _ = dgl.train_end_to_end(key, p0, x, oh, **kw)
    for a, b in zip(jax.tree.leaves(pi), jax.tree.leaves(po)):
        np.testing.assert_array_equal(a, b)
    cfg = dgl.LegoConfig(steps=3, eps_rel=0.05, batch_size=None)
    v = dgl.mf_variances(pi)
    li, _ = dgl.lego(key, p0, x, y, v, cfg, progress=False)
    lo, _ = dgl.lego(key, p0, x, oh, v, cfg, progress=False)
    for a, b in zip(jax.tree.leaves(li), jax.tree.leaves(lo)):
        np.testing.assert_array_equal(a, b)
    ri = dgl.random_features(p0, x, y)
    np.testing.assert_array_equal(ri[-1]["w"], dgl.random_features(p0, x, oh)[-1]["w"])
    logits = jax.jit(nets.mlp_apply)(li, x)  # one program (op by op: ~7)
    acc = float(probes.accuracy(logits, y))
    brute = np.mean(np.argmax(np.asarray(logits), 1) == np.asarray(y))
    assert acc == pytest.approx(brute)
    assert float(probes.accuracy(logits, oh)) == acc
    ev = dgl.monitor_fn(x, y, eps_rel=0.05)(loop.TrainState(li, None, 0))
    ev1 = dgl.monitor_fn(x, oh, eps_rel=0.05)(loop.TrainState(li, None, 0))
    assert float(ev["mse"]) == float(ev1["mse"])
    with pytest.raises(ValueError, match=r"^accuracy: labels must be integer labels in \[0, 2\)"):
        probes.accuracy(logits, jnp.full(len(x), 7))
    with pytest.raises(ValueError, match="labels"):
        probes.accuracy(logits, 7)
    with pytest.raises(ValueError, match=r"^train_end_to_end: y must have 120 rows"):
        dgl.train_end_to_end(key, p0, x, y[:10], **kw)


def test_gnrev_step_integer_labels_equal_one_hot_ce(digits17):
    x, y = digits17
    x = x[:40]
    y = y[:40]
    params, frozen = gnrev.revmlp_init(jax.random.key(0), dim=64, depth=1, bottleneck=64)
    P = gnrev.readout_init(jax.random.key(1), 64, 2)
    gn = gnrev.gn_step(frozen, P, learning_rate=0.5, loss="ce")
    step = jax.jit(gn.step)  # as fit runs it (op by op: ~70 compiles)
    si, mi = step(gn.init(params), (x, y), jax.random.key(2))
    so, mo = step(gn.init(params), (x, jax.nn.one_hot(y, 2)), jax.random.key(2))
    np.testing.assert_allclose(mi["loss"], mo["loss"], rtol=1e-6)
    for a, b in zip(jax.tree.leaves(si.params), jax.tree.leaves(so.params)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_dmn_train_and_evaluate_one_hot_equals_labels():
    tr = data.load("digits", "train", n=200, seed=0)
    te = data.load("digits", "test", n=100, seed=0)
    kw = dict(key=jax.random.key(0), epochs=1, batch_size=50, progress=False)
    ri = dmn.train_and_evaluate("d4,m,de10", tr.x, tr.y, te.x, te.y, 10, **kw)
    ro = dmn.train_and_evaluate("d4,m,de10", tr.x, np.eye(10)[tr.y], te.x, np.eye(10)[te.y],
                                10, **kw)
    assert ri["val_acc"] == ro["val_acc"] and ri["final_loss"] == ro["final_loss"]
    with pytest.raises(ValueError, match=r"^train_and_evaluate: y_train must be integer labels "
                                         r"in \[0, 10\)"):
        dmn.train_and_evaluate("d4,m,de10", tr.x, tr.y + 5, te.x, te.y, 10, **kw)


def test_width_sweep_mse_integer_labels_equal_one_hot():
    x = jnp.eye(4)
    y = jnp.array([0, 0, 1, 1])
    kw = dict(widths=[2], depth=2, cost=bn.mse_cost, lam=1e-2, seeds=1, adam_steps=30,
              progress=False)
    ri = bn.width_sweep(jax.random.key(0), x, y, **kw)
    ro = bn.width_sweep(jax.random.key(0), x, jax.nn.one_hot(y, 2), **kw)
    np.testing.assert_array_equal(ri["loss"], ro["loss"])


def test_target_errors_name_the_entry_point_called():
    """as_targets / as_labels once prefixed their messages with the argument only ("y:
    expected 120 rows ..."); each entry point now passes its own name down."""
    x = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    key = jax.random.key(0)
    p0 = nets.mlp_init(key, [3, 2, 2])
    cfg = dgl.LegoConfig(steps=1, batch_size=None)
    for f, exc, what in (
            (lambda: dgl.random_features(p0, x, np.array([0, 1, 1])), ValueError,
             r"^random_features: y must have 4 rows \(one per sample\), got shape \(3,\)"),
            (lambda: dgl.lego(key, p0, x, np.array([0, 1, 1, 5]), dgl.mf_variances(p0), cfg,
                              progress=False), ValueError,
             r"^lego: y must be integer labels in \[0, 2\), got values in \[0, 5\]"),
            (lambda: dgl.monitor_fn(x, np.array([0, 1, 1]), eps_rel=0.1)(
                loop.TrainState(p0, None, 0)), ValueError, r"^monitor_fn: y must have 4 rows"),
            (lambda: dgl.train_end_to_end(key, p0, x, np.zeros((4, 3)), optimizer=None,
                                          steps=1, progress=False), ValueError,
             r"^train_end_to_end: y as targets \[N, C\] must have C = 2 columns"),
            (lambda: probes.accuracy(jnp.zeros((4, 2)), None), TypeError,
             r"^accuracy: labels must be an array of integer labels \[N\] or one-hot rows"),
            (lambda: data.as_targets(np.zeros((2, 2, 2)), 2), ValueError,
             r"^as_targets: y must be integer labels \[N\] or targets \[N, 2\], got shape "
             r"\(2, 2, 2\)"),
            (lambda: data.as_labels(np.zeros((2, 2, 2)), 2, name="y_val", fn="f"), ValueError,
             r"^f: y_val must be integer labels \[N\] or one-hot rows \[N, C\]")):
        with pytest.raises(exc, match=what):
            f()
