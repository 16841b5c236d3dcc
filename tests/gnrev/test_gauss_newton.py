"""Tests for layerlab.gnrev._gauss_newton: the exact GN direction (Prop. 4.4) and pinvs.

Exactness is proved against dense routes: the block Jacobian from ``jax.jacfwd`` and
``numpy.linalg.pinv`` (Moore–Penrose, App. N), the right-inverse property via a jvp, the
softmax Hessian pseudo-inverse, and hand-built matrices with known singular values.
"""
import dataclasses
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

import layerlab.gnrev as g


def _perturbed(key, dim, depth, **kw):
    p, f = g.revmlp_init(key, dim, depth, dtype=jnp.float64, **kw)
    p = jax.tree.map(lambda a: a + 0.2 * jax.random.normal(jax.random.key(5), a.shape), p)
    return p, f


@pytest.mark.filterwarnings("ignore::layerlab.gnrev.GramFloorWarning")  # requests below the floor
@pytest.mark.parametrize(
    "n,dim,bottleneck,first_linear,activation",
    [(4, 6, 7, False, jax.nn.relu), (3, 4, None, True, jnp.tanh)],
)
def test_block_update_is_moore_penrose_of_block_jacobian(
    x64, key, n, dim, bottleneck, first_linear, activation
):
    """(a) L * delta_l == pinv(J_l) eps, J_l = d y / d theta_l from a dense Jacobian."""
    depth = 3
    p, f = _perturbed(key, dim, depth, bottleneck=bottleneck, first_linear=first_linear,
                      activation=activation)
    x = jax.random.normal(jax.random.key(1), (n, dim))
    eps = jax.random.normal(jax.random.key(2), (n, dim))
    delta, info = jax.jit(
        lambda p, x, e: g.gn_direction(p, f, x, e, pinv=g.PinvConfig(rtol=1e-12, atol=1e-13),
                                       return_info=True)
    )(p, x, eps)
    np.testing.assert_array_equal(info.rank, n)  # full row rank: exact pseudo-inverses

    def block_jac(blk, p, x):
        th0, unravel = ravel_pytree(jax.tree.map(lambda a: a[blk], p))

        def out(th):
            b = unravel(th)
            q = {k: p[k].at[blk].set(b[k]) for k in p}
            return g.revmlp_apply(q, f, x).ravel()

        return jax.jacfwd(out)(th0)

    # every block's dense Jacobian in one jitted program (op by op it was ~70 compiles)
    jacs = jax.jit(lambda p, x: [block_jac(li, p, x) for li in range(depth)])(p, x)
    for li in range(depth):
        J = np.asarray(jacs[li])
        assert J.shape[0] <= J.shape[1]
        dense = np.linalg.pinv(J, rcond=1e-12) @ np.asarray(eps).ravel()
        ours = ravel_pytree(jax.tree.map(lambda a: depth * a[li], delta))[0]
        np.testing.assert_allclose(ours, dense, rtol=1e-7, atol=1e-9)
        # and the block alone hits the target: J_l (L delta_l) = eps
        np.testing.assert_allclose(J @ np.asarray(ours), np.asarray(eps).ravel(), atol=1e-9)


@pytest.mark.filterwarnings("ignore::layerlab.gnrev.GramFloorWarning")  # requests below the floor
def test_right_inverse_and_residual_certificate(x64, key):
    """(b) J delta = eps for the whole net (jvp), for the default gram and the svd solver."""
    p, f = _perturbed(key, 8, 2, bottleneck=12)
    x = jax.random.normal(jax.random.key(1), (9, 8))
    eps = jax.random.normal(jax.random.key(2), (9, 8))

    @jax.jit
    def run(p, x, eps):
        out = {}
        for solver in ("gram", "svd"):
            d = g.gn_direction(p, f, x, eps, pinv=g.PinvConfig(rtol=1e-10, atol=1e-12,
                                                                 solver=solver))
            _, jd = jax.jvp(lambda q: g.revmlp_apply(q, f, x), (p,), (d,))
            out[solver] = (jd, g.gn_residual(p, f, x, d, eps))
        # default truncation (1% of the largest singular value) may cut directions
        d = g.gn_direction(p, f, x, eps)
        out["default"] = g.gn_residual(p, f, x, d, eps)
        return out

    out = run(p, x, eps)
    for solver in ("gram", "svd"):
        jd, res = out[solver]
        np.testing.assert_allclose(jd, eps, atol=1e-9)
        assert float(res) < 1e-10
    assert 0.0 <= float(out["default"]) < 1.0


@pytest.mark.filterwarnings("ignore::layerlab.gnrev.GramFloorWarning")  # requests below the floor
def test_underdetermined_warns_and_reports_rank(x64, key):
    p, f = _perturbed(key, 4, 1, bottleneck=3)  # d' + 1 = 4 < n = 6
    x = jax.random.normal(jax.random.key(1), (6, 4))
    eps = jax.random.normal(jax.random.key(2), (6, 4))
    with pytest.warns(UserWarning, match=r"n=6 exceeds the rank bound of block 0 \(rank <= 4\)"):
        d, info = g.gn_direction(p, f, x, eps, pinv=g.PinvConfig(rtol=1e-12, atol=1e-13),
                                 return_info=True)
    assert int(info.rank.max()) == 4
    # the target can no longer be hit exactly
    assert float(g.gn_residual(p, f, x, d, eps)) > 1e-3


