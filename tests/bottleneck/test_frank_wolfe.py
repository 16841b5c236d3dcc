"""Tests for layerlab.bottleneck._frank_wolfe and the Remark 4 check (paper A, Sec. 3.3,
Props. 13, 19)."""
import jax
import jax.numpy as jnp
import numpy as np

from layerlab import bottleneck as bn
from layerlab.bottleneck import experiments as ex


def test_cp_rank_lower_bound_on_graph_matrices():
    # triangle-free: every edge needs its own nonnegative rank-one term (Prop. 13)
    for N in (4, 6, 8):
        r = bn.cp_rank_lower_bound(bn.bipartite_matrix(N))
        assert r["triangle_free"] and r["edge_packing"] == N * N // 4 == r["lower"]
    # a triangle: one clique covers it, the bound falls back to the rank (3 = cp-rank of I+11^T)
    A = np.eye(3) + np.ones((3, 3))
    r = bn.cp_rank_lower_bound(A)
    assert not r["triangle_free"] and r["edge_packing"] == 1 and r["lower"] == 3
    # a 5-cycle (triangle-free, 5 edges): the bound is 5 = the number of edges
    E = bn.incidence_matrix([(i, (i + 1) % 5) for i in range(5)], 5)
    assert bn.cp_rank_lower_bound(E.T @ E)["lower"] == 5


def test_frank_wolfe_reaches_the_infinite_width_loss():
    # one-hot targets with 2 classes (X = I_4): (Y^T Y)^{1/2} is CP, so the soft-threshold
    # bound (an independent closed form) is the infinite-width optimum
    y = np.eye(2)[[0, 0, 1, 1]]                       # [N, n_out] = [4, 2]
    lam = 1e-2
    r = bn.frank_wolfe_shallow(y, lam, iters=30)
    lb = bn.identity_inputs_loss_lower_bound(y, lam)
    assert abs(r["final_loss"] - lb) <= 1e-5 * lb
    assert r["gap"][-1] >= -1e-6 * lam  # no descent atom left
    assert r["width"] <= 4 and r["atoms"].shape == (4, r["width"])
    S = np.maximum(r["atoms"], 0.0)
    np.testing.assert_allclose(r["K_sigma"], (S * r["c"]) @ S.T, atol=1e-12)
    # the network built from the atoms has exactly this L_lambda (second route: weight space)
    with jax.enable_x64(True):
        params = jax.tree.map(jnp.asarray, r["params"])
        wl = bn.weight_loss(params, jnp.eye(4), cost=lambda Z: jnp.sum((Z - y) ** 2) / 4,
                            lam=lam, beta=0.0)
    np.testing.assert_allclose(float(wl), r["final_loss"], rtol=1e-6)


def test_remark4_local_minimum_whose_covariances_are_not():
    r = ex.remark4_check(0.1)
    assert r["grad_norm"] < 1e-12
    eig = np.sort(r["hessian_eigs"])
    assert eig[0] > -1e-10 and abs(eig[0]) < 1e-10 and eig[1] > 0.1  # PSD, one flat direction
    assert abs(r["loss"] - (0.1 * (2 - 0.1) + 1)) < 1e-12  # (1-c)^2 + 1 + 2 lam c, c = 1 - lam
    assert r["same_covariances"] < 1e-12
    assert abs(r["endpoint_drop"] - r["predicted_drop"]) < 1e-12 and r["endpoint_drop"] > 0
    assert r["cov_shift"] < 2e-4
