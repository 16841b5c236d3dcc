"""Tests for layerlab.bottleneck._sweeps (masked widths, vectorised sweeps through loop.fit)."""
import jax
import jax.numpy as jnp
import numpy as np
import optax

from layerlab import bottleneck as bn
from layerlab import loop


def test_masked_net_equals_narrow_net(key, x64):
    kx, kw, ky = jax.random.split(key, 3)
    x = jax.random.normal(kx, (7, 3))
    y = jax.random.normal(ky, (7, 2))
    Ws = bn.init_weights(kw, [3, 6, 6, 2])
    masks = bn.width_masks([4], 6, 2)[0]
    hp = {"masks": masks, "lam": jnp.asarray(0.1)}
    loss, aux = jax.jit(lambda W: bn.masked_loss(W, (x, y), hparams=hp, cost=bn.mse_cost))(Ws)
    narrow = [Ws[0][:4], jnp.concatenate([Ws[1][:4, :4], Ws[1][:4, -1:]], 1),
              jnp.concatenate([Ws[2][:, :4], Ws[2][:, -1:]], 1)]
    ref = jax.jit(lambda W: bn.weight_loss(W, x.T, cost=lambda Z: bn.mse_cost(Z, y), lam=0.1))(
        narrow)
    np.testing.assert_allclose(loss, ref, rtol=1e-12)
    # masked entries get exactly zero gradient
    g = jax.jit(jax.grad(lambda W: bn.masked_loss(W, (x, y), hparams=hp, cost=bn.mse_cost)[0]))(
        Ws)
    assert float(jnp.abs(g[0][4:]).max()) == 0.0
    assert float(jnp.abs(g[1][:, 4:6]).max()) == 0.0 and float(jnp.abs(g[2][:, 4:6]).max()) == 0.0
    assert float(jnp.abs(g[1][:4, :4]).max()) > 0


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
    lb = bn.identity_inputs_loss_lower_bound(np.asarray(y).T, 1e-2)
    assert res["best"][2] >= lb * (1 - 1e-4)
    # rerun run index 3 (width 2, seed 1) alone, with the same init, mask and optimiser
    r = 3
    state_r = jax.tree.map(lambda a: a[r], res["state"])
    k_init, k_fit, _ = jax.random.split(key, 3)
    W0 = bn.init_weights(jax.random.split(k_init, 6)[r], [4, 3, 2], beta=0.0)
    hp = {"masks": bn.width_masks([2], 3, 1)[0], "lam": jnp.asarray(1e-2)}
    step = bn.sweep_step(bn.mse_cost, optax.adam(optax.cosine_decay_schedule(3e-2, T, 1e-2)),
                         beta=0.0)
    st, _ = loop.fit(step.step, step.init(W0, hp), (x, y), key=k_fit, steps=T, progress=False)
    for a, b in zip(st.params, state_r.params):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_plateau_start():
    assert bn.plateau_start([1, 2, 3, 4], [5.0, 2.0, 1.001, 1.0], rel_tol=0.01) == 3
    assert bn.plateau_start([1, 2, 3, 4], [5.0, 2.0, 1.05, 1.0], rel_tol=0.01) == 4
