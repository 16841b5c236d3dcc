"""Bad input at the public boundary of every package: a clear error, never a silent number.

Each case calls one public function with one bad argument and asserts the exception type and
that the message names the offending argument (issue 15).  A few documented degenerate cases
return a defined value instead (CKA of a constant representation, the effective rank of the
zero matrix) and are checked against it.  Tiny arrays only: the file runs in seconds.
"""
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from layerlab import _checks, bottleneck, data, dgl, dmn, gnrev, kernels, loop, nets, probes

RNG = np.random.default_rng(0)
X = RNG.normal(size=(6, 3)).astype(np.float32)
X_NAN = X.copy()
X_NAN[1, 2] = np.nan
Y1H = np.eye(3, dtype=np.float32)[[0, 1, 2, 0, 1, 2]]
LAB = np.array([0, 1, 2, 0, 1, 2])
KEY = jax.random.key(0)
K_PSD = X @ X.T + np.eye(6, dtype=np.float32)
MLP = nets.mlp_init(KEY, [3, 4, 3])
LOGITS = nets.mlp_apply(MLP, X)
REV_PARAMS, REV_FROZEN = gnrev.revmlp_init(KEY, 4, 2)
READOUT = gnrev.readout_init(KEY, 4, 3)


def _lsq(params, batch):
    x, y = batch
    return jnp.mean((nets.mlp_apply(params, x) - y) ** 2)


TS = loop.optax_step(_lsq, optax.sgd(0.1))
STATE = TS.init(MLP)


def _fit(**kw):
    args = dict(key=KEY, steps=2, progress=False)
    args.update(kw)
    data_ = args.pop("data", (X, Y1H))
    state = args.pop("state", STATE)
    step = args.pop("step", TS.step)
    return loop.fit(step, state, data_, **args)


def _nan_params_step(s, b, k):
    s2, m = TS.step(s, b, k)
    return s2._replace(params=jax.tree.map(lambda a: a * jnp.nan, s2.params)), m


def _mse(z, y):
    return bottleneck.mse_cost(z, y)


def _sweep(**kw):
    args = dict(widths=[2], depth=2, cost=bottleneck.mse_cost, lam=0.1, seeds=1,
                adam_steps=1, progress=False)
    args.update(kw)
    x = args.pop("x", X)
    y = args.pop("y", Y1H)
    return bottleneck.width_sweep(KEY, x, y, **args)


# (id, thunk, exception type, regex the message must match: names the argument)
CASES = []


def case(id_, exc, match):
    def deco(f):
        CASES.append(pytest.param(f, exc, match, id=id_))
        return f
    return deco


def add(id_, f, exc, match):
    CASES.append(pytest.param(f, exc, match, id=id_))


# ----------------------------------------------------------------- non-arrays (None, str)
NON_ARRAY_TARGETS = {
    "kernels.relu_nngp.x1": (lambda v: kernels.relu_nngp(v, depth=1, w_var=1.0, b_var=0.1),
                             "x1"),
    "kernels.relu_ntk.x1": (lambda v: kernels.relu_ntk(v, depth=1, w_var=1.0, b_var=0.1), "x1"),
    "kernels.erf_nngp.x2": (lambda v: kernels.erf_nngp(X, v if v is not None else "abc",
                                                       depth=1, w_var=1.0, b_var=0.1), "x2"),
    "probes.linear_cka.x": (lambda v: probes.linear_cka(v, X), r"\bx\b"),
    "probes.linear_cka.y": (lambda v: probes.linear_cka(X, v), r"\by\b"),
    "probes.rbf_cka.x": (lambda v: probes.rbf_cka(v, X), r"\bx\b"),
    "probes.gram_linear.x": (lambda v: probes.gram_linear(v), r"\bx\b"),
    "probes.cka.K1": (lambda v: probes.cka(v, K_PSD), "K1"),
    "probes.hsic.K2": (lambda v: probes.hsic(K_PSD, v), "K2"),
    "probes.effective_rank.s": (lambda v: probes.effective_rank(v), r"\bs\b"),
    "probes.participation_ratio.eigs": (lambda v: probes.participation_ratio(v), "eigs"),
    "nets.mlp_apply.x": (lambda v: nets.mlp_apply(MLP, v), r"\bx\b"),
    "dgl.dgl_loss.K": (lambda v: dgl.dgl_loss(v, Y1H, eps2=0.1), r"\bK\b"),
    "dgl.dgl_loss.Y": (lambda v: dgl.dgl_loss(K_PSD, v, eps2=0.1), r"\bY\b"),
    "dgl.dgl_linear.H": (lambda v: dgl.dgl_linear(v, Y1H), r"\bH\b"),
    "probes.accuracy.logits": (lambda v: probes.accuracy(v, LAB), "logits"),
    "probes.accuracy.labels": (lambda v: probes.accuracy(LOGITS, v), "labels"),
    "dmn.class_density_matrices.h": (lambda v: dmn.class_density_matrices(v, LAB, 3), r"\bh\b"),
    "dmn.class_density_matrices.y": (lambda v: dmn.class_density_matrices(X, v, 3), r"\by\b"),
    "gnrev.revmlp_apply.x": (lambda v: gnrev.revmlp_apply(REV_PARAMS, REV_FROZEN, v), r"\bx\b"),
    "gnrev.output_target.logits": (lambda v: gnrev.output_target(v, LAB), "logits"),
    "gnrev.output_target.labels": (lambda v: gnrev.output_target(jnp.ones((6, 3)), v),
                                   "labels"),
    "gnrev.loss_value.labels": (lambda v: gnrev.loss_value(jnp.ones((6, 3)), v), "labels"),
    "bottleneck.width_sweep.x": (lambda v: _sweep(x=v), r"\bx\b"),
    "bottleneck.representations.x": (lambda v: bottleneck.representations(MLP, v), r"\bx\b"),
    "data.one_hot.y": (lambda v: data.one_hot(v, 3), r"\by\b"),
}
for name, (f, arg) in NON_ARRAY_TARGETS.items():
    for bad_id, bad in (("None", None), ("str", "abc")):
        add(f"{name}={bad_id}", (lambda f=f, bad=bad: f(bad)), TypeError, arg)