def test_bad_inputs(key):
    p, f = g.revmlp_init(key, 4, 1, bottleneck=8)
    x = jnp.ones((3, 4))
    with pytest.raises(ValueError, match="non-finite"):
        g.gn_direction(p, f, x, x.at[0, 0].set(jnp.inf))
    with pytest.raises(TypeError, match="pinv must be a PinvConfig"):
        g.gn_direction(p, f, x, x, pinv="svd")
    with pytest.raises(ValueError, match="PinvConfig.method must be one of"):
        g.PinvConfig(method="svd")
    with pytest.raises(ValueError, match="combine must be one of"):
        g.gn_direction(p, f, x, x, combine="sum")
    with pytest.raises(ValueError, match="key"):
        g.gn_direction(p, f, x, x, pinv=g.PinvConfig(method="noise"))
    with pytest.raises(ValueError, match=r"shape \(n, 4\)"):
        g.gn_direction(p, f, x, jnp.ones((3, 6)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # n = 3 <= d' + 1: no warning
        g.gn_direction(p, f, x, x)
    # PinvConfig's integers: numpy integers are ints, bools and floats are not
    assert g.PinvConfig(rank=np.int64(3)).rank == 3
    assert type(g.PinvConfig(rank=np.int64(3)).rank) is int
    for bad in (True, 2.0):
        with pytest.raises(TypeError, match=r"^PinvConfig\.rank must be an integer"):
            g.PinvConfig(rank=bad)
    with pytest.raises(ValueError, match=r"^PinvConfig\.oversample must be >= 0, got -1"):
        g.PinvConfig(oversample=-1)
    # loss_value: logits [n, C] and one label per row, named
    with pytest.raises(ValueError, match=r"^loss_value: logits must have rank 2"):
        g.loss_value(jnp.ones(4), jnp.array([0, 1, 0, 1]))
    with pytest.raises(ValueError, match=r"^loss_value: labels have 3 rows but logits 4"):
        g.loss_value(jnp.ones((4, 2)), jnp.array([0, 1, 0]))
    with pytest.raises(ValueError, match=r"^loss_value: loss must be one of"):
        g.loss_value(jnp.ones((4, 2)), jnp.array([0, 1, 0, 1]), loss="xent")


def test_target_dtype_must_match_the_parameters(key):
    """A float64 target for a float32 net is refused by name, as revmlp_apply refuses x (it
    failed inside jax.jvp); lists are converted like arrays; n = 0 is refused."""
    p, f = g.revmlp_init(key, 6, 2, bottleneck=5)
    x = jax.random.normal(jax.random.key(1), (4, 6))
    eps = jax.random.normal(jax.random.key(2), (4, 6))
    with jax.enable_x64(True):
        with pytest.raises(TypeError, match=r"^gn_direction: target has dtype float64 but the "
                                            r"parameters are float32; cast it with "
                                            r"target\.astype\(jnp\.float32\)"):
            g.gn_direction(p, f, x, eps.astype(jnp.float64))
        with pytest.raises(TypeError, match=r"^gn_direction: x has dtype float64"):
            g.gn_direction(p, f, x.astype(jnp.float64), eps)
        with pytest.raises(TypeError, match=r"^gn_direction: y has dtype float64"):
            g.gn_direction(p, f, x, eps, y=g.revmlp_apply(p, f, x).astype(jnp.float64))
    ref = g.gn_direction(p, f, x, eps)
    got = g.gn_direction(p, f, np.asarray(x).tolist(), np.asarray(eps).tolist())
    for k in p:
        np.testing.assert_array_equal(got[k], ref[k])
    with pytest.raises(ValueError, match=r"gn_direction: x must hold at least one sample"):
        g.gn_direction(p, f, jnp.zeros((0, 6)), jnp.zeros((0, 6)))
    with pytest.raises(ValueError, match=r"gn_direction: y .* must have the shape of x"):
        g.gn_direction(p, f, x, eps, y=x[:3])
    with pytest.raises(ValueError, match=r"gn_direction: target must have the shape of x"):
        g.gn_direction(p, f, x, eps[:3])


def _matrix(s, n, k, seed=0):
    rng = np.random.default_rng(seed)
    u, _ = np.linalg.qr(rng.normal(size=(n, len(s))))
    w, _ = np.linalg.qr(rng.normal(size=(k, len(s))))
    return u @ np.diag(s) @ w.T, u, w


@pytest.mark.filterwarnings("ignore::layerlab.gnrev.GramFloorWarning")  # requests below the floor
@pytest.mark.parametrize("shape", [(5, 9), (9, 5)])  # both Gram orientations
@pytest.mark.parametrize("solver", ["gram", "svd", "rsvd"])
def test_pinv_regularisations_on_known_spectrum(x64, key, shape, solver):
    n, k = shape
    s = np.array([10.0, 3.0, 1.0, 0.05, 1e-9])
    a, u, w = _matrix(s, n, k)
    # truncate: max(1% of s_max, atol) = 0.1 -> keeps 3
    pt, rank, cond = g.regularized_pinv(jnp.asarray(a), g.PinvConfig(solver=solver))
    ref = w[:, :3] @ np.diag(1 / s[:3]) @ u[:, :3].T
    np.testing.assert_allclose(pt, ref, atol=1e-8)
    assert int(rank) == 3 and abs(float(cond) - 10.0) < 1e-6
    # atol wins when larger: atol = 2 -> keeps 2
    pt, rank, _ = g.regularized_pinv(jnp.asarray(a), g.PinvConfig(atol=2.0, solver=solver))
    assert int(rank) == 2
    # damp: 1 / (s + 0.01 s_max), singular values above atol only
    damp = g.PinvConfig(method="damp", solver=solver)
    pdmp, rank, cond = g.regularized_pinv(jnp.asarray(a), damp)
    ref = w[:, :4] @ np.diag(1 / (s[:4] + 0.1)) @ u[:, :4].T
    np.testing.assert_allclose(pdmp, ref, atol=1e-7)
    assert int(rank) == 4
    np.testing.assert_allclose(float(cond), 10.1 / 0.15, rtol=1e-6)
    # noise: plain pinv of a + 0.1 std(a) * N(key)
    pn, rank, _ = g.regularized_pinv(jnp.asarray(a), g.PinvConfig(method="noise", solver=solver),
                                    key=key)
    noisy = a + 0.1 * a.std() * np.asarray(jax.random.normal(key, a.shape, jnp.float64))
    np.testing.assert_allclose(pn, np.linalg.pinv(noisy), atol=1e-7)
    assert int(rank) == min(n, k)


def test_softmax_newton_target_is_pinv_of_hessian(x64):
    rng = np.random.default_rng(0)
    logits = jnp.asarray(rng.normal(size=(6, 5)) * 2)
    labels = jnp.asarray(rng.integers(0, 5, size=6))
    got = g.output_target(logits, labels, loss="ce", target="newton")
    p = np.asarray(jax.nn.softmax(logits))
    y = np.eye(5)[np.asarray(labels)]
    for i in range(6):
        H = np.diag(p[i]) - np.outer(p[i], p[i])
        np.testing.assert_allclose(got[i], np.linalg.pinv(H) @ (p[i] - y[i]), atol=1e-9)
    # also for soft labels, and the gradient target is p - y
    ys = jnp.asarray(rng.dirichlet(np.ones(5), size=6))
    got = g.softmax_newton_target(logits, ys)
    for i in range(6):
        H = np.diag(p[i]) - np.outer(p[i], p[i])
        np.testing.assert_allclose(got[i], np.linalg.pinv(H) @ (p[i] - ys[i]), atol=1e-9)
    np.testing.assert_allclose(g.output_target(logits, labels, loss="ce"), p - y, atol=1e-12)
    # MSE: target = f - y for both choices; the gradient of the summed loss
    t = jnp.asarray(rng.normal(size=(6, 5)))
    for kind in ("gradient", "newton"):
        np.testing.assert_allclose(g.output_target(logits, t, loss="mse", target=kind),
                                   logits - t)
    grad = jax.grad(lambda f: 6 * g.loss_value(f, t, loss="mse"))(logits)
    np.testing.assert_allclose(grad, logits - t, atol=1e-12)
    grad = jax.grad(lambda f: 6 * g.loss_value(f, labels, loss="ce"))(logits)
    np.testing.assert_allclose(grad, p - y, atol=1e-12)


@pytest.mark.filterwarnings("ignore::layerlab.gnrev.GramFloorWarning")  # requests below the floor
@pytest.mark.parametrize("shape", [(3, 5), (5, 3)])  # both Gram orientations
def test_pinv_solve_one_right_hand_side_is_a_vector(x64, shape):
    """e of shape [n] is one right-hand side: x = pinv(a) e of shape [k] (it was the [k, n]
    outer-product-like broadcast)."""
    rng = np.random.default_rng(1)
    a = rng.normal(size=shape)
    e = rng.normal(size=shape[0])
    ref = np.linalg.pinv(a) @ e
    exact = g.PinvConfig(rtol=1e-12, atol=1e-14)
    for solver in ("gram", "svd", "rsvd"):
        cfg = g.PinvConfig(rtol=1e-12, atol=1e-14, solver=solver)
        x, rank, _ = g.pinv_solve(jnp.asarray(a), jnp.asarray(e), cfg)
        assert x.shape == (shape[1],)
        np.testing.assert_allclose(x, ref, rtol=1e-9, atol=1e-11)
        assert int(rank) == min(shape)
    xm, _, _ = g.pinv_solve(jnp.asarray(a), jnp.asarray(e[:, None]), exact)
    np.testing.assert_allclose(xm[:, 0], ref, rtol=1e-9, atol=1e-11)


def _pinv_solve_sq(a, e, method):
    return jnp.sum(g.pinv_solve(a, e, g.PinvConfig(method=method))[0] ** 2)


# module-level and jitted: the 8 cases below share 4 programs per function (the two shapes
# times the two methods; op by op the first case alone was ~100 compiles)
_pinv_solve_sq_jit = jax.jit(_pinv_solve_sq, static_argnames="method")
_pinv_solve_sq_grad = jax.jit(jax.grad(_pinv_solve_sq), static_argnames="method")


@pytest.mark.filterwarnings("ignore::layerlab.gnrev.GramFloorWarning")  # requests below the floor
@pytest.mark.parametrize("rank", [3, 2])
@pytest.mark.parametrize("transpose", [False, True])  # both Gram orientations
@pytest.mark.parametrize("method", ["truncate", "damp"])
def test_pinv_solve_gradient_of_rank_deficient_matrix(x64, rank, transpose, method):
    """The Gram solver's gradient is finite and matches central differences for a
    rank-deficient a (sqrt of a zero Gram eigenvalue had an infinite derivative: NaN)."""
    rng = np.random.default_rng(rank)
    a = rng.normal(size=(4, rank)) @ rng.normal(size=(rank, 6))
    if transpose:
        a = a.T
    e = jnp.asarray(rng.normal(size=(a.shape[0], 2)))

    def f(a):
        return _pinv_solve_sq_jit(a, e, method=method)

    a = jnp.asarray(a)
    grad = _pinv_solve_sq_grad(a, e, method=method)
    assert bool(jnp.all(jnp.isfinite(grad)))
    for seed in range(3):
        d = jnp.asarray(np.random.default_rng(10 + seed).normal(size=a.shape))
        h = 1e-6
        fd = (f(a + h * d) - f(a - h * d)) / (2 * h)
        np.testing.assert_allclose(float(jnp.sum(grad * d)), float(fd), rtol=1e-5, atol=1e-7)


def test_pinv_solve_checks_shapes():
    a = jnp.ones((4, 5))
    with pytest.raises(ValueError, match=r"pinv_solve: a must have rank 2, got shape \(4,\)"):
        g.pinv_solve(jnp.ones(4), jnp.ones((4, 2)))
    with pytest.raises(ValueError, match=r"pinv_solve: e must have one row per row of a .*"
                                         r"got shape \(3, 2\)"):
        g.pinv_solve(a, jnp.ones((3, 2)))
    with pytest.raises(ValueError, match=r"pinv_solve: e must have rank 1 or 2"):
        g.pinv_solve(a, jnp.ones((4, 2, 1)))
    with pytest.raises(ValueError, match=r"regularized_pinv: a must have rank 2"):
        g.regularized_pinv(jnp.ones((2, 3, 4)))
    with pytest.raises(TypeError, match=r"pinv_solve: config must be a PinvConfig"):
        g.pinv_solve(a, jnp.ones(4), "svd")


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_half_precision_is_solved_in_float32(key, dtype):
    """bfloat16 / float16 reach the GN solve (np.finfo(bfloat16) and float16 eigh failed):
    the pseudo-inverse is taken in float32 and cast back; checked against float64 NumPy."""
    rng = np.random.default_rng(0)
    a = jnp.asarray(rng.normal(size=(4, 9)), dtype)
    e = jnp.asarray(rng.normal(size=(4, 2)), dtype)
    ref = np.linalg.pinv(np.asarray(a, np.float64)) @ np.asarray(e, np.float64)
    x, rank, cond = g.pinv_solve(a, e)
    assert x.dtype == dtype and cond.dtype == jnp.float32 and int(rank) == 4
    np.testing.assert_allclose(np.asarray(x, np.float64), ref, rtol=0, atol=0.02)
    if dtype == jnp.float16:
        return  # the same path as bfloat16 below
    p, f = g.revmlp_init(key, 6, 2, bottleneck=8)
    x = jax.random.normal(jax.random.key(1), (4, 6))
    eps = jax.random.normal(jax.random.key(2), (4, 6))

    def cast(t, dt):
        return jax.tree.map(
            lambda v: v.astype(dt) if jnp.issubdtype(v.dtype, jnp.floating) else v, t)

    @jax.jit
    def run(p, f, x, eps):  # the direction in half precision, J d = eps checked in float32
        d = g.gn_direction(*cast((p, f, x, eps), dtype))
        return d, g.gn_residual(p, f, x, cast(d, jnp.float32), eps)

    d, res = run(p, f, x, eps)
    assert all(d[k].dtype == dtype for k in d)
    assert float(res) < 0.03  # bfloat16 keeps 8 significant bits


def test_softmax_newton_target_is_finite_for_confident_predictions():
    """float32 logit margins of 90 and 100 underflow p_c of the other classes to 0; the
    target is still the closed form mean(r) - r, r = y / p, taken in float64 (it was NaN)."""
    logits = np.array([[90.0, 0.0, 0.0], [0.0, 100.0, -5.0], [1.0, -2.0, 0.5],
                       [0.0, 0.0, 120.0]], np.float32)
    y = np.eye(3)[[0, 1, 2, 2]]
    y[2] = [0.2, 0.5, 0.3]  # a soft row with no underflow
    got = np.asarray(g.softmax_newton_target(jnp.asarray(logits), jnp.asarray(y, jnp.float32)))
    z = logits.astype(np.float64)
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    r = y / p
    ref = r.mean(1, keepdims=True) - r
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got[0], [-2 / 3, 1 / 3, 1 / 3], rtol=1e-6)
    # H u = p - y in float64 (H = diag p - p pᵀ): the Newton equation holds
    for i in range(4):
        H = np.diag(p[i]) - np.outer(p[i], p[i])
        np.testing.assert_allclose(H @ got[i].astype(np.float64), p[i] - y[i], atol=1e-6)
    # integer labels through output_target, and a finite gradient
    lab = jnp.array([0, 1])
    t = g.output_target(jnp.asarray(logits[:2]), lab, target="newton")
    np.testing.assert_allclose(t, ref[:2], rtol=1e-6, atol=1e-6)
    grad = jax.grad(lambda f: g.softmax_newton_target(f, jnp.asarray(y[:2], jnp.float32))
                    .sum())(jnp.asarray(logits[:2]))
    assert np.all(np.isfinite(grad))
    with pytest.raises(ValueError, match=r"softmax_newton_target: y must have the shape"):
        g.softmax_newton_target(jnp.asarray(logits), jnp.ones((4, 2)))


def test_combine_conventions_differ_by_exactly_depth(x64, key):
    """per_block (authors' code) = L x average (Eqs. 16-17), for the direction and the step."""
    depth = 3
    p, f = _perturbed(key, 6, depth, bottleneck=12)
    x = jax.random.normal(jax.random.key(1), (5, 6))
    eps = jax.random.normal(jax.random.key(2), (5, 6))
    @jax.jit  # one program (op by op the jvp and the steps were ~70 compiles)
    def directions(p, x, eps):
        avg = g.gn_direction(p, f, x, eps)
        per = g.gn_direction(p, f, x, eps, combine="per_block")
        _, jd = jax.jvp(lambda q: g.revmlp_apply(q, f, x), (p,), (per,))
        return avg, per, jd

    avg, per, jd = directions(p, x, eps)
    for k in p:
        np.testing.assert_allclose(per[k], depth * avg[k], rtol=1e-12, atol=1e-14)
    # the averaged direction is a right inverse, the per-block one overshoots by L
    np.testing.assert_allclose(jd, depth * eps, atol=1e-8)
    # one training step: per_block at alpha equals average at L * alpha
    P = g.readout_init(jax.random.key(3), 6, 3)
    labels = jnp.array([0, 1, 2, 0, 1])
    s_avg = g.gn_step(f, P, learning_rate=0.3 * depth)
    s_per = g.gn_step(f, P, learning_rate=0.3, combine="per_block")
    a, ma = jax.jit(s_avg.step)(s_avg.init(p), (x, labels), key)
    b, mb = jax.jit(s_per.step)(s_per.init(p), (x, labels), key)
    for k in p:
        np.testing.assert_allclose(a.params[k], b.params[k], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ma["residual"], mb["residual"], rtol=1e-8)
    assert float(ma["residual"]) < 1e-6


@pytest.mark.filterwarnings("ignore::layerlab.gnrev.GramFloorWarning")  # requests below the floor
def test_rank_warning_names_linear_first_block(x64, key):
    """first_linear: block 0's [xV, 1] has rank <= d/2 + 1 even though d' + 1 >= n."""
    p, f = g.revmlp_init(key, 8, 2, bottleneck=32, first_linear=True, dtype=jnp.float64)
    assert g.rank_bounds(f, 32) == [5, 33]
    x = jax.random.normal(jax.random.key(1), (7, 8))  # n = 7 > d/2 + 1 = 5
    eps = jax.random.normal(jax.random.key(2), (7, 8))
    with pytest.warns(UserWarning, match=r"n=7 exceeds the rank bound of block 0 "
                                         r"\(linear, rank <= 5\)"):
        d, info = g.gn_direction(p, f, x, eps, return_info=True)
    assert int(info.rank[0].max()) <= 5 and int(info.rank[1].min()) == 7
    assert float(g.gn_residual(p, f, x, d, eps)) > 1e-3  # not a right inverse
    p2, f2 = g.revmlp_init(key, 8, 2, bottleneck=32, dtype=jnp.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # all blocks nonlinear: bounds 33 >= 7, no warning
        warnings.simplefilter("ignore", g.GramFloorWarning)
        d2 = g.gn_direction(p2, f2, x, eps, pinv=g.PinvConfig(rtol=1e-10, atol=1e-12))
    assert float(g.gn_residual(p2, f2, x, d2, eps)) < 1e-8


def test_randomized_svd_matches_svd_solver(x64, key):
    a = jax.random.normal(key, (20, 50)) @ jnp.diag(jnp.linspace(1.0, 3.0, 50))
    e = jax.random.normal(jax.random.key(1), (20, 3))
    ref, r0, _ = g.pinv_solve(a, e, g.PinvConfig(solver="svd"))
    got, r1, _ = g.pinv_solve(a, e, g.PinvConfig(solver="rsvd"), key=jax.random.key(2))
    np.testing.assert_allclose(got, ref, rtol=1e-8, atol=1e-10)
    assert int(r0) == int(r1) == 20
    # low target rank + oversampling still finds the exact range of a rank-6 matrix
    low = a[:, :6] @ jax.random.normal(jax.random.key(3), (6, 50))
    ref, _, _ = g.pinv_solve(low, e, g.PinvConfig(solver="svd"))
    got, rank, _ = g.pinv_solve(low, e, g.PinvConfig(solver="rsvd", rank=4, oversample=4))
    np.testing.assert_allclose(got, ref, rtol=1e-7, atol=1e-9)
    assert int(rank) == 6


@pytest.mark.parametrize("bad", ["zero_mean", "scaled", "negative"])
def test_ce_real_targets_must_be_probability_rows(bad):
    """Real CE targets off the simplex (this library's own zero-mean DGL encoding, 2*onehot)
    gave softmax - y instead of sum(y) softmax - y: a wrong gradient, silently."""
    logits = jnp.asarray(np.random.default_rng(0).normal(size=(3, 3)), jnp.float32)
    onehot = jax.nn.one_hot(jnp.array([0, 2, 1]), 3)
    y = {"zero_mean": onehot - 1.0 / 3, "scaled": 2.0 * onehot,
         "negative": jnp.array([[1.5, -0.5, 0.0]] * 3)}[bad]
    for call in (lambda: g.output_target(logits, y),
                 lambda: g.output_target(logits, y, target="newton"),
                 lambda: g.loss_value(logits, y)):
        with pytest.raises(ValueError, match=r"(output_target|loss_value): for loss='ce' "
                                             r"real-valued labels must be probability rows"):
            call()
    with pytest.raises(ValueError, match=r"softmax_newton_target: .* y must be probability"):
        g.softmax_newton_target(logits, y)
    # mse takes any real targets; soft labels on the simplex and one-hot rows are fine
    g.output_target(logits, y, loss="mse")
    soft = jax.nn.softmax(logits + 1.0, axis=-1)
    np.testing.assert_allclose(g.output_target(logits, soft),
                               jax.nn.softmax(logits, axis=-1) - soft, atol=1e-6)
    np.testing.assert_allclose(g.output_target(logits, onehot),
                               g.output_target(logits, jnp.array([0, 2, 1])), atol=1e-7)
    # traced: not checked (documented requirement)
    jax.jit(lambda y: g.output_target(logits, y))(y)
    # soft labels rounded to bfloat16 logits' dtype (row sums 1 +- 2e-3) are on the simplex
    g.loss_value(jnp.zeros((2, 3), jnp.bfloat16), jnp.full((2, 3), 1 / 3, jnp.float32))


def test_target_messages_name_the_function():
    logits = jnp.ones((3, 2))
    with pytest.raises(ValueError, match=r"output_target: integer labels must have shape"):
        g.output_target(logits, jnp.ones((3, 2), jnp.int32))
    with pytest.raises(ValueError, match=r"loss_value: labels must be \[n\] integer class "
                                         r"labels or \[n, 2\] real targets .*got shape "
                                         r"\(3, 3\) and dtype float32\.$"):
        g.loss_value(logits, jnp.ones((3, 3)))
    with pytest.raises(ValueError,
                       match=r"output_target: labels must be integer class labels in \[0, 2\)"):
        g.output_target(logits, jnp.array([0, 1, 2]))
    with pytest.raises(ValueError, match=r"output_target: target must be one of"):
        g.output_target(logits, jnp.array([0, 1, 1]), target="foo")
    with pytest.raises(ValueError, match=r"output_target: loss must be one of"):
        g.output_target(logits, jnp.array([0, 1, 1]), loss="hinge")


def test_float_label_vector_names_what_came_and_what_is_accepted():
    """Float class indices [n] were read as [n, 1] targets and the error named shape (n, 1),
    a shape the caller never passed; it now names the shape and dtype passed and the two
    accepted forms.  A real [n] vector stays valid for a one-output readout."""
    logits = jnp.array([[2.0, 0.0, -1.0], [0.0, 1.0, 0.0], [-1.0, 0.0, 3.0]])
    y = jnp.array([0.0, 1.0, 2.0])
    for call, fn in ((lambda: g.output_target(logits, y), "output_target"),
                     (lambda: g.loss_value(logits, y), "loss_value"),
                     (lambda: g.loss_value(logits, y, loss="mse"), "loss_value")):
        with pytest.raises(ValueError) as err:
            call()
        msg = str(err.value)
        assert msg.startswith(f"{fn}: labels must be [n] integer class labels or [n, 3] real "
                              "targets"), msg
        assert "got shape (3,) and dtype float32" in msg and "astype(jnp.int32)" in msg, msg
        assert "(3, 1)" not in msg, msg
    # the advice works: the same values as integers are the one-hot targets
    np.testing.assert_allclose(g.output_target(logits, y.astype(jnp.int32)),
                               jax.nn.softmax(logits, axis=-1) - jnp.eye(3), atol=1e-6)
    # one output: a real [n] vector is the [n, 1] target column
    f1 = logits[:, :1]
    np.testing.assert_allclose(g.loss_value(f1, y, loss="mse"),
                               0.5 * np.mean((np.asarray(f1[:, 0]) - np.asarray(y)) ** 2),
                               rtol=1e-6)


def test_gn_residual_checks_its_arguments(key):
    """gn_residual once passed everything to jax.jvp: a target of another shape failed in
    ``sub`` ("incompatible shapes for broadcasting"), a delta of another structure, shape or
    dtype in jvp, a bad x or frozen named revmlp_apply, and a NaN target gave NaN."""
    p, f = g.revmlp_init(key, 4, 2, bottleneck=5)
    x = jax.random.normal(jax.random.key(1), (3, 4))
    eps = jax.random.normal(jax.random.key(2), (3, 4))
    d = jax.tree.map(jnp.zeros_like, p)
    for args, exc, what in (
            ((p, f, x, d, eps[:2]), ValueError, r"target must have the shape of x \(3, 4\) "
                                                r".*got \(2, 4\)"),
            ((p, f, x, d, eps[:, :2]), ValueError, r"target must have shape \(n, 4\)"),
            ((p, f, x, d, eps.at[0, 0].set(jnp.nan)), ValueError, r"target has 1 non-finite"),
            ((p, f, x[:, :2], d, eps), ValueError, r"x must have shape \(n, 4\)"),
            ((p, None, x, d, eps), TypeError, r"frozen must be the RevMLPFrozen"),
            ((p, f, x, {"w1": d["w1"]}, eps), TypeError,
             r"delta must be a dict with the keys of params \['b1', 'b2', 'w1', 'w2'\] .*"
             r"got \['w1'\]"),
            ((p, f, x, [d], eps), TypeError, r"delta must be a dict .*got list"),
            ((p, f, x, {**d, "w1": d["w1"][:1]}, eps), ValueError,
             r"delta\['w1'\] must have the shape of params\['w1'\] \(2, 5, 2\), got \(1, 5, 2\)"),
            ((p, f, x, {**d, "b1": d["b1"].astype(jnp.bfloat16)}, eps), TypeError,
             r"delta\['b1'\] has dtype bfloat16 but the parameters are float32"),
            ((p, f, x, {**d, "b2": d["b2"].astype(jnp.int32)}, eps), TypeError,
             r"delta\['b2'\] must hold floating-point values")):
        with pytest.raises(exc, match=rf"^gn_residual: {what}"):
            g.gn_residual(*args)
    # the static checks run under jit too (at trace time)
    with pytest.raises(ValueError, match=r"^gn_residual: target must have the shape of x"):
        jax.jit(lambda e: g.gn_residual(p, f, x, d, e))(eps[:2])


def test_gn_residual_of_a_zero_target_is_zero_or_inf(x64, key):
    # no relative error exists for eps = 0: 0 if J delta = 0 as well, inf otherwise (a 1e-30
    # floor once turned any nonzero J delta into a huge finite "relative" residual)
    p, f = _perturbed(key, 4, 1, bottleneck=8)
    x = jax.random.normal(jax.random.key(1), (3, 4))
    zero = jnp.zeros_like(x)
    d0 = jax.tree.map(jnp.zeros_like, p)
    assert float(g.gn_residual(p, f, x, d0, zero)) == 0.0
    d1 = g.gn_direction(p, f, x, jax.random.normal(jax.random.key(2), (3, 4)))
    assert float(g.gn_residual(p, f, x, d1, zero)) == float("inf")
    eps = jax.random.normal(jax.random.key(3), (3, 4))  # a nonzero target: the plain ratio
    jd = jax.jvp(lambda q: g.revmlp_apply(q, f, x), (p,), (d1,))[1]
    np.testing.assert_allclose(g.gn_residual(p, f, x, d1, eps),
                               np.linalg.norm(jd - eps) / np.linalg.norm(eps), rtol=1e-12)


@pytest.mark.parametrize("solver", ["gram", "svd"])
@pytest.mark.parametrize("a_dtype", [jnp.bfloat16, jnp.float16])
@pytest.mark.parametrize("e_dtype", [jnp.float32, jnp.float64])
def test_half_precision_a_with_wider_e(x64, solver, a_dtype, e_dtype):
    """A half-precision ``a`` is factorised in float32 whatever ``e``'s dtype (a bfloat16 ``a``
    with a float32 ``e`` reached eigh/svd in bfloat16: NotImplementedError).  Checked against
    numpy's float64 least squares on the rounded ``a`` (min-norm, ``a`` of full row rank)."""
    a = jax.random.normal(jax.random.key(0), (4, 6), jnp.float32).astype(a_dtype)
    e = jax.random.normal(jax.random.key(1), (4, 2), jnp.float32).astype(e_dtype)
    x, rank, _ = g.pinv_solve(a, e, g.PinvConfig(solver=solver))
    ref = np.linalg.lstsq(np.asarray(a, np.float64), np.asarray(e, np.float64), rcond=None)[0]
    assert int(rank) == 4
    assert x.dtype == jnp.result_type(a_dtype, e_dtype)
    err = np.linalg.norm(np.asarray(x, np.float64) - ref) / np.linalg.norm(ref)
    assert err < 1e-2
    # one right-hand side, too
    xv, _, _ = g.pinv_solve(a, e[:, 0], g.PinvConfig(solver=solver))
    np.testing.assert_allclose(np.asarray(xv, np.float64), ref[:, 0], rtol=1e-2,
                               atol=1e-2 * np.abs(ref[:, 0]).max())


@pytest.mark.parametrize("solver", ["svd", "rsvd"])
def test_svd_solvers_drop_numerically_zero_singular_values_at_rtol_zero(x64, solver):
    """``rtol=0, atol=0`` with an SVD solver is numpy's pinv (floor ``max(n, k) eps s_1``): a
    rank-3 ``A`` [5, 8] with two singular values ~1e-17 s_1 kept them (rank 5, their
    inverses ~1e16 swamped the solution).  Against ``numpy.linalg.pinv`` in float64."""
    rng = np.random.default_rng(0)
    u, _ = np.linalg.qr(rng.normal(size=(5, 5)))
    w, _ = np.linalg.qr(rng.normal(size=(8, 8)))
    a = u @ np.diag([1.0, 0.5, 0.1, 1e-17, 3e-18]) @ w[:, :5].T
    e = rng.normal(size=(5, 3))
    x, rank, _ = g.pinv_solve(jnp.asarray(a), jnp.asarray(e),
                              g.PinvConfig(rtol=0.0, atol=0.0, solver=solver))
    ref = np.linalg.pinv(a, rtol=8 * np.finfo(np.float64).eps) @ e
    assert int(rank) == 3
    np.testing.assert_allclose(np.asarray(x), ref, rtol=1e-10, atol=1e-10 * np.abs(ref).max())
    # the floor sits far below the default rtol = 1%: the default truncation is unchanged
    s = np.array([1.0, 0.5, 0.1, 0.02, 0.005])
    a2 = u @ np.diag(s) @ w[:, :5].T
    x2, r2, _ = g.pinv_solve(jnp.asarray(a2), jnp.asarray(e), g.PinvConfig(solver=solver))
    assert int(r2) == 4
    ref2 = w[:, :4] @ np.diag(1 / s[:4]) @ u[:, :4].T @ e
    np.testing.assert_allclose(np.asarray(x2), ref2, rtol=1e-10, atol=1e-10 * np.abs(ref2).max())


def test_gram_solver_warns_when_it_cannot_honour_the_config(key):
    """The Gram floor ``10 sqrt(eps) s_1`` (3.45e-3 s_1 in float32) defeats ``damp``: a
    [6, 9] A with s = (1, .5, .1, .01, .002, .0015) gave rank 4 for damp (92% error vs the
    damped formula; svd: rank 6, exact): it warns, naming the setting and solver='svd'.  A
    smaller ``rtol`` (1e-3) truncates at the floor (rank 4; svd keeps 6, as numpy does), as
    documented, without a warning (the experiments' EXACT_PINV is such a config); the
    default does not warn either."""
    rng = np.random.default_rng(0)
    u, _ = np.linalg.qr(rng.normal(size=(6, 6)))
    w, _ = np.linalg.qr(rng.normal(size=(9, 9)))
    s = np.array([1, 0.5, 0.1, 0.01, 0.002, 0.0015])
    a = jnp.asarray(u @ np.diag(s) @ w[:, :6].T, jnp.float32)
    damped = w[:, :6] @ np.diag(1 / (s + 0.01)) @ u.T  # App. K, every singular value
    for cfg, match in [(g.PinvConfig(method="damp"), r"method='damp'.*solver='svd'"),
                       (g.PinvConfig(rtol=1e-3), None)]:
        if match is None:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                _, rank, _ = g.regularized_pinv(a, cfg)
        else:
            with pytest.warns(g.GramFloorWarning, match=match):
                _, rank, _ = g.regularized_pinv(a, cfg)
        assert int(rank) == 4  # the floor at 3.45e-3 s_1 drops .002 and .0015
        svd = dataclasses.replace(cfg, solver="svd")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            pm, rank, _ = g.regularized_pinv(a, svd)
        assert int(rank) == 6
        if cfg.method == "damp":
            err = np.linalg.norm(np.asarray(pm, np.float64) - damped) / np.linalg.norm(damped)
            assert err < 1e-4
    # gn_direction warns once per call, naming itself
    p, f = g.revmlp_init(key, 4, 2, bottleneck=8)
    x = jax.random.normal(jax.random.key(1), (4, 4))
    with pytest.warns(g.GramFloorWarning, match="gn_direction: PinvConfig.method='damp'") as rec:
        g.gn_direction(p, f, x, x, pinv=g.PinvConfig(method="damp"))
    assert sum(issubclass(r.category, g.GramFloorWarning) for r in rec) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g.gn_direction(p, f, x, x)  # default config: no warning
        g.pinv_solve(a, jnp.ones(6, jnp.float32))
        g.pinv_solve(a, jnp.ones(6, jnp.float32), g.PinvConfig(rtol=1e-2, atol=0.0))


def test_pinv_config_refuses_rtol_of_one_and_pinv_solve_an_empty_matrix():
    """``rtol >= 1`` keeps no singular value (a zero direction) and was accepted; an empty
    ``a`` reached the factorisation (raw error)."""
    for bad in (1.0, 5.0):
        with pytest.raises(ValueError, match=r"PinvConfig\.rtol must be < 1.*got " + str(bad)):
            g.PinvConfig(rtol=bad)
    assert g.PinvConfig(rtol=0.999).rtol == 0.999
    for shape in [(0, 3), (3, 0)]:
        with pytest.raises(ValueError, match=r"^pinv_solve: a must have at least one row and "
                                             rf"one column, got shape \({shape[0]}, {shape[1]}\)"):
            g.pinv_solve(jnp.zeros(shape), jnp.zeros((shape[0], 2)))


def test_key_is_checked_in_every_solver_entry_point(key):
    """key=3 with a noise / rsvd pinv reached jax.random and gave its raw "invalid PRNG key
    data" error; every public function that takes a key now names it, accepts typed and
    legacy uint32[2] keys alike (same draws) and still takes None where none is needed."""
    p, f = g.revmlp_init(key, 4, 2, bottleneck=8)
    x = jax.random.normal(jax.random.key(1), (4, 4))
    eps = jax.random.normal(jax.random.key(2), (4, 4))
    a = jax.random.normal(jax.random.key(3), (4, 6))
    noise, rsvd = g.PinvConfig(method="noise"), g.PinvConfig(solver="rsvd", rank=2, oversample=0)
    calls = {
        "pinv_solve": lambda k, c: g.pinv_solve(a, eps, c, key=k)[0],
        "regularized_pinv": lambda k, c: g.regularized_pinv(a, c, key=k)[0],
        "gn_direction": lambda k, c: g.gn_direction(p, f, x, eps, pinv=c, key=k)["w1"],
    }
    raw = jax.random.PRNGKey(7)
    for fn, call in calls.items():
        for cfg in (noise, rsvd, None):  # also when the key would go unused
            with pytest.raises(TypeError, match=rf"^{fn}: key must be a PRNG key "
                                                r"\(jax.random.key\(seed\)\), got int 3\.$"):
                call(3, cfg)
        np.testing.assert_array_equal(call(raw, noise), call(jax.random.wrap_key_data(raw),
                                                             noise))
        assert not np.array_equal(call(raw, noise), call(jax.random.PRNGKey(8), noise))
        np.testing.assert_array_equal(call(None, None), call(raw, None))
    # traced keys pass (static check), under jit as eagerly
    out = jax.jit(lambda k: calls["pinv_solve"](k, noise))(jax.random.wrap_key_data(raw))
    np.testing.assert_allclose(out, calls["pinv_solve"](raw, noise), rtol=1e-5, atol=1e-6)
