"""Tests for layerlab.bottleneck._diagnostics and _tasks (paper B)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from layerlab import bottleneck as bn
from layerlab import nets


def test_diagnostics_on_constructed_rank_k_net(key, x64):
    """A deep linear net whose layers are rank-2 partial isometries: exactly 2 singular values
    equal to 1, representations of rank 2, Jacobian rank 2 with log pdet 0."""
    d, L, k = 6, 5, 2
    Q, _ = jnp.linalg.qr(jax.random.normal(key, (d, d)))
    P = Q[:, :k] @ Q[:, :k].T
    Ws = [{"w": P.T, "b": jnp.zeros(d)} for _ in range(L)]
    ident = lambda z: z  # noqa: E731
    x = jax.random.normal(jax.random.fold_in(key, 1), (20, d))
    out = jax.jit(lambda W, v: bn.bottleneck_diagnostics(W, v, activation=ident, tol=1e-6))(Ws, x)
    np.testing.assert_array_equal(out["count_near_one"], [k] * L)
    np.testing.assert_array_equal(out["numerical_rank"], [k] * L)
    assert float(out["jacobian_rank"]) == k
    np.testing.assert_allclose(out["jacobian_log_pdet"], 0.0, atol=1e-9)
    # NTK trace of a linear net: sum_l ||d f / d W_l||^2, closed form for f = P^L x
    # dF/dW_l contributes ||P||_F^2-type terms: Tr Theta(x, x) = sum_l (||P x||^2 + beta^2 ...)
    # check it against a brute-force Jacobian instead (with respect to the nets params w, b:
    # for beta = 1 the same kernel as paper A's W_l = [w_l^T, b_l])
    J = jax.jacrev(lambda W: bn.network_fn(W, x[:1], activation=ident)[0])(Ws)
    brute = sum(float(jnp.sum(j ** 2)) for j in jax.tree.leaves(J))
    np.testing.assert_allclose(bn.ntk_trace(Ws, x[:1], activation=ident), brute, rtol=1e-9)


def test_jacobian_stats_against_finite_differences(key, x64):
    Ws = nets.mlp_init(key, [3, 5, 2], init="he")
    x = jax.random.normal(jax.random.fold_in(key, 2), (4, 3))
    js = jax.jit(lambda W, v: bn.jacobian_stats(W, v, activation=jnp.tanh))(Ws, x)
    f = jax.jit(lambda v: bn.network_fn(Ws, v[None], activation=jnp.tanh)[0])
    eps = 1e-6
    for i in range(4):
        J = np.stack([(f(x[i] + eps * e) - f(x[i] - eps * e)) / (2 * eps) for e in jnp.eye(3)], 1)
        s = np.linalg.svd(J, compute_uv=False)
        np.testing.assert_allclose(js["singular_values"][i], s, rtol=1e-6)


def test_symmetry_task_depends_on_two_statistics(key, x64):
    ds, info = bn.symmetry_task(key, 64, d=6, steps=5, noise=0.0, return_info=True)
    assert ds.x.shape == (64, 6) and ds.y.shape == (64, 5)
    # noise-free: rotating w_0 about the e axis leaves the targets unchanged
    w = jnp.asarray(ds.x[0], jnp.float64)
    R = jnp.eye(6).at[1:3, 1:3].set(jnp.array([[0.0, -1.0], [1.0, 0.0]]))
    M = jnp.outer(info["e"], info["e"])
    g = jax.grad(bn.symmetry_objective)
    def traj(w):
        out = []
        for _ in range(5):
            w = w - 0.02 * g(w, M)
            out.append(np.log(float(bn.symmetry_objective(w, M))))
        return np.array(out)
    np.testing.assert_allclose(traj(w), ds.y[0], rtol=1e-5)
    np.testing.assert_allclose(traj(R @ w), traj(w), rtol=1e-10)
    with pytest.raises(ValueError, match="need n >= 1"):
        bn.symmetry_task(key, 0)