# ----------------------------------------------------------------- NaN / Inf inputs
for name, f, arg in [
    ("kernels.relu_nngp", lambda: kernels.relu_nngp(X_NAN, depth=1, w_var=1.0, b_var=0.1), "x1"),
    ("kernels.erf_ntk.x2", lambda: kernels.erf_ntk(X, X_NAN, depth=1, w_var=1.0, b_var=0.1),
     "x2"),
    ("probes.linear_cka", lambda: probes.linear_cka(X_NAN, X), r"\bx\b"),
    ("probes.rbf_cka.y", lambda: probes.rbf_cka(X, X_NAN), r"\by\b"),
    ("probes.gram_rbf", lambda: probes.gram_rbf(X_NAN), r"\bx\b"),
    ("probes.effective_rank", lambda: probes.effective_rank(jnp.array([1.0, jnp.nan])),
     r"\bs\b"),
    ("probes.stable_rank", lambda: probes.stable_rank(jnp.array([1.0, jnp.inf])), r"\bm\b"),
    ("probes.center_gram", lambda: probes.center_gram(K_PSD * np.inf), r"\bK\b|\bk\b"),
    ("dgl.dgl_loss.K", lambda: dgl.dgl_loss(K_PSD * np.nan, Y1H, eps2=0.1), r"\bK\b"),
    ("gnrev.revmlp_apply", lambda: gnrev.revmlp_apply(
        REV_PARAMS, REV_FROZEN, jnp.full((2, 4), jnp.nan)), r"\bx\b"),
    ("loop.fit.data", lambda: _fit(data=(X_NAN, Y1H)), r"data"),
    ("bottleneck.representations.x", lambda: bottleneck.representations(MLP, X_NAN),
     r"\bx\b"),
    ("bottleneck.width_sweep.x", lambda: _sweep(x=X_NAN), r"\bx\b"),
    ("dgl.lego.x", lambda: dgl.lego(KEY, MLP, X_NAN, Y1H, dgl.LayerVariances(
        jnp.ones(2), jnp.ones(2)), dgl.LegoConfig(steps=1)), r"\bx\b"),
    ("bottleneck.plateau_start.losses", lambda: bottleneck.plateau_start(
        [1, 2], [np.nan, 0.1]), "losses"),
]:
    add(f"nan:{name}", f, ValueError, arg)

# ----------------------------------------------------------------- labels
for name, f, exc, arg in [
    ("dmn.cdm.y>=C", lambda: dmn.class_density_matrices(X, np.array([0, 1, 2, 3, 4, 0]), 3),
     ValueError, r"\by\b.*\[0, 3\)"),
    ("dmn.cdm.y<0", lambda: dmn.class_density_matrices(X, np.array([0, 1, 2, -1, 1, 0]), 3),
     ValueError, r"\by\b.*\[-1, 2\]"),
    ("dmn.cdm.float", lambda: dmn.class_density_matrices(X, LAB.astype(np.float32), 3),
     TypeError, r"\by\b"),
    ("dmn.cdm.2d", lambda: dmn.class_density_matrices(X, LAB[:, None], 3), ValueError, r"\by\b"),
    ("dmn.cdm.len", lambda: dmn.class_density_matrices(X, LAB[:4], 3), ValueError, r"\by\b"),
    ("dmn.cdm.C=0", lambda: dmn.class_density_matrices(X, LAB, 0), ValueError, "num_classes"),
    ("gnrev.output_target.7", lambda: gnrev.output_target(
        jnp.ones((5, 3)), jnp.array([0, 1, 2, 3, 7])), ValueError, r"labels.*\[0, 7\]"),
    ("gnrev.output_target.-1", lambda: gnrev.output_target(
        jnp.ones((2, 3)), jnp.array([0, -1])), ValueError, "labels"),
    ("gnrev.output_target.rows", lambda: gnrev.output_target(
        jnp.ones((3, 3)), jnp.array([0, 1])), ValueError, "labels"),
    ("gnrev.loss_value.9", lambda: gnrev.loss_value(jnp.ones((2, 3)), jnp.array([0, 9])),
     ValueError, "labels"),
    ("probes.accuracy.7", lambda: probes.accuracy(LOGITS, jnp.full((6,), 7)), ValueError,
     "labels"),
    ("probes.accuracy.-1", lambda: probes.accuracy(LOGITS, jnp.full((6,), -1)), ValueError,
     "labels"),
    ("probes.accuracy.len", lambda: probes.accuracy(LOGITS, jnp.zeros((5,), jnp.int32)),
     ValueError, "labels"),
    ("probes.accuracy.float", lambda: probes.accuracy(LOGITS, jnp.zeros((6,))), TypeError,
     "labels"),
    ("data.one_hot.jnp5", lambda: data.one_hot(jnp.array([0, 1, 5]), 3), ValueError,
     r"labels.*\[0, 3\)"),
    ("data.one_hot.jnp-1", lambda: data.one_hot(jnp.array([0, -1]), 3), ValueError, "labels"),
    ("data.one_hot.np5", lambda: data.one_hot(np.array([0, 5]), 3), ValueError, "labels"),
    ("data.one_hot.float", lambda: data.one_hot(jnp.array([0.0, 1.0]), 3), TypeError, "labels"),
    ("data.one_hot.C=0", lambda: data.one_hot(np.array([0]), 0), ValueError, "num_classes"),
    ("data.one_hot.C=2.5", lambda: data.one_hot(np.array([0]), 2.5), TypeError, "num_classes"),
]:
    add(f"labels:{name}", f, exc, arg)

