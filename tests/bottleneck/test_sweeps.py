"""Tests for layerlab.bottleneck._sweeps (masked widths, vectorised sweeps through loop.fit)."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from layerlab import bottleneck as bn
from layerlab import loop, nets


def test_masked_net_equals_narrow_net(key, x64):
    kx, kw, ky = jax.random.split(key, 3)
    x = jax.random.normal(kx, (7, 3))
    y = jax.random.normal(ky, (7, 2))
    P = nets.mlp_init(kw, [3, 6, 6, 2], init="he", b_std=0.1, dtype=jnp.float64)
    masks = bn.width_masks([4], 6, 2)[0]
    hp = {"masks": masks, "lam": jnp.asarray(0.1)}
    loss, aux = jax.jit(lambda p: bn.masked_loss(p, (x, y), hparams=hp, cost=bn.mse_cost))(P)
    narrow = [{"w": P[0]["w"][:, :4], "b": P[0]["b"][:4]},
              {"w": P[1]["w"][:4, :4], "b": P[1]["b"][:4]},
              {"w": P[2]["w"][:4], "b": P[2]["b"]}]
    ref = jax.jit(lambda p: bn.weight_loss(p, x, cost=lambda Z: bn.mse_cost(Z, y), lam=0.1))(
        narrow)
    np.testing.assert_allclose(loss, ref, rtol=1e-12)
    # and by hand: nets.mlp_apply of the narrow net, squared parameters summed
    by_hand = float(jnp.sum((nets.mlp_apply(narrow, x) - y) ** 2) / 7) + 0.1 * sum(
        float(jnp.sum(p["w"] ** 2) + jnp.sum(p["b"] ** 2)) for p in narrow)
    np.testing.assert_allclose(loss, by_hand, rtol=1e-12)
    # masked entries get exactly zero gradient
    g = jax.jit(jax.grad(lambda p: bn.masked_loss(p, (x, y), hparams=hp, cost=bn.mse_cost)[0]))(
        P)
    assert float(jnp.abs(g[0]["w"][:, 4:]).max()) == 0.0
    assert float(jnp.abs(g[0]["b"][4:]).max()) == 0.0
    assert float(jnp.abs(g[1]["w"][4:6]).max()) == 0.0
    assert float(jnp.abs(g[1]["w"][:, 4:6]).max()) == 0.0
    assert float(jnp.abs(g[2]["w"][4:6]).max()) == 0.0
    assert float(jnp.abs(g[1]["w"][:4, :4]).max()) > 0


def test_vectorised_sweep_matches_single_run(key):
    """The runs=True sweep gives the same final loss as the same run trained alone."""
    T = 1500
    x = jnp.eye(4)
    y = jax.nn.one_hot(jnp.array([0, 0, 1, 1]), 2)
    res = bn.width_sweep(key, x, y, widths=[1, 2, 3], depth=2, cost=bn.mse_cost, lam=1e-2,
                         seeds=2, adam_steps=T, adam_lr=3e-2, beta=0.0, progress=False)
    assert res["loss"].shape == (3, 2)
    # width 1 cannot fit two classes with one ReLU ray; widths 2 and 3 reach the same plateau
    assert res["best"][0] > 1.5 * res["best"][1]
    np.testing.assert_allclose(res["best"][1], res["best"][2], rtol=0.01)
    lb = bn.identity_inputs_loss_lower_bound(np.asarray(y), 1e-2)
    assert res["best"][2] >= lb * (1 - 1e-4)
    # rerun run index 3 (width 2, seed 1) alone, with the same init, mask and optimiser
    r = 3
    state_r = jax.tree.map(lambda a: a[r], res["state"])
    k_init, k_fit, _ = jax.random.split(key, 3)
    W0 = nets.mlp_init(jax.random.split(k_init, 6)[r], [4, 3, 2], init="he")
    hp = {"masks": bn.width_masks([2], 3, 1)[0], "lam": jnp.asarray(1e-2)}
    step = bn.sweep_step(bn.mse_cost, optax.adam(optax.cosine_decay_schedule(3e-2, T, 1e-2)),
                         beta=0.0)
    st, _ = loop.fit(step.step, step.init(W0, hp), (x, y), key=k_fit, steps=T, progress=False)
    for a, b in zip(jax.tree.leaves(st.params), jax.tree.leaves(state_r.params)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


@pytest.fixture(scope="module")
def polished():
    """A tiny smooth (tanh) width sweep, without and with 200 L-BFGS polish steps."""
    kx, ky, ks = jax.random.split(jax.random.key(0), 3)
    x = jax.random.normal(kx, (20, 3))
    y = jnp.tanh(x @ jax.random.normal(ky, (3, 2)))
    kw = dict(widths=(2, 4), depth=3, cost=bn.mse_cost, lam=1e-2, seeds=2, adam_steps=200,
              adam_lr=1e-2, activation=jnp.tanh, progress=False)
    return (x, y, bn.width_sweep(ks, x, y, **kw),
            bn.width_sweep(ks, x, y, polish_steps=200, **kw))


def test_polish_converges_every_run(polished):
    """The L-BFGS polish takes every run's gradient norm down >= 10x without raising its loss."""
    _, _, rough, fine = polished
    assert np.all(np.isfinite(fine["grad_norm"]))
    assert np.all(fine["grad_norm"] <= rough["grad_norm"] / 10), (
        rough["grad_norm"].tolist(), fine["grad_norm"].tolist())
    assert np.all(fine["loss"] <= rough["loss"] * (1 + 1e-6))
    # the returned numbers are those of the returned (polished) params
    x, y = polished[0], polished[1]

    @jax.jit  # run 0's loss in one program (eagerly, op by op: ~40 programs)
    def loss_of_run_0(state):
        W = jax.tree.map(lambda a: a[0], state.params)
        hp = jax.tree.map(lambda a: a[0], state.hparams)
        return bn.masked_loss(W, (x, y), hparams=hp, cost=bn.mse_cost, activation=jnp.tanh)[0]

    np.testing.assert_allclose(loss_of_run_0(fine["state"]), fine["loss"][0, 0], rtol=1e-5)


