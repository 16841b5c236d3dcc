"""Reproductions of papers (A) and (B): configs, runs returning a :class:`~layerlab.record.Record`,
and plots.  Scripts in ``reproduce/bottleneck_*.py`` only parse flags and call these.

(A) Jacot, Golikov, Hongler, Gabriel, "Feature Learning in L2-regularized DNNs:
Attraction/Repulsion and Sparsity", NeurIPS 2022.
(B) Jacot, "Bottleneck Structure in Learned Features: Low-Dimension vs Regularity Tradeoff",
NeurIPS 2023.

=================  ===========================================  ==============================
artifact           run function                                 paper
=================  ===========================================  ==============================
``a_fig1``         :func:`run_a_fig1` (forces at a critical pt)  A, Fig. 1 and Sec. 3.1
``a_fig2``         :func:`run_a_fig2` (width plateau)            A, Fig. 2 and App. (teacher)
``a_rank``         :func:`run_a_rank` (Rank_sigma, FW, Rem. 4)   A, Sec. 3.3, 4, Props 13-14, 19
``b_structure``    :func:`run_b_structure`                       B, Thms 3, 6, 7, Cor. 8
``b_symmetry``     :func:`run_b_symmetry`                        B, Sec. 5 (Fig. 2)
``b_minima``       :func:`run_b_minima`                          B, Fig. 1 and Sec. 3
=================  ===========================================  ==============================

Drivers here may ``jit`` (library maths never does).  Every run takes an explicit ``key``.
Samples are rows and parameters ``layerlab.nets`` params, as in :mod:`layerlab.bottleneck`;
where a number must not depend on the layout (the float64 polish flattens the parameters) the
driver works on paper A's view ``from_mlp_params``.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from layerlab import data, loop, nets
from layerlab._checks import as_device_array, promote_float
from layerlab._plotting import subplots
from layerlab.bottleneck._covariances import covariances
from layerlab.bottleneck._cprank import bipartite_matrix, identity_inputs_loss_lower_bound
from layerlab.bottleneck._diagnostics import (
    bottleneck_diagnostics,
    centred_weight_counts,
    network_fn,
)
from layerlab.bottleneck._forces import Forces, _forces, forces
from layerlab.bottleneck._frank_wolfe import cp_rank_lower_bound, frank_wolfe_shallow
from layerlab.bottleneck._layout import (
    cols,
    from_mlp_params,
    to_mlp_params,
    weight_norm_sq,
)
from layerlab.bottleneck._optimise import representation_step
from layerlab.bottleneck._representations import (
    _layer_inputs,
    _phi,
    representations,
    weight_loss,
)
from layerlab.bottleneck._sweeps import (
    _runs_init,
    cross_entropy_cost,
    masked_loss,
    masked_weights,
    mse_cost,
    plateau_start,
    sweep_step,
    width_masks,
    width_sweep,
)
from layerlab.bottleneck._tasks import symmetry_task
from layerlab.record import Claim, Record, Row

Array = jax.Array

__all__ = [
    "AFig1Config", "AFig2Config", "ARankConfig", "BStructureConfig", "BSymmetryConfig",
    "BMinimaConfig", "force_stats", "polish_second_order", "run_chunked", "run_a_fig1",
    "run_a_fig2", "merge_a_fig2", "run_a_rank", "run_b_structure", "run_b_symmetry", "run_b_minima",
    "plot_a_fig1", "plot_a_fig2", "plot_a_rank", "plot_b_structure", "plot_b_symmetry",
    "plot_b_minima", "remark4_check", "ACTIVATIONS",
]

ACTIVATIONS: dict[str, Callable[[Array], Array]] = {
    "relu": jax.nn.relu, "tanh": jnp.tanh, "softplus": jax.nn.softplus,
    "gelu": jax.nn.gelu,
}


def _act(name: str) -> Callable[[Array], Array]:
    if name not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}; got {name!r}.")
    return ACTIVATIONS[name]


def _sub(ckpt, name):
    return None if ckpt is None else os.path.join(os.fspath(ckpt), name)


def _g2(v) -> float:
    return float(np.format_float_positional(float(v), precision=2, unique=False, fractional=False))


def _f(v) -> float:
    return float(np.asarray(v))


# ============================================================================ shared tools
def force_stats(params: Sequence[dict], x: Array, *, lam: float, ridge: float = 0.0,
                beta: float = 1.0, activation: Callable = jax.nn.relu,
                rank_rtol: float = 1e-6) -> tuple[list, Forces, list[dict]]:
    """Attraction/repulsion balance on each hidden layer of the network ``params``.

    .. math:: r_\\ell = \\frac{\\|F^{att}_\\ell + F^{rep}_\\ell\\|}{\\|F^{att}_\\ell\\|},
              \\qquad r^{row}_\\ell = \\frac{\\|P_\\ell (F^{att}_\\ell + F^{rep}_\\ell)\\|}
              {\\|P_\\ell F^{att}_\\ell\\|}

    with ``P_l`` ``[N, N]`` the projection on the column space of ``Z_{l-1}^sigma``
    ``[N, n_{l-1} + 1]`` (the variations of ``Z_l`` a change of ``W_l`` can realise; paper A's
    row space of its transpose).  At a critical point of ``L_lambda`` where every
    ``Z_{l-1}^sigma`` has full rank ``N``, ``r_l = 0`` (Sec. 3.1).

    Args:
      params: ``layerlab.nets`` params.  x: ``[N, n_0]`` (rows are samples).  lam: ``lambda``.
      ridge: Tikhonov ``rho`` of the pseudo-inverses (0: Moore-Penrose).

    Returns:
      ``(Zs, Forces, stats)``: ``Z_l`` and the forces ``[N, n_l]``, and one dict per hidden
      layer: ``imbalance``, ``imbalance_row_space``, ``att``, ``rep``, ``cos_att_minus_rep``,
      ``rank_input_sigma``, ``smin_input_sigma`` (smallest singular value of ``Z_{l-1}^sigma``
      relative to its largest).

    References:
      (A) Section 3.1 and Figure 1.
    """
    X = x.T  # paper A's columns: the numbers of the committed records
    Zs = _phi(from_mlp_params(params, beta), X, beta, activation)
    att, rep = _forces(Zs, X, lam, beta, activation, ridge)
    As = _layer_inputs(Zs, X, beta, activation)
    out = []
    for l in range(len(Zs) - 1):  # noqa: E741
        a, r = att[l], rep[l]
        _, s, vt = jnp.linalg.svd(As[l], full_matrices=False)
        keep = (s > rank_rtol * s[0]).astype(s.dtype)
        P = (vt.T * keep[None, :]) @ vt
        na = jnp.linalg.norm(a)
        out.append({"imbalance": jnp.linalg.norm(a + r) / na,
                    "imbalance_row_space": jnp.linalg.norm((a + r) @ P) / jnp.linalg.norm(a @ P),
                    "att": na, "rep": jnp.linalg.norm(r),
                    "cos_att_minus_rep": jnp.sum(a * -r) / (na * jnp.linalg.norm(r)),
                    "rank_input_sigma": jnp.sum(keep),
                    "smin_input_sigma": s[-1] / s[0]})
    return cols(Zs), Forces(attraction=cols(att), repulsion=cols(rep)), out


def polish_second_order(loss: Callable[[Any], Array], params: Any, *, lbfgs_iters: int = 2000,
                        newton_iters: int = 50, gtol: float = 1e-10,
                        max_dense: int = 4000) -> tuple[Any, dict]:
    """Polish ``params`` to a critical point in float64: L-BFGS, then Newton -- damped Newton
    with the exact Hessian when there are at most ``max_dense`` parameters, else trust-region
    Newton-CG with exact Hessian-vector products (``scipy.optimize``, ``trust-krylov``).

    Call inside ``jax.enable_x64(True)``.  Returns ``(params64, info)`` with ``grad_norm``
    (final Euclidean gradient norm), ``loss``, iteration counts and messages.
    """
    import scipy.optimize

    # flattened on host (ravel_pytree's order and layout): eagerly its reshape / concatenate
    # and the unflattening's split / reshape were one program per leaf shape
    leaves, treedef = jax.tree.flatten(params)
    leaves = [np.asarray(a, np.float64) for a in leaves]
    shapes = [a.shape for a in leaves]
    cuts = np.cumsum([a.size for a in leaves])[:-1].tolist()

    def unravel(v):
        parts = jnp.split(v, cuts) if cuts else [v]
        return jax.tree.unflatten(treedef, [u.reshape(sh) for u, sh in zip(parts, shapes)])

    f = lambda v: loss(unravel(v))  # noqa: E731
    vg = jax.jit(jax.value_and_grad(f))
    hvp = jax.jit(lambda v, t: jax.jvp(jax.grad(f), (v,), (t,))[1])

    def fun(v):
        val, g = vg(as_device_array(np.asarray(v, np.float64)))
        return float(val), np.asarray(g, np.float64)

    info: dict[str, Any] = {}
    x = np.concatenate([a.ravel() for a in leaves])
    if lbfgs_iters > 0:
        r = scipy.optimize.minimize(fun, x, jac=True, method="L-BFGS-B",
                                    options={"maxiter": lbfgs_iters, "gtol": gtol * 1e-2,
                                             "ftol": 0.0, "maxcor": 50})
        x = r.x
        info.update(lbfgs_iters=int(r.nit), lbfgs_message=str(r.message))
    info["grad_norm_after_lbfgs"] = float(np.linalg.norm(fun(x)[1]))
    if newton_iters > 0 and info["grad_norm_after_lbfgs"] > gtol and x.size <= max_dense:
        # damped Newton with the exact Hessian (small problems): quadratic convergence
        hess = jax.jit(jax.hessian(f))
        mu, it = 1e-8, 0
        for it in range(newton_iters):  # noqa: B007
            val, g = fun(x)
            if np.linalg.norm(g) <= gtol:
                break
            H = np.asarray(hess(as_device_array(x)), np.float64)
            w, V = np.linalg.eigh((H + H.T) / 2)
            while True:
                step = -V @ ((V.T @ g) / (np.abs(w) + mu))
                xn = x + step
                if np.linalg.norm(fun(xn)[1]) < np.linalg.norm(g) or mu > 1e6:
                    break
                mu *= 10
            x, mu = xn, max(mu / 100, 1e-12)
        info.update(newton="dense", newton_iters=it + 1)
    elif newton_iters > 0 and info["grad_norm_after_lbfgs"] > gtol:
        r = scipy.optimize.minimize(
            fun, x, jac=True, method="trust-krylov",
            hessp=lambda v, t: np.asarray(hvp(as_device_array(np.asarray(v, np.float64)),
                                              as_device_array(np.asarray(t, np.float64))),
                                          np.float64),
            options={"maxiter": newton_iters, "gtol": gtol})
        if np.linalg.norm(fun(r.x)[1]) < info["grad_norm_after_lbfgs"]:
            x = r.x
        info.update(newton="trust-krylov", newton_iters=int(r.nit),
                    newton_message=str(r.message))
    val, g = fun(x)
    info.update(loss=val, grad_norm=float(np.linalg.norm(g)), max_abs_grad=float(np.abs(g).max()))
    parts = np.split(np.asarray(x, np.float64), cuts) if cuts else [np.asarray(x, np.float64)]
    return jax.tree.unflatten(treedef, [as_device_array(u.reshape(sh))  # on host: exact
                                        for u, sh in zip(parts, shapes)]), info


def run_chunked(step: Callable, state: Any, n_chunks: int, chunk: int) -> tuple[Any, list, list]:
    """Run ``step(state, None, None)`` as jitted ``lax.scan`` chunks; time each chunk.

    The first chunk compiles and is not timed.  Returns ``(state, times [n_chunks],
    metrics per chunk)``.
    """
    @jax.jit
    def many(s):
        def body(s, _):
            return step(s, None, None)
        return jax.lax.scan(body, s, None, length=chunk)

    state, _ = jax.block_until_ready(many(state))
    times, ms = [], []
    for _ in range(n_chunks):
        t0 = time.perf_counter()
        state, m = many(state)
        jax.block_until_ready(m)
        times.append(time.perf_counter() - t0)
        ms.append(m)
    return state, times, ms


def _digits_subset(source: str, classes, n_per_class: int, seed: int, data_dir=None):
    """``x [N, d]`` standardised, one-hot zero-mean targets ``[N, C]``, labels ``[N]``."""
    if source == "mnist":
        ds = data.load("mnist", n=n_per_class * len(classes), classes=classes, balanced=True,
                       seed=seed, data_dir=data_dir)
    elif source == "digits":
        ds = data.select_classes(data.load("digits", split="all"), classes)
        ds = data.balanced_subset(ds, n_per_class * len(classes), seed=seed)
    else:
        raise ValueError(f"source must be 'mnist' or 'digits'; got {source!r}.")
    x = np.asarray(data.flatten(ds.x), np.float64)
    x = x[:, x.std(0) > 0]
    x = (x - x.mean(0)) / x.std(0)
    order = np.argsort(np.asarray(ds.y), kind="stable")
    y = data.one_hot(np.asarray(ds.y)[order], len(classes), zero_mean=True)
    return x[order], np.asarray(y, np.float64), np.asarray(ds.y)[order]


def _train_runs(x, y, sizes, lam, keys, *, cost=mse_cost, activation=jax.nn.relu, beta=1.0,
                adam_steps=0, adam_lr=1e-3, gd_steps=0, gd_lrs=None, progress=True,
                checkpoint_dir=None, desc="train"):
    """Train ``len(keys)`` full-width runs in one program: Adam (cosine decay) then GD with a
    per-run rate.  Returns ``(params with runs axis, history, grad_norm [R])``."""
    (x,) = promote_float(x)  # integer x: float weights and a float lambda (not int 0)
    R = len(keys)
    depth = len(sizes) - 1
    width = sizes[1]
    dt = np.dtype(x.dtype)
    hp = {"masks": as_device_array(np.ones((R, depth - 1, width), dt)),  # from host: no program
          "lam": as_device_array(np.full((R,), lam, dt))}
    params, kf = _he_inits(list(keys), sizes=tuple(sizes), dtype=dt)
    hist = None
    if adam_steps > 0:
        sched = optax.cosine_decay_schedule(adam_lr, adam_steps, alpha=1e-2)
        ts = sweep_step(cost, optax.adam(sched), beta=beta, activation=activation)
        st, hist = loop.fit(ts.step, _runs_init(params, hp, init_fn=ts.init), (x, y), key=kf,
                            steps=adam_steps, runs=True, progress=progress,
                            desc=f"{desc} (adam)", checkpoint_dir=_sub(checkpoint_dir, "adam"))
        params = st.params
    if gd_steps > 0:
        lrs = as_device_array(np.broadcast_to(np.asarray(gd_lrs, np.float64), (R,)).astype(dt))
        opt = optax.inject_hyperparams(optax.sgd)(learning_rate=1.0)
        ts = sweep_step(cost, opt, beta=beta, activation=activation)
        st = _runs_init(params, hp, init_fn=ts.init, learning_rates=lrs)
        st, h2 = loop.fit(ts.step, st, (x, y), key=jax.random.fold_in(kf, 1), steps=gd_steps,
                          runs=True, progress=progress, desc=f"{desc} (gd)", check_finite=False,
                          checkpoint_dir=_sub(checkpoint_dir, "gd"))
        params, hist = st.params, (h2 if hist is None else hist)

    def gn(p, h):
        g = jax.grad(lambda q: masked_loss(q, (x, y), hparams=h, cost=cost, beta=beta,
                                           activation=activation)[0])(p)
        return optax.tree.norm(g)

    return params, hist, np.asarray(jax.jit(jax.vmap(gn))(params, hp)), hp


@functools.partial(jax.jit, static_argnames=("sizes", "dtype"))
def _he_inits(keys: list, *, sizes: tuple[int, ...], dtype) -> tuple[list[dict], Array]:
    """:func:`_train_runs`'s start as one program: He inits of ``sizes`` from each of ``keys``
    (leaves ``[R, ...]`` in ``dtype``) and the data key ``fold_in(keys[0], 12345)``."""
    W0 = jax.vmap(lambda k: nets.mlp_init(k, sizes, init="he"))(jnp.stack(keys))
    return jax.tree.map(lambda a: a.astype(dtype), W0), jax.random.fold_in(keys[0], 12345)


# ============================================================================ A, Fig. 1
@dataclasses.dataclass(frozen=True)
class AFig1Config:
    """Attraction/repulsion (paper A, Fig. 1, Sec. 3.1).

    Part 1 (smooth, the identity at a true critical point; ours): ``smooth_activation`` net
    of width ``smooth_width >= N`` on Gaussian inputs ``[N, N - 1]`` and Gaussian targets, so
    every ``Z^sigma`` has full column rank (L^r differentiable); float64 full-batch GD then
    L-BFGS + exact-Hessian Newton to ``grad_norm <= target_grad_norm``.
    Part 2 (the paper's figure): L = 3 ReLU, MNIST digits 7/8/9, N = 42, width 50, ``gd_steps``
    = 20k steps of full-batch GD (App.: "trained with full batch GD"), then the same polish.
    """

    source: str = "mnist"              # Fig. 1: MNIST digits 7, 8, 9
    classes: tuple[int, ...] = (7, 8, 9)
    n_per_class: int = 14              # N = 42 (Fig. 1 caption)
    depth: int = 3                     # L = 3
    width: int = 50                    # n_1 = n_2 = 50
    lam: float = 1e-3                  # not stated in the paper
    gd_steps: int = 20000              # "T = 20k steps of gradient descent"
    gd_lr: float = 0.05
    ridge: float = 1e-8                # Tikhonov approximation of the forces (caption)
    smooth_activation: str = "tanh"
    smooth_n: int = 12                 # Gaussian inputs [N, N-1], Gaussian targets [N, out]:
    smooth_out: int = 6                # high-rank targets keep every Z^sigma of full column
    smooth_width: int = 16             # rank N (the regime where L^r is differentiable)
    smooth_lam: float = 1e-2
    smooth_gd_lr: float = 0.02
    lbfgs_iters: int = 3000
    newton_iters: int = 100
    target_grad_norm: float = 1e-8
    seed: int = 0

    @classmethod
    def paper(cls) -> AFig1Config:
        return cls()

    @classmethod
    def cpu(cls) -> AFig1Config:
        return cls(gd_steps=5000, lbfgs_iters=1000, newton_iters=50)

    @classmethod
    def smoke(cls) -> AFig1Config:
        return cls(source="digits", n_per_class=4, width=12, gd_steps=20, smooth_n=6,
                   smooth_width=8, lbfgs_iters=30, newton_iters=2)


def _first_run(tree: Any) -> Any:
    """Every leaf's first run (``a[0]``), sliced on host (eagerly, one program per shape)."""
    return jax.tree.map(lambda a: as_device_array(np.asarray(a)[0]), tree)


# paper A's view and back (exact: beta = 1), one program per shapes instead of ~4 ops per layer
_from_mlp_jit = jax.jit(from_mlp_params)
_to_mlp_jit = jax.jit(to_mlp_params)


@functools.partial(jax.jit, static_argnames="sizes")
def _he_init64(key: Array, *, sizes: tuple[int, ...]) -> list[dict]:
    """``nets.mlp_init(key, sizes, init="he")`` cast to float64, as one program."""
    return jax.tree.map(lambda w: w.astype(jnp.float64), nets.mlp_init(key, sizes, init="he"))


def _relu_smooth_net(cfg, x, y, act, width, key, progress, ckpt, desc, lam, lr):
    sizes = [x.shape[1]] + [width] * (cfg.depth - 1) + [y.shape[1]]
    xx, yy = as_device_array(x), as_device_array(y)
    params, hist, gn, hp = _train_runs(xx, yy, sizes, lam, [key],
                                       activation=act, gd_steps=cfg.gd_steps, gd_lrs=lr,
                                       progress=progress, checkpoint_dir=ckpt, desc=desc)
    W, hp1 = _first_run((params, hp))
    loss = lambda p: masked_loss(p, (xx, yy), hparams=hp1, cost=mse_cost,  # noqa: E731
                                 activation=act)[0]
    return W, float(gn[0]), loss, hist


def run_a_fig1(config: AFig1Config, *, key: Array, progress: bool = True,
               checkpoint_dir: str | os.PathLike | None = None,
               data_dir: str | os.PathLike | None = None) -> Record:
    """Forces at a critical point (smooth) and on the paper's ReLU digits net (float64)."""
    cfg = config
    t0 = time.perf_counter()
    arrays: dict[str, Any] = {}
    with jax.enable_x64(True):
        res: dict[str, Any] = {}
        for part, act_name, npc, width, lam in [
                ("smooth", cfg.smooth_activation, cfg.smooth_n, cfg.smooth_width,
                 cfg.smooth_lam),
                ("relu", "relu", cfg.n_per_class, cfg.width, cfg.lam)]:
            act = _act(act_name)
            if part == "smooth":  # Gaussian regression, n_0 + 1 = N: full-rank regime
                rng = np.random.default_rng(cfg.seed)
                x = rng.standard_normal((cfg.smooth_n, cfg.smooth_n - 1))
                y = rng.standard_normal((cfg.smooth_n, cfg.smooth_out))
                labels = np.zeros(cfg.smooth_n, int)
            else:
                x, y, labels = _digits_subset(cfg.source, cfg.classes, npc, cfg.seed, data_dir)
            W, gn_gd, loss, _ = _relu_smooth_net(cfg, x, y, act, width,
                                                 jax.random.fold_in(key, len(part)), progress,
                                                 _sub(checkpoint_dir, part), part, lam,
                                                 cfg.smooth_gd_lr if part == "smooth"
                                                 else cfg.gd_lr)
            stats = jax.jit(lambda p, r, act=act, x=as_device_array(x), lam=lam: force_stats(
                p, x, lam=lam, ridge=r, activation=act)[2])
            ridge = 0.0 if part == "smooth" else cfg.ridge
            st_gd = stats(W, ridge)
            # polish paper A's view [W_1, ..., W_L] (beta = 1, exact round trip): the flattened
            # vector, hence L-BFGS's arithmetic, is the one of the committed records
            Wc, info = polish_second_order(lambda Wc: loss(to_mlp_params(Wc)),
                                           _from_mlp_jit(W), lbfgs_iters=cfg.lbfgs_iters,
                                           newton_iters=cfg.newton_iters,
                                           gtol=cfg.target_grad_norm * 1e-2)
            Wp = _to_mlp_jit(Wc)
            st_p = stats(Wp, ridge)
            init = _he_init64(jax.random.fold_in(key, len(part)), sizes=tuple(
                [x.shape[1]] + [width] * (cfg.depth - 1) + [y.shape[1]]))
            st_0 = stats(init, ridge)
            res[part] = {
                "activation": act_name, "N": x.shape[0], "width": width, "ridge": ridge,
                "lam": lam, "n_0": x.shape[1],
                "grad_norm_after_gd": gn_gd, "polish": info,
                "init": [{k: _f(v) for k, v in s.items()} for s in st_0],
                "after_gd": [{k: _f(v) for k, v in s.items()} for s in st_gd],
                "polished": [{k: _f(v) for k, v in s.items()} for s in st_p],
                "labels": labels,
            }
            arrays[part] = {"x": x, "params": jax.tree.map(np.asarray, Wp)}
    rows, claims = [], []
    sm, rl = res["smooth"], res["relu"]
    for l, s in enumerate(sm["polished"]):  # noqa: E741
        rows.append(Row(f"smooth ({sm['activation']}) layer {l + 1}: |F_att+F_rep|/|F_att| at "
                        "the critical point", s["imbalance"], paper=0.0, tol=1e-3,
                        note=f"Gaussian data N={sm['N']}, n_0={sm['n_0']}, width {sm['width']}, "
                             f"lambda {sm['lam']:g}, float64, grad norm "
                             f"{sm['polish']['grad_norm']:.1e}; exact pseudo-inverses"))
    rows.append(Row("smooth: final gradient norm", sm["polish"]["grad_norm"], paper=None,
                    note=f"target <= {cfg.target_grad_norm:g}"))
    for l, (a, b) in enumerate(zip(rl["after_gd"], rl["polished"])):  # noqa: E741
        rows.append(Row(f"ReLU digits layer {l + 1}: |F_att+F_rep|/|F_att| after {cfg.gd_steps} "
                        "GD steps", a["imbalance"], paper=0.0,
                        note="paper's Fig. 1 protocol; forces with Tikhonov ridge "
                             f"{cfg.ridge:g}"))
        rows.append(Row(f"ReLU digits layer {l + 1}: same after float64 polish", b["imbalance"],
                        paper=0.0, note=f"grad norm {rl['polish']['grad_norm']:.1e}"))
        rows.append(Row(f"ReLU digits layer {l + 1}: row-space imbalance after polish",
                        b["imbalance_row_space"], paper=0.0,
                        note="net force projected on the row space of Z_{l-1}^sigma"))
        rows.append(Row(f"ReLU digits layer {l + 1}: smallest relative singular value of "
                        "Z_{l-1}^sigma", b["smin_input_sigma"]))
    worst = max(s["imbalance"] for s in sm["polished"])
    claims.append(Claim("forces cancel at a critical point (F_att + F_rep = 0, Sec. 3.1)",
                        worst <= 1e-3 and sm["polish"]["grad_norm"] <= 10 * cfg.target_grad_norm,
                        f"{sm['activation']} net, float64, grad norm "
                        f"{sm['polish']['grad_norm']:.1e}: max_l |F_att+F_rep|/|F_att| = "
                        f"{worst:.1e} (at init: "
                        f"{max(s['imbalance'] for s in sm['init']):.2f})"))
    rel_row = max(s["imbalance_row_space"] for s in rl["polished"])
    smins = [s["smin_input_sigma"] for s in rl["polished"]]
    rows_sp = [round(s["imbalance_row_space"], 4) for s in rl["polished"]]
    ranks = [int(s["rank_input_sigma"]) for s in rl["polished"]]
    claims.append(Claim(
        "ReLU digits (L=3, 7/8/9, the paper's Fig. 1 setting): forces balance at the end of "
        "training", rel_row < 0.1,
        f"after {cfg.gd_steps} GD steps: |F_att+F_rep|/|F_att| "
        f"{[round(s['imbalance'], 3) for s in rl['after_gd']]}; after the float64 polish (grad "
        f"norm {rl['polish']['grad_norm']:.1e}; ReLU kinks stop Newton): full "
        f"{[round(s['imbalance'], 3) for s in rl['polished']]}, along the admissible directions "
        f"(row space of Z_(l-1)^sigma) {rows_sp}."
        f" Explanation: not a critical point, and the repulsion on layer l contains "
        f"(Z_l^sigma)^+ whose relative smallest singular values are "
        f"{[_g2(v) for v in smins[1:]]} (rank {ranks}"
        f" of N={rl['N']} for the inputs of layers 1..{len(smins)}): the compressed "
        "representation amplifies the residual gradient by up to 1/s_min^2"))
    scale = "paper" if cfg.source == "mnist" and cfg.n_per_class == 14 and cfg.gd_steps >= 20000 \
        else "reduced"
    rec = Record("bottleneck", "a_fig1", "Attraction/repulsion forces cancel at a critical point",
                 scale, dataclasses.asdict(cfg), rows=rows, claims=claims,
                 wall_s=time.perf_counter() - t0,
                 note="lambda and the GD rate are not given in the paper; the smooth part is "
                      "ours (the identity needs a differentiable L^r: full-rank Z^sigma)",
                 extra={"result": res})
    rec.arrays = arrays  # inputs and polished weights for plot_a_fig1 (not written to JSON)
    return rec


_representations_jit = jax.jit(representations, static_argnames=("beta", "activation"))
_forces_plot = jax.jit(forces, static_argnames=("lam", "beta", "activation", "ridge"))


def plot_a_fig1(record: Record, path: str | os.PathLike) -> None:
    """Hidden representations (the samples on their top-2 PCs) with attraction/repulsion arrows
    (needs the record returned by :func:`run_a_fig1`, which carries the parameters)."""
    res = record.extra["result"]
    fig, axes = subplots(2, 2, figsize=(11, 10))
    colors = np.array(["tab:blue", "tab:orange", "tab:green", "tab:red"])
    with jax.enable_x64(True):
        for row, part in enumerate(["smooth", "relu"]):
            r = res[part]
            act = _act(r["activation"])
            x = as_device_array(record.arrays[part]["x"])
            params = jax.tree.map(as_device_array, record.arrays[part]["params"])
            Zs = _representations_jit(params, x, activation=act)
            F = _forces_plot(Zs, x, lam=r["lam"], activation=act, ridge=r["ridge"])
            for l in range(min(2, len(Zs) - 1)):  # noqa: E741
                ax = axes[row, l]
                Z = np.asarray(Zs[l])                                  # [N, n_l]
                mu = Z.mean(0, keepdims=True)
                _, _, Vt = np.linalg.svd(Z - mu, full_matrices=False)
                P = Vt[:2]                                             # top-2 PCs [2, n_l]
                pts = P @ (Z - mu).T
                a, rr = P @ np.asarray(F.attraction[l]).T, P @ np.asarray(F.repulsion[l]).T
                sc = 0.25 * np.abs(pts).max() / max(np.abs(a).max(), np.abs(rr).max(), 1e-300)
                ax.scatter(pts[0], pts[1], c=colors[np.asarray(r["labels"]) % 4], s=18, zorder=3)
                ax.quiver(pts[0], pts[1], sc * a[0], sc * a[1], color="tab:green", angles="xy",
                          scale_units="xy", scale=1, width=0.004, label="attraction")
                ax.quiver(pts[0], pts[1], sc * rr[0], sc * rr[1], color="tab:red", angles="xy",
                          scale_units="xy", scale=1, width=0.004, label="repulsion")
                ax.set_title(f"{part} ({r['activation']}), layer {l + 1}: |att+rep|/|att| = "
                             f"{r['polished'][l]['imbalance']:.1e}", fontsize=9)
                ax.legend(fontsize=7)
    fig.suptitle("paper A Fig. 1: forces on Z_l (top-2 PCs of the data points)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


# ============================================================================ A, Fig. 2
@dataclasses.dataclass(frozen=True)
class AFig2Config:
    """Width plateau (paper A, Fig. 2; teacher setting from the appendix).

    Left: MNIST subset N = 1000, depth 3, cross-entropy, two lambdas (values not stated in the
    text; ours 1e-3, 1e-4).  Right: N = 1000 Gaussian inputs, teacher of depth 3 and widths
    (50, 10, 10, 10), MSE, lambda = 1e-6, three nets per width, the minimum taken.  Both: Adam
    then full-batch GD (App.), then an L-BFGS polish of every run (ours).  Plateau start: the
    smallest width whose best train loss is within ``plateau_rel_tol`` of the minimum over
    widths (one definition, used in the record and docs/bottleneck.md).
    """

    mnist_n: int = 1000
    mnist_test_n: int = 10000
    mnist_lams: tuple[float, ...] = (1e-3, 1e-4)
    mnist_widths: tuple[int, ...] = (2, 4, 8, 16, 32, 64, 128, 256)
    mnist_seeds: int = 1
    teacher_n: int = 1000
    teacher_test_n: int = 10000
    teacher_widths_net: tuple[int, ...] = (50, 10, 10, 10)
    teacher_lam: float = 1e-6
    teacher_widths: tuple[int, ...] = (2, 4, 6, 8, 10, 12, 16, 24, 32, 48, 64)
    teacher_seeds: int = 3
    depth: int = 3
    adam_steps: int = 30000
    adam_lr: float = 3e-3
    gd_steps: int = 20000
    mnist_gd_lr: float = 0.1
    teacher_gd_lr: float = 3e-3
    # L-BFGS iterations after GD (width_sweep's polish), both parts: after 30k Adam + 20k GD
    # the teacher runs still had gradient norms 0.02-0.09 at losses ~1e-4 (H100 record without
    # it), so the loss was not monotone in width; the plateau is read off converged runs.
    polish_steps: int = 2000
    plateau_rel_tol: float = 0.05
    parts: tuple[str, ...] = ("mnist", "teacher")

    @classmethod
    def paper(cls) -> AFig2Config:
        return cls()

    @classmethod
    def cpu(cls) -> AFig2Config:
        return cls(mnist_n=200, mnist_test_n=2000, mnist_widths=(2, 4, 8, 16, 32, 64),
                   teacher_n=200, teacher_test_n=2000, teacher_widths=(2, 4, 8, 10, 16, 32),
                   adam_steps=3000, gd_steps=1000, polish_steps=500)

    @classmethod
    def smoke(cls) -> AFig2Config:
        # polish_steps=1: one L-BFGS step (with its zoom line search) per sweep, one chunk;
        # the L-BFGS state starts weakly typed and is not after a chunk, so a longer polish
        # compiled its program (the run's largest) twice per sweep
        return cls(mnist_n=40, mnist_test_n=40, mnist_widths=(2, 4), teacher_n=40,
                   teacher_test_n=40, teacher_widths=(2, 4), teacher_seeds=2, adam_steps=20,
                   gd_steps=10, polish_steps=1)


_A_FIG2_PARTS = ("mnist", "teacher")
_A_FIG2_NOTE = ("MNIST lambdas are not stated in the text (ours 1e-3, 1e-4); step counts, rates "
                "and the L-BFGS polish are ours (the paper gives none)")


def run_a_fig2(config: AFig2Config, *, key: Array, progress: bool = True,
               checkpoint_dir: str | os.PathLike | None = None,
               data_dir: str | os.PathLike | None = None,
               merge_into: str | os.PathLike | None = None) -> Record:
    """Train/test loss vs width on MNIST (two lambdas) and on the teacher task.

    Runs the parts in ``config.parts``.  With ``merge_into`` (an ``a_fig2`` record written
    before, e.g. a GPU run of both parts) the result is :func:`merge_a_fig2` of that record and
    this run: the parts run here replace the record's, the others are kept.
    """
    cfg = config
    unknown = set(cfg.parts) - set(_A_FIG2_PARTS)
    if unknown or not cfg.parts:
        raise ValueError(f"AFig2Config.parts must be a non-empty subset of {_A_FIG2_PARTS}; "
                         f"got {cfg.parts}.")
    t0 = time.perf_counter()
    out: dict[str, Any] = {}
    if "mnist" in cfg.parts:
        tr = data.load("mnist", n=cfg.mnist_n, balanced=True, seed=0, data_dir=data_dir)
        te = data.load("mnist", "test", n=cfg.mnist_test_n, seed=0, data_dir=data_dir)
        x, y = as_device_array(data.flatten(tr.x)), jnp.asarray(tr.y, jnp.int32)
        xt, yt = as_device_array(data.flatten(te.x)), jnp.asarray(te.y, jnp.int32)
        for i, lam in enumerate(cfg.mnist_lams):
            r = width_sweep(jax.random.fold_in(key, i), x, y, widths=cfg.mnist_widths,
                            depth=cfg.depth, cost=cross_entropy_cost, lam=lam,
                            seeds=cfg.mnist_seeds, adam_steps=cfg.adam_steps,
                            adam_lr=cfg.adam_lr, gd_steps=cfg.gd_steps, gd_lr=cfg.mnist_gd_lr,
                            polish_steps=cfg.polish_steps, progress=progress,
                            desc=f"mnist lam={lam:g}",
                            checkpoint_dir=_sub(checkpoint_dir, f"mnist_{i}"))
            out[f"mnist lam={lam:g}"] = _sweep_summary(r, xt, yt, cross_entropy_cost, cfg)
    if "teacher" in cfg.parts:
        tr, te = _a_fig2_teacher_data(cfg, key)
        x, y = as_device_array(tr.x), as_device_array(tr.y)
        r = width_sweep(jax.random.fold_in(key, 7), x, y, widths=cfg.teacher_widths,
                        depth=cfg.depth, cost=mse_cost, lam=cfg.teacher_lam,
                        seeds=cfg.teacher_seeds, adam_steps=cfg.adam_steps, adam_lr=cfg.adam_lr,
                        gd_steps=cfg.gd_steps, gd_lr=cfg.teacher_gd_lr,
                        polish_steps=cfg.polish_steps, progress=progress, desc="teacher",
                        checkpoint_dir=_sub(checkpoint_dir, "teacher"))
        out["teacher"] = _sweep_summary(r, as_device_array(te.x), as_device_array(te.y),
                                        mse_cost, cfg)
        out["teacher"]["target_variance"] = float(np.var(np.asarray(tr.y)))
    wall = time.perf_counter() - t0
    if merge_into is not None:
        return merge_a_fig2(merge_into, out, cfg, wall_s=wall)
    return _a_fig2_record(cfg, out, wall, _A_FIG2_NOTE)


def _a_fig2_teacher_data(cfg: AFig2Config, key: Array) -> tuple[data.Dataset, data.Dataset]:
    """Train and test sets of one teacher; the test inputs have their own key (with the
    teacher's key alone the first ``teacher_n`` test points would be the training points:
    the PRNG is counter-based, so a longer draw extends a shorter one).  The key is not a
    child of the teacher's: here ``fold_in(k, i)`` equals ``split(k)[i]``, and
    ``data.teacher`` draws its default inputs from ``split(k)[1]``."""
    kt = jax.random.fold_in(key, 99)
    tr = data.teacher(kt, cfg.teacher_n, cfg.teacher_widths_net)
    te = data.teacher(kt, cfg.teacher_test_n, cfg.teacher_widths_net,
                      x_key=jax.random.fold_in(key, 98), split="test")
    return tr, te


def _a_fig2_part(name: str) -> str:
    """The part (``mnist`` / ``teacher``) a sweep of ``extra["sweeps"]`` belongs to."""
    return "mnist" if name.startswith("mnist") else "teacher"


def _a_fig2_paper_part(part: str, c: dict) -> bool:
    """Whether the run that made ``part`` used the paper's configuration for it."""
    if part == "mnist":
        return c["mnist_n"] == 1000
    return c["teacher_n"] == 1000 and c["teacher_lam"] == 1e-6 and c["teacher_seeds"] == 3


def _fmt_list(v, fmt: str) -> list[float | None]:
    return [None if not np.isfinite(a) else float(format(a, fmt))
            for a in np.asarray(v, float).ravel()]


def _a_fig2_record(cfg: AFig2Config, out: dict[str, dict], wall_s: float | None, note: str, *,
                   part_configs: dict[str, dict] | None = None) -> Record:
    """The ``a_fig2`` record (rows, claims, scale) from the sweep summaries ``out``.

    ``out``: ``{"mnist lam=...": summary, ..., "teacher": summary}`` as written by
    :func:`_sweep_summary` (arrays, or the lists of a loaded record).  ``part_configs``: the
    config (dict) of the run each part came from, for a merged record (default: ``cfg`` for
    every part); the record's ``config`` then also lists them as ``per_part``.
    """
    merged = part_configs is not None
    if part_configs is None:
        part_configs = {p: dataclasses.asdict(cfg) for p in cfg.parts}
    rows, claims, starts = [], [], {}
    for name, s in out.items():
        c = part_configs[_a_fig2_part(name)]
        st = int(s["plateau_start"])
        starts[name] = None if st < 0 else st
        rows.append(Row(f"{name}: plateau start (width, best train loss within "
                        f"{cfg.plateau_rel_tol:.0%} of the min over widths)", starts[name],
                        paper=10, tol=6,
                        note=f"N={c[_a_fig2_part(name) + '_n']}; paper: 'the plateau appears "
                             "to start around 10'"))
        g = np.asarray(s["grad_norm_best"], float)
        polish = int(c.get("polish_steps", 0))
        steps = (f"after {c['adam_steps']} Adam + {c['gd_steps']} GD + {polish} L-BFGS steps"
                 if polish else f"after {c['adam_steps']} Adam + {c['gd_steps']} GD steps "
                 "(no L-BFGS polish)")
        rows.append(Row(f"{name}: max final gradient norm over widths (best seeds)",
                        float(np.max(g)) if np.all(np.isfinite(g)) else None,
                        note=(f"convergence check {steps}; by width "
                              f"{dict(zip(np.asarray(s['widths']).tolist(), _fmt_list(g, '.2g')))}"
                              if np.all(np.isfinite(g))
                              else f"some widths diverged (all seeds): {g.tolist()}")))
    if "teacher" in out:
        t = out["teacher"]
        test, train = np.asarray(t["test_best"], float), np.asarray(t["best"], float)
        ratio = test / train
        below = np.asarray(test <= train)
        rows.append(Row(
            "teacher: widths whose test loss is below the regularised train loss (best seeds)",
            int(np.sum(below)),
            note=f"of {below.size}; test / train by width "
                 f"{dict(zip(np.asarray(t['widths']).tolist(), _fmt_list(ratio, '.3g')))} "
                 "(the claim below needs all below 1)"))
    if starts:
        ok = all(v is not None and v <= 16 and v < max(np.asarray(out[k]["widths"]))
                 for k, v in starts.items())
        claims.append(Claim(
            "train loss plateaus in width on MNIST N=1000 and on the teacher task, starting "
            "around width 10 (<= 16 and before the largest width), far below N^2",
            ok, "N = " + ", ".join(
                f"{c[p + '_n']} ({p})" for p, c in part_configs.items()) + "; " + "; ".join(
                f"{k}: start {v}, best loss by width {_fmt_list(out[k]['best'], '.4g')}, final "
                f"grad norms {_fmt_list(out[k]['grad_norm_best'], '.2g')}"
                for k, v in starts.items())))
    if "teacher" in out:
        claims.append(Claim(
            "teacher: test loss below the regularised train loss (the regulariser is not in "
            "the test loss)", bool(np.all(test <= train)),
            f"test {_fmt_list(test, '.3g')} vs train {_fmt_list(train, '.3g')}"))
    paper_scale = (set(part_configs) == set(_A_FIG2_PARTS)
                   and all(_a_fig2_paper_part(p, c) for p, c in part_configs.items()))
    config = dataclasses.asdict(cfg)
    if merged:
        config["per_part"] = part_configs
    return Record("bottleneck", "a_fig2", "Loss plateau in width (MNIST and teacher)",
                  "paper" if paper_scale else "reduced", config, rows=rows, claims=claims,
                  wall_s=wall_s, note=note, extra={"sweeps": out})


def _device(machine: dict) -> str:
    kind = machine.get("device_kind") or machine.get("processor") or "unknown device"
    return f"{kind} ({machine.get('cpu_count', '?')} CPU cores)"


def merge_a_fig2(record_path: str | os.PathLike, out: dict[str, dict], config: AFig2Config, *,
                 wall_s: float, command: str = "") -> Record:
    """Merge a run of some parts of Fig. 2 into an existing ``a_fig2`` record.

    The parts in ``config.parts`` (their sweeps ``out``, as built by :func:`run_a_fig2`)
    replace the record's entries of ``extra["sweeps"]`` for those parts; the other entries are
    kept exactly as stored.  Rows and claims are recomputed from the merged sweeps by the same
    function as for a single run; the record is ``"paper"`` scale when every part's run used
    the paper's configuration for that part.  ``config`` of the merged record is ``config``'s
    fields with the kept parts' ``mnist_*`` / ``teacher_*`` fields from the old record, plus
    ``per_part`` (each part's full run config); ``wall_s`` is the **sum** of the old record's
    wall time (including the parts replaced here) and ``wall_s``; ``extra["runs"]`` lists each
    run (parts kept from it, machine, wall time, command, git), and the note says which part ran
    on which machine and with which settings.

    Args:
      record_path: the existing record (``load_record`` validates it).
      out: ``{"mnist lam=...": summary, "teacher": summary}`` of this run's parts.
      config: this run's config (``parts`` = the parts in ``out``).
      wall_s: this run's wall time in seconds.
      command: this run's command line (default: filled in when the record is written).

    Returns:
      the merged :class:`~layerlab.record.Record` (written by the caller, ``write_record``).
    """
    from layerlab.record import _git, load_record, machine_info

    old = load_record(record_path)
    if old["artifact"] != "a_fig2" or old["paper"] != "bottleneck":
        raise ValueError(f"merge_a_fig2: {record_path} is a {old['paper']} {old['artifact']} "
                         "record, not bottleneck a_fig2.")
    new_parts = tuple(p for p in _A_FIG2_PARTS if p in config.parts)
    if {_a_fig2_part(k) for k in out} != set(new_parts):
        raise ValueError(f"merge_a_fig2: out holds sweeps {sorted(out)}, not the parts "
                         f"{new_parts} of config.parts.")
    old_cfg = old["config"]
    if float(old_cfg["plateau_rel_tol"]) != float(config.plateau_rel_tol):
        raise ValueError("merge_a_fig2: the kept sweeps' plateau starts use plateau_rel_tol "
                         f"{old_cfg['plateau_rel_tol']}, this run {config.plateau_rel_tol}: "
                         "rerun with the same value.")
    old_per_part = old_cfg.get("per_part") or {
        p: {k: v for k, v in old_cfg.items() if k != "per_part"}
        for p in old_cfg.get("parts", _A_FIG2_PARTS)}
    old_sweeps = old.get("extra", {}).get("sweeps", {})
    kept = [p for p in _A_FIG2_PARTS if p not in new_parts and p in old_per_part
            and any(_a_fig2_part(k) == p for k in old_sweeps)]
    sweeps: dict[str, dict] = {}
    for p in _A_FIG2_PARTS:
        if p in new_parts:
            sweeps.update({k: v for k, v in out.items() if _a_fig2_part(k) == p})
        elif p in kept:
            sweeps.update({k: v for k, v in old_sweeps.items() if _a_fig2_part(k) == p})
    now = dataclasses.asdict(config)
    part_configs = {p: (now if p in new_parts else old_per_part[p])
                    for p in _A_FIG2_PARTS if p in new_parts or p in kept}
    fields = dataclasses.asdict(config)
    for p in kept:
        fields.update({k: v for k, v in old_per_part[p].items()
                       if k.startswith(p + "_") and k in fields})
    fields["parts"] = tuple(part_configs)
    merged_cfg = AFig2Config(**{k: tuple(v) if isinstance(v, list) else v
                                for k, v in fields.items()})

    old_runs = old.get("extra", {}).get("runs") or [{
        "parts": list(old_cfg.get("parts", _A_FIG2_PARTS)), "machine": old["machine"],
        "wall_s": old["wall_s"], "command": old["command"], "git": old["git"]}]
    runs = []
    for r in old_runs:
        used = [p for p in r.get("parts_kept", r["parts"]) if p in kept]
        if used:
            runs.append({**r, "parts_kept": used})
    me = machine_info()
    runs.append({"parts": list(new_parts), "parts_kept": list(new_parts), "machine": me,
                 "wall_s": wall_s, "command": command, "git": _git()})
    total = sum(float(r["wall_s"]) for r in runs if r["wall_s"] is not None)

    def settings(p: str, c: dict) -> str:
        if p == "teacher":
            what = (f"teacher {tuple(c['teacher_widths_net'])}, N={c['teacher_n']} (test "
                    f"{c['teacher_test_n']}), lambda={c['teacher_lam']:g}, widths "
                    f"{tuple(c['teacher_widths'])} x {c['teacher_seeds']} nets, GD rate "
                    f"{c['teacher_gd_lr']:g}")
        else:
            what = (f"MNIST N={c['mnist_n']} (test {c['mnist_test_n']}), lambdas "
                    f"{tuple(c['mnist_lams'])}, widths {tuple(c['mnist_widths'])} x "
                    f"{c['mnist_seeds']} nets, GD rate {c['mnist_gd_lr']:g}")
        return (f"{what}, depth {c['depth']}, {c['adam_steps']} Adam (rate {c['adam_lr']:g}) + "
                f"{c['gd_steps']} GD + {int(c.get('polish_steps', 0))} L-BFGS steps")

    def secs(v) -> str:
        return "? s" if v is None else f"{float(v):.0f} s"

    where = "; ".join(
        f"{' + '.join(r['parts_kept'])}: " + (
            f"this run on {_device(r['machine'])}, {secs(r['wall_s'])}"
            if r is runs[-1] else
            f"kept from `{r['command']}` (git {r['git']}) on {_device(r['machine'])}, "
            f"{secs(r['wall_s'])} for its parts {'+'.join(r['parts'])}")
        for r in runs)
    note = (f"Merged record. {where}. wall_s = {total:.0f} s is the sum of these runs' wall "
            "times. Settings: " + "; ".join(f"{p}: {settings(p, c)}"
                                            for p, c in part_configs.items())
            + f" (each part's config in config.per_part). {_A_FIG2_NOTE}")
    rec = _a_fig2_record(merged_cfg, sweeps, total, note, part_configs=part_configs)
    rec.command = command
    rec.extra["runs"] = runs
    for k, v in old.get("extra", {}).items():
        if k not in rec.extra:
            rec.extra[k] = v
    return rec


@functools.partial(jax.jit, static_argnames="cost")
def _test_costs(params: list[dict], masks: Array, xt: Array, yt: Array, *,
                cost: Callable) -> Array:
    """``cost`` ``[R]`` of each masked run (``params`` leaves and ``masks`` ``[R, ...]``) on
    the test set ``(xt [M, n_0], yt)``: one program per shapes and cost (the test set an
    argument, not constants of a program compiled per sweep)."""
    return jax.vmap(lambda p, m: cost(representations(masked_weights(p, m), xt)[-1], yt))(
        params, masks)


def _sweep_summary(r, xt, yt, cost, cfg) -> dict:
    W, S = r["loss"].shape
    best_seed = r["best_seed"]

    masks = width_masks(np.repeat(r["widths"], S), max(r["widths"]), cfg.depth - 1)
    tc = np.asarray(_test_costs(r["state"].params, masks, xt, yt, cost=cost)).reshape(W, S)
    idx = (np.arange(W), best_seed)
    return {"widths": r["widths"], "loss": r["loss"], "cost": r["cost"], "reg": r["reg"],
            "grad_norm": r["grad_norm"], "best": r["best"],
            "grad_norm_best": r["grad_norm"][idx], "test": tc, "test_best": tc[idx],
            "plateau_start": plateau_start(r["widths"], r["best"], rel_tol=cfg.plateau_rel_tol)}


def plot_a_fig2(record: Record, path: str | os.PathLike) -> None:
    sw = record.extra["sweeps"]
    fig, ax = subplots(1, 2, figsize=(12, 4.5))
    for name, s in sw.items():
        a = ax[1] if name == "teacher" else ax[0]
        line, = a.loglog(s["widths"], s["best"], "o-", label=f"{name} train (reg. loss)")
        a.loglog(s["widths"], s["test_best"], "s--", c=line.get_color(), label=f"{name} test")
        if name == "teacher":
            for j in range(np.asarray(s["loss"]).shape[1]):
                a.scatter(s["widths"], np.asarray(s["loss"])[:, j], s=6, c="tab:blue")
        a.axvline(s["plateau_start"], ls=":", c=line.get_color())
    ax[0].set(title="MNIST subset, cross-entropy, L=3", xlabel="width", ylabel="loss")
    ax[1].set(title="teacher (50,10,10,10), MSE, lambda=1e-6", xlabel="width")
    for a in ax:
        a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


# ============================================================================ A, Rank_sigma
def remark4_check(lam: float = 0.1, a1: float | None = None, eps: float = 1e-2) -> dict:
    """Proposition 19 / Remark 4: a local minimum of ``L_lambda`` whose covariances are not a
    local minimum of ``L^k``.

    Shallow bias-free ReLU net of widths (1, 2, 1), inputs ``x = (1, -1)^T``, targets
    ``y = (1, 1)^T`` (``[N, 1]``, rows are samples), cost ``||Z_2 - y||^2`` (the proof's
    normalisation).  At ``W_1 = (a_1, a_2)^T``, ``W_2 = (a_1, a_2)`` (paper A's view; ``w_1 =
    (a_1, a_2)``, ``w_2 = (a_1, a_2)^T`` as ``layerlab.nets`` params) with
    ``a_1^2 + a_2^2 = 1 - lambda``, ``a_1, a_2 > 0``: gradient 0 and Hessian PSD (a local
    minimum; one flat direction along the circle).  The endpoint ``a_2 = 0`` has the same
    ``(K_1, K_1^sigma, Z_2)`` but the dead neuron, turned to the input ``-1`` with weights
    ``(-eps, eps)``, lowers the loss by ``2 (1 - lambda) eps^2 - eps^4`` while the covariances
    move by ``O(eps^2)``: so ``(K, Z_L)`` is not a local minimum of L^k.

    Returns:
      dict with ``grad_norm`` and ``hessian_eigs`` at the interior point, ``same_covariances``
      (max entry difference of ``(K_1, K_1^sigma, Z_2)`` between interior point and endpoint),
      ``endpoint_drop`` (loss decrease along the path at ``eps``), ``predicted_drop`` and
      ``cov_shift`` (max covariance change along the path).
    """
    if not 0 < lam < 1:
        raise ValueError(f"remark4_check: lam must be in (0, 1); got {lam}.")
    with jax.enable_x64(True):
        r = np.sqrt(1 - lam)
        a1 = r / np.sqrt(2) if a1 is None else a1
        a2 = np.sqrt(r ** 2 - a1 ** 2)
        v = as_device_array(np.array([a1, a2, a1, a2], np.float64))  # no program per array
        end = as_device_array(np.array([r, 0.0, r, 0.0]))
        pert = as_device_array(np.array([r, -eps, r, eps]))
        out = jax.device_get(_remark4_parts(v, end, pert, as_device_array(np.asarray(
            lam, np.float64))))
        loss_v, loss_end, loss_pert, g, H, gam_v, gam_end, gam_pert = out
        same = max(float(np.abs(a - b).max()) for a, b in zip(gam_v, gam_end))
        shift = max(float(np.abs(a - b).max()) for a, b in zip(gam_end, gam_pert))
        return {"grad_norm": float(np.linalg.norm(g)),
                "hessian_eigs": np.linalg.eigvalsh(np.asarray(H)),
                "loss": float(loss_v), "loss_endpoint": float(loss_end),
                "same_covariances": same, "endpoint_drop": float(loss_end - loss_pert),
                "predicted_drop": 2 * (1 - lam) * eps ** 2 - eps ** 4, "cov_shift": shift}


@jax.jit
def _remark4_parts(v, end, pert, lam):
    """:func:`remark4_check`'s losses, gradient, Hessian and ``(K_1, K_1^sigma, Z_2)`` at the
    interior point ``v``, the endpoint and the perturbed endpoint, as one program (eagerly,
    each ``grad``/``hessian`` op compiled on its own: ~9 s)."""
    x = jnp.array([[1.0], [-1.0]], v.dtype)
    y = jnp.array([[1.0], [1.0]], v.dtype)
    cost = lambda Z: jnp.sum((Z - y) ** 2)  # noqa: E731

    def net(w):  # bias-free (beta = 0): the biases are ignored
        return [{"w": jnp.stack([w[0], w[1]])[None, :], "b": jnp.zeros(2, w.dtype)},
                {"w": jnp.stack([w[2], w[3]])[:, None], "b": jnp.zeros(1, w.dtype)}]

    def loss(w):
        return weight_loss(net(w), x, cost=cost, lam=lam, beta=0.0)

    def gam(w):
        Zs = representations(net(w), x, beta=0.0)
        c = covariances(Zs, x, beta=0.0)
        return c.K[0], c.K_sigma[1], Zs[-1]

    return (loss(v), loss(end), loss(pert), jax.grad(loss)(v), jax.hessian(loss)(v),
            gam(v), gam(end), gam(pert))


@dataclasses.dataclass(frozen=True)
class ARankConfig:
    """Rank_sigma of the optimum: B_N (Props. 13-14), Frank-Wolfe on L^k vs weight GD (Sec.
    3.3), and the Remark 4 counterexample (Prop. 19).

    ``x = I_N``, ``y = B_N``, bias-free shallow ReLU (Prop. 14's setting), MSE ``/N``.
    """

    sizes: tuple[int, ...] = (4, 6, 8)
    lam: float = 1e-3
    fw_iters: int = 150
    gd_steps: int = 20000
    gd_lr: float = 0.2
    gd_chunk: int = 500
    gd_seeds: int = 4
    cp_rel_tol: float = 0.05
    remark4_lam: float = 0.1
    sweep_steps: int = 30000           # B_N width sweep (Adam)
    sweep_rel_tol: float = 1e-3
    lr_n: int = 60                     # L^r (projected Adam) vs weight-space Adam: teacher task
    lr_width: int = 64
    lr_steps: int = 3000
    lr_rate: float = 3e-3
    lr_ridge: float = 1e-4

    @classmethod
    def paper(cls) -> ARankConfig:
        return cls()

    @classmethod
    def cpu(cls) -> ARankConfig:
        return cls(sizes=(4, 6), fw_iters=100, gd_steps=5000, sweep_steps=8000)

    @classmethod
    def smoke(cls) -> ARankConfig:
        return cls(sizes=(4,), fw_iters=3, gd_steps=40, gd_chunk=20, gd_seeds=2, sweep_steps=20,
                   lr_n=12,
                   lr_width=8, lr_steps=20)


def run_a_rank(config: ARankConfig, *, key: Array, progress: bool = True,
               checkpoint_dir: str | os.PathLike | None = None) -> Record:
    """Frank-Wolfe vs weight-space GD on B_N, CP-rank lower bounds, Remark 4."""
    del checkpoint_dir
    cfg = config
    t0 = time.perf_counter()
    rows, claims, out = [], [], {}
    for N in cfg.sizes:
        B = bipartite_matrix(N)
        lb = identity_inputs_loss_lower_bound(B, cfg.lam)
        fw = frank_wolfe_shallow(B, cfg.lam, iters=cfg.fw_iters)
        # the FW optimum approximates a matrix with exact zeros: entries < cp_rel_tol max are
        # taken as those zeros (zero_tol; the default certifies the matrix as given)
        cp = cp_rank_lower_bound(fw["K_sigma"], rel_tol=cfg.cp_rel_tol, zero_tol=cfg.cp_rel_tol)
        # weight-space full-batch GD at width N(N+1) (Caratheodory: enough for the optimum)
        width = N * (N + 1)
        with jax.enable_x64(True):
            x = as_device_array(np.eye(N))  # from host: no program per shape
            y = as_device_array(B)
            sizes = [N, width, N]
            R = cfg.gd_seeds
            ts = sweep_step(mse_cost, optax.sgd(cfg.gd_lr), beta=0.0)
            hp = {"masks": as_device_array(np.ones((R, 1, width))),
                  "lam": as_device_array(np.full((R,), cfg.lam))}
            st = _a_rank_gd_init(key, hp, N=N, sizes=tuple(sizes), init_fn=ts.init)
            vstep = jax.vmap(ts.step, in_axes=(0, None, None))

            def step(s, b, k, vstep=vstep, x=x, y=y):
                return vstep(s, (x, y), k)

            n_chunks = max(1, cfg.gd_steps // cfg.gd_chunk)
            st, times, ms = run_chunked(step, st, n_chunks, cfg.gd_chunk)
            gd_loss = np.array([np.asarray(m["loss"])[-1] for m in ms])  # [chunks, R]
            Zs = np.asarray(_first_reps_beta0(st.params, x))  # [R, N, n_1]
            cps = [cp_rank_lower_bound(np.maximum(z, 0) @ np.maximum(z, 0).T,
                                       rel_tol=cfg.cp_rel_tol, zero_tol=cfg.cp_rel_tol)["lower"]
                   for z in Zs]
        best = int(np.argmin(gd_loss[-1]))
        gd_step_s = float(np.median(times)) / cfg.gd_chunk / R
        fw_it_s = float(np.median(np.diff(np.concatenate([[0.0], fw["time_s"]]))))
        # the width plateau itself: widths 1 .. N^2/4 + 2 masked in one program (Adam)
        widths = list(range(1, N * N // 4 + 3))
        sw = width_sweep(jax.random.fold_in(key, 50 + N), np.eye(N, dtype=jnp.result_type(float)),
                         np.asarray(B, np.float32),
                         widths=widths, depth=2, cost=mse_cost, lam=cfg.lam,
                         seeds=cfg.gd_seeds, adam_steps=cfg.sweep_steps, adam_lr=1e-2, beta=0.0,
                         progress=progress, desc=f"B_{N} widths")
        p_start = plateau_start(widths, sw["best"], rel_tol=cfg.sweep_rel_tol, reference=lb)
        rows.append(Row(f"B_{N}: plateau start of the width sweep (loss within "
                        f"{cfg.sweep_rel_tol:g} of the infinite-width loss)", p_start,
                        paper=N * N / 4, tol=1.0,
                        note=f"Adam {cfg.sweep_steps} steps, best of {cfg.gd_seeds} seeds; "
                             f"loss/bound at width N: {sw['best'][N - 1] / lb:.4f}"))
        out[f"B_{N}"] = {"sweep_widths": widths, "sweep_best": sw["best"], "plateau_start": p_start,
                         "N": N, "lower_bound": lb, "fw": {k: fw[k] for k in (
            "loss", "gap", "time_s", "width", "final_loss")}, "fw_cp": cp,
            "gd_loss": gd_loss, "gd_steps_axis": (np.arange(n_chunks) + 1) * cfg.gd_chunk,
            "gd_step_s_per_run": gd_step_s, "fw_iter_s": fw_it_s, "gd_cp_lower": cps,
            "gd_width": width}
        rows.append(Row(f"B_{N}: Frank-Wolfe L^k / infinite-width loss - 1", fw["final_loss"] / lb
                        - 1, paper=0.0, tol=1e-3,
                        note=f"{len(fw['loss'])} oracle calls, final gap {fw['gap'][-1]:.1e}"))
        rows.append(Row(f"B_{N}: weight-space GD (width N(N+1)={width}) best loss / "
                        "infinite-width loss - 1", float(gd_loss[-1, best]) / lb - 1, paper=0.0,
                        tol=1e-3, seeds=1,
                        note=f"{cfg.gd_steps} full-batch GD steps, best of {R} seeds"))
        rows.append(Row(f"B_{N}: CP-rank lower bound on Rank_sigma of the FW optimum", cp["lower"],
                        paper=N * N / 4, tol=0.0,
                        note=f"support graph edges {cp['edges']}, triangle-free "
                             f"{cp['triangle_free']}, entries < {cfg.cp_rel_tol} max = 0"))
        rows.append(Row(f"B_{N}: CP-rank lower bound, best weight-space GD net", cps[best],
                        paper=N * N / 4, tol=0.0))
        rows.append(Row(f"B_{N}: width (atoms) of the FW solution", fw["width"], paper=None,
                        note=f"upper bound on Rank_sigma at the optimum found; N^2/4 = "
                             f"{N * N // 4}, N(N+1) = {N * (N + 1)}"))
        rows.append(Row(f"B_{N}: cost of one FW iteration / one GD step (wall time ratio)",
                        fw_it_s / gd_step_s, note=f"FW {fw_it_s * 1e3:.2f} ms per iteration "
                        f"(host numpy/scipy), GD {gd_step_s * 1e6:.1f} us per step and run"))
    okfw = all(out[k]["fw"]["final_loss"] / out[k]["lower_bound"] - 1 <= 1e-3 for k in out)
    claims.append(Claim("Frank-Wolfe on L^k reaches the infinite-width optimum without "
                        "projections (Sec. 3.3)", okfw,
                        "; ".join(f"{k}: FW {v['fw']['final_loss']:.6g} vs bound "
                                  f"{v['lower_bound']:.6g} in {len(v['fw']['loss'])} iterations; "
                                  f"GD best {np.min(v['gd_loss'][-1]):.6g} after "
                                  f"{cfg.gd_steps} steps" for k, v in out.items())))
    okcp = all(v["fw_cp"]["lower"] >= v["N"] ** 2 // 4 for v in out.values())
    claims.append(Claim("at the optimum for Y = B_N, Rank_sigma >= N^2/4 (Props. 13-14), "
                        "certified by a computable CP-rank lower bound", okcp,
                        "; ".join(f"{k}: lower bound {v['fw_cp']['lower']} (N^2/4 = "
                                  f"{v['N'] ** 2 // 4}), FW width {v['fw']['width']}"
                                  for k, v in out.items())))
    out["representation_space"] = _lr_vs_weights(cfg, key)
    rs = out["representation_space"]
    rows.append(Row("L^r by projected Adam vs weights by Adam: final L_lambda ratio (repr/weight)",
                    rs["final"]["representation"] / rs["final"]["weight"],
                    note=f"teacher N={cfg.lr_n}, width {cfg.lr_width}, L=3, {cfg.lr_steps} "
                         f"steps, lr {cfg.lr_rate:g}, ridge {cfg.lr_ridge:g}: "
                         f"{rs['final']['representation']:.4g} vs {rs['final']['weight']:.4g}"))
    rows.append(Row("L^r step / weight step (wall time ratio)", rs["step_s"]["representation"]
                    / rs["step_s"]["weight"], note="pseudo-inverse solves + projection per step"))
    r4 = remark4_check(cfg.remark4_lam)
    out["remark4"] = r4
    rows.append(Row("Prop. 19: gradient norm at the interior local minimum", r4["grad_norm"],
                    paper=0.0, tol=1e-9))
    rows.append(Row("Prop. 19: smallest Hessian eigenvalue there", float(r4["hessian_eigs"][0]),
                    paper=0.0, tol=1e-9, note="one flat direction (along the circle)"))
    rows.append(Row("Prop. 19: loss drop along the endpoint's path (eps=1e-2)",
                    r4["endpoint_drop"], paper=r4["predicted_drop"], tol=1e-12,
                    note="same (K, Z_L) as the local minimum, covariances move O(eps^2)"))
    claims.append(Claim("Remark 4: L^k has strictly fewer local minima than L_lambda",
                        r4["grad_norm"] < 1e-9 and r4["hessian_eigs"][0] > -1e-9
                        and r4["same_covariances"] < 1e-12 and r4["endpoint_drop"] > 0,
                        f"interior point: grad {r4['grad_norm']:.1e}, Hessian eigenvalues "
                        f"{np.round(r4['hessian_eigs'], 4).tolist()}; endpoint with the same "
                        f"(K, Z_L) (max diff {r4['same_covariances']:.1e}) descends by "
                        f"{r4['endpoint_drop']:.3e} at covariance shift {r4['cov_shift']:.1e}"))
    return Record("bottleneck", "a_rank", "Rank_sigma: CP-rank bound, Frank-Wolfe on L^k, Remark 4",
                  _a_rank_scale(cfg),
                  dataclasses.asdict(cfg), rows=rows, claims=claims,
                  wall_s=time.perf_counter() - t0,
                  note="the paper proves these statements and runs no experiment for them; "
                       "N values, lambda and budgets are ours", extra={"result": out})


@functools.partial(jax.jit, static_argnames=("N", "sizes", "init_fn"))
def _a_rank_gd_init(key: Array, hp: dict, *, N: int, sizes: tuple[int, ...],
                    init_fn: Callable) -> loop.TrainState:
    """:func:`run_a_rank`'s GD runs at the start, one program per ``N``: ``R`` He inits of
    ``sizes`` from ``fold_in(key, N)`` (float64) and ``init_fn`` of each with its ``hp`` (leaves
    ``[R, ...]``); eagerly every fold-in, split, cast and optimizer-state zero was its own
    program."""
    R = hp["lam"].shape[0]
    W0 = jax.vmap(lambda k: nets.mlp_init(k, sizes, init="he"))(
        jax.random.split(jax.random.fold_in(key, N), R))
    W0 = jax.tree.map(lambda a: a.astype(jnp.float64), W0)
    return jax.vmap(init_fn)(W0, hp)


@jax.jit
def _first_reps_beta0(params: Sequence[dict], x: Array) -> Array:
    """``Z_1`` ``[R, N, n_1]`` of bias-free (``beta = 0``) runs ``params`` (leaves ``[R, ...]``)
    on ``x`` ``[N, n_0]``, as one program."""
    return jax.vmap(lambda p: representations(p, x, beta=0.0)[0])(params)


def _a_rank_scale(cfg: ARankConfig) -> str:
    """``"paper"`` when ``cfg`` has the paper configuration's sizes and at least its budgets
    (Frank-Wolfe iterations, GD steps and random starts, sweep and L^r steps); fewer
    ``--seeds`` (``gd_seeds``) or steps make a reduced record, which ``--paper`` does not write
    over the committed one."""
    full = ARankConfig.paper()
    budgets = ("fw_iters", "gd_steps", "gd_seeds", "sweep_steps", "lr_steps")
    return ("paper" if tuple(cfg.sizes) == tuple(full.sizes)
            and all(getattr(cfg, f) >= getattr(full, f) for f in budgets) else "reduced")


def _lr_vs_weights(cfg: ARankConfig, key: Array) -> dict:
    """Projected Adam on L^r (``representation_step``) vs Adam on the weights, same init."""
    ds = data.teacher(jax.random.fold_in(key, 5), cfg.lr_n, (10, 10, 10, 3))
    x, y = as_device_array(ds.x), as_device_array(ds.y)
    cost = lambda Z: mse_cost(Z, y)  # noqa: E731
    sizes = [x.shape[1], cfg.lr_width, cfg.lr_width, y.shape[1]]
    chunk = max(1, min(100, cfg.lr_steps))
    n = max(1, cfg.lr_steps // chunk)
    wstep = sweep_step(mse_cost, optax.adam(cfg.lr_rate))
    hp = {"masks": as_device_array(np.ones((2, cfg.lr_width), jnp.result_type(float))),
          "lam": jnp.asarray(cfg.lam * 10)}
    rstep = representation_step(x, cost, optax.adam(cfg.lr_rate), lam=cfg.lam * 10,
                                ridge=cfg.lr_ridge)

    @jax.jit
    def starts(key):  # one program: eagerly each draw, zero and matmul was its own
        W0 = nets.mlp_init(jax.random.fold_in(key, 6), sizes, init="he")
        return (wstep.init(W0, hp), rstep.init(representations(W0, x)),
                weight_loss(W0, x, cost=cost, lam=cfg.lam * 10))

    w_start, r_start, initial = starts(key)
    _, tw, mw = run_chunked(lambda s, b, k: wstep.step(s, (x, y), jax.random.key(0)),
                            w_start, n, chunk)
    _, tr, mr = run_chunked(rstep.step, r_start, n, chunk)
    mw, mr = jax.device_get((mw, mr))  # host: no eager indexing program per chunk shape
    return {"steps": (np.arange(n) + 1) * chunk,
            "weight": [float(m["loss"][-1]) for m in mw],
            "representation": [float(m["weight_loss"][-1]) for m in mr],
            "final": {"weight": float(mw[-1]["loss"][-1]),
                      "representation": float(mr[-1]["weight_loss"][-1])},
            "initial": float(initial),
            "step_s": {"weight": float(np.median(tw)) / chunk,
                       "representation": float(np.median(tr)) / chunk}}


def plot_a_rank(record: Record, path: str | os.PathLike) -> None:
    res = record.extra["result"]
    fig, ax = subplots(1, 2, figsize=(12, 4.5))
    for k, v in res.items():
        if not k.startswith("B_"):
            continue
        lb = v["lower_bound"]
        fl = np.asarray(v["fw"]["loss"]) / lb - 1
        line, = ax[0].semilogy(np.arange(1, len(fl) + 1), np.maximum(fl, 1e-12), "o-", ms=3,
                               label=f"{k} Frank-Wolfe (iterations)")
        gl = np.min(np.asarray(v["gd_loss"]), axis=1) / lb - 1
        ax[1].semilogy(v["gd_steps_axis"], np.maximum(gl, 1e-12), "-", c=line.get_color(),
                       label=f"{k} weight GD (steps)")
    ax[0].set(title="L^k by Frank-Wolfe: loss / infinite-width loss - 1", xlabel="iteration")
    ax[1].set(title="weight-space GD at width N(N+1)", xlabel="step")
    for a in ax:
        a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


# ============================================================================ B, structure
def _host_counts(d: dict, keys: Sequence[str]) -> dict:
    """The diagnostics on host, the counts ``keys`` as integers (the records' format).

    The diagnostics of a run whose weights diverged are NaN (its counts and ranks are
    undefined; they used to come out as 0, a plausible "rank-0 bottleneck"): such runs stop
    the experiment here with a ``ValueError`` naming them, rather than later on ``int(nan)``
    or a record row that refuses NaN.  The finished training stays in its checkpoints."""
    d = jax.tree.map(np.asarray, d)
    for k in keys:
        v = d[k]
        if not np.all(np.isfinite(v)):
            runs = sorted({int(i) for i in np.argwhere(~np.isfinite(v.reshape(len(v), -1)))[:, 0]})
            raise ValueError(
                f"bottleneck experiment: the diagnostics ({k}) of run(s) {runs} of {len(v)} "
                "are not finite: their weights diverged (non-finite parameters), so their "
                "ranks and counts are undefined and no record is built from them; rerun with a "
                "smaller learning rate or fewer steps (finished training is kept in the "
                "checkpoint folder, if one was given).")
        d[k] = v.astype(np.int64)
    return d


def _diag_runs(params, x, n_diag, tol, rel_tol, beta=1.0, activation=jax.nn.relu):
    f = jax.jit(jax.vmap(lambda W: bottleneck_diagnostics(
        W, x[:n_diag], tol=tol, rel_tol=rel_tol, beta=beta, activation=activation)))
    return _host_counts(f(params), ("count_near_one", "numerical_rank"))


def _centred_runs(params, x, n_diag, tol):
    """:func:`~layerlab.bottleneck.centred_weight_counts` of a sweep's runs (vmapped), on host."""
    f = jax.jit(jax.vmap(lambda W: centred_weight_counts(W, x[:n_diag], tol=tol)))
    return _host_counts(f(params), ("count_near_one", "dominant"))


def _inner_median(c, frac=0.25):
    """Median over the inner layers (drop the first and last ``frac`` of the depth)."""
    L = len(c)
    lo, hi = int(np.floor(frac * L)), L - int(np.floor(frac * L))
    return float(np.median(np.asarray(c)[lo:max(hi, lo + 1)]))


def _latent_task(key, n, k, d):
    ds = data.latent(key, n, k=k, d_in=d, d_out=d)
    x, y = np.asarray(ds.x), np.asarray(ds.y)
    y = (y - y.mean(0)) / y.std()
    return jnp.asarray(x), jnp.asarray(y)


@dataclasses.dataclass(frozen=True)
class BStructureConfig:
    """Bottleneck structure vs depth (paper B, Thms. 3, 6, 7, Cor. 8) on latent-k data
    (``layerlab.data.latent``: ``x = g(z)``, ``y = h(z)``, ``z in R^k``), and the learning-rate
    effect with plain GD at one depth (Sec. 4: large rates keep the NTK of order L)."""

    ks: tuple[int, ...] = (1, 2, 3)
    depths: tuple[int, ...] = (4, 6, 8, 12, 16, 20)
    n: int = 500
    dim: int = 20
    width: int = 64
    lam: float = 1e-2                  # 1e-3: weights with 2-5 svs near 1 for k = 1 (pilot)
    seeds: int = 2
    adam_steps: int = 10000
    adam_lr: float = 3e-3
    gd_steps: int = 2000
    gd_lr_depth: float = 0.012         # GD rate = gd_lr_depth / L (Sec. 4: a rate ~ 1/L keeps
    #                                    the NTK O(L)); a fixed 2e-3 oscillated at L >= 12
    #                                    (final grad norm 4.8 at L = 12, 21.6 at L = 18)
    lr_depth: int = 8
    lr_k: int = 2
    lr_gd_lrs: tuple[float, ...] = (0.003, 0.03)
    lr_gd_steps: int = 20000
    tol: float = 0.25
    rel_tol: float = 1e-2
    n_diag: int = 64

    @classmethod
    def paper(cls) -> BStructureConfig:
        return cls()

    @classmethod
    def cpu(cls) -> BStructureConfig:
        return cls(ks=(1, 2), depths=(4, 8, 12), n=200, width=32, seeds=1, adam_steps=3000,
                   gd_steps=500, lr_gd_steps=3000)

    @classmethod
    def smoke(cls) -> BStructureConfig:
        # one k: a second one only repeats the depth loop (same code and shapes, every program
        # traced and compiled again); k = lr_k = 2, so the learning-rate part reuses its data;
        # dim = width: one weight shape; seeds = len(lr_gd_lrs) = 2: the learning-rate runs
        # have the depth-3 runs' shapes (both share their eager programs)
        return cls(ks=(2,), depths=(3, 4), n=32, dim=8, width=8, seeds=2, adam_steps=20,
                   gd_steps=5, lr_depth=3, lr_gd_steps=10, n_diag=8)


def run_b_structure(config: BStructureConfig, *, key: Array, progress: bool = True,
                    checkpoint_dir: str | os.PathLike | None = None) -> Record:
    cfg = config
    t0 = time.perf_counter()
    res: dict[str, Any] = {"depth_sweep": {}, "lr": {}}
    for k in cfg.ks:
        x, y = _latent_task(jax.random.fold_in(key, 100 + k), cfg.n, k, cfg.dim)
        for L in cfg.depths:
            sizes = [cfg.dim] + [cfg.width] * (L - 1) + [cfg.dim]
            keys = list(jax.random.split(jax.random.fold_in(key, 1000 * k + L), cfg.seeds))
            params, hist, gn, _ = _train_runs(
                x, y, sizes, cfg.lam, keys, adam_steps=cfg.adam_steps, adam_lr=cfg.adam_lr,
                gd_steps=cfg.gd_steps, gd_lrs=cfg.gd_lr_depth / L, progress=progress,
                checkpoint_dir=_sub(checkpoint_dir, f"k{k}_L{L}"), desc=f"k={k} L={L}")
            d = _diag_runs(params, x, cfg.n_diag, cfg.tol, cfg.rel_tol)
            c = _centred_runs(params, x, cfg.n_diag, cfg.tol)
            cc, dom, gain = c["count_near_one"], c["dominant"], c["mean_gain"]
            res["depth_sweep"][f"k={k} L={L}"] = {
                "k": k, "L": L, "grad_norm": gn, "cost": np.asarray(hist["train"]["cost"][-1]),
                "count_near_one": d["count_near_one"], "effective_rank": d["effective_rank"],
                "numerical_rank": d["numerical_rank"], "jacobian_rank": d["jacobian_rank"],
                "jacobian_log_pdet": d["jacobian_log_pdet"], "ntk_trace": d["ntk_trace"],
                "singular_values": [s[:, :8] for s in d["singular_values"]],
                "inner_count": [_inner_median(c) for c in d["count_near_one"]],
                "centred_count": cc, "centred_dominant": dom, "mean_gain": gain,
                "inner_centred_count": [_inner_median(c) for c in cc],
                "inner_centred_dominant": [_inner_median(c) for c in dom],
                "inner_top_sv": [_inner_median([float(np.median(s[:max(k, 1)])) for s in sv])
                                 for sv in zip(*d["singular_values"])],
                "inner_mean_gain": [_inner_median(g) for g in gain],
                "inner_numerical_rank": [_inner_median(c[:-1]) for c in d["numerical_rank"]]}
    # learning-rate effect: plain GD from the same init, small and large rate, one program
    x, y = _latent_task(jax.random.fold_in(key, 100 + cfg.lr_k), cfg.n, cfg.lr_k, cfg.dim)
    sizes = [cfg.dim] + [cfg.width] * (cfg.lr_depth - 1) + [cfg.dim]
    k0 = jax.random.fold_in(key, 777)
    params, hist, gn, _ = _train_runs(x, y, sizes, cfg.lam, [k0] * len(cfg.lr_gd_lrs),
                                      gd_steps=cfg.lr_gd_steps, gd_lrs=cfg.lr_gd_lrs,
                                      progress=progress, desc="lr effect (GD)",
                                      checkpoint_dir=_sub(checkpoint_dir, "lr"))
    d = _diag_runs(params, x, cfg.n_diag, cfg.tol, cfg.rel_tol)
    res["lr"] = {"lrs": cfg.lr_gd_lrs, "grad_norm": gn, "ntk_trace": d["ntk_trace"],
                 "jacobian_rank": d["jacobian_rank"], "effective_rank": d["effective_rank"],
                 "count_near_one": d["count_near_one"],
                 "cost": np.asarray(hist["train"]["cost"][-1])}
    rows, claims = [], []
    ds = res["depth_sweep"]
    Ls = np.asarray(cfg.depths, float)
    count_ok, ntk_slopes = [], []
    for k in cfg.ks:
        cnt = [float(np.mean(ds[f"k={k} L={L}"]["inner_count"])) for L in cfg.depths]
        jr = [float(np.mean(ds[f"k={k} L={L}"]["jacobian_rank"])) for L in cfg.depths]
        ntk = [float(np.mean(ds[f"k={k} L={L}"]["ntk_trace"])) for L in cfg.depths]
        nr = [float(np.mean(ds[f"k={k} L={L}"]["inner_numerical_rank"])) for L in cfg.depths]
        Lmax = cfg.depths[-1]
        per_seed = ds[f"k={k} L={Lmax}"]
        rows.append(Row(f"latent k={k}, L={Lmax}: median count of weight singular values within "
                        f"{cfg.tol} of 1 (inner layers)", cnt[-1], paper=k, tol=0.5,
                        seeds=cfg.seeds, spread=float(np.std(per_seed["inner_count"])),
                        note=f"by depth {dict(zip(cfg.depths, [round(c, 2) for c in cnt]))}"))
        cc = [float(np.mean(ds[f"k={k} L={L}"]["inner_centred_count"])) for L in cfg.depths]
        mg = [float(np.mean(ds[f"k={k} L={L}"]["inner_mean_gain"])) for L in cfg.depths]
        dm = [float(np.mean(ds[f"k={k} L={L}"]["inner_centred_dominant"])) for L in cfg.depths]
        top = [float(np.mean(ds[f"k={k} L={L}"]["inner_top_sv"])) for L in cfg.depths]
        rows.append(Row(f"latent k={k}, L={Lmax}: the same count with the mean input direction "
                        f"projected out (the ReLU representation's offset)", cc[-1], paper=k,
                        tol=0.5, seeds=cfg.seeds,
                        note=f"by depth {dict(zip(cfg.depths, [round(c, 2) for c in cc]))}; "
                             f"gain of w_l along the mean direction (inner median) by depth "
                             f"{[round(g, 2) for g in mg]}"))
        rows.append(Row(f"latent k={k}, L={Lmax}: dominant singular values (> 1/2) of the inner "
                        "weights, mean input direction projected out", dm[-1], paper=k, tol=0.5,
                        seeds=cfg.seeds,
                        note=f"by depth {dict(zip(cfg.depths, [round(c, 2) for c in dm]))}; "
                             f"median of the top-k singular values (inner layers) by depth "
                             f"{[round(v, 3) for v in top]} (Thm. 6: -> 1 as L grows)"))
        rows.append(Row(f"latent k={k}, L={Lmax}: Jacobian rank", jr[-1], paper=k, tol=0.5,
                        seeds=cfg.seeds, note=f"by depth {[round(v, 2) for v in jr]}"))
        rows.append(Row(f"latent k={k}, L={Lmax}: numerical rank of inner representations",
                        nr[-1], paper=k, tol=0.5, seeds=cfg.seeds,
                        note=f"rel tol {cfg.rel_tol}; by depth {[round(v, 2) for v in nr]}"))
        slope = float(np.polyfit(np.log(Ls), np.log(ntk), 1)[0]) if len(Ls) > 1 else float("nan")
        ntk_slopes.append(slope)
        rows.append(Row(f"latent k={k}: log-log slope of NTK trace vs depth", slope, paper=1.0,
                        tol=0.5, note=f"NTK trace by depth {[round(v, 1) for v in ntk]}; "
                                      f"trace/L {[round(v / L, 1) for v, L in zip(ntk, Ls)]}"))
        rows.append(Row(f"latent k={k}: max final gradient norm", float(max(
            np.max(ds[f"k={k} L={L}"]["grad_norm"]) for L in cfg.depths))))
        count_ok.append(abs(cnt[-1] - k) <= 0.5 and abs(cnt[-1] - k) <= abs(cnt[0] - k) + 1e-9)
    claims.append(Claim("number of weight singular values near 1 approaches k with depth "
                        "(Thm. 6)", all(count_ok),
                        "; ".join(f"k={k}: " + str([round(float(np.mean(
                            ds[f'k={k} L={L}']['inner_count'])), 2) for L in cfg.depths])
                                  for k in cfg.ks) + f" at depths {list(cfg.depths)}"))
    claims.append(Claim("NTK trace of order L (Thm. 7 / Cor. 8)",
                        all(0.5 <= s <= 1.5 for s in ntk_slopes),
                        f"log-log slopes {[round(s, 2) for s in ntk_slopes]} for k={list(cfg.ks)}"))
    jr_ok = all(abs(float(np.mean(ds[f"k={k} L={cfg.depths[-1]}"]["jacobian_rank"])) - k) <= 0.5
                for k in cfg.ks)
    claims.append(Claim("Jacobian rank equals the bottleneck rank k at large depth (Thm. 3)",
                        jr_ok, str({k: round(float(np.mean(
                            ds[f"k={k} L={cfg.depths[-1]}"]["jacobian_rank"])), 2)
                            for k in cfg.ks})))
    lr = res["lr"]
    for i, eta in enumerate(cfg.lr_gd_lrs):
        rows.append(Row(f"GD lr={eta:g} (L={cfg.lr_depth}, k={cfg.lr_k}): NTK trace",
                        float(lr["ntk_trace"][i]),
                        note=f"Jacobian rank {float(lr['jacobian_rank'][i]):.2f}, inner count "
                             f"{_inner_median(lr['count_near_one'][i])}, cost "
                             f"{float(lr['cost'][i]):.3g}, grad norm "
                             f"{float(lr['grad_norm'][i]):.1e}"))
    claims.append(Claim("larger GD learning rate -> smaller NTK trace (stability bound "
                        "~ 1/eta, Sec. 4)",
                        bool(np.all(np.diff(np.asarray(lr["ntk_trace"])) < 0)),
                        f"lrs {list(cfg.lr_gd_lrs)}: NTK trace "
                        f"{[round(float(v), 1) for v in lr['ntk_trace']]}"))
    return Record("bottleneck", "b_structure", "Bottleneck structure vs depth (latent-k data)",
                  "reduced", dataclasses.asdict(cfg), rows=rows, claims=claims,
                  wall_s=time.perf_counter() - t0,
                  note="paper B's experimental settings are not in the text; task sizes, "
                       "lambda and budgets are ours",
                  extra={"result": res})


def plot_b_structure(record: Record, path: str | os.PathLike) -> None:
    cfg = record.config
    ds = record.extra["result"]["depth_sweep"]
    ks, depths = cfg["ks"], cfg["depths"]
    fig, ax = subplots(1, 4, figsize=(22, 4.5))
    Lmax = depths[-1]
    for i, k in enumerate(ks):
        c = f"C{i}"
        sv = ds[f"k={k} L={Lmax}"]["singular_values"]
        for l, s in enumerate(sv):  # noqa: E741
            ax[0].scatter(np.full(np.asarray(s).shape[-1], l + 1 + 0.2 * (i - 1)),
                          np.asarray(s)[0], s=8, c=c, label=f"k={k} (seed 0)" if l == 0 else None)
        ax[1].plot(depths, [np.mean(ds[f"k={k} L={L}"]["inner_count"]) for L in depths], "o-",
                   c=c, label=f"k={k}: within {cfg['tol']} of 1")
        if "inner_centred_dominant" in ds[f"k={k} L={Lmax}"]:
            ax[1].plot(depths, [np.mean(ds[f"k={k} L={L}"]["inner_centred_dominant"])
                                for L in depths], "s--", c=c,
                       label=f"k={k}: > 1/2, mean direction removed")
        ax[2].plot(depths, [np.mean(ds[f"k={k} L={L}"]["jacobian_rank"]) for L in depths], "o-",
                   c=c, label=f"k={k}")
        ax[3].plot(depths, [np.mean(ds[f"k={k} L={L}"]["ntk_trace"]) for L in depths], "o-",
                   c=c, label=f"k={k}")
    ax[0].axhline(1, ls=":", c="k")
    ax[0].set(title=f"weight singular values per layer, L={Lmax}", xlabel="layer")
    ax[1].set(title="inner weights: singular values near 1 (median over layers)",
              xlabel="depth L")
    ax[2].set(title="Jacobian rank", xlabel="depth L")
    ax[3].set(title="NTK trace (order L?)", xlabel="depth L")
    for a in ax:
        a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


# ============================================================================ B, symmetry
@dataclasses.dataclass(frozen=True)
class BSymmetryConfig:
    """Symmetry task of paper B, Sec. 5: from ``w_0`` predict the next ``T`` GD log-losses of
    ``||w w^T - e e^T - E||^2``; BN-rank 2 (the summary statistics ``(w.e, |w_perp|)``)."""

    n: int = 1000
    d: int = 10
    steps_T: int = 10
    depth: int = 12
    width: int = 64
    lam: float = 1e-2                  # 1e-3 left no bottleneck at 4k steps (CPU trial)
    seeds: int = 2
    adam_steps: int = 10000
    adam_lr: float = 3e-3
    gd_steps: int = 2000
    gd_lr: float = 2e-3                # 0.01 oscillated at depth 12 (grad norm ~10)
    tol: float = 0.25
    rel_tol: float = 1e-2
    n_diag: int = 64

    @classmethod
    def paper(cls) -> BSymmetryConfig:
        """N = 1000, L = 12, width 64, 10k Adam + 2k GD steps; lambda = 1e-3 (the paper states
        none): at L = 12 a lambda sweep (results/bottleneck/ablation/b_symmetry_lambda.json)
        gave a 2-D representation at 1e-3 (5-NN R^2 0.983) and rank-underestimating minima
        at 3e-3 (0.573) and 1e-2 (0.235)."""
        return cls(lam=1e-3)

    @classmethod
    def cpu(cls) -> BSymmetryConfig:
        return cls(n=300, depth=8, width=32, seeds=1, adam_steps=3000, gd_steps=500)

    @classmethod
    def smoke(cls) -> BSymmetryConfig:
        # d = steps_T = width: every weight matrix has one shape (shared eager programs)
        return cls(n=40, d=8, steps_T=8, depth=4, width=8, seeds=1, adam_steps=20, gd_steps=5,
                   n_diag=8)


def _knn_r2(P: np.ndarray, T: np.ndarray, k: int = 5) -> float:
    """R^2 of predicting ``T [n, m]`` from ``P [n, 2]`` by leave-one-out k-NN averaging."""
    D = np.sum((P[:, None] - P[None]) ** 2, -1)
    np.fill_diagonal(D, np.inf)
    idx = np.argsort(D, axis=1)[:, :k]
    pred = T[idx].mean(1)
    return float(1 - np.sum((pred - T) ** 2) / np.sum((T - T.mean(0)) ** 2))


def run_b_symmetry(config: BSymmetryConfig, *, key: Array, progress: bool = True,
                   checkpoint_dir: str | os.PathLike | None = None) -> Record:
    cfg = config
    t0 = time.perf_counter()
    ds, info = symmetry_task(jax.random.fold_in(key, 1), cfg.n, d=cfg.d, steps=cfg.steps_T,
                             return_info=True)
    x, y = np.asarray(ds.x), np.asarray(ds.y)
    y = (y - y.mean(0)) / y.std()
    x, y = jnp.asarray(x), jnp.asarray(y)
    sizes = [cfg.d] + [cfg.width] * (cfg.depth - 1) + [cfg.steps_T]
    keys = list(jax.random.split(jax.random.fold_in(key, 2), cfg.seeds))
    params, hist, gn, _ = _train_runs(x, y, sizes, cfg.lam, keys, adam_steps=cfg.adam_steps,
                                      adam_lr=cfg.adam_lr, gd_steps=cfg.gd_steps,
                                      gd_lrs=cfg.gd_lr, progress=progress, desc="symmetry",
                                      checkpoint_dir=checkpoint_dir)
    d = _diag_runs(params, x, cfg.n_diag, cfg.tol, cfg.rel_tol)
    cost = np.asarray(hist["train"]["cost"][-1])
    best = int(np.argmin(cost))
    Zs = representations(jax.tree.map(lambda a: a[best], params), x)
    er = np.asarray(d["effective_rank"])[best]
    mid = int(np.argmin(er[:-1]))  # most compressed hidden layer
    Z = np.asarray(Zs[mid]).T  # [n, N]: PCA in paper A's columns (the records' numbers)
    Zc = Z - Z.mean(1, keepdims=True)
    U, s, _ = np.linalg.svd(Zc, full_matrices=False)
    frac2 = float(np.sum(s[:2] ** 2) / np.sum(s ** 2))
    P = (U[:, :2].T @ Zc).T
    stats = np.asarray(info["stats"])
    stats_n = (stats - stats.mean(0)) / stats.std(0)
    r2 = _knn_r2(P, np.concatenate([np.abs(stats_n[:, :1]), stats_n[:, 1:]], 1))
    r2_y = _knn_r2(P, np.asarray(y))
    cnt = np.asarray(d["count_near_one"])[best]
    sv = [np.asarray(s_)[best] for s_ in d["singular_values"]]
    c = _centred_runs(params, x, cfg.n_diag, cfg.tol)
    cc, dom, gain = c["count_near_one"][best], c["dominant"][best], c["mean_gain"][best]
    rows = [
        Row("Jacobian rank", float(np.mean(d["jacobian_rank"])), paper=2, tol=0.5,
            seeds=cfg.seeds, spread=float(np.std(d["jacobian_rank"]))),
        Row("median count of weight singular values near 1 (inner layers)",
            _inner_median(cnt), paper=2, tol=0.5, note=f"per layer {cnt.tolist()}"),
        Row("the same count with the mean input direction projected out (inner layers)",
            _inner_median(cc), paper=2, tol=0.5,
            note=f"layers 2..L {cc.tolist()}; gain along the mean direction "
                 f"{np.round(gain, 2).tolist()}"),
        Row("dominant singular values (> 1/2), mean input direction projected out (inner "
            "layers)", _inner_median(dom), paper=2, tol=0.5, note=f"layers 2..L {dom.tolist()}"),
        Row(f"variance in the top-2 PCs of the most compressed layer (layer {mid + 1})", frac2,
            paper=None, note=f"effective rank per layer {np.round(er, 2).tolist()}"),
        Row("R^2 of the summary statistics (|w.e|, |w_perp|) from the 2-D representation "
            "(5-NN)", r2, paper=None),
        Row("R^2 of the targets from the 2-D representation (5-NN)", r2_y, paper=None),
        Row("train cost (MSE, standardised targets)", float(cost[best]),
            note=f"grad norm {float(gn[best]):.1e}"),
    ]
    claims = [
        Claim("the deep L2-regularised net learns a 2-D representation of the symmetry task "
              "(BN-rank 2, Sec. 5)", frac2 > 0.9 and r2 > 0.8,
              f"layer {mid + 1}: {frac2:.3f} of the variance in 2 PCs; the summary statistics "
              f"are a function of those 2 coordinates with 5-NN R^2 {r2:.3f}; Jacobian rank "
              f"{float(np.mean(d['jacobian_rank'])):.2f}"),
        Claim("singular-value pattern: about 2 singular values near 1 in the inner layers",
              abs(_inner_median(cnt) - 2) <= 0.5,
              f"count per layer {cnt.tolist()}, top-3 singular values of the middle layer "
              f"{np.round(sv[len(sv) // 2][:3], 3).tolist()}"),
    ]
    return Record("bottleneck", "b_symmetry", "Symmetry learning (paper B Sec. 5)", "reduced",
                  dataclasses.asdict(cfg), rows=rows, claims=claims,
                  wall_s=time.perf_counter() - t0,
                  note="network size, lambda, noise and budgets are ours (not in the text)",
                  extra={"P": P, "stats": stats, "mid_layer": mid + 1, "effective_rank": er,
                         "count_near_one": cnt, "singular_values": [s_[:6] for s_ in sv]})


def plot_b_symmetry(record: Record, path: str | os.PathLike) -> None:
    e = record.extra
    P, st = np.asarray(e["P"]), np.asarray(e["stats"])
    fig, ax = subplots(1, 3, figsize=(16, 4.5))
    for i, name in enumerate(["|w.e|", "|w_perp|"]):
        sc = ax[i].scatter(P[:, 0], P[:, 1], c=np.abs(st[:, i]), s=8, cmap="viridis")
        fig.colorbar(sc, ax=ax[i])
        ax[i].set(title=f"layer {e['mid_layer']} top-2 PCs coloured by {name}")
    sv = e["singular_values"]
    for l, s in enumerate(sv):  # noqa: E741
        ax[2].scatter(np.full(len(s), l + 1), s, s=10, c="k")
    ax[2].axhline(1, ls=":", c="r")
    ax[2].set(title="weight singular values per layer", xlabel="layer")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


# ============================================================================ B, Fig. 1
@dataclasses.dataclass(frozen=True)
class BMinimaConfig:
    """Local minima across depths (paper B, Fig. 1): several seeds per depth on latent-k data;
    each minimum is classified by its rank (Jacobian rank); minima of the same rank at
    different depths represent about the same function and their parameter norm grows like
    ``L R^(0) + R^(1)`` with ``R^(0)`` = the rank (Thm. 3 / the expansion of Sec. 3)."""

    k: int = 2
    depths: tuple[int, ...] = (4, 6, 8, 12, 16)
    seeds: int = 5
    n: int = 500
    dim: int = 20
    width: int = 64
    lam: float = 1e-2                  # 1e-3 left no bottleneck at 4k steps (CPU trial)
    adam_steps: int = 10000
    adam_lr: float = 3e-3
    gd_steps: int = 2000
    gd_lr_depth: float = 0.012         # GD rate = gd_lr_depth / L, as in BStructureConfig
    tol: float = 0.25
    rel_tol: float = 1e-2
    n_diag: int = 64
    n_test: int = 500

    @classmethod
    def paper(cls) -> BMinimaConfig:
        return cls()

    @classmethod
    def cpu(cls) -> BMinimaConfig:
        return cls(depths=(4, 6, 8, 12), seeds=3, n=200, width=32, adam_steps=3000, gd_steps=500)

    @classmethod
    def smoke(cls) -> BMinimaConfig:
        # dim = width and n_test = n: one weight shape, and the test inputs are drawn by the
        # training draw's compiled programs
        return cls(depths=(3, 4), seeds=2, n=32, dim=8, width=8, adam_steps=20, gd_steps=5,
                   n_diag=8, n_test=32)


def run_b_minima(config: BMinimaConfig, *, key: Array, progress: bool = True,
                 checkpoint_dir: str | os.PathLike | None = None) -> Record:
    cfg = config
    t0 = time.perf_counter()
    kd = jax.random.fold_in(key, 100 + cfg.k)
    x, y = _latent_task(kd, cfg.n, cfg.k, cfg.dim)
    te = data.latent(kd, cfg.n_test, k=cfg.k, d_in=cfg.dim, d_out=cfg.dim, split="val")
    xt = jnp.asarray(te.x)
    pts = []
    funcs = {}
    for L in cfg.depths:
        sizes = [cfg.dim] + [cfg.width] * (L - 1) + [cfg.dim]
        keys = list(jax.random.split(jax.random.fold_in(key, L), cfg.seeds))
        params, hist, gn, _ = _train_runs(
            x, y, sizes, cfg.lam, keys, adam_steps=cfg.adam_steps, adam_lr=cfg.adam_lr,
            gd_steps=cfg.gd_steps, gd_lrs=cfg.gd_lr_depth / L, progress=progress, desc=f"L={L}",
            checkpoint_dir=_sub(checkpoint_dir, f"L{L}"))
        d = _diag_runs(params, x, cfg.n_diag, cfg.tol, cfg.rel_tol)
        norms = np.asarray(jax.vmap(weight_norm_sq)(params))
        dom = _centred_runs(params, x, cfg.n_diag, cfg.tol)["dominant"]
        inner_w2 = np.asarray([[float(np.sum(np.asarray(p["w"][s]) ** 2)) for p in params]
                               for s in range(cfg.seeds)])
        cost = np.asarray(hist["train"]["cost"][-1])
        out = np.asarray(jax.jit(jax.vmap(lambda p: network_fn(p, xt)))(params))
        for s in range(cfg.seeds):
            r = int(np.round(float(d["jacobian_rank"][s])))
            pts.append({"L": L, "seed": s, "rank": r, "jacobian_rank": float(d["jacobian_rank"][s]),
                        "norm2": float(norms[s]), "cost": float(cost[s]),
                        "loss": float(cost[s] + cfg.lam * norms[s]),
                        "grad_norm": float(gn[s]), "inner_count": _inner_median(
                            d["count_near_one"][s]),
                        "inner_centred_dominant": _inner_median(dom[s]),
                        "inner_w_norm2": _inner_median(inner_w2[s])})
            funcs[(L, s)] = out[s]
    rows, claims = [], []
    ranks = sorted({p["rank"] for p in pts})
    fits = {}
    for r in ranks:
        sel = [p for p in pts if p["rank"] == r]
        Ls = np.array([p["L"] for p in sel], float)
        if len(set(Ls)) >= 2:
            a, b = np.polyfit(Ls, [p["norm2"] for p in sel], 1)
            fits[r] = (float(a), float(b), len(sel), len(set(Ls)))
    for r, (a, b, m, nL) in fits.items():
        sel = [p for p in pts if p["rank"] == r]
        rows.append(Row(f"rank-{r} minima: slope of ||theta||^2 vs L", a, paper=r, tol=0.5 * r,
                        note=f"{m} minima over {nL} depths, intercept (R^(1)-like) {b:.2f}; "
                             "theory: ||theta||^2 ~ L R^(0) + R^(1), R^(0) = rank; per inner "
                             "layer ||w_l||^2 (median) "
                             f"{np.median([p['inner_w_norm2'] for p in sel]):.2f}, dominant "
                             "singular values with the mean input direction projected out "
                             f"{np.median([p['inner_centred_dominant'] for p in sel]):.1f}"))
    # same function across depths: relative distance between the best minima of rank k (or of
    # the most frequent rank when no run found rank k)
    counts = {r: sum(p["rank"] == r for p in pts) for r in ranks}
    r_star = cfg.k if counts.get(cfg.k, 0) else max(counts, key=counts.get)
    best = {}
    for p in pts:
        if p["rank"] == r_star and (p["L"] not in best or p["loss"] < best[p["L"]]["loss"]):
            best[p["L"]] = p
    dists = []
    Lb = sorted(best)
    for i in range(len(Lb) - 1):
        f1, f2 = funcs[(Lb[i], best[Lb[i]]["seed"])], funcs[(Lb[i + 1], best[Lb[i + 1]]["seed"])]
        dists.append(float(np.linalg.norm(f1 - f2) / np.linalg.norm(f2)))
    if dists:
        rows.append(Row(f"rank-{r_star} minima at consecutive depths: relative distance between "
                        "their functions (test inputs)", float(np.mean(dists)), paper=None,
                        note=f"depth pairs {list(zip(Lb[:-1], Lb[1:]))}: "
                             f"{[round(v, 3) for v in dists]}"))
    rows.append(Row(f"fraction of minima with the true rank k={cfg.k}",
                    counts.get(cfg.k, 0) / len(pts), note=f"ranks found {counts}"))
    claims.append(Claim("GD finds local minima of several ranks, and minima of the same rank at "
                        "different depths represent about the same function (Fig. 1)",
                        len(dists) > 0 and float(np.mean(dists)) < 0.2,
                        f"ranks (Jacobian rank, rounded) over {len(pts)} runs: {counts}; "
                        f"relative function distance between depths "
                        f"{[round(v, 3) for v in dists]}"))
    if cfg.k in fits:
        a = fits[cfg.k][0]
        claims.append(Claim("parameter norm of rank-k minima grows like k L (R^(0) = k)",
                            abs(a - cfg.k) <= 0.5 * cfg.k,
                            f"fitted slope {a:.2f} vs k = {cfg.k}"))
    return Record("bottleneck", "b_minima", "Local minima across depths (paper B Fig. 1)",
                  "reduced", dataclasses.asdict(cfg), rows=rows, claims=claims,
                  wall_s=time.perf_counter() - t0,
                  note="paper B's Fig. 1 task and sizes are not in the text; ours: latent-k data",
                  extra={"minima": pts, "fits": {str(r): v for r, v in fits.items()}})


def plot_b_minima(record: Record, path: str | os.PathLike) -> None:
    pts = record.extra["minima"]
    fig, ax = subplots(1, 2, figsize=(12, 4.5))
    ranks = sorted({p["rank"] for p in pts})
    for r in ranks:
        sel = [p for p in pts if p["rank"] == r]
        ax[0].scatter([p["L"] for p in sel], [p["norm2"] for p in sel], label=f"rank {r}")
        ax[1].scatter([p["L"] for p in sel], [p["cost"] for p in sel], label=f"rank {r}")
    ax[0].set(title="||theta||^2 of the minima vs depth", xlabel="L")
    ax[1].set(title="train cost of the minima", xlabel="L", yscale="log")
    for a in ax:
        a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