# ----------------------------------------------------------------- hyper-parameters
for name, f, exc, arg in [
    ("gnrev.gn_step.lr<0", lambda: gnrev.gn_step(REV_FROZEN, READOUT, learning_rate=-0.5),
     ValueError, "learning_rate"),
    ("gnrev.gn_step.lr=0", lambda: gnrev.gn_step(REV_FROZEN, READOUT, learning_rate=0.0),
     ValueError, "learning_rate"),
    ("gnrev.gn_step.lr=nan", lambda: gnrev.gn_step(REV_FROZEN, READOUT, learning_rate=np.nan),
     ValueError, "learning_rate"),
    ("gnrev.gn_step.lr=str", lambda: gnrev.gn_step(REV_FROZEN, READOUT, learning_rate="0.1"),
     TypeError, "learning_rate"),
    ("gnrev.gn_step.wd<0", lambda: gnrev.gn_step(REV_FROZEN, READOUT, weight_decay=-1.0),
     ValueError, "weight_decay"),
    ("gnrev.gn_step.loss", lambda: gnrev.gn_step(REV_FROZEN, READOUT, loss="hinge"),
     ValueError, "loss"),
    ("gnrev.gn_step.target", lambda: gnrev.gn_step(REV_FROZEN, READOUT, target="x"),
     ValueError, "target"),
    ("gnrev.gn_step.init_hparams", lambda: gnrev.gn_step(REV_FROZEN, READOUT).init(
        REV_PARAMS, {"learning_rate": jnp.asarray(-1.0), "weight_decay": jnp.asarray(0.0)}),
     ValueError, "learning_rate"),
    ("dgl.LegoConfig.lr<0", lambda: dgl.LegoConfig(lr=-1), ValueError, r"\blr\b"),
    ("dgl.LegoConfig.lr=0", lambda: dgl.LegoConfig(lr=0.0), ValueError, r"\blr\b"),
    ("dgl.LegoConfig.eps_rel", lambda: dgl.LegoConfig(eps_rel=-0.5), ValueError, "eps_rel"),
    ("dgl.LegoConfig.wd", lambda: dgl.LegoConfig(weight_decay=-1.0), ValueError,
     "weight_decay"),
    ("dgl.LegoConfig.steps<0", lambda: dgl.LegoConfig(steps=-1), ValueError, "steps"),
    ("dgl.LegoConfig.steps=2.5", lambda: dgl.LegoConfig(steps=2.5), TypeError, "steps"),
    ("dgl.LegoConfig.batch=1", lambda: dgl.LegoConfig(batch_size=1), ValueError, "batch_size"),
    ("dgl.LegoConfig.ridge", lambda: dgl.LegoConfig(ridge_rel=-1.0), ValueError, "ridge_rel"),
    ("dgl.lego.cfg", lambda: dgl.lego(KEY, MLP, X, Y1H, dgl.LayerVariances(
        jnp.ones(2), jnp.ones(2)), {"lr": 1}), TypeError, "cfg"),
    ("dgl.dgl_loss.eps2<0", lambda: dgl.dgl_loss(K_PSD, Y1H, eps2=-1.0), ValueError, "eps2"),
    ("dgl.dgl_linear.eps2<0", lambda: dgl.dgl_linear(X, Y1H, eps2=-1.0), ValueError, "eps2"),
    ("bottleneck.repr_loss.lam<0", lambda: bottleneck.representation_loss(
        [X[:, :2]], X, cost=lambda z: jnp.sum(z ** 2), lam=-1), ValueError, "lam"),
    ("bottleneck.repr_loss.ridge<0", lambda: bottleneck.representation_loss(
        [X[:, :2]], X, cost=lambda z: jnp.sum(z ** 2), lam=1.0, ridge=-1.0), ValueError,
     "ridge"),
    ("bottleneck.weight_loss.lam<0", lambda: bottleneck.weight_loss(
        MLP, X, cost=lambda z: jnp.sum(z ** 2), lam=-1), ValueError, "lam"),
    ("bottleneck.repr_step.lam<0", lambda: bottleneck.representation_step(
        X, lambda z: jnp.sum(z ** 2), optax.sgd(0.1), lam=-0.1), ValueError, "lam"),
    ("bottleneck.repr_step.ridge<0", lambda: bottleneck.representation_step(
        X, lambda z: jnp.sum(z ** 2), optax.sgd(0.1), lam=0.1, ridge=-1.0), ValueError,
     "ridge"),
    # bottleneck argument checks (second audit): each names the argument and what came
    ("bottleneck.repr_loss.lam.vector", lambda: bottleneck.representation_loss(
        [X[:, :2]], X, cost=lambda z: jnp.sum(z ** 2), lam=jnp.array([0.1, 0.2])), ValueError,
     r"representation_loss: lam must be a scalar, got shape \(2,\)"),
    ("bottleneck.weight_loss.lam.vector", lambda: bottleneck.weight_loss(
        MLP, X, cost=lambda z: jnp.sum(z ** 2), lam=[0.1, 0.2]), ValueError,
     r"weight_loss: lam must be a scalar, got shape \(2,\)"),
    ("bottleneck.forces.lam.vector", lambda: bottleneck.forces(
        [X[:, :2]], X, lam=jnp.ones(3)), ValueError, r"forces: lam must be a scalar"),
    ("bottleneck.repr_loss.cost.vector", lambda: bottleneck.representation_loss(
        [X[:, :2]], X, cost=lambda z: z ** 2, lam=0.1), ValueError,
     r"representation_loss: cost must return a scalar C\(Z_L\).*got shape \(6, 2\)"),
    ("bottleneck.weight_loss.cost.vector", lambda: bottleneck.weight_loss(
        MLP, X, cost=lambda z: jnp.sum(z ** 2, axis=1), lam=0.1), ValueError,
     r"weight_loss: cost must return a scalar C\(Z_L\).*got shape \(6,\)"),
    ("bottleneck.jacobian_stats.rel_tol<0", lambda: bottleneck.jacobian_stats(
        MLP, X, rel_tol=-1.0), ValueError, r"jacobian_stats: rel_tol must be >= 0.0, got -1.0"),
    ("bottleneck.representation_dims.rel_tol<0", lambda: bottleneck.representation_dims(
        MLP, X, rel_tol=-0.5), ValueError,
     r"representation_dims: rel_tol must be >= 0.0, got -0.5"),
    ("bottleneck.width_masks.1.5", lambda: bottleneck.width_masks([1.5, 2], 3, 1), TypeError,
     r"width_masks: widths\[0\] must be an integer, got float 1.5"),
    ("bottleneck.width_masks.>max", lambda: bottleneck.width_masks([2, 4], 3, 1), ValueError,
     r"width_masks: widths\[1\] must be <= 3, got 4"),
    ("bottleneck.caratheodory_reduce.NaN", lambda: bottleneck.caratheodory_reduce(X_NAN),
     ValueError, r"caratheodory_reduce: Z has 1 non-finite \(NaN/Inf\) entries out of 18"),
    ("bottleneck.caratheodory_reduce.tanh", lambda: bottleneck.caratheodory_reduce(
        X, activation=jnp.tanh), ValueError,
     r"caratheodory_reduce: activation must be positively homogeneous"),
    ("bottleneck.rank_sigma_bounds.NaN", lambda: bottleneck.rank_sigma_bounds(X_NAN),
     ValueError, r"rank_sigma_bounds: Z has 1 non-finite"),
    ("bottleneck.rank_sigma_bounds.tol<0", lambda: bottleneck.rank_sigma_bounds(X, tol=-1),
     ValueError, r"rank_sigma_bounds: tol must be >= 0.0, got -1.0"),
    ("bottleneck.is_triangle_free.self_loop", lambda: bottleneck.is_triangle_free(
        [(0, 0), (1, 2)], 3), ValueError,
     r"is_triangle_free: edges\[0\] = \(0, 0\) must be a pair of distinct vertices in "
     r"\[0, 3\)"),
    ("bottleneck.is_triangle_free.negative", lambda: bottleneck.is_triangle_free(
        [(0, 1), (1, 2), (2, -3)], 3), ValueError,
     r"is_triangle_free: edges\[2\] = \(2, -3\) must be a pair of distinct"),
    ("bottleneck.psd_pinv.non_square", lambda: bottleneck.psd_pinv(jnp.ones((3, 4))),
     ValueError, r"psd_pinv: K must be a square Gram matrix \[N, N\], got shape \(3, 4\)"),
    ("bottleneck.tikhonov_pinv.1d", lambda: bottleneck.tikhonov_pinv(jnp.ones(3), 0.1),
     ValueError, r"tikhonov_pinv: A must have rank 2, got shape \(3,\)"),
    ("bottleneck.augment.1d", lambda: bottleneck.augment(jnp.ones(3), 1.0), ValueError,
     r"augment: Z must have rank 2, got shape \(3,\)"),
    ("bottleneck.covariance_loss.empty", lambda: bottleneck.covariance_loss(
        [], [], jnp.ones((6, 2)), cost=jnp.sum, lam=0.1), ValueError,
     r"covariance_loss: K_sigma must hold the L >= 1 input covariances"),
    ("bottleneck.repr_step.Z_rows", lambda: (lambda rs: rs.init([X[:4, :2], X[:, :1]]))(
        bottleneck.representation_step(X, jnp.sum, optax.sgd(0.1), lam=0.1)), ValueError,
     r"representation_step: Z_1 must have shape \[N, n_1\] = \[6, \?\].*got \(4, 2\)"),
    # samples are rows at every public function: a transposed argument is named
    ("bottleneck.representations.x.T", lambda: bottleneck.representations(MLP, X.T),
     ValueError, r"params\[0\]"),
    ("bottleneck.representations.x.1d", lambda: bottleneck.representations(MLP, X[0]),
     ValueError, r"\bx\b.*\[N, n_0\]"),
    ("bottleneck.weights_from_representations.Z.T", lambda: (
        bottleneck.weights_from_representations([X.T], X)), ValueError, r"Z_1.*\[N, n_1\]"),
    ("bottleneck.forces.Z.T", lambda: bottleneck.forces([X[:, :2], X.T], X, lam=0.1),
     ValueError, r"Z_2.*\[N, n_2\]"),
    ("bottleneck.mse_cost.y.T", lambda: bottleneck.mse_cost(jnp.asarray(Y1H),
                                                            jnp.asarray(Y1H).T),
     ValueError, r"\by\b.*\[N, n_L\]"),
    ("bottleneck.cross_entropy_cost.Z_L.T", lambda: bottleneck.cross_entropy_cost(
        jnp.asarray(Y1H).T, jnp.asarray(LAB)), ValueError, r"\by\b.*\[N\]"),
    ("bottleneck.covariance_loss.Z_L.T", lambda: bottleneck.covariance_loss(
        [K_PSD], [K_PSD, K_PSD], jnp.asarray(Y1H).T, cost=jnp.sum, lam=0.1), ValueError,
     r"Z_L.*\[N, n_L\]"),
    ("bottleneck.linear_optimal_covariances.Z_L.T", lambda: (
        bottleneck.linear_optimal_covariances(np.eye(6, dtype=np.float32), Y1H[:, :2].T, 2)),
     ValueError, r"Z_L.*\[N, n_L\]"),
    ("bottleneck.frank_wolfe_shallow.y", lambda: bottleneck.frank_wolfe_shallow(
        Y1H[0], 0.1), ValueError, r"\by\b.*\[N, n_out\]"),
    ("bottleneck.rank_sigma_bounds.Z", lambda: bottleneck.rank_sigma_bounds(X[0]),
     ValueError, r"\bZ\b.*\[N, n\]"),
    ("bottleneck.width_sweep.depth=0", lambda: _sweep(depth=0), ValueError, "depth"),
    ("bottleneck.width_sweep.depth=1.5", lambda: _sweep(depth=1.5), TypeError, "depth"),
    ("bottleneck.width_sweep.seeds=0", lambda: _sweep(seeds=0), ValueError, "seeds"),
    ("bottleneck.width_sweep.lam<0", lambda: _sweep(lam=-1.0), ValueError, "lam"),
    ("bottleneck.width_sweep.adam_lr=0", lambda: _sweep(adam_lr=0.0), ValueError, "adam_lr"),
    ("bottleneck.width_sweep.widths=[]", lambda: _sweep(widths=[]), ValueError, "widths"),
    ("bottleneck.width_sweep.widths=[0]", lambda: _sweep(widths=[0]), ValueError, "widths"),
    ("bottleneck.width_sweep.max_width", lambda: _sweep(widths=[4], max_width=2), ValueError,
     "max_width"),
    ("bottleneck.width_sweep.rows", lambda: _sweep(y=Y1H[:4]), ValueError, r"\by\b"),
    ("bottleneck.plateau_start.len", lambda: bottleneck.plateau_start([1, 2, 3], [0.1, 0.2]),
     ValueError, r"widths.*losses"),
    ("bottleneck.plateau_start.empty", lambda: bottleneck.plateau_start([], []), ValueError,
     "widths"),
    ("bottleneck.plateau_start.rel_tol", lambda: bottleneck.plateau_start(
        [1, 2], [0.2, 0.1], rel_tol=-1.0), ValueError, "rel_tol"),
    ("bottleneck.plateau_start.None", lambda: bottleneck.plateau_start(None, [0.1]), TypeError,
     "widths"),
    ("kernels.depth<0", lambda: kernels.relu_nngp(X, depth=-1, w_var=1.0, b_var=0.0),
     ValueError, "depth"),
    ("kernels.depth=1.5", lambda: kernels.relu_nngp(X, depth=1.5, w_var=1.0, b_var=0.0),
     TypeError, "depth must be an integer"),
    ("kernels.w_var<0", lambda: kernels.relu_nngp(X, depth=1, w_var=-1.0, b_var=0.0),
     ValueError, "w_var"),
    ("kernels.b_var.len", lambda: kernels.relu_ntk(X, depth=1, w_var=1.0, b_var=[0.0] * 5),
     ValueError, "b_var"),
    ("kernels.x1.rank", lambda: kernels.relu_nngp(X[0], depth=1, w_var=1.0, b_var=0.0),
     ValueError, "x1"),
    ("kernels.x2.d", lambda: kernels.relu_nngp(X, X[:, :2], depth=1, w_var=1.0, b_var=0.0),
     ValueError, "x2"),
    ("probes.linear_cka.n", lambda: probes.linear_cka(X, X[:4]), ValueError, r"x and y"),
    ("probes.linear_cka.method", lambda: probes.linear_cka(X, X, method="svd"), ValueError,
     "method"),
    ("probes.participation_ratio.rank", lambda: probes.participation_ratio(K_PSD), ValueError,
     "participation_ratio"),
    ("probes.tree_relative_change.zeros", lambda: probes.tree_relative_change(
        MLP, jax.tree.map(jnp.zeros_like, MLP)), ValueError, "a0"),
    ("nets.mlp_apply.width", lambda: nets.mlp_apply(MLP, X[:, :2]), ValueError, "features"),
    ("nets.mlp_apply.params", lambda: nets.mlp_apply(None, X), ValueError, "params"),
    ("gnrev.revmlp_apply.f16", lambda: gnrev.revmlp_apply(
        REV_PARAMS, REV_FROZEN, jnp.ones((3, 4), jnp.float16)), TypeError, r"\bx\b.*float16"),
    ("gnrev.revmlp_apply.int", lambda: gnrev.revmlp_apply(
        REV_PARAMS, REV_FROZEN, jnp.ones((3, 4), jnp.int32)), TypeError, r"\bx\b"),
    ("gnrev.revmlp_apply.dim", lambda: gnrev.revmlp_apply(
        REV_PARAMS, REV_FROZEN, jnp.ones((3, 6))), ValueError, r"\bx\b"),
]:
    add(f"hparam:{name}", f, exc, arg)

