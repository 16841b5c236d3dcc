"""Tests for layerlab.bottleneck._diagnostics and _tasks (paper B)."""
import jax
import jax.extend
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
    @jax.jit  # both in one program (eagerly, op by op: ~50 programs)
    def ntk_and_jacobian(W, v):
        J = jax.jacrev(lambda W: bn.network_fn(W, v, activation=ident)[0])(W)
        return bn.ntk_trace(W, v, activation=ident), J

    ntk, J = ntk_and_jacobian(Ws, x[:1])
    brute = sum(float(np.sum(np.asarray(j) ** 2)) for j in jax.tree.leaves(J))
    np.testing.assert_allclose(ntk, brute, rtol=1e-9)


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


def _np_centred_weight_counts(params, x, tol, dominant_above):
    """Independent float64 numpy route: forward pass, explicit projector, np.linalg.svd."""
    ws = [np.asarray(p["w"], np.float64) for p in params]
    bs = [np.asarray(p["b"], np.float64) for p in params]
    Z = np.asarray(x, np.float64) @ ws[0] + bs[0]
    cnt, dom, gain, svs = [], [], [], []
    for w, b in zip(ws[1:], bs[1:]):
        A = np.maximum(Z, 0.0)                                # sigma(Z_{l-1}) [N, n_{l-1}]
        m = A.mean(0) / np.linalg.norm(A.mean(0))
        s = np.linalg.svd((np.eye(len(m)) - np.outer(m, m)) @ w, compute_uv=False)
        cnt.append(np.sum(np.abs(s - 1) < tol))
        dom.append(np.sum(s > dominant_above))
        gain.append(np.linalg.norm(m @ w))
        svs.append(s)
        Z = A @ w + b
    return np.array(cnt), np.array(dom), np.array(gain), np.concatenate(svs)


def test_centred_weight_counts_against_numpy(key, x64):
    """The counts and gains of random nets equal an explicit numpy projection + SVD, one net
    and a stack of nets under jit(vmap)."""
    sizes, tol, dom_above = [5, 8, 7, 8, 3], 0.3, 0.6
    keys = jax.random.split(key, 4)
    x = jax.random.normal(jax.random.fold_in(key, 1), (30, 5), jnp.float64)
    f = lambda p: bn.centred_weight_counts(p, x, tol=tol, dominant_above=dom_above)  # noqa: E731
    # the nets drawn in one program and sliced on the host (eagerly, ~20 small programs)
    stack = jax.device_get(jax.jit(jax.vmap(lambda k: nets.mlp_init(
        k, sizes, init="he", b_std=0.3, dtype=jnp.float64)))(keys))
    runs = jax.device_get(jax.jit(jax.vmap(f))(stack))
    one = jax.device_get(jax.jit(f)(jax.tree.map(lambda a: a[0], stack)))
    for r in range(len(keys)):
        params = jax.tree.map(lambda a, r=r: a[r], stack)
        cnt, dom, gain, s = _np_centred_weight_counts(params, x, tol, dom_above)
        # the counts are exact only away from the thresholds: the random nets must not sit there
        assert np.min(np.abs(np.abs(s - 1) - tol)) > 1e-6 and np.min(np.abs(s - dom_above)) > 1e-6
        np.testing.assert_array_equal(runs["count_near_one"][r], cnt)
        np.testing.assert_array_equal(runs["dominant"][r], dom)
        np.testing.assert_allclose(runs["mean_gain"][r], gain, rtol=1e-10)
    assert runs["count_near_one"].shape == (len(keys), len(sizes) - 2)
    assert np.sum(runs["count_near_one"]) > 0 and np.sum(runs["dominant"]) > 0   # not trivial
    for k in one:
        np.testing.assert_allclose(one[k], runs[k][0], rtol=1e-12)


