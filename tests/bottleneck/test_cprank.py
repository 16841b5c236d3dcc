"""Tests for layerlab.bottleneck._cprank (paper A, Props. 13-14, Remark 23)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from layerlab import bottleneck as bn
from layerlab import nets


@pytest.mark.parametrize("N", [4, 6, 8])
def test_bipartite_matrix_structure(N):
    m = N // 2
    B = bn.bipartite_matrix(N)
    ref = np.block([[m * np.eye(m), np.ones((m, m))], [np.ones((m, m)), m * np.eye(m)]])
    np.testing.assert_array_equal(B, ref)
    edges = bn.complete_bipartite_edges(N)
    assert len(edges) == N * N // 4 and bn.is_triangle_free(edges, N)
    # B_N is PSD with eigenvalues 2m, m (N-2 times), 0
    ev = np.sort(np.linalg.eigvalsh(B))
    np.testing.assert_allclose(ev, np.sort([2 * m] + [m] * (N - 2) + [0]), atol=1e-10)
    assert bn.shallow_min_norm_identity_inputs(B) == pytest.approx(N * N)


def test_triangle_detection():
    assert not bn.is_triangle_free([(0, 1), (1, 2), (0, 2)], 3)
    assert bn.is_triangle_free([(0, 1), (1, 2), (2, 3), (3, 0)], 4)
    E = bn.incidence_matrix([(0, 1), (1, 2)], 3)
    np.testing.assert_array_equal(E.T @ E, [[1, 1, 0], [1, 2, 1], [0, 1, 1]])
    with pytest.raises(ValueError, match="distinct vertices"):
        bn.incidence_matrix([(0, 0)], 2)
    with pytest.raises(ValueError, match="even N"):
        bn.bipartite_matrix(5)


@pytest.mark.parametrize("N", [4, 6, 10])
def test_width_n_construction(N, x64):
    params, norm = bn.bipartite_width_n_network(N)
    out = bn.representations(params, jnp.eye(N), beta=0.0)[-1]
    np.testing.assert_allclose(out, bn.bipartite_matrix(N), atol=1e-9)
    np.testing.assert_allclose(out, nets.mlp_apply(params, jnp.eye(N)), atol=1e-12)  # b = 0
    np.testing.assert_allclose(norm, sum(float(jnp.sum(p["w"] ** 2)) for p in params),
                               rtol=1e-12)
    np.testing.assert_allclose(norm, N * np.sqrt((N + 2) * (N - 1)), rtol=1e-12)
    assert N * N <= norm < N * N + N
    # and it is a critical point-free upper bound: the lower bound N^2 is below it
    assert bn.shallow_min_norm_identity_inputs(np.asarray(out)) == pytest.approx(N * N)


def test_loss_lower_bound_is_soft_threshold_minimum(key):
    y = np.asarray(jax.random.normal(key, (3, 5)), dtype=np.float64).T   # [N, n_out] = [5, 3]
    lam, N = 0.07, 5
    f = lambda yh: np.sum((yh - y) ** 2) / N + 2 * lam * np.linalg.svd(yh, compute_uv=False).sum()  # noqa: E731
    U, s, Vt = np.linalg.svd(y, full_matrices=False)
    ystar = (U * np.maximum(s - lam * N, 0)) @ Vt
    lb = bn.identity_inputs_loss_lower_bound(y, lam)
    np.testing.assert_allclose(f(ystar), lb, rtol=1e-12)
    rng = np.random.default_rng(0)
    for _ in range(50):  # convex objective: random perturbations never go below
        assert f(ystar + 0.05 * rng.standard_normal(y.shape)) >= lb - 1e-12
    # N is the number of rows: the transposed targets give another (wrong) N
    assert bn.identity_inputs_loss_lower_bound(y.T, lam) != pytest.approx(lb)