for name, f, exc, arg in [
    ("dgl.dgl_features.eps_rel<0", lambda: dgl.dgl_features(
        X, Y1H, lambda h: h @ h.T, eps_rel=-1.0), ValueError, "eps_rel"),
    ("probes.gram_rbf.sigma_frac=0", lambda: probes.gram_rbf(X, sigma_frac=0.0), ValueError,
     "sigma_frac"),
    ("probes.gram_rbf.sigma<0", lambda: probes.gram_rbf(X, sigma=-1.0), ValueError, "sigma"),
    ("probes.count_near_one.tol<0", lambda: probes.count_near_one(jnp.ones(3), -0.1),
     ValueError, "tol"),
    ("data.standardize.None", lambda: data.standardize(None), TypeError, r"\bx\b"),
    ("data.flatten.str", lambda: data.flatten("abc"), TypeError, r"\bx\b"),
    ("dmn.num_components.var_fraction", lambda: dmn.num_components(
        jnp.array([3.0, 2.0, 1.0]), 1.5), ValueError, "var_fraction"),
]:
    add(f"hparam:{name}", f, exc, arg)

# probes / nets argument checks (third audit): the message names the function, the argument,
# what was expected and what came (before: inf / nan / a plausible number / a raw jnp error)
_K16 = (lambda a: a @ a.T)(RNG.normal(size=(16, 3)).astype(np.float32))
_XS = RNG.normal(size=(4, 3, 6)).astype(np.float32)
for name, f, exc, arg in [
    ("probes.kernel_change_rate.zero", lambda: probes.kernel_change_rate(
        np.zeros((6, 6), np.float32), K_PSD), ValueError,
     r"^kernel_change_rate: k_prev is all zeros, so the relative change is undefined"),
    ("probes.kernel_change_rate.nan", lambda: probes.kernel_change_rate(K_PSD * np.nan, K_PSD),
     ValueError, r"^kernel_change_rate: k_prev has 36 non-finite \(NaN/Inf\) entries"),
    ("probes.kernel_change_rate.k_next.inf", lambda: probes.kernel_change_rate(
        K_PSD, K_PSD * np.inf), ValueError, r"^kernel_change_rate: k_next has 36 non-finite"),
    ("probes.kernel_change_rate.1d", lambda: probes.kernel_change_rate(K_PSD[0], K_PSD[1]),
     ValueError, r"^kernel_change_rate k_prev: expected a square \[n, n\] kernel matrix, got "
                 r"\(6,\)"),
    ("probes.kernel_change_rate.None", lambda: probes.kernel_change_rate(None, K_PSD),
     TypeError, r"^kernel_change_rate: k_prev must be an array, got None"),
    ("probes.kernel_change_rate.shapes", lambda: probes.kernel_change_rate(K_PSD, _K16),
     ValueError, r"^kernel_change_rate: k_prev and k_next must have the same shape, got "
                 r"\(6, 6\) and \(16, 16\)"),
    ("probes.minibatch_cka.m=3", lambda: probes.minibatch_cka(_XS, _XS[..., :2]), ValueError,
     r"^minibatch_cka: each minibatch must hold m >= 4 samples .* got m = 3 \(xs \(4, 3, 6\)"),
    ("probes.minibatch_cka.B=0", lambda: probes.minibatch_cka(_XS[:0], _XS[:0]), ValueError,
     r"^minibatch_cka: xs and ys must hold at least one minibatch, got B = 0"),
    ("probes.minibatch_cka_update.m=3", lambda: probes.minibatch_cka_update(
        probes.minibatch_cka_init(), _XS[0], _XS[1]), ValueError,
     r"^minibatch_cka_update: each minibatch must hold m >= 4 samples .* got m = 3"),
    ("probes.linear_cka.0_features", lambda: probes.linear_cka(X[:, :0], X), ValueError,
     r"^linear_cka: x must have at least one feature per sample, got shape \(6, 0\)"),
    ("probes.rbf_cka.0_features", lambda: probes.rbf_cka(X, X[:, :0]), ValueError,
     r"^rbf_cka: y must have at least one feature per sample, got shape \(6, 0\)"),
    ("probes.minibatch_cka.0_features", lambda: probes.minibatch_cka(
        np.zeros((2, 4, 0), np.float32), np.ones((2, 4, 2), np.float32)), ValueError,
     r"^minibatch_cka: xs must have at least one feature per sample, got shape \(2, 4, 0\)"),
    ("probes.effective_rank.0d", lambda: probes.effective_rank(3.0), ValueError,
     r"^effective_rank: s must be singular values \[k\] or a matrix \[m, n\], got shape "
     r"\(\)"),
    ("probes.stable_rank.3d", lambda: probes.stable_rank(np.ones((2, 3, 4))), ValueError,
     r"^stable_rank: m must be singular values \[k\] or a matrix"),
    ("probes.count_near_one.0d", lambda: probes.count_near_one(np.float32(1.0)), ValueError,
     r"^count_near_one: s must be singular values \[k\] \(or \[\.\.\., k\]\), got a scalar"),
    ("probes.gram_rbf.sigma.vector", lambda: probes.gram_rbf(X, sigma=jnp.array([1.0, 2.0])),
     ValueError, r"^gram_rbf: sigma must be a scalar, got shape \(2,\)"),
    ("probes.gram_rbf.sigma_frac.vector", lambda: probes.gram_rbf(X, sigma_frac=[0.5, 0.8]),
     ValueError, r"^gram_rbf: sigma_frac must be a scalar, got shape \(2,\)"),
    ("probes.rbf_cka.sigma_frac.vector", lambda: probes.rbf_cka(X, X, sigma_frac=[0.5, 0.8]),
     ValueError, r"^rbf_cka: sigma_frac must be a scalar, got shape \(2,\)"),
    ("probes.participation_ratio.negative", lambda: probes.participation_ratio(
        np.array([3.0, -1.0, -1.0])), ValueError,
     r"^participation_ratio: eigs must be non-negative .* got 2 entries below that, the "
     r"smallest -1"),
    ("nets.mlp_apply.chain", lambda: nets.mlp_apply(
        [MLP[0], {"w": jnp.ones((5, 2)), "b": jnp.ones(2)}], X), ValueError,
     r"^mlp_apply: layer 1 does not chain onto layer 0: its w has shape \(5, 2\), layer 0's w "
     r"\(3, 4\) outputs 4 features"),
]:
    add(f"audit3:{name}", f, exc, arg)

