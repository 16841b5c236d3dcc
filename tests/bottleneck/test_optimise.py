"""Tests for layerlab.bottleneck._optimise (projected GD on L^r)."""
import jax
import jax.numpy as jnp
import numpy as np
import optax

from layerlab import bottleneck as bn
from layerlab import nets


def test_projected_representation_gd_decreases_true_loss(key):
    kx, ky, kw = jax.random.split(key, 3)
    x = jax.random.normal(kx, (3, 12)).T                      # [N, n_0] = [12, 3]
    y = jnp.tanh(x[:, :2] * 2.0)                              # [N, n_L] = [12, 2]
    cost = lambda Z: jnp.sum((Z - y) ** 2) / 12  # noqa: E731
    W0 = nets.mlp_init(kw, [3, 8, 8, 2], init="he")
    Zs0 = jax.jit(bn.representations)(W0, x)
    rs = bn.representation_step(x, cost, optax.adam(1e-2), lam=1e-2, ridge=1e-4)
    step = jax.jit(rs.step)
    state = rs.init(Zs0)
    losses = []
    for _ in range(300):
        state, m = step(state, None, None)
        losses.append(float(m["weight_loss"]))
    assert [Z.shape for Z in state.params] == [(12, 8), (12, 8), (12, 2)]
    l0 = float(jax.jit(lambda W: bn.weight_loss(W, x, cost=cost, lam=1e-2))(W0))
    assert losses[-1] < 0.5 * l0
    # After projection Z is admissible, so Z = Phi(Psi(Z)) exactly (Proposition 1) and
    # L^r(Z) equals the network's L_lambda.  The identity is exact only for the plain
    # pseudo-inverse (ridge=0; the Tikhonov one used in training biases Psi by
    # ~rho/sigma_min^2 ~ 1e-4 here), so it is checked in float64 with ridge=0 on the
    # float32 iterate: what is left is float32 rounding of Z (eps32 ~ 1.2e-7 relative)
    # amplified by the layers' conditioning (cond <= ~400 here) -> 1e-5 * max|Z|
    # leaves a > 50x margin over the measured 1.8e-7 absolute.
    with jax.enable_x64(True):
        x64 = jnp.asarray(np.asarray(x, np.float64))
        y64 = jnp.asarray(np.asarray(y, np.float64))
        Zs64 = [jnp.asarray(np.asarray(z, np.float64)) for z in state.params]
        cost64 = lambda Z: jnp.sum((Z - y64) ** 2) / 12  # noqa: E731

        @jax.jit  # one program (eager, each op compiles apart)
        def check(Zs64):
            P64 = bn.weights_from_representations(Zs64, x64, ridge=0.0)
            return (bn.representations(P64, x64),
                    bn.representation_loss(Zs64, x64, cost=cost64, lam=1e-2, ridge=0.0),
                    bn.weight_loss(P64, x64, cost=cost64, lam=1e-2))

        Zs_back, l_rep, l_weight = check(Zs64)
        scale = max(float(jnp.abs(z).max()) for z in Zs64)
        for a, b in zip(Zs_back, Zs64):
            np.testing.assert_allclose(a, b, atol=1e-5 * scale)
        np.testing.assert_allclose(
            l_rep, l_weight,
            rtol=1e-6)  # Gram-matrix route: cond(A)^2 ~ 1e5 times eps64; measured 7.7e-9