def test_vectorised_polish_matches_single_run(polished):
    """The runs=True polish gives the same run as bn.polish_step driven alone by loop.fit."""
    x, y, rough, fine = polished
    r = 1  # width 2, seed 1: converged (near a minimum, float32 rounding is not amplified)
    assert fine["grad_norm"].ravel()[r] < 1e-4
    pol = bn.polish_step(bn.mse_cost, activation=jnp.tanh)
    start = jax.tree.map(lambda a: a[r], rough["state"])
    st, hist = loop.fit(pol.step, pol.init(start.params, start.hparams), (x, y),
                        key=jax.random.key(1), steps=200, progress=False, check_finite=False)
    assert hist["train"]["loss"].shape == (200,)
    want = jax.tree.map(lambda a: a[r], fine["state"].params)
    for a, b in zip(jax.tree.leaves(st.params), jax.tree.leaves(want)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_polish_steps_is_checked():
    x, y = jnp.eye(4), jnp.eye(4)[:, :2]
    for bad, exc in ((-1, ValueError), (2.5, TypeError)):
        with pytest.raises(exc, match="polish_steps"):
            bn.width_sweep(jax.random.key(0), x, y, widths=[1], depth=2, cost=bn.mse_cost,
                           lam=1e-2, polish_steps=bad, progress=False)


def test_costs_take_samples_as_rows():
    Z = jnp.array([[1.0, 2.0], [0.0, -1.0], [3.0, 0.5]])       # [N, n_L] = [3, 2]
    y = jnp.array([[1.0, 0.0], [0.0, 0.0], [2.0, 0.5]])
    np.testing.assert_allclose(bn.mse_cost(Z, y), (4.0 + 1.0 + 1.0) / 3)
    labels = jnp.array([1, 0, 0])
    logp = jax.nn.log_softmax(Z, axis=1)
    np.testing.assert_allclose(bn.cross_entropy_cost(Z, labels),
                               -(logp[0, 1] + logp[1, 0] + logp[2, 0]) / 3, rtol=1e-6)
    for bad in (y.T, y[:2]):
        with pytest.raises(ValueError, match=r"y must be \[N, n_L\] = \(3, 2\)"):
            bn.mse_cost(Z, bad)


def test_plateau_start():
    assert bn.plateau_start([1, 2, 3, 4], [5.0, 2.0, 1.001, 1.0], rel_tol=0.01) == 3
    assert bn.plateau_start([1, 2, 3, 4], [5.0, 2.0, 1.05, 1.0], rel_tol=0.01) == 4
    assert bn.plateau_start([1, 2, 3, 4], [5.0, 2.0, 1.04, 1.0]) == 3  # default: 5 %
    assert bn.plateau_start([8, 2, 4], [1.0, 1.0, 5.0]) == 2  # the smallest, in any order


def _by_hand_loss(params, x, y, lam):
    """``mse + lam sum ||w||^2 + ||b||^2`` of ``layerlab.nets`` params, float64 numpy."""
    h = np.asarray(x, np.float64)
    for i, p in enumerate(params):
        h = h @ np.asarray(p["w"], np.float64) + np.asarray(p["b"], np.float64)
        if i < len(params) - 1:
            h = np.maximum(h, 0.0)
    reg = sum(np.sum(np.asarray(p["w"], np.float64) ** 2) + np.sum(np.asarray(p["b"],
              np.float64) ** 2) for p in params)
    return np.sum((h - np.asarray(y, np.float64)) ** 2) / h.shape[0] + lam * reg


_XI = np.array([[1, 2, 0], [0, 1, 3], [2, 2, 1], [1, 0, 0]], np.int32)
_SWEEP = dict(widths=[2], depth=2, cost=bn.mse_cost, lam=0.1, seeds=1, progress=False)


def test_integer_inputs_keep_a_float_lambda(key):
    # regression: integer x made the runs' lambda jnp.full(R, 0.1, int32) = 0 (the penalty
    # silently dropped)
    xi, y = _XI, np.array([0, 1, 1, 0])
    ri = bn.width_sweep(key, xi, y, adam_steps=2, **_SWEEP)
    np.testing.assert_allclose(np.asarray(ri["state"].hparams["lam"]), [0.1], rtol=1e-7)
    params = jax.tree.map(lambda a: a[0], ri["state"].params)
    want = _by_hand_loss(params, xi, np.eye(2)[y], 0.1)
    np.testing.assert_allclose(ri["loss"][0, 0], want, rtol=1e-5)


def test_zero_adam_steps_evaluates_the_initial_network(key):
    # regression: adam_steps=0 failed inside optax's cosine schedule (decay_steps=0)
    xi, y = _XI, np.array([0, 1, 1, 0])
    r0 = bn.width_sweep(key, xi, y, adam_steps=0, **_SWEEP)
    p0 = jax.tree.map(lambda a: a[0], r0["state"].params)
    init = nets.mlp_init(jax.random.split(jax.random.split(key, 3)[0], 1)[0], [3, 2, 2],
                         init="he")
    for a, b in zip(jax.tree.leaves(p0), jax.tree.leaves(init)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(r0["loss"][0, 0], _by_hand_loss(p0, xi, np.eye(2)[y], 0.1),
                               rtol=1e-5)


def test_float_label_vector_is_refused_by_name():
    # [N] float targets: neither [N, n_out] targets nor integer labels
    x = jnp.eye(4)
    msg = (r"^width_sweep: y must be \[N, n_out\] float targets or \[N\] integer labels, "
           r"got shape \(4,\) dtype float32")
    with pytest.raises(ValueError, match=msg):
        bn.width_sweep(jax.random.key(0), x, jnp.arange(4.0), widths=[1], depth=2,
                       cost=bn.mse_cost, lam=1e-2, progress=False)


def test_width_sweep_takes_an_array_w_std(key):
    """``w_std`` as a 0-d array (what ``nets.mlp_init`` takes) runs the same sweep as the
    Python float; a static jit argument made it fail with "non-hashable static arguments"."""
    x = jax.random.normal(key, (12, 3))
    y = jax.random.normal(jax.random.fold_in(key, 1), (12, 2))
    kw = dict(widths=[2], depth=2, cost=bn.mse_cost, lam=0.1, seeds=1, adam_steps=2,
              gd_steps=0, polish_steps=0, progress=False)
    a = bn.width_sweep(key, x, y, w_std=jnp.asarray(0.7), **kw)
    b = bn.width_sweep(key, x, y, w_std=0.7, **kw)
    np.testing.assert_array_equal(a["loss"], b["loss"])
    c = bn.width_sweep(key, x, y, w_std=1.4, **kw)
    assert not np.allclose(a["loss"], c["loss"])  # w_std does reach the init