# ----------------------------------------------------------------- n = 1 data
for name, f, arg in [
    ("probes.linear_cka", lambda: probes.linear_cka(X[:1], X[:1]), "2 samples"),
    ("dgl.dgl_loss", lambda: dgl.dgl_loss(K_PSD[:1, :1], Y1H[:1], eps2=0.1), "N = 2"),
    ("probes.unbiased_hsic", lambda: probes.unbiased_hsic(K_PSD[:3, :3], K_PSD[:3, :3]),
     "n >= 4"),
]:
    add(f"n=1:{name}", f, ValueError, arg)

# ----------------------------------------------------------------- non-finite results
for name, f, arg in [
    ("kernels.relu_nngp.1e30", lambda: kernels.relu_nngp(X * 1e30, depth=2, w_var=1.0,
                                                          b_var=0.1), "rescale"),
    ("kernels.relu_ntk.1e30", lambda: kernels.relu_ntk(X * 1e30, depth=1, w_var=1.0,
                                                        b_var=0.1), "x1"),
    ("dgl.dgl_linear.constant", lambda: dgl.dgl_linear(np.ones((10, 3)), np.ones((10, 2))),
     "eps2"),
]:
    add(f"result:{name}", f, _checks.NonFiniteResultError, arg)

# ----------------------------------------------------------------- loop.fit arguments
for name, kw, exc, arg in [
    ("steps=2.7", dict(steps=2.7), TypeError, "steps"),
    ("steps=-1", dict(steps=-1), ValueError, "steps"),
    ("steps=str", dict(steps="3"), TypeError, "steps"),
    ("epochs=1.5", dict(steps=None, epochs=1.5), TypeError, "epochs"),
    ("steps+epochs", dict(epochs=1), ValueError, "steps= or epochs="),
    ("batch_size=0", dict(batch_size=0), ValueError, "batch_size"),
    ("batch_size=2.5", dict(batch_size=2.5), TypeError, "batch_size"),
    ("batch_size>n", dict(batch_size=7), ValueError, "batch_size"),
    ("eval_every=0", dict(eval_every=0, eval_fn=lambda s: {}), ValueError, "eval_every"),
    ("chunk_size=0", dict(chunk_size=0), ValueError, "chunk_size"),
    ("checkpoint_every.nodir", dict(checkpoint_every=2), ValueError, "checkpoint_dir"),
    ("max_to_keep=0", dict(max_to_keep=0), ValueError, r"fit: max_to_keep must be >= 1, got 0"),
    ("key=None", dict(key=None), ValueError, "key"),
    ("key=int", dict(key=3), TypeError, "key"),
    ("empty data", dict(data=(X[:0], Y1H[:0])), ValueError, "0 samples"),
    ("no data", dict(data=None), ValueError, "data"),
    ("data disagree", dict(data=(X, Y1H[:5])), ValueError, "disagree"),
    ("data scalar", dict(data=(np.float32(1.0),)), ValueError, "sample axis"),
    ("step not callable", dict(step=3), TypeError, "step"),
    ("eval_fn not callable", dict(eval_fn=3), TypeError, "eval_fn"),
    ("check_finite=str", dict(check_finite="loss"), TypeError, "check_finite"),
    ("early_stopping.patience", dict(eval_fn=lambda s: {"l": jnp.zeros(())},
                                     early_stopping=loop.EarlyStopping("l", patience=0)),
     ValueError, "patience"),
    ("early_stopping.mode", dict(eval_fn=lambda s: {"l": jnp.zeros(())},
                                 early_stopping=loop.EarlyStopping("l", mode="down")),
     ValueError, "mode"),
    ("early_stopping.min_delta", dict(eval_fn=lambda s: {"l": jnp.zeros(())},
                                      early_stopping=loop.EarlyStopping("l", min_delta=-1.0)),
     ValueError, "min_delta"),
    ("data_runs_axis", dict(data_runs_axis=True), ValueError, "runs"),
    ("runs without axis", dict(runs=True, state=jnp.zeros(())), ValueError, "runs"),
    ("nan state", dict(step=_nan_params_step), loop.NonFiniteError, r"state.*params"),
]:
    add(f"fit:{name}", (lambda kw=kw: _fit(**kw)), exc, arg)


