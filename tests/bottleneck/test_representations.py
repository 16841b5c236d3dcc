"""Tests for layerlab.bottleneck._representations (paper A: Sec. 2, Prop. 1)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from layerlab import bottleneck as bn
from layerlab import nets


def _rand_params(key, sizes, scale=1.0, beta=1.0):
    """Random paper-view weights ``W_l ~ N(0, 1/(n_{l-1}+1))`` ``[n_l, n_{l-1}+1]`` as params."""
    ks = jax.random.split(key, len(sizes) - 1)
    Ws = [scale * jax.random.normal(k, (m, n + 1)) / np.sqrt(n + 1)
          for k, n, m in zip(ks, sizes[:-1], sizes[1:])]
    return bn.to_mlp_params(Ws, beta)


def _mse(y):
    return lambda Z: jnp.sum((Z - y) ** 2) / y.shape[0]


def _min_norm_solution(A, Z):
    """Independent route for Psi: paper-view ``W`` of least norm with ``A W^T = Z`` (lstsq)."""
    Wt, *_ = np.linalg.lstsq(np.asarray(A), np.asarray(Z), rcond=None)
    return Wt.T


def _layer_inputs(Zs, x, beta):
    return [bn.augment(x, beta)] + [bn.augment(jax.nn.relu(Z), beta) for Z in Zs[:-1]]


def test_phi_psi_identity_and_min_norm(key, x64):
    kx, kw = jax.random.split(key)
    x = jax.random.normal(kx, (3, 7)).T                       # [N, n_0] = [7, 3]
    params = _rand_params(kw, [3, 5, 4, 2], beta=0.7)
    Zs = bn.representations(params, x, beta=0.7)
    assert [Z.shape for Z in Zs] == [(7, 5), (7, 4), (7, 2)]
    Ps = bn.weights_from_representations(Zs, x, beta=0.7)
    Zs2 = bn.representations(Ps, x, beta=0.7)
    for a, b in zip(Zs, Zs2):
        np.testing.assert_allclose(a, b, atol=1e-10)
    # Psi(Z) is the minimum-norm solution (paper view, bias column included): lstsq per layer
    for Wl, A, Z in zip(bn.from_mlp_params(Ps, 0.7), _layer_inputs(Zs, x, 0.7), Zs):
        np.testing.assert_allclose(Wl, _min_norm_solution(A, Z), atol=1e-10)
    # second route for Phi: layerlab.nets.mlp_apply on the same params (beta does not change
    # the function, only the norm)
    out, hidden = nets.mlp_apply(params, x, return_hidden=True)
    np.testing.assert_allclose(out, Zs[-1], atol=1e-12)
    for h, Z in zip(hidden, Zs[:-1]):
        np.testing.assert_allclose(h, jax.nn.relu(Z), atol=1e-12)


def test_weight_loss_of_psi_equals_representation_loss(key, x64):
    kx, kw, ky = jax.random.split(key, 3)
    x = jax.random.normal(kx, (3, 6)).T
    y = jax.random.normal(ky, (2, 6)).T
    Zs = bn.representations(_rand_params(kw, [3, 4, 5, 2]), x)
    cost, lam = _mse(y), 0.3
    lr = bn.representation_loss(Zs, x, cost=cost, lam=lam)
    lw = bn.weight_loss(bn.weights_from_representations(Zs, x), x, cost=cost, lam=lam)
    np.testing.assert_allclose(lr, lw, rtol=1e-12)
    # independent value: lstsq min-norm weights, norms summed by hand
    ref = float(cost(Zs[-1])) + lam * sum(
        np.sum(_min_norm_solution(A, Z) ** 2) for A, Z in zip(_layer_inputs(Zs, x, 1.0), Zs))
    np.testing.assert_allclose(lr, ref, rtol=1e-10)


def test_representation_loss_below_weight_loss_gap_is_null_component(key, x64):
    """L^r(Phi(W)) <= L_lambda(W), with gap = lambda * ||component outside Im Z^sigma||^2."""
    kx, kw, ky, kd = jax.random.split(key, 4)
    N = 4  # fewer points than n_{l-1}+1 so every layer has a null space
    x = jax.random.normal(kx, (6, N)).T
    y = jax.random.normal(ky, (2, N)).T
    cost, lam = _mse(y), 0.05
    P0 = _rand_params(kw, [6, 7, 6, 2])
    Pp = bn.weights_from_representations(bn.representations(P0, x), x)  # params in Im Psi
    Zs = bn.representations(Pp, x)
    lr = bn.representation_loss(Zs, x, cost=cost, lam=lam)
    np.testing.assert_allclose(bn.weight_loss(Pp, x, cost=cost, lam=lam), lr, rtol=1e-12)
    # strict inequality by exactly lambda * ||D||^2 for D with Z^sigma D^T = 0 (paper view)
    Ds = []
    for k, A, Wl in zip(jax.random.split(kd, 3), _layer_inputs(Zs, x, 1.0),
                        bn.from_mlp_params(Pp)):
        G = jax.random.normal(k, Wl.shape)
        P = jnp.linalg.pinv(A) @ A  # projector onto the row space of Z^sigma [N, n+1]
        Ds.append(G @ (jnp.eye(A.shape[1]) - P))
    W = bn.to_mlp_params([a + d for a, d in zip(bn.from_mlp_params(Pp), Ds)])
    for a, b in zip(bn.representations(W, x), Zs):
        np.testing.assert_allclose(a, b, atol=1e-10)
    gap = bn.weight_loss(W, x, cost=cost, lam=lam) - bn.representation_loss(
        bn.representations(W, x), x, cost=cost, lam=lam)
    expected = lam * sum(float(jnp.sum(D ** 2)) for D in Ds)
    assert expected > 0.1
    np.testing.assert_allclose(gap, expected, rtol=1e-9)
    # and a random W (not projected) is strictly above its L^r
    gap0 = bn.weight_loss(P0, x, cost=cost, lam=lam) - bn.representation_loss(
        bn.representations(P0, x), x, cost=cost, lam=lam)
    assert gap0 > 1e-3


def test_pinvs(key, x64):
    A = jax.random.normal(key, (4, 9))
    np.testing.assert_allclose(bn.tikhonov_pinv(A, 1e-10), jnp.linalg.pinv(A), atol=1e-7)
    np.testing.assert_allclose(bn.tikhonov_pinv(A.T, 1e-10), jnp.linalg.pinv(A.T), atol=1e-7)
    P = bn.tikhonov_pinv(A, 0.3)
    np.testing.assert_allclose(P, A.T @ jnp.linalg.inv(A @ A.T + 0.3 * jnp.eye(4)), atol=1e-12)
    np.testing.assert_allclose(bn.psd_pinv(A.T @ A, 0.3), P @ P.T, atol=1e-12)
    # rows: the kernel over samples of B = A^T [9, 4]
    Q = bn.tikhonov_pinv(A.T, 0.3)
    np.testing.assert_allclose(bn.psd_pinv(A.T @ A, 0.3), Q.T @ Q, atol=1e-12)


def test_bad_inputs_raise():
    x = jnp.ones((5, 3))
    p = [{"w": jnp.ones((3, 2)), "b": jnp.zeros(2)}]
    with pytest.raises(ValueError, match=r"x must be a matrix \[N, n_0\]"):
        bn.representations(p, jnp.ones(5))
    with pytest.raises(ValueError, match=r"params\[0\] \(layer 1\) must be"):
        bn.representations([{"w": jnp.ones((2, 2)), "b": jnp.zeros(2)}], x)
    with pytest.raises(ValueError, match=r"params\[1\] \(layer 2\) must be"):
        bn.weight_loss(p + [{"w": jnp.ones((3, 1)), "b": jnp.zeros(1)}], x,
                       cost=jnp.sum, lam=0.1)
    with pytest.raises(ValueError, match=r"Z_2 must have shape \[N, n_2\] = \[5, \?\]"):
        bn.weights_from_representations([jnp.ones((5, 2)), jnp.ones((4, 2))], x)
    with pytest.raises(ValueError, match="NaN"):
        bn.representations(p, x.at[0, 0].set(jnp.nan))


def _dead_neuron_reps(key):
    """Representations whose ``Z_1^sigma`` is rank deficient (a dead ReLU unit): a zero
    singular value, where a zero-ridge solve breaks down."""
    kx, kw = jax.random.split(key)
    x = jax.random.normal(kx, (6, 3))
    p = nets.mlp_init(kw, [3, 4, 2])
    p[0]["w"] = p[0]["w"].at[:, 0].set(0.0)
    p[0]["b"] = p[0]["b"].at[0].set(-1.0)
    return x, jax.jit(bn.representations)(p, x)  # one program (eagerly, op by op)


def _numpy_representation_loss(Zs, x, lam, cost_np, ridge=0.0):
    """Independent route in float64 numpy, rows convention: Moore-Penrose pseudo-inverses
    (``ridge = 0``) or ``(A^T A + rho I)^{-1} A^T``."""
    x = np.asarray(x, np.float64)
    Zs = [np.asarray(Z, np.float64) for Z in Zs]
    As = [x] + [np.maximum(Z, 0.0) for Z in Zs[:-1]]
    As = [np.concatenate([A, np.ones((A.shape[0], 1))], 1) for A in As]
    if ridge == 0:
        pinvs = [np.linalg.pinv(A) for A in As]
    else:
        pinvs = [np.linalg.solve(A.T @ A + ridge * np.eye(A.shape[1]), A.T) for A in As]
    reg = sum(np.sum((P @ Z) ** 2) for P, Z in zip(pinvs, Zs))
    return cost_np(Zs[-1]) + lam * reg


def test_zero_ridge_of_any_type_is_moore_penrose(key):
    # regression: a zero ridge that is not a Python number (numpy / jax scalar, a tracer
    # under jit or vmap) took the regularised solve at rho = 0: NaN on any rank-deficient input
    x, Zs = _dead_neuron_reps(key)
    ref = _numpy_representation_loss(Zs, x, 0.5, lambda Z: np.sum(Z ** 2))

    def loss(Zs, r):
        return bn.representation_loss(Zs, x, cost=lambda Z: jnp.sum(Z ** 2), lam=0.5, ridge=r)

    for r in (np.float32(0), jnp.array(0.0)):
        np.testing.assert_allclose(float(loss(Zs, r)), ref, rtol=1e-5)
    jitted = jax.jit(loss)
    np.testing.assert_allclose(float(jitted(Zs, 0.0)), ref, rtol=1e-5)
    vm = np.asarray(jax.jit(jax.vmap(loss, in_axes=(None, 0)))(Zs, jnp.array([0.0, 0.1])))
    np.testing.assert_allclose(float(vm[0]), ref, rtol=1e-5)
    ref_01 = _numpy_representation_loss(Zs, x, 0.5, lambda Z: np.sum(Z ** 2), ridge=0.1)
    np.testing.assert_allclose(float(vm[1]), ref_01, rtol=1e-5)
    # gradient at a traced zero: finite; on Z_L it is 2 Z_L + 2 lam (K_{L-1}^sigma)^+ Z_L
    g = jax.jit(jax.grad(loss))(Zs, 0.0)
    assert all(np.all(np.isfinite(np.asarray(a))) for a in g)
    A = np.concatenate([np.maximum(np.asarray(Zs[0], np.float64), 0), np.ones((6, 1))], 1)
    P = np.linalg.pinv(A, rcond=1e-10)                       # [n_1 + 1, N], A of rank 4
    Z2 = np.asarray(Zs[1], np.float64)
    np.testing.assert_allclose(g[1], 2 * Z2 + 2 * 0.5 * P.T @ P @ Z2, rtol=1e-4, atol=1e-5)
    # the pseudo-inverse itself, against numpy's
    At = A.T.astype(np.float32)                              # [5, 6]
    np.testing.assert_allclose(jax.jit(bn.tikhonov_pinv)(At, 0.0), P.T, rtol=1e-4, atol=1e-5)
    Pv = np.asarray(jax.jit(jax.vmap(bn.tikhonov_pinv, in_axes=(None, 0)))(
        At, jnp.array([0.0, 0.3])))
    np.testing.assert_allclose(Pv[0], P.T, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(Pv[1], A @ np.linalg.inv(A.T @ A + 0.3 * np.eye(5)),
                               rtol=1e-4, atol=1e-5)


def test_traced_zero_ridge_has_the_one_sided_ridge_derivative():
    # a traced zero ridge is the pseudo-inverse, with d/drho at 0 the one-sided derivative
    # -A^+ A^+T A^+ (tikhonov_pinv) and -2 (K^+)^2 (psd_pinv), against float64 finite
    # differences, on a full-rank and a rank-deficient (collinear rows) matrix
    with jax.enable_x64(True):
        A = jax.random.normal(jax.random.key(3), (4, 7), jnp.float64)  # full row rank
        Ad = A.at[3].set(A[0] + A[1])                                    # rank 3
        for M in (A, Ad):
            np.testing.assert_allclose(jax.jit(bn.tikhonov_pinv)(M, 0.0),
                                       np.linalg.pinv(np.asarray(M)), rtol=1e-10, atol=1e-12)
            for fn, arg in ((bn.tikhonov_pinv, M), (bn.psd_pinv, M @ M.T)):
                f = jax.jit(lambda r, fn=fn, arg=arg: jnp.sum(fn(arg, r) ** 2))
                h = 1e-4   # one-sided (ridge >= 0), Richardson-extrapolated: error O(h^2)
                fd = 2 * (f(h / 2) - f(0.0)) / (h / 2) - (f(h) - f(0.0)) / h
                g = jax.grad(f)(0.0)
                np.testing.assert_allclose(g, fd, rtol=1e-5)
                assert abs(float(g)) > 1e-3
        # a traced negative ridge: NaN, never a number
        assert np.isnan(jax.jit(bn.tikhonov_pinv)(A, -1.0)).all()


def _collinear_example():
    """The audit's example: x [6, 3] with x_3 = x_1 + x_2, so Z_0^sigma = [x, 1] has rank 3
    while the solve of its [4, 4] Gram matrix at ridge 0 stays finite (and wrong) in float32.
    Returns the float32 (x, y, Zs) and the float64 numpy (x, y, Zs) of the exactly collinear
    data (the float32 x_3 is collinear only up to rounding)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 3))
    x[:, 2] = x[:, 0] + x[:, 1]
    y = rng.standard_normal((6, 2))
    params = nets.mlp_init(jax.random.key(2), [3, 12, 2], init="he")
    w = [(np.asarray(p["w"], np.float64), np.asarray(p["b"], np.float64)) for p in params]
    Z1 = x @ w[0][0] + w[0][1]
    Zs64 = [Z1, np.maximum(Z1, 0.0) @ w[1][0] + w[1][1]]
    x32, y32 = jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.float32)
    return (x32, y32, jax.jit(bn.representations)(params, x32)), (x, y, Zs64)