def test_centred_weight_counts_removes_the_offset_direction(key, x64):
    """Identity weights on positive inputs carry the mean offset through the weights: every
    ``w_l = I_d`` has d singular values at 1 (``layer_counts_near_one``), d - 1 once the unit
    mean direction m is projected out (``(I - m m^T)`` has singular values 1, ..., 1, 0), and
    gain ``||m^T I|| = 1`` along it."""
    d, L = 4, 3
    x = jax.random.uniform(key, (20, d), jnp.float64, 0.5, 1.5)
    params = [{"w": jnp.eye(d), "b": jnp.zeros(d)} for _ in range(L)]
    out = bn.centred_weight_counts(params, x)
    np.testing.assert_array_equal(bn.layer_counts_near_one(params), [d] * L)
    np.testing.assert_array_equal(out["count_near_one"], [d - 1] * (L - 1))
    np.testing.assert_array_equal(out["dominant"], [d - 1] * (L - 1))
    np.testing.assert_allclose(out["mean_gain"], 1.0, rtol=1e-12)


def test_centred_weight_counts_rejects_bad_inputs(key):
    params = nets.mlp_init(key, [3, 4, 2])
    x = jnp.ones((5, 3))
    with pytest.raises(ValueError, match="centred_weight_counts: x must be a matrix"):
        bn.centred_weight_counts(params, x[0])
    with pytest.raises(ValueError, match=r"centred_weight_counts: params\[0\]"):
        bn.centred_weight_counts(params, x.T)
    with pytest.raises(ValueError, match="params must have at least 2 layers"):
        bn.centred_weight_counts(params[:1], x)
    with pytest.raises(ValueError, match="centred_weight_counts: tol"):
        bn.centred_weight_counts(params, x, tol=0.0)


def test_symmetry_task_depends_on_two_statistics(key, x64):
    ds, info = bn.symmetry_task(key, 64, d=6, steps=5, noise=0.0, return_info=True)
    assert ds.x.shape == (64, 6) and ds.y.shape == (64, 5)
    # noise-free: rotating w_0 about the e axis leaves the targets unchanged
    w = np.asarray(ds.x[0], np.float64)
    R = np.eye(6)
    R[1:3, 1:3] = [[0.0, -1.0], [1.0, 0.0]]
    M = np.outer(info["e"], info["e"])
    g = jax.grad(bn.symmetry_objective)

    @jax.jit  # the 5 steps in one program (eagerly, each step's ops compiled apart)
    def objectives(w):
        out = []
        for _ in range(5):
            w = w - 0.02 * g(w, M)
            out.append(bn.symmetry_objective(w, M))
        return jnp.stack(out)

    def traj(w):
        return np.log(np.asarray(objectives(w), np.float64))
    np.testing.assert_allclose(traj(w), ds.y[0], rtol=1e-5)
    np.testing.assert_allclose(traj(R @ w), traj(w), rtol=1e-10)
    with pytest.raises(ValueError, match=r"symmetry_task: n must be >= 1, got 0"):
        bn.symmetry_task(key, 0)


def test_symmetry_task_checks_its_arguments(key):
    with pytest.raises(TypeError, match=r"symmetry_task: n must be an integer, got float 2.5"):
        bn.symmetry_task(key, 2.5)
    with pytest.raises(ValueError, match=r"symmetry_task: lr must be > 0.0 .*got -1.0"):
        bn.symmetry_task(key, 3, lr=-1.0)
    with pytest.raises(ValueError, match=r"symmetry_task: d must be >= 2, got 1"):
        bn.symmetry_task(key, 3, d=1)
    with pytest.raises(ValueError, match=r"symmetry_task: noise must be >= 0.0, got -0.1"):
        bn.symmetry_task(key, 3, noise=-0.1)


def test_symmetry_task_scales_match_the_docstring(key):
    # E = (G + G^T) / 2 with G_ij ~ N(0, noise^2 / d); w_0 ~ N(0, w_scale^2 I / d)
    d = 40
    ds, info = bn.symmetry_task(key, 400, d=d, steps=1, lr=1e-4, noise=0.5, w_scale=3.0,
                                return_info=True)
    E = np.asarray(info["E"])
    iu = np.triu_indices(d, 1)
    np.testing.assert_allclose(E[iu].std(), 0.5 / np.sqrt(2 * d), rtol=0.1)
    np.testing.assert_allclose(E.diagonal().std(), 0.5 / np.sqrt(d), rtol=0.3)
    np.testing.assert_allclose(np.sqrt(np.mean(np.sum(ds.x ** 2, 1))), 3.0, rtol=0.05)