@pytest.mark.parametrize("f, exc, match", CASES)
def test_bad_input_raises_naming_the_argument(f, exc, match):
    with pytest.raises(exc, match=match):
        f()


def test_there_are_at_least_120_cases():
    assert len(CASES) >= 120, len(CASES)


# ----------------------------------------------------------------- documented values
def test_cka_of_a_constant_representation_is_zero():
    const = np.ones((6, 3), np.float32)
    assert float(probes.linear_cka(const, X)) == 0.0
    assert float(probes.linear_cka(X, const, method="gram")) == 0.0
    assert float(probes.rbf_cka(const, X)) == 0.0
    k_const = np.ones((6, 6), np.float32)
    assert float(probes.cka(k_const, K_PSD)) == 0.0


def test_cka_is_scale_invariant_up_to_overflow():
    # 1e30 inputs would overflow x^T x in float32; the rescaled form gives the exact value
    ref = float(probes.linear_cka(X, 2.0 * X[:, ::-1] + 0.5))
    assert math.isclose(float(probes.linear_cka(X * 1e30, 2.0 * X[:, ::-1] + 0.5)), ref,
                        rel_tol=1e-5)
    ref_rbf = float(probes.rbf_cka(X, X ** 2))
    assert math.isclose(float(probes.rbf_cka(X * 1e30, X ** 2)), ref_rbf, rel_tol=1e-4)