def test_zero_ridge_is_moore_penrose_under_eager_jit_and_vmap_on_collinear_inputs():
    """Regression: a traced zero ridge took the solve at 0 wherever it was finite; on collinear
    inputs that solve is finite but wrong in float32, so jit/vmap gave other numbers than the
    eager call (L^r 6.9056 vs 6.8546 under vmap, +0.74 %; the attraction 31 % off).  Now eager,
    jit and vmap agree (float32, 1e-5) and equal float64 numpy pinv."""
    (x, y, Zs), (x64, y64, Zs64) = _collinear_example()
    cost = lambda Z: jnp.sum((Z - y) ** 2) / 6  # noqa: E731
    ref = _numpy_representation_loss(Zs64, x64, 1e-2, lambda Z: np.sum((Z - y64) ** 2) / 6)

    def f(r):
        return bn.representation_loss(Zs, x, cost=cost, lam=1e-2, ridge=r)

    eager = float(f(0.0))
    jitted = float(jax.jit(f)(0.0))
    vm = np.asarray(jax.jit(jax.vmap(f))(jnp.array([0.0, 0.1])))  # (eager vmap: ~70 programs)
    for v in (eager, jitted, float(vm[0])):
        np.testing.assert_allclose(v, ref, rtol=1e-5)
    np.testing.assert_allclose(float(vm[1]), float(f(0.1)), rtol=1e-5)
    # the attraction F_1 = -2 lam (K_0^sigma)^+ Z_1 (float64 numpy) and Psi, all three routes
    A0 = np.concatenate([x64, np.ones((6, 1))], 1)                     # rank 3
    att_ref = -2 * 1e-2 * np.linalg.pinv(A0 @ A0.T, hermitian=True) @ Zs64[0]

    def att(r):
        return bn.forces(Zs, x, lam=1e-2, ridge=r).attraction[0]

    for F in (att(0.0), jax.jit(att)(0.0), np.asarray(jax.jit(jax.vmap(att))(jnp.zeros(2)))[0]):
        np.testing.assert_allclose(F, att_ref, rtol=1e-4, atol=1e-5 * np.abs(att_ref).max())
    w_ref = np.linalg.pinv(A0) @ Zs64[0]                                 # [n_0 + 1, n_1]
    for P in (bn.weights_from_representations(Zs, x),
              jax.jit(lambda r: bn.weights_from_representations(Zs, x, ridge=r))(0.0)):
        np.testing.assert_allclose(P[0]["w"], w_ref[:3], rtol=1e-4, atol=1e-5)
    K = bn.covariances(Zs, x)
    lk = [bn.covariance_loss(K.K, K.K_sigma, Zs[-1], cost=cost, lam=1e-2, ridge=r)
          for r in (0.0,)] + [jax.jit(lambda r: bn.covariance_loss(
              K.K, K.K_sigma, Zs[-1], cost=cost, lam=1e-2, ridge=r))(0.0)]
    for v in lk:   # L^k via pinv of the [N, N] K^sigma: ~1e-3 relative in float32 (docs)
        np.testing.assert_allclose(float(v), ref, rtol=2e-3)


