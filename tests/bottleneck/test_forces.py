"""Tests for layerlab.bottleneck._forces (paper A: Sec. 3.1, attraction/repulsion and the
deep-linear closed form)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize
from jax.flatten_util import ravel_pytree

from layerlab import bottleneck as bn
from layerlab import nets


def _rand_params(key, sizes, scale=1.0):
    ks = jax.random.split(key, len(sizes) - 1)
    Ws = [scale * jax.random.normal(k, (m, n + 1)) / np.sqrt(n + 1)
          for k, n, m in zip(ks, sizes[:-1], sizes[1:])]
    return bn.to_mlp_params(Ws)


def _mse(y):
    return lambda Z: jnp.sum((Z - y) ** 2) / y.shape[0]


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


def test_attraction_closed_form(key, x64):
    kx, kw = jax.random.split(key)
    x = jax.random.normal(kx, (3, 9)).T
    Zs = jax.jit(bn.representations)(_rand_params(kw, [3, 4, 4, 2]), x)
    F = jax.jit(lambda Z: bn.forces(Z, x, lam=0.3))(Zs)

    @jax.jit  # the closed form in one program (eager, each op compiles apart)
    def closed_form(Zs):
        covs = bn.covariances(Zs, x)
        return [-2 * 0.3 * jnp.linalg.pinv(covs.K_sigma[l]) @ Zs[l] for l in range(3)]  # noqa: E741

    for l, want in enumerate(closed_form(Zs)):  # noqa: E741
        assert F.attraction[l].shape == Zs[l].shape
        np.testing.assert_allclose(F.attraction[l], want, atol=1e-9)
    assert float(jnp.abs(F.repulsion[-1]).max()) == 0.0
    # repulsion = minus the gradient of the next layer's term (finite differences)
    E = jax.random.normal(key, Zs[0].shape)

    @jax.jit
    def f(t):
        A = bn.augment(jax.nn.relu(Zs[0] + t * E), 1.0)
        return 0.3 * jnp.sum((jnp.linalg.pinv(A) @ Zs[1]) ** 2)

    fd = (f(1e-6) - f(-1e-6)) / 2e-6
    np.testing.assert_allclose(-jnp.sum(F.repulsion[0] * E), fd, rtol=1e-5)


def test_forces_cancel_at_minimum(key, x64):
    """Wide, well-conditioned regime (Z_l^sigma of full rank N): every Z is admissible, so
    the minimum of L_lambda maps to a critical point of L^r and the forces balance."""
    kx, kw, ky = jax.random.split(key, 3)
    x = jax.random.normal(kx, (5, 6)).T
    y = jax.random.normal(ky, (4, 6)).T
    cost, lam = _mse(y), 1e-2
    act = jnp.tanh
    loss = lambda p: bn.weight_loss(p, x, cost=cost, lam=lam, activation=act)  # noqa: E731
    params = _minimise(loss, _rand_params(kw, [5, 6, 6, 4], scale=1.5))
    reps = jax.jit(lambda p: bn.representations(p, x, activation=act))
    Zs = reps(params)
    for Z in Zs[:-1]:  # the regime the statement needs: Z^sigma of full rank N
        A = np.concatenate([np.tanh(np.asarray(Z)), np.ones((Z.shape[0], 1))], 1)
        assert np.linalg.svd(A, compute_uv=False)[-1] > 1e-2
    force_fn = jax.jit(lambda Zs: bn.forces(Zs, x, lam=lam, activation=act))
    F = force_fn(Zs)
    gC = jax.jit(jax.grad(cost))(Zs[-1])
    for l in range(3):  # noqa: E741
        net = F.attraction[l] + F.repulsion[l] - (gC if l == 2 else 0.0)
        scale = float(jnp.linalg.norm(F.attraction[l]))
        assert scale > 1e-2
        assert float(jnp.linalg.norm(net)) < 1e-5 * scale, (l, float(jnp.linalg.norm(net)), scale)
    # away from the minimum they do not cancel
    F0 = force_fn(reps(_rand_params(ky, [5, 6, 6, 4])))
    assert float(jnp.linalg.norm(F0.attraction[0] + F0.repulsion[0])) > 0.1 * float(
        jnp.linalg.norm(F0.attraction[0]))


def test_linear_network_closed_form(key, x64):
    kx, kw, ky = jax.random.split(key, 3)
    N, L = 3, 3
    x = (jax.random.normal(kx, (N, N)) + 2 * jnp.eye(N)).T
    y = jax.random.normal(ky, (3, N)).T
    cost, lam = _mse(y), 0.05
    ident = lambda z: z  # noqa: E731
    loss = lambda p: bn.weight_loss(p, x, cost=cost, lam=lam, beta=0.0, activation=ident)  # noqa: E731
    params = _minimise(loss, _rand_params(kw, [N, N, N, 3]))
    Zs = bn.representations(params, x, beta=0.0, activation=ident)
    K_ref = bn.linear_optimal_covariances(x, Zs[-1], L)
    for Zl, Kr in zip(Zs[:-1], K_ref):
        np.testing.assert_allclose(Zl @ Zl.T, Kr, rtol=1e-5, atol=1e-6 * float(jnp.abs(Kr).max()))
    reg = float(bn.weight_norm_sq(params, beta=0.0))
    assert reg == pytest.approx(sum(float(jnp.sum(p["w"] ** 2)) for p in params), rel=1e-12)
    np.testing.assert_allclose(reg, bn.linear_optimal_regulariser(x, Zs[-1], L), rtol=1e-6)


@pytest.mark.parametrize("dtype,rtol", [("float64", 1e-12), ("float32", 2e-5)])
def test_linear_closed_form_rank_deficient_depth_24(dtype, rtol):
    """Issue 14: Z_L Z_L^T singular (n_L = 3 < N = 4); exact value L sum_i s_i^{2/L} from the
    singular values of x^{-1} Z_L in float64 numpy.  Before the fix the numerically-zero
    eigenvalue was raised to 1/24: +7.4 % in float64 (seeds 1, 3-6), +17 % in float32."""
    L = 24
    with jax.enable_x64(dtype == "float64"):
        for seed in range(8):
            rng = np.random.default_rng(seed)
            x = (rng.standard_normal((4, 4)) + 2 * np.eye(4)).T     # [N, N], rows are samples
            Z = rng.standard_normal((3, 4)).T                       # [N, n_L]
            s = np.linalg.svd(np.linalg.inv(x) @ Z, compute_uv=False)
            exact = L * np.sum(s ** (2.0 / L))
            xd, Zd = jnp.asarray(x, dtype), jnp.asarray(Z, dtype)
            ours = float(bn.linear_optimal_regulariser(xd, Zd, L))
            assert abs(ours - exact) <= rtol * exact, (seed, ours, exact)
            # hidden covariances: Tr[K_l (x x^T)^{-1}] = sum_i s_i^{2l/L} for every l
            Ks = bn.linear_optimal_covariances(xd, Zd, L)
            G = np.linalg.inv(x @ x.T)
            for l in (1, 12, 23):  # noqa: E741
                want = np.sum(s ** (2.0 * l / L))
                got = float(np.sum(np.asarray(Ks[l - 1], np.float64) * G))
                assert abs(got - want) <= 50 * rtol * want, (seed, l, got, want)


def test_linear_closed_form_bad_inputs():
    with pytest.raises(ValueError, match="square invertible x"):
        bn.linear_optimal_covariances(jnp.ones((5, 3)), jnp.ones((5, 1)), 3)
    with pytest.raises(ValueError, match=r"Z_L must be \[N, n_L\] = \[5, \?\]"):
        bn.linear_optimal_regulariser(jnp.eye(5), jnp.ones((1, 5)), 3)
    # regression: depth was not checked (0 divided by zero, -2 gave a negative "minimum",
    # 2.5 a Python TypeError from range)
    x, Z = jnp.eye(3) + 0.1, jnp.ones((3, 2))
    for fn in (bn.linear_optimal_covariances, bn.linear_optimal_regulariser):
        name = fn.__name__
        for d in (0, -2):
            with pytest.raises(ValueError, match=rf"{name}: depth must be >= 1, got {d}\."):
                fn(x, Z, d)
        with pytest.raises(TypeError, match=rf"{name}: depth must be an integer, got float 2.5"):
            fn(x, Z, 2.5)


def test_forces_at_a_zero_ridge_of_any_type(key):
    # regression: np.float32(0) (or a jax zero) took the regularised solve at rho = 0 inside
    # the jitted forces: NaN as soon as a layer input is rank deficient (a dead ReLU unit)
    kx, kw = jax.random.split(key)
    x = jax.random.normal(kx, (6, 3))
    p = bn.to_mlp_params([jax.random.normal(kw, (4, 4)), jnp.ones((2, 5))])
    p[0]["w"] = p[0]["w"].at[:, 0].set(0.0)
    p[0]["b"] = p[0]["b"].at[0].set(-1.0)
    Zs = bn.representations(p, x)
    F0 = bn.forces(Zs, x, lam=0.3, ridge=0)
    ins = [np.asarray(x, np.float64)] + [np.maximum(np.asarray(Zs[0], np.float64), 0)]
    for r in (np.float32(0), jnp.array(0.0)):
        F = bn.forces(Zs, x, lam=0.3, ridge=r)
        for l in range(2):  # noqa: E741
            # independent route: F^att_l = -2 lam (K_{l-1}^sigma)^+ Z_l, float64 numpy, with
            # (A A^T)^+ = A^{+T} A^+ for the layer input A = [sigma(Z_{l-1}), 1]
            P = np.linalg.pinv(np.concatenate([ins[l], np.ones((6, 1))], 1), rcond=1e-10)
            want = -0.6 * P.T @ P @ np.asarray(Zs[l], np.float64)
            np.testing.assert_allclose(F.attraction[l], want, rtol=1e-4, atol=1e-5)
            np.testing.assert_array_equal(F.attraction[l], F0.attraction[l])
            np.testing.assert_array_equal(F.repulsion[l], F0.repulsion[l])


def test_forces_check_lam_and_ridge():
    x, Zs = jnp.ones((4, 3)), [jnp.ones((4, 2)), jnp.ones((4, 1))]
    with pytest.raises(ValueError, match=r"forces: lam must be >= 0.0 .*got -1.0"):
        bn.forces(Zs, x, lam=-1.0)
    with pytest.raises(ValueError, match=r"forces: lam must be finite .*got nan"):
        bn.forces(Zs, x, lam=float("nan"))
    with pytest.raises(ValueError, match=r"forces: ridge must be >= 0.0, got -5.0"):
        bn.forces(Zs, x, lam=1.0, ridge=-5.0)


def test_forces_and_diagnostics_compile_once_per_activation(key):
    """Regression: the activation is a static argument of the jitted cores, so a fresh
    functools.partial (identity comparison) compiled anew on every call, without bound.  Names
    and equal plain-number partials are now one static argument; jax.nn.relu twice compiles
    once.  Values: the named / partial activations give the forces of the explicit function."""
    import functools

    from layerlab.bottleneck._diagnostics import _diagnostics_jit
    from layerlab.bottleneck._forces import _forces_jit

    x = jax.random.normal(key, (9, 3))                    # shapes of no other test here
    params = nets.mlp_init(jax.random.fold_in(key, 1), [3, 7, 5, 2], init="he")

    def leaky():                                          # a new object at every call
        return functools.partial(jax.nn.leaky_relu, negative_slope=0.1)

    def explicit(z):
        return jnp.where(z >= 0, z, 0.1 * z)

    acts = ((jax.nn.relu, jax.nn.relu), ("tanh", jnp.tanh), (leaky, explicit))

    @jax.jit  # the explicit functions' references in one program (eagerly, jacobian_stats
    def reference(params, x):  # compiled op by op: ~6 s); called before the counts below
        out = []
        for _, ref in acts:
            Zs = bn.representations(params, x, activation=ref)
            Fr = bn.forces(Zs, x, lam=0.1, activation=ref)
            out.append((Zs, Fr, bn.jacobian_stats(params, x, activation=ref)["log_pdet"]))
        return out

    for (act, ref), (Zs, Fr, log_pdet) in zip(acts, reference(params, x)):
        make = act if act is leaky else (lambda a=act: a)
        n0 = _forces_jit._cache_size()
        F1 = bn.forces(Zs, x, lam=0.1, activation=make())
        assert _forces_jit._cache_size() == n0 + 1
        F2 = bn.forces(Zs, x, lam=0.1, activation=make())
        assert _forces_jit._cache_size() == n0 + 1      # no second compile
        for a, b, c in zip(F1.attraction + F1.repulsion, F2.attraction + F2.repulsion,
                           Fr.attraction + Fr.repulsion):
            np.testing.assert_array_equal(a, b)
            np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-6)
        m0 = _diagnostics_jit._cache_size()
        d1 = bn.bottleneck_diagnostics(params, x, activation=make(), ntk=False)
        bn.bottleneck_diagnostics(params, x, activation=make(), ntk=False)
        assert _diagnostics_jit._cache_size() == m0 + 1
        np.testing.assert_allclose(d1["jacobian_log_pdet"], log_pdet, rtol=1e-5)
    with pytest.raises(ValueError, match=r"forces: activation must be a callable or one of "
                                         r"\['elu', 'gelu', .*got 'rleu'"):
        bn.forces(Zs, x, lam=0.1, activation="rleu")
    with pytest.raises(TypeError, match=r"representations: activation must be a callable"):
        bn.representations(params, x, activation=3)