def _eqn_shapes(jaxpr):
    """Shapes of every intermediate of a (closed) jaxpr, sub-jaxprs included."""
    for eqn in jaxpr.eqns:
        for v in eqn.outvars:
            yield tuple(getattr(v.aval, "shape", ()))
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            yield from _eqn_shapes(sub)


@pytest.mark.parametrize("activation", [jax.nn.relu, jnp.tanh])
def test_ntk_trace_is_the_per_sample_jacobian_norm(key, x64, activation):
    """Tr Theta summed from per-sample Jacobians equals the diagonal of the dense empirical NTK
    (the former route) and an explicit jacrev of each sample, in paper A's parameters
    (beta = 0.5), eagerly, under jit, chunked and vmapped over nets; and no [B, B] array is
    ever built (B = 13 is no other size of the problem)."""
    from layerlab import kernels
    from layerlab.bottleneck._diagnostics import _network_fn_paper

    B, beta = 13, 0.5

    @jax.jit  # the setup and the dense reference as programs (eagerly, op by op: ~5 s)
    def setup(keys, x):
        stack = jax.vmap(lambda k: nets.mlp_init(k, [3, 6, 5, 2], init="he", b_std=0.2,
                                                 dtype=jnp.float64))(keys)
        params = jax.tree.map(lambda a: a[0], stack)
        Ws = bn.from_mlp_params(params, beta)
        dense = kernels.empirical_ntk(lambda W, v: _network_fn_paper(W, v, beta, activation),
                                      Ws, x)
        return stack, params, jax.tree.map(lambda a: a[1], stack), Ws, jnp.mean(jnp.diag(dense))

    x = jax.random.normal(jax.random.fold_in(key, 1), (B, 3), jnp.float64)
    stack, params, params_1, Ws, ref_dense = setup(jax.random.split(key, 2), x)
    ref_dense = float(ref_dense)
    brute = 0.0
    # d f(x_i) / d W_l for W_l = [w_l^T, b_l / beta], one sample at a time (compiled once),
    # squared and summed in numpy
    jac = jax.jit(jax.jacrev(lambda W, xi: bn.network_fn(
        bn.to_mlp_params(W, beta), xi[None], beta=beta, activation=activation)[0]))
    for xi in np.asarray(x):
        brute += sum(float(np.sum(np.asarray(j) ** 2)) for j in jac(Ws, xi))
    brute /= B
    np.testing.assert_allclose(ref_dense, brute, rtol=1e-12)   # the two references agree
    got = bn.ntk_trace(params, x, beta=beta, activation=activation)
    np.testing.assert_allclose(float(got), brute, rtol=1e-10)
    f = jax.jit(lambda p, v, c=None: bn.ntk_trace(p, v, beta=beta, activation=activation,
                                                   chunk_size=c), static_argnums=2)
    np.testing.assert_allclose(float(f(params, x)), brute, rtol=1e-10)
    np.testing.assert_allclose(float(f(params, x, 4)), brute, rtol=1e-10)  # 13 = 3 * 4 + 1
    vm = jax.jit(jax.vmap(lambda p: bn.ntk_trace(p, x, beta=beta, activation=activation)))(stack)
    np.testing.assert_allclose(float(vm[0]), brute, rtol=1e-10)
    np.testing.assert_allclose(
        float(vm[1]), float(bn.ntk_trace(params_1, x, beta=beta, activation=activation)),
        rtol=1e-12)
    d = bn.bottleneck_diagnostics(params, x, beta=beta, activation=activation)
    np.testing.assert_allclose(float(d["ntk_trace"]), brute, rtol=1e-10)
    jaxpr = jax.make_jaxpr(lambda p: bn.ntk_trace(p, x, beta=beta, activation=activation))(params)
    assert not [s for s in _eqn_shapes(jaxpr.jaxpr) if s.count(B) >= 2]
    with pytest.raises(ValueError, match="ntk_trace: chunk_size must be >= 1, got 0"):
        bn.ntk_trace(params, x, chunk_size=0)


