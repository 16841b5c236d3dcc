"""Tests for layerlab.bottleneck._layout (layerlab.nets params and paper A's view of them)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from layerlab import bottleneck as bn
from layerlab import nets


def test_paper_view_round_trip_and_norm(key, x64):
    params = nets.mlp_init(key, [3, 5, 2], init="he", b_std=0.3, dtype=jnp.float64)
    Ws = bn.from_mlp_params(params, beta=0.5)
    assert [W.shape for W in Ws] == [(5, 4), (2, 6)]
    np.testing.assert_array_equal(Ws[0][:, :3], params[0]["w"].T)
    np.testing.assert_allclose(Ws[1][:, -1], params[1]["b"] / 0.5, rtol=1e-15)
    back = bn.to_mlp_params(Ws, beta=0.5)
    for p, q in zip(params, back):
        np.testing.assert_allclose(q["w"], p["w"], rtol=1e-15)
        np.testing.assert_allclose(q["b"], p["b"], rtol=1e-15)
    # ||W||^2 = sum ||w||^2 + ||b||^2 / beta^2, by hand; beta = 0 leaves the biases out
    by_hand = sum(float(jnp.sum(p["w"] ** 2) + jnp.sum(p["b"] ** 2) / 0.25) for p in params)
    assert float(bn.weight_norm_sq(params, beta=0.5)) == pytest.approx(by_hand, rel=1e-12)
    no_bias = sum(float(jnp.sum(p["w"] ** 2)) for p in params)
    assert float(bn.weight_norm_sq(params, beta=0.0)) == pytest.approx(no_bias, rel=1e-12)


@pytest.mark.parametrize("beta", [0.5, 1.0, 2.0])
def test_network_fn_is_nets_mlp_apply(key, x64, beta):
    """beta weighs the biases in the norm but does not change the function."""
    params = nets.mlp_init(key, [4, 6, 6, 3], init="he", b_std=0.5, dtype=jnp.float64)
    x = jax.random.normal(jax.random.fold_in(key, 1), (9, 4))
    np.testing.assert_allclose(bn.network_fn(params, x, beta=beta), nets.mlp_apply(params, x),
                               atol=1e-12)
    # beta = 0: a net without biases
    nob = [{"w": p["w"], "b": jnp.zeros_like(p["b"])} for p in params]
    np.testing.assert_allclose(bn.network_fn(params, x, beta=0.0), nets.mlp_apply(nob, x),
                               atol=1e-12)


def test_bad_params_name_the_layer():
    x = jnp.ones((4, 3))
    with pytest.raises(ValueError, match=r"params must be a non-empty list"):
        bn.representations([], x)
    with pytest.raises(ValueError, match=r"params\[0\] \(layer 1\).*n_0 = 3.*got w \(2, 3\)"):
        bn.representations([{"w": jnp.ones((2, 3)), "b": jnp.zeros(3)}], x)
    with pytest.raises(ValueError, match=r"params\[0\] \(layer 1\).*got ndarray|got Array"):
        bn.representations([jnp.ones((2, 4))], x)


def test_beta_is_traceable_and_matches_the_python_float(key, x64):
    """beta may be a traced array: jit, vmap and grad over it give the values of a float beta
    (it was float()-ed at trace time); beta = 0 still drops the bias column."""
    params = nets.mlp_init(key, [3, 5, 2], dtype=jnp.float64)
    params = [{"w": p["w"], "b": p["b"] + 0.3} for p in params]  # non-zero biases
    x = jax.random.normal(jax.random.key(1), (7, 3), jnp.float64)
    jitted = jax.jit(lambda b: bn.weight_norm_sq(params, beta=b))
    for b in (0.5, 1.0, 2.0):
        want = sum(float(jnp.sum(p["w"] ** 2) + jnp.sum((p["b"] / b) ** 2)) for p in params)
        np.testing.assert_allclose(float(jitted(b)), want, rtol=1e-12)
    vm = jax.vmap(lambda b: bn.weight_norm_sq(params, beta=b))(jnp.array([0.5, 2.0]))
    np.testing.assert_allclose(vm, [float(jitted(0.5)), float(jitted(2.0))], rtol=1e-12)
    g = jax.grad(lambda b: bn.weight_norm_sq(params, beta=b))(0.5)
    want_g = sum(float(-2.0 * jnp.sum(p["b"] ** 2) / 0.5 ** 3) for p in params)
    np.testing.assert_allclose(float(g), want_g, rtol=1e-10)
    np.testing.assert_allclose(
        float(bn.weight_norm_sq(params, beta=0.0)),
        sum(float(jnp.sum(p["w"] ** 2)) for p in params), rtol=1e-12)
    zs = jax.jit(lambda b: bn.representations(params, x, beta=b))(0.7)
    for a, c in zip(jax.tree.leaves(zs), jax.tree.leaves(bn.representations(params, x, beta=0.7))):
        np.testing.assert_allclose(a, c, rtol=1e-12)


def test_diagnostics_functions_check_their_inputs(key):
    params = nets.mlp_init(key, [3, 5, 2])
    x = jax.random.normal(jax.random.key(1), (7, 3))
    for fn in (bn.network_fn, bn.jacobian_stats, bn.ntk_trace):
        with pytest.raises(ValueError, match=fn.__name__):
            fn(params, x.T)            # samples as columns
        with pytest.raises(ValueError, match="one row per sample"):
            fn(params, x[0])           # one sample, 1-D
    K = [jnp.eye(5)]
    with pytest.raises(ValueError, match=r"K_sigma\[1\] has shape \(6, 6\)"):
        bn.covariance_loss(K, [jnp.eye(5), jnp.eye(6)], jnp.ones((5, 2)), lam=0.1, cost="mse")


def test_integer_and_half_precision_inputs_are_promoted(key):
    # regression: integer x reached jax.jacfwd (TypeError) and cast beta to an integer dtype;
    # bfloat16 x reached LAPACK (NotImplementedError).  Second route: the same numbers in float32.
    p = nets.mlp_init(key, [3, 4, 2])
    p = [{"w": q["w"], "b": q["b"] + 1.0} for q in p]
    xi = jnp.array([[1, 2, 0], [0, 1, 3], [2, 2, 1]], jnp.int32)
    xf = xi.astype(jnp.float32)
    di = bn.bottleneck_diagnostics(p, xi, beta=0.5, ntk=False)
    df = bn.bottleneck_diagnostics(p, xf, beta=0.5, ntk=False)
    for k in ("jacobian_rank", "jacobian_log_pdet"):
        np.testing.assert_allclose(di[k], df[k], rtol=1e-6)
    for x in (xi, xi.astype(jnp.uint8), xf.astype(jnp.bfloat16), xf.astype(jnp.float16)):
        Zs = bn.representations(p, x)
        assert Zs[0].dtype == jnp.float32
        np.testing.assert_allclose(Zs[-1], nets.mlp_apply(p, xf), rtol=1e-6)


def test_a_per_layer_beta_is_refused_naming_beta(key):
    """Paper A has one amount of bias beta for the net.  A vector beta (one per layer) gave
    a raw broadcasting error, or silently a wrong result: from_mlp_params built [5, 6] and
    [2, 10] "W_l" matrices (b / beta broadcast into 3 columns) and weight_norm_sq summed
    them.  Every public function now refuses it statically (also under jit), and a traced
    scalar beta (vmap over values) still works and matches the per-value calls."""
    params = nets.mlp_init(key, [3, 5, 2], init="he", b_std=0.3)
    x = jax.random.normal(jax.random.key(1), (4, 3))
    Zs = bn.representations(params, x)
    bv = jnp.array([1.0, 0.5, 2.0])
    calls = {
        "from_mlp_layer": lambda b: bn.from_mlp_layer(params[0], b),
        "from_mlp_params": lambda b: bn.from_mlp_params(params, b),
        "to_mlp_params": lambda b: bn.to_mlp_params(bn.from_mlp_params(params), b),
        "weight_norm_sq": lambda b: bn.weight_norm_sq(params, beta=b),
        "augment": lambda b: bn.augment(Zs[0], b),
        "representations": lambda b: bn.representations(params, x, beta=b),
        "weights_from_representations": lambda b: bn.weights_from_representations(Zs, x, beta=b),
        "covariances": lambda b: bn.covariances(Zs, x, beta=b),
        "forces": lambda b: bn.forces(Zs, x, lam=0.1, beta=b),
        "network_fn": lambda b: bn.network_fn(params, x, beta=b),
        "layer_singular_values": lambda b: bn.layer_singular_values(params, include_bias=True,
                                                                    beta=b),
        "masked_loss": lambda b: bn.masked_loss(
            params, (x, jnp.zeros((4, 2))), cost=bn.mse_cost, beta=b,
            hparams={"masks": jnp.ones((1, 5)), "lam": jnp.asarray(0.1)}),
        "sweep_step": lambda b: bn.sweep_step(bn.mse_cost, None, beta=b),
    }
    for fn, call in calls.items():
        for bad in (bv, [1.0, 0.5]):
            with pytest.raises(ValueError, match=rf"^{fn}: beta must be a scalar \(paper A's "
                                                 r"one amount of bias, shared by every layer\), "
                                                 rf"got shape \({len(bad)},\)"):
                call(bad)
        if fn != "sweep_step":
            with pytest.raises(ValueError, match=rf"^{fn}: beta must be a scalar"):
                jax.jit(call)(bv)  # static: refused at trace time as well
    with pytest.raises(ValueError, match=r"^weight_norm_sq: beta must be finite"):
        bn.weight_norm_sq(params, beta=float("nan"))
    # a scalar beta vmapped over values is the per-value result
    betas = jnp.array([0.5, 2.0])
    got = jax.vmap(lambda b: bn.weight_norm_sq(params, beta=b))(betas)
    want = [float(bn.weight_norm_sq(params, beta=float(b))) for b in betas]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert want[0] != pytest.approx(want[1])


def test_vector_tolerances_are_refused_naming_them(key):
    """A tolerance is one number.  A vector ``tol``/``rel_tol`` used to broadcast against the
    singular values (a per-value comparison, silently a different count) or to fail inside
    ``float()`` with numpy's message; every bottleneck function taking one now names it."""
    params = nets.mlp_init(key, [3, 5, 4, 2], init="he", b_std=0.3)
    x = jax.random.normal(jax.random.key(1), (6, 3))
    Z = bn.representations(params, x)[1]
    K = np.asarray(Z @ Z.T)
    y = np.asarray(jax.random.normal(jax.random.key(2), (6, 2)))
    v = [0.1, 0.2]
    calls = {
        "layer_counts_near_one": ("tol", lambda t: bn.layer_counts_near_one(params, tol=t)),
        "centred_weight_counts": ("tol", lambda t: bn.centred_weight_counts(params, x, tol=t)),
        "representation_dims": ("rel_tol", lambda t: bn.representation_dims(params, x,
                                                                            rel_tol=t)),
        "jacobian_stats": ("rel_tol", lambda t: bn.jacobian_stats(params, x, rel_tol=t)),
        "bottleneck_diagnostics": ("rel_tol", lambda t: bn.bottleneck_diagnostics(
            params, x, rel_tol=t)),
        "cp_rank_lower_bound": ("zero_tol", lambda t: bn.cp_rank_lower_bound(K, zero_tol=t)),
        "frank_wolfe_shallow": ("tol", lambda t: bn.frank_wolfe_shallow(y, 0.1, iters=1,
                                                                         tol=t)),
        "rank_sigma_bounds": ("tol", lambda t: bn.rank_sigma_bounds(Z, tol=t)),
        "caratheodory_reduce": ("tol", lambda t: bn.caratheodory_reduce(Z, tol=t)),
        "plateau_start": ("rel_tol", lambda t: bn.plateau_start([1, 2, 3], [3.0, 1.0, 1.0],
                                                                rel_tol=t)),
    }
    for fn, (name, call) in calls.items():
        with pytest.raises(ValueError, match=rf"^{fn}: {name} must be a scalar, got shape "
                                             r"\(2,\)"):
            call(v)
    for name, kw in (("lam", dict(lam=v)), ("prune", dict(lam=0.1, prune=v))):
        with pytest.raises(ValueError, match=rf"^frank_wolfe_shallow: {name} must be a scalar"):
            bn.frank_wolfe_shallow(y, iters=1, **kw)
    # ntk_trace: an unhashable activation cannot be jit's static argument: the eager route
    class Unhashable:
        __hash__ = None

        def __call__(self, z):
            return jax.nn.relu(z)

    np.testing.assert_allclose(bn.ntk_trace(params, x, activation=Unhashable()),
                               bn.ntk_trace(params, x), rtol=1e-5)
    # the scalar path is unchanged: layer_counts_near_one against a direct count
    s = [np.linalg.svd(np.asarray(p["w"]), compute_uv=False) for p in params]
    want = [np.sum(np.abs(si - 1.0) < 0.4) for si in s]
    np.testing.assert_array_equal(bn.layer_counts_near_one(params, tol=0.4), want)
