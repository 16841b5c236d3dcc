"""Tests for layerlab.bottleneck._frank_wolfe and the Remark 4 check (paper A, Sec. 3.3,
Props. 13, 19)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from layerlab import bottleneck as bn
from layerlab import nets
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


def test_cp_rank_lower_bound_never_exceeds_a_known_decomposition():
    # regression: a tiny entry was read as a missing edge, so edges sharing a clique were
    # counted apart: v v^T (CP-rank 1) got 2
    v = np.array([1.0, 1e-3, 1e-3])
    r = bn.cp_rank_lower_bound(np.outer(v, v))
    assert r["lower"] == 1 and r["edge_packing"] == 1
    b1, b2 = np.array([1.0, 1e-4, 1e-4, 0.0]), np.array([0.0, 0.0, 1.0, 1.0])
    assert bn.cp_rank_lower_bound(np.outer(b1, b1) + np.outer(b2, b2))["lower"] <= 2
    # brute force: sums of r random nonnegative rank-one terms with tiny entries never bound
    # above r
    rng = np.random.default_rng(0)
    for _ in range(50):
        k = int(rng.integers(1, 4))
        B = rng.random((k, 5)) * rng.choice([0.0, 1e-4, 1.0], size=(k, 5))
        assert bn.cp_rank_lower_bound(B.T @ B)["lower"] <= k
    # an approximate B_N (an optimiser's output) keeps the N^2/4 bound when its small entries
    # are declared zeros, and only then
    Bn = bn.bipartite_matrix(6) + 1e-3 * (bn.bipartite_matrix(6) == 0)
    assert bn.cp_rank_lower_bound(Bn, rel_tol=0.05, zero_tol=0.05)["lower"] == 9
    assert bn.cp_rank_lower_bound(Bn)["edge_packing"] == 1


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_cp_rank_lower_bound_rank_tolerance_follows_the_dtype(dtype):
    """Regression: a fixed relative tolerance 1e-9 counted float32 rounding noise as rank: the
    K^sigma of a width-2 ReLU layer (CP-rank <= 2: two nonnegative neurons) got the bound 5.
    Known upper bound: the width, 2 = rank_sigma_bounds' upper; exact rank 2 (float64 numpy)."""
    with jax.enable_x64(dtype == jnp.float64):
        x = jax.random.normal(jax.random.key(0), (8, 3), dtype)
        params = jax.tree.map(lambda a: a.astype(dtype),
                              nets.mlp_init(jax.random.key(1), [3, 2, 1], init="he"))
        Zs = bn.representations(params, x)
        A = bn.covariances(Zs, x).K_sigma[1] - 1.0        # sigma(Z_1) sigma(Z_1)^T, [8, 8]
        assert A.dtype == dtype
        r = bn.cp_rank_lower_bound(A)
    S = np.maximum(np.asarray(Zs[0], np.float64), 0.0)  # the two neurons
    assert np.all(S >= 0) and S.shape[1] == 2
    assert np.linalg.matrix_rank(S @ S.T) == 2
    assert r["rank"] == 2 and r["lower"] <= bn.rank_sigma_bounds(Zs[0])["upper"] == 2
    # B_6 keeps its bound N^2/4 = 9 (rank 5) in float64 and float32
    for B in (bn.bipartite_matrix(6), bn.bipartite_matrix(6).astype(np.float32)):
        r6 = bn.cp_rank_lower_bound(B)
        assert (r6["lower"], r6["rank"], r6["edge_packing"]) == (9, 5, 9)
    if dtype == jnp.float32:   # the former fixed 1e-9 reads float32 noise (2.5e-8) as rank
        assert bn.cp_rank_lower_bound(A, rank_rtol=1e-9)["lower"] == 5
    with pytest.raises(ValueError, match=r"cp_rank_lower_bound: rank_rtol must be >= 0.0"):
        bn.cp_rank_lower_bound(A, rank_rtol=-1.0)
    with pytest.raises(ValueError, match=r"cp_rank_lower_bound: A has 9 non-finite"):
        bn.cp_rank_lower_bound(np.full((3, 3), np.nan))


def test_frank_wolfe_checks_its_arguments():
    B = bn.bipartite_matrix(4)
    with pytest.raises(ValueError, match=r"frank_wolfe_shallow: iters must be >= 1, got 0"):
        bn.frank_wolfe_shallow(B, 1e-2, iters=0)
    with pytest.raises(ValueError, match=r"frank_wolfe_shallow: lam must be finite .*got nan"):
        bn.frank_wolfe_shallow(B, float("nan"))
    with pytest.raises(ValueError, match=r"frank_wolfe_shallow: lam must be > 0.0 .*got 0.0"):
        bn.frank_wolfe_shallow(B, 0.0)
    with pytest.raises(ValueError,
                       match=r"identity_inputs_loss_lower_bound: lam must be >= 0.0 .*got -1.0"):
        bn.identity_inputs_loss_lower_bound(B, -1.0)