def test_negative_ridge_is_refused():
    x = jnp.ones((5, 3))
    Zs = [jnp.ones((5, 2)), jnp.ones((5, 1))]
    with pytest.raises(ValueError,
                       match=r"weights_from_representations: ridge must be >= 0.0, got -5.0"):
        bn.weights_from_representations(Zs, x, ridge=-5.0)
    with pytest.raises(ValueError, match=r"tikhonov_pinv: ridge must be >= 0.0, got -1.0"):
        bn.tikhonov_pinv(jnp.eye(2), -1.0)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_tikhonov_pinv_of_half_precision_is_computed_in_float32(dtype):
    """LAPACK has no half-precision kernels: 'NotImplementedError: Unsupported dtype bfloat16',
    naming no function."""
    A = jnp.asarray(np.random.default_rng(0).normal(size=(3, 5)), dtype)
    A64 = np.asarray(A, np.float64)  # the half-precision values, exactly
    got = bn.tikhonov_pinv(A)
    assert got.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(got), np.linalg.pinv(A64), rtol=1e-4, atol=1e-5)
    got = bn.tikhonov_pinv(A, 0.3)
    assert got.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(got),
                               A64.T @ np.linalg.inv(A64 @ A64.T + 0.3 * np.eye(3)),
                               rtol=1e-4, atol=1e-5)