def test_non_finite_params_raise_eagerly_and_give_nan_under_jit(key):
    """Regression: NaN weights gave plausible numbers (counts and ranks 0, log pdet 0).  Eagerly
    every diagnostic names the first non-finite leaf; under jit(vmap) over a stack of nets, the
    entries that depend on the NaN layer are NaN and the others equal numpy's counts."""
    sizes = [3, 8, 8, 2]
    stack = jax.vmap(lambda k: nets.mlp_init(k, sizes, init="he"))(jax.random.split(key, 2))
    stack[1]["w"] = stack[1]["w"].at[1, 0, 0].set(jnp.nan)       # run 1, layer 2 (params[1])
    bad = jax.tree.map(lambda a: a[1], stack)
    x = jax.random.normal(jax.random.fold_in(key, 1), (6, 3))
    calls = {
        "bottleneck_diagnostics": lambda p: bn.bottleneck_diagnostics(p, x),
        "layer_counts_near_one": bn.layer_counts_near_one,
        "layer_singular_values": bn.layer_singular_values,
        "centred_weight_counts": lambda p: bn.centred_weight_counts(p, x),
        "representation_dims": lambda p: bn.representation_dims(p, x),
        "jacobian_stats": lambda p: bn.jacobian_stats(p, x),
        "ntk_trace": lambda p: bn.ntk_trace(p, x),
    }
    for name, f in calls.items():
        with pytest.raises(ValueError, match=rf"{name}: params must be finite; params\[1\]"
                                             r"\['w'\] has 1 non-finite \(NaN/Inf\) entries"):
            f(bad)
    inf_bias = [dict(p) for p in jax.tree.map(lambda a: a[0], stack)]
    inf_bias[0]["b"] = inf_bias[0]["b"].at[2].set(jnp.inf)
    with pytest.raises(ValueError, match=r"params\[0\]\['b'\] has 1 non-finite"):
        bn.bottleneck_diagnostics(inf_bias, x)

    d = jax.tree.map(np.asarray,
                     jax.jit(jax.vmap(lambda p: bn.bottleneck_diagnostics(p, x)))(stack))
    c = jax.tree.map(np.asarray, jax.jit(jax.vmap(lambda p: bn.centred_weight_counts(p, x)))(stack))
    for r in range(2):
        w = [np.asarray(p["w"][r], np.float64) for p in stack]
        if r == 0:
            want = [np.sum(np.abs(np.linalg.svd(a, compute_uv=False) - 1) < 0.25) for a in w]
            np.testing.assert_array_equal(d["count_near_one"][0], want)
            assert d["count_near_one"].dtype == np.float32
            assert np.all(np.isfinite(d["numerical_rank"][0]))
            assert np.isfinite(d["jacobian_rank"][0]) and np.isfinite(c["dominant"][0]).all()
            continue
        s0 = np.linalg.svd(w[0], compute_uv=False)                 # layer 1 is still finite
        np.testing.assert_array_equal(d["count_near_one"][1][[0, 2]],
                                      [np.sum(np.abs(s0 - 1) < 0.25),
                                       np.sum(np.abs(np.linalg.svd(w[2], compute_uv=False) - 1)
                                              < 0.25)])
        assert np.isnan(d["count_near_one"][1][1])
        assert np.isfinite(d["numerical_rank"][1][0])             # Z_1 does not see layer 2
        assert np.isnan(d["numerical_rank"][1][1:]).all()
        assert np.isnan(d["effective_rank"][1][1:]).all()
        for k in ("jacobian_rank", "jacobian_log_pdet", "ntk_trace"):
            assert np.isnan(d[k][1]), k
        for k in ("count_near_one", "dominant", "mean_gain"):
            assert np.isnan(c[k][1]).all(), k                      # layers 2 and 3
    js = jax.jit(lambda p: bn.jacobian_stats(p, x))(bad)
    assert np.isnan(js["rank_per_point"]).all() and np.isnan(js["log_pdet"])