def test_spectral_measures_of_the_zero_matrix_are_zero():
    assert float(probes.effective_rank(jnp.zeros(3))) == 0.0
    assert float(probes.effective_rank(jnp.zeros((3, 4)))) == 0.0
    assert float(probes.stable_rank(jnp.zeros((3, 4)))) == 0.0
    assert float(probes.participation_ratio(jnp.zeros(3))) == 0.0
    # and the usual values elsewhere: r equal singular values -> r
    assert math.isclose(float(probes.effective_rank(jnp.ones(4))), 4.0, rel_tol=1e-6)


def test_value_checks_are_skipped_under_jit():
    # the same functions trace: out-of-range labels give the one_hot zero row, not an error
    f = jax.jit(lambda y: data.one_hot(y, 3))
    np.testing.assert_array_equal(np.asarray(f(jnp.array([0, 5]))),
                                  [[1, 0, 0], [0, 0, 0]])
    g = jax.jit(lambda h, y: dmn.class_density_matrices(h, y, 3))
    assert g(X, jnp.asarray(LAB)).shape == (3, 3, 3)
    nan = jax.jit(lambda x: kernels.relu_nngp(x, depth=1, w_var=1.0, b_var=0.0))(X * 1e30)
    assert not np.all(np.isfinite(np.asarray(nan)))  # NaN under jit, documented