def test_vector_lam_and_per_sample_cost_are_refused_but_vmap_over_lam_works(key):
    """Regression: lam = [0.1, 0.2] or a cost returning [N, n_L] broadcast to an array of
    losses; now a ValueError naming lam / cost, while vmap over lam (a traced scalar) gives
    each value's loss (second route: the scalar calls, and C + lam * ||Psi(Z)||^2 by hand)."""
    x = jax.random.normal(key, (6, 3))
    p = nets.mlp_init(jax.random.fold_in(key, 1), [3, 4, 2])
    Zs = bn.representations(p, x)
    cost = lambda Z: jnp.mean(Z ** 2)  # noqa: E731
    with pytest.raises(ValueError, match=r"representation_loss: lam must be a scalar"):
        bn.representation_loss(Zs, x, cost=cost, lam=jnp.array([0.1, 0.2]))
    with pytest.raises(ValueError, match=r"weight_loss: cost must return a scalar"):
        bn.weight_loss(p, x, cost=lambda Z: Z ** 2, lam=0.1)
    lams = jnp.array([0.1, 0.2])
    vm = jax.vmap(lambda lam: bn.representation_loss(Zs, x, cost=cost, lam=lam))(lams)
    reg = _numpy_representation_loss(Zs, x, 1.0, lambda Z: 0.0)
    for v, lam in zip(vm, (0.1, 0.2)):
        np.testing.assert_allclose(v, float(bn.representation_loss(Zs, x, cost=cost, lam=lam)),
                                   rtol=1e-6)
        np.testing.assert_allclose(v, float(cost(Zs[-1])) + lam * reg, rtol=1e-4)


