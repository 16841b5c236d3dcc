"""Tests for layerlab.bottleneck._reformulations (paper A: Prop. 1, Prop. 3, Sec. 3.1, eq. 4.1)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize
from jax.flatten_util import ravel_pytree

from layerlab import bottleneck as bn


def _rand_weights(key, sizes, scale=1.0):
    ks = jax.random.split(key, len(sizes) - 1)
    return [scale * jax.random.normal(k, (m, n + 1)) / np.sqrt(n + 1)
            for k, n, m in zip(ks, sizes[:-1], sizes[1:])]


def _mse(Y):
    return lambda Z: jnp.sum((Z - Y) ** 2) / Y.shape[1]


def _minimise(fun, params, gtol=1e-11, maxiter=20000):
    """L-BFGS in float64 on a pytree (test helper)."""
    flat, unravel = ravel_pytree(params)
    vg = jax.jit(jax.value_and_grad(lambda f: fun(unravel(f))))

    def f(v):
        val, g = vg(jnp.asarray(v))
        return float(val), np.asarray(g, dtype=np.float64)

    res = scipy.optimize.minimize(f, np.asarray(flat), jac=True, method="L-BFGS-B",
                                  options={"gtol": gtol, "ftol": 0.0, "maxiter": maxiter,
                                           "maxcor": 30})
    return unravel(jnp.asarray(res.x))


def _min_norm_solution(A, Z):
    """Independent route for Psi: min-norm W with W A = Z (numpy lstsq)."""
    W, *_ = np.linalg.lstsq(np.asarray(A).T, np.asarray(Z).T, rcond=None)
    return W.T


def test_phi_psi_identity_and_min_norm(key, x64):
    kx, kw = jax.random.split(key)
    X = jax.random.normal(kx, (3, 7))
    W = _rand_weights(kw, [3, 5, 4, 2])
    Zs = bn.representations(W, X, beta=0.7)
    Ws = bn.weights_from_representations(Zs, X, beta=0.7)
    Zs2 = bn.representations(Ws, X, beta=0.7)
    for a, b in zip(Zs, Zs2):
        np.testing.assert_allclose(a, b, atol=1e-10)
    # Psi(Z) is the minimum-norm solution: compare with lstsq on each layer
    As = [bn.augment(X, 0.7)] + [bn.augment(jax.nn.relu(Z), 0.7) for Z in Zs[:-1]]
    for Wl, A, Z in zip(Ws, As, Zs):
        np.testing.assert_allclose(Wl, _min_norm_solution(A, Z), atol=1e-10)
    # explicit forward pass written out by hand (rows = samples) agrees with Phi
    h = X.T
    for l, Wl in enumerate(W):  # noqa: E741
        h = h @ Wl[:, :-1].T + 0.7 * Wl[None, :, -1]
        if l < 2:
            np.testing.assert_allclose(h.T, Zs[l], atol=1e-12)
            h = jax.nn.relu(h)
    np.testing.assert_allclose(h.T, Zs[-1], atol=1e-12)


def test_weight_loss_of_psi_equals_representation_loss(key, x64):
    kx, kw, ky = jax.random.split(key, 3)
    X = jax.random.normal(kx, (3, 6))
    Y = jax.random.normal(ky, (2, 6))
    Zs = bn.representations(_rand_weights(kw, [3, 4, 5, 2]), X)
    cost, lam = _mse(Y), 0.3
    lr = bn.representation_loss(Zs, X, cost=cost, lam=lam)
    lw = bn.weight_loss(bn.weights_from_representations(Zs, X), X, cost=cost, lam=lam)
    np.testing.assert_allclose(lr, lw, rtol=1e-12)
    # independent value: lstsq min-norm weights, norms summed by hand
    As = [bn.augment(X, 1.0)] + [bn.augment(jax.nn.relu(Z), 1.0) for Z in Zs[:-1]]
    ref = float(cost(Zs[-1])) + lam * sum(
        np.sum(_min_norm_solution(A, Z) ** 2) for A, Z in zip(As, Zs))
    np.testing.assert_allclose(lr, ref, rtol=1e-10)


def test_representation_loss_below_weight_loss_gap_is_null_component(key, x64):
    """L^r(Phi(W)) <= L_lambda(W), with gap = lambda * ||component outside Im Z^sigma||^2."""
    kx, kw, ky, kd = jax.random.split(key, 4)
    N = 4  # fewer points than n_{l-1}+1 so every layer has a null space
    X = jax.random.normal(kx, (6, N))
    Y = jax.random.normal(ky, (2, N))
    cost, lam = _mse(Y), 0.05
    W0 = _rand_weights(kw, [6, 7, 6, 2])
    Wp = bn.weights_from_representations(bn.representations(W0, X), X)  # W in Im Psi
    Zs = bn.representations(Wp, X)
    lr = bn.representation_loss(Zs, X, cost=cost, lam=lam)
    np.testing.assert_allclose(bn.weight_loss(Wp, X, cost=cost, lam=lam), lr, rtol=1e-12)
    # strict inequality by exactly lambda * ||D||^2 for D with D Z^sigma = 0
    As = [bn.augment(X, 1.0)] + [bn.augment(jax.nn.relu(Z), 1.0) for Z in Zs[:-1]]
    Ds = []
    for k, A, Wl in zip(jax.random.split(kd, 3), As, Wp):
        G = jax.random.normal(k, Wl.shape)
        P = A @ jnp.linalg.pinv(A)  # projector onto the column space of Z^sigma
        Ds.append(G @ (jnp.eye(A.shape[0]) - P))
    W = [a + d for a, d in zip(Wp, Ds)]
    for a, b in zip(bn.representations(W, X), Zs):
        np.testing.assert_allclose(a, b, atol=1e-10)
    gap = bn.weight_loss(W, X, cost=cost, lam=lam) - bn.representation_loss(
        bn.representations(W, X), X, cost=cost, lam=lam)
    expected = lam * sum(float(jnp.sum(D ** 2)) for D in Ds)
    assert expected > 0.1
    np.testing.assert_allclose(gap, expected, rtol=1e-9)
    # and a random W (not projected) is strictly above its L^r
    gap0 = bn.weight_loss(W0, X, cost=cost, lam=lam) - bn.representation_loss(
        bn.representations(W0, X), X, cost=cost, lam=lam)
    assert gap0 > 1e-3


@pytest.mark.parametrize("ridge", [0.0, 0.1])
def test_covariance_loss_of_gamma_equals_representation_loss(key, x64, ridge):
    kx, kw, ky = jax.random.split(key, 3)
    X = jax.random.normal(kx, (3, 8))
    Y = jax.random.normal(ky, (2, 8))
    Zs = bn.representations(_rand_weights(kw, [3, 5, 12, 2]), X, beta=0.5)
    cost = _mse(Y)
    covs = bn.covariances(Zs, X, beta=0.5)
    np.testing.assert_allclose(covs.K_sigma[0], X.T @ X + 0.25, atol=1e-12)
    lk = jax.jit(lambda c, z: bn.covariance_loss(c.K, c.K_sigma, z, cost=cost, lam=0.2,
                                                 ridge=ridge))(covs, Zs[-1])
    lr = jax.jit(lambda Z: bn.representation_loss(Z, X, cost=cost, lam=0.2, beta=0.5,
                                                  ridge=ridge))(Zs)
    np.testing.assert_allclose(lk, lr, rtol=1e-9)


def test_pinvs(key, x64):
    A = jax.random.normal(key, (4, 9))
    np.testing.assert_allclose(bn.tikhonov_pinv(A, 1e-10), jnp.linalg.pinv(A), atol=1e-7)
    np.testing.assert_allclose(bn.tikhonov_pinv(A.T, 1e-10), jnp.linalg.pinv(A.T), atol=1e-7)
    P = bn.tikhonov_pinv(A, 0.3)
    np.testing.assert_allclose(P, A.T @ jnp.linalg.inv(A @ A.T + 0.3 * jnp.eye(4)), atol=1e-12)
    np.testing.assert_allclose(bn.psd_pinv(A.T @ A, 0.3), P @ P.T, atol=1e-12)


def test_attraction_closed_form(key, x64):
    kx, kw = jax.random.split(key)
    X = jax.random.normal(kx, (3, 9))
    Zs = bn.representations(_rand_weights(kw, [3, 4, 4, 2]), X)
    F = jax.jit(lambda Z: bn.forces(Z, X, lam=0.3))(Zs)
    covs = bn.covariances(Zs, X)
    for l in range(3):  # noqa: E741
        np.testing.assert_allclose(
            F.attraction[l], -2 * 0.3 * Zs[l] @ jnp.linalg.pinv(covs.K_sigma[l]), atol=1e-9)
    assert float(jnp.abs(F.repulsion[-1]).max()) == 0.0
    # repulsion = minus the gradient of the next layer's term (finite differences)
    E = jax.random.normal(key, Zs[0].shape)
    def f(t):
        A = bn.augment(jax.nn.relu(Zs[0] + t * E), 1.0)
        return 0.3 * jnp.sum((Zs[1] @ jnp.linalg.pinv(A)) ** 2)

    fd = (f(1e-6) - f(-1e-6)) / 2e-6
    np.testing.assert_allclose(-jnp.sum(F.repulsion[0] * E), fd, rtol=1e-5)


def test_forces_cancel_at_minimum(key, x64):
    """Wide, well-conditioned regime (Z_l^sigma of full column rank N): every Z is admissible,
    so the minimum of L_lambda maps to a critical point of L^r and the forces balance."""
    kx, kw, ky = jax.random.split(key, 3)
    X = jax.random.normal(kx, (5, 6))
    Y = jax.random.normal(ky, (4, 6))
    cost, lam = _mse(Y), 1e-2
    act = jnp.tanh
    loss = lambda W: bn.weight_loss(W, X, cost=cost, lam=lam, activation=act)  # noqa: E731
    W = _minimise(loss, _rand_weights(kw, [5, 6, 6, 4], scale=1.5))
    Zs = bn.representations(W, X, activation=act)
    for Z in Zs[:-1]:  # the regime the statement needs: Z^sigma of full column rank
        assert np.linalg.svd(bn.augment(act(Z), 1.0), compute_uv=False)[-1] > 1e-2
    force_fn = jax.jit(lambda Zs: bn.forces(Zs, X, lam=lam, activation=act))
    F = force_fn(Zs)
    gC = jax.grad(cost)(Zs[-1])
    for l in range(3):  # noqa: E741
        net = F.attraction[l] + F.repulsion[l] - (gC if l == 2 else 0.0)
        scale = float(jnp.linalg.norm(F.attraction[l]))
        assert scale > 1e-2
        assert float(jnp.linalg.norm(net)) < 1e-5 * scale, (l, float(jnp.linalg.norm(net)), scale)
    # away from the minimum they do not cancel
    F0 = force_fn(bn.representations(_rand_weights(ky, [5, 6, 6, 4]), X, activation=act))
    assert float(jnp.linalg.norm(F0.attraction[0] + F0.repulsion[0])) > 0.1 * float(
        jnp.linalg.norm(F0.attraction[0]))


def test_linear_network_closed_form(key, x64):
    kx, kw, ky = jax.random.split(key, 3)
    N, L = 3, 3
    X = jax.random.normal(kx, (N, N)) + 2 * jnp.eye(N)
    Y = jax.random.normal(ky, (3, N))
    cost, lam = _mse(Y), 0.05
    ident = lambda z: z  # noqa: E731
    loss = lambda W: bn.weight_loss(W, X, cost=cost, lam=lam, beta=0.0, activation=ident)  # noqa: E731
    W = _minimise(loss, _rand_weights(kw, [N, N, N, 3]))
    Zs = bn.representations(W, X, beta=0.0, activation=ident)
    K_ref = bn.linear_optimal_covariances(X, Zs[-1], L)
    for Zl, Kr in zip(Zs[:-1], K_ref):
        np.testing.assert_allclose(Zl.T @ Zl, Kr, rtol=1e-5, atol=1e-6 * float(jnp.abs(Kr).max()))
    reg = sum(float(jnp.sum(w ** 2)) for w in W)
    np.testing.assert_allclose(reg, bn.linear_optimal_regulariser(X, Zs[-1], L), rtol=1e-6)


def test_rank_sigma_bounds_and_caratheodory(key, x64):
    Z = jax.random.normal(key, (40, 3))
    covs_before = (Z.T @ Z, jax.nn.relu(Z).T @ jax.nn.relu(Z))
    Zr = bn.caratheodory_reduce(Z)
    assert Zr.shape[0] <= 3 * 4 < 40
    np.testing.assert_allclose(Zr.T @ Zr, covs_before[0], atol=1e-8)
    Sr = np.maximum(Zr, 0)
    np.testing.assert_allclose(Sr.T @ Sr, covs_before[1], atol=1e-8)
    b = bn.rank_sigma_bounds(Z)
    assert b["lower"] == 3 and b["upper"] == 12 and b["N_times_N_plus_1"] == 12
    assert b["lower"] <= Zr.shape[0] <= b["upper"]
    # a single ray: Rank_sigma = 1 exactly, bounds tight
    z = jnp.abs(jax.random.normal(key, (1, 3)))
    b1 = bn.rank_sigma_bounds(jnp.concatenate([z, 2 * z, 0.5 * z]))
    assert b1["lower"] == 1 and b1["upper"] == 1
    assert bn.caratheodory_reduce(jnp.concatenate([z, 2 * z, 0.5 * z])).shape[0] == 1


def test_bad_inputs_raise():
    X = jnp.ones((3, 5))
    with pytest.raises(ValueError, match="X must be a matrix"):
        bn.representations([jnp.ones((2, 4))], jnp.ones(5))
    with pytest.raises(ValueError, match=r"W_1 must have shape"):
        bn.representations([jnp.ones((2, 3))], X)
    with pytest.raises(ValueError, match=r"Z_2 must have shape"):
        bn.weights_from_representations([jnp.ones((2, 5)), jnp.ones((2, 4))], X)
    with pytest.raises(ValueError, match="NaN"):
        bn.representations([jnp.ones((2, 4))], X.at[0, 0].set(jnp.nan))
    with pytest.raises(ValueError, match="square invertible"):
        bn.linear_optimal_covariances(X, jnp.ones((1, 5)), 3)


@pytest.mark.parametrize("dtype,rtol", [("float64", 1e-12), ("float32", 2e-5)])
def test_linear_closed_form_rank_deficient_depth_24(dtype, rtol):
    """Issue 14: Z_L^T Z_L singular (n_L = 3 < N = 4); exact value L sum_i s_i^{2/L} from the
    singular values of Z_L X^{-1} in float64 numpy.  Before the fix the numerically-zero
    eigenvalue was raised to 1/24: +7.4 % in float64 (seeds 1, 3-6), +17 % in float32."""
    L = 24
    with jax.enable_x64(dtype == "float64"):
        for seed in range(8):
            rng = np.random.default_rng(seed)
            X = rng.standard_normal((4, 4)) + 2 * np.eye(4)
            Z = rng.standard_normal((3, 4))
            s = np.linalg.svd(Z @ np.linalg.inv(X), compute_uv=False)
            exact = L * np.sum(s ** (2.0 / L))
            Xd, Zd = jnp.asarray(X, dtype), jnp.asarray(Z, dtype)
            ours = float(bn.linear_optimal_regulariser(Xd, Zd, L))
            assert abs(ours - exact) <= rtol * exact, (seed, ours, exact)
            # hidden covariances: Tr[K_l (X^T X)^{-1}] = sum_i s_i^{2l/L} for every l
            Ks = bn.linear_optimal_covariances(Xd, Zd, L)
            G = np.linalg.inv(X.T @ X)
            for l in (1, 12, 23):  # noqa: E741
                want = np.sum(s ** (2.0 * l / L))
                got = float(np.sum(np.asarray(Ks[l - 1], np.float64) * G))
                assert abs(got - want) <= 50 * rtol * want, (seed, l, got, want)
