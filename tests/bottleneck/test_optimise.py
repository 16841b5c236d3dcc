"""Tests for layerlab.bottleneck._optimise (projected GD on L^r)."""
import jax
import jax.numpy as jnp
import numpy as np
import optax

from layerlab import bottleneck as bn


def test_projected_representation_gd_decreases_true_loss(key):
    kx, ky, kw = jax.random.split(key, 3)
    X = jax.random.normal(kx, (3, 12))
    Y = jnp.tanh(X[:2] * 2.0)
    cost = lambda Z: jnp.sum((Z - Y) ** 2) / 12  # noqa: E731
    W0 = bn.init_weights(kw, [3, 8, 8, 2])
    Zs0 = bn.representations(W0, X)
    rs = bn.representation_step(X, cost, optax.adam(1e-2), lam=1e-2, ridge=1e-4)
    step = jax.jit(rs.step)
    state = rs.init(Zs0)
    losses = []
    for _ in range(300):
        state, m = step(state, None, None)
        losses.append(float(m["weight_loss"]))
    # after projection Z is admissible: Z = Phi(Psi(Z)) and L^r(Z) equals the network's L_lambda
    Ws = bn.weights_from_representations(state.params, X, ridge=1e-4)
    for a, b in zip(bn.representations(Ws, X), state.params):
        np.testing.assert_allclose(a, b, atol=3e-4)  # float32, ridge 1e-4 (1.06e-4 seen)
    l0 = float(bn.weight_loss(W0, X, cost=cost, lam=1e-2))
    assert losses[-1] < 0.5 * l0
    np.testing.assert_allclose(
        bn.representation_loss(state.params, X, cost=cost, lam=1e-2, ridge=0.0),
        bn.weight_loss(bn.weights_from_representations(state.params, X), X, cost=cost, lam=1e-2),
        rtol=1e-3)