def test_a_vector_ridge_is_refused_naming_ridge(key):
    """ridge is one Tikhonov parameter for every pseudo-inverse.  A vector (one per layer)
    gave raw broadcasting errors, and tikhonov_pinv of a [6, 3] matrix silently added
    diag(ridge) to A^T A (a per-column regulariser, not rho I): now refused statically."""
    params = nets.mlp_init(key, [3, 4, 2])
    x = jax.random.normal(jax.random.key(1), (6, 3))
    Zs = bn.representations(params, x)
    rv = jnp.array([0.1, 0.2, 0.3])
    cost = lambda z: jnp.mean(z ** 2)  # noqa: E731
    calls = {
        "tikhonov_pinv": lambda r: bn.tikhonov_pinv(x, r),
        "psd_pinv": lambda r: bn.psd_pinv(x @ x.T, r),
        "weights_from_representations": lambda r: bn.weights_from_representations(Zs, x,
                                                                                   ridge=r),
        "representation_loss": lambda r: bn.representation_loss(Zs, x, cost=cost, lam=0.1,
                                                                 ridge=r),
        "forces": lambda r: bn.forces(Zs, x, lam=0.1, ridge=r),
        "representation_step": lambda r: bn.representation_step(x, cost, None, lam=0.1,
                                                                ridge=r),
        "frank_wolfe_shallow": lambda r: bn.frank_wolfe_shallow(np.eye(3), 0.1, ridge=r),
    }
    for fn, call in calls.items():
        with pytest.raises(ValueError, match=rf"^{fn}: ridge must be a scalar, got shape "
                                             r"\(3,\)"):
            call(rv)
    # the scalar ridge is the Tikhonov inverse A^T (A A^T + rho I)^-1 (n > m: the Gram of A^T)
    xn = np.asarray(x, np.float64)
    np.testing.assert_allclose(bn.tikhonov_pinv(x, 0.2),
                               np.linalg.solve(xn.T @ xn + 0.2 * np.eye(3), xn.T),
                               rtol=1e-4, atol=1e-5)
