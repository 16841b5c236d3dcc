"""Width sweeps as masked neurons of one maximal width, many runs in one compiled program.

A run of hidden width ``w`` is the maximal-width net whose parameters (``layerlab.nets`` layout)
are multiplied by a 0/1 mask: columns of ``w_l`` and entries of ``b_l`` (outgoing neurons) and rows
of ``w_{l+1}`` (incoming) beyond ``w`` are zeroed, both in the forward pass and in the penalty, so
masked entries get no gradient and cost nothing.  Widths x seeds then share one program:
``layerlab.loop.fit(..., runs=True)`` vmaps the step over the runs axis, with each run's masks and
``lambda`` in ``TrainState.hparams``.  Samples are rows (``x [N, n_0]``, outputs ``[N, n_L]``).

References:
  (A) Jacot, Golikov, Hongler, Gabriel, NeurIPS 2022, Section 4 and Figure 2 (plateau of the
  minimal regularised loss vs width).
"""
from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.typing import ArrayLike

from layerlab import loop, nets
from layerlab._checks import (
    as_device_array,
    check_array,
    check_int,
    check_number,
    check_same_length,
    jit_or_eager,
    promote_float,
)
from layerlab.bottleneck._layout import Params, check_beta, check_scalar, from_mlp_params
from layerlab.bottleneck._representations import Activation, _phi, as_activation
from layerlab.data._targets import as_targets

Array = jax.Array


# ----------------------------------------------------------------------------- costs
def mse_cost(Z_L: Array, y: Array) -> Array:
    """Mean squared error over the samples, ``(1/N) sum_i ||z_i - y_i||^2``.

    .. math:: C(Z_L) = \\tfrac1N \\|Z_L - y\\|_F^2

    Args:
      Z_L: outputs ``[N, n_L]`` (rows are samples).  y: targets ``[N, n_L]``.

    Returns:
      scalar.
    """
    if y.ndim != 2 or y.shape != Z_L.shape:
        raise ValueError(f"mse_cost: y must be [N, n_L] = {tuple(Z_L.shape)} like Z_L; "
                         f"got {y.shape}.")
    return jnp.sum(jnp.square(Z_L - y)) / y.shape[0]


def cross_entropy_cost(Z_L: Array, y: Array) -> Array:
    """Mean softmax cross-entropy of logits ``Z_L`` ``[N, C]`` against int labels ``y`` ``[N]``."""
    if y.ndim != 1 or y.shape[0] != Z_L.shape[0]:
        raise ValueError(f"cross_entropy_cost: y must be int labels [N] = [{Z_L.shape[0]}]; "
                         f"got {y.shape}.")
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(Z_L, y))


# ----------------------------------------------------------------------------- masks
def width_masks(widths: Sequence[int], max_width: int, n_hidden: int) -> Array:
    """0/1 masks ``[R, n_hidden, max_width]``: run ``r`` keeps the first ``widths[r]`` neurons
    (integers in ``[1, max_width]``; ``1.5`` is refused: it kept 2 neurons)."""
    fn = "width_masks"
    max_width = check_int(max_width, "max_width", fn=fn, min_value=1)
    check_int(n_hidden, "n_hidden", fn=fn, min_value=0)
    if np.ndim(widths) != 1:
        raise ValueError(f"{fn}: widths must be a sequence of integers, got shape "
                         f"{np.shape(widths)}.")
    widths = np.asarray([check_int(w, f"widths[{i}]", fn=fn, min_value=1, max_value=max_width)
                         for i, w in enumerate(np.asarray(widths).tolist())], dtype=np.int64)
    m = (np.arange(max_width)[None, :] < widths[:, None]).astype(np.float32)
    return as_device_array(np.repeat(m[:, None, :], n_hidden, axis=1))


def masked_weights(params: Sequence[dict], masks: Array) -> list[dict]:
    """Zero the parameters of masked neurons (``layerlab.nets`` layout).

    .. math:: \\tilde w_\\ell = w_\\ell \\odot (m_{\\ell-1}\\, m_\\ell^T),\\quad
              \\tilde b_\\ell = b_\\ell \\odot m_\\ell,\\quad m_0 = m_L = 1

    (paper A's view: ``W_l * (m_l [m_{l-1}; 1]^T)``).

    Args:
      params: ``[{"w": [n_{l-1}, n_l], "b": [n_l]}, ...]`` at maximal width.
      masks: ``[L - 1, n_max]`` hidden masks (all hidden layers of width ``n_max``).

    Returns:
      the masked params, same shapes.
    """
    L = len(params)
    if masks.shape[0] != L - 1:
        raise ValueError(f"masks must be [L-1, n_max] = [{L - 1}, ...]; got {masks.shape}.")
    out = []
    for l, p in enumerate(params):  # noqa: E741
        w = p["w"]
        m_in = masks[l - 1] if l > 0 else jnp.ones((w.shape[0],), w.dtype)
        m_out = masks[l] if l < L - 1 else jnp.ones((w.shape[1],), w.dtype)
        out.append({"w": w * (m_in[:, None] * m_out[None, :]), "b": p["b"] * m_out})
    return out


def masked_loss(params: Params, batch: tuple[ArrayLike, ArrayLike], *,
                hparams: dict[str, ArrayLike], cost: Callable, beta: ArrayLike = 1.0,
                activation: Activation = jax.nn.relu) -> tuple[Array, dict[str, Array]]:
    """Regularised loss of the masked net on a batch ``(x [B, n_0], y)``.

    .. math:: \\mathcal L_\\lambda = C(Z_L(\\tilde W))
              + \\lambda \\sum_\\ell\\|\\tilde W_\\ell\\|_F^2

    with ``||W_l||_F^2 = ||w_l||^2 + ||b_l||^2 / beta^2`` (paper A's norm, see
    :func:`weight_norm_sq`).

    Args:
      params: maximal-width ``layerlab.nets`` params.
      batch: ``(x [B, n_0], y)`` (rows are samples, as stored for ``loop.fit``).
      hparams: ``{"masks": [L-1, n_max], "lam": []}``.
      cost: ``cost(Z_L [B, n_L], y) -> scalar`` (e.g. :func:`mse_cost`).

    Returns:
      ``(loss, {"cost": ..., "reg": ...})``.

    References:
      (A) Section 2.1.
    """
    check_beta(beta, "masked_loss")
    x, y = batch
    Ws = from_mlp_params(masked_weights(params, hparams["masks"]), beta)
    Z_L = _phi(Ws, x.T, beta, as_activation(activation, "masked_loss"))[-1]
    c = cost(Z_L.T, y)
    reg = sum(jnp.sum(W * W) for W in Ws)
    return c + hparams["lam"] * reg, {"cost": c, "reg": reg}


def sweep_step(cost: Callable, optimizer: optax.GradientTransformation, *, beta: ArrayLike = 1.0,
               activation: Activation = jax.nn.relu) -> loop.TrainStep:
    """``layerlab.loop.optax_step`` on :func:`masked_loss` with masks and lambda in hparams."""
    check_beta(beta, "sweep_step")
    def loss_fn(params, batch, hparams):
        return masked_loss(params, batch, hparams=hparams, cost=cost, beta=beta,
                           activation=activation)

    return loop.optax_step(loss_fn, optimizer, has_aux=True, with_hparams=True)


def polish_step(cost: Callable, *, beta: ArrayLike = 1.0,
                activation: Activation = jax.nn.relu) -> loop.TrainStep:
    """L-BFGS step on the full-batch :func:`masked_loss` of one run (masks, lambda in hparams).

    .. math:: \\theta_{t+1} = \\theta_t - \\eta_t\\, P_t \\nabla\\mathcal L_\\lambda(\\theta_t)

    with ``P_t`` the L-BFGS inverse-Hessian estimate and ``eta_t`` from its zoom line search
    (``optax.lbfgs()`` with its defaults: memory 10, strong Wolfe conditions, at most 20
    trials), which evaluates ``L_lambda`` with this run's ``state.hparams`` on the step's batch.
    The value and gradient at the accepted point stay in the optimizer state and the next step
    reuses them (``optax.value_and_grad_from_state``), so every step must see the same batch:
    drive it with ``loop.fit(..., batch_size=None)`` (with ``runs=True`` it is vmapped like
    :func:`sweep_step`; a vmapped line search runs as many trials as the slowest run needs, and
    a run whose parameters are NaN takes all 20 each step).

    Args:
      cost: ``cost(Z_L [N, n_L], y) -> scalar`` (e.g. :func:`mse_cost`).
      beta, activation: as in :func:`masked_loss`.

    Returns:
      ``TrainStep(init, step)``: ``init(params, hparams) -> TrainState`` with
      ``hparams = {"masks": [L-1, n_max], "lam": []}``; the step logs ``loss`` and ``grad_norm``
      at the parameters it starts from.

    References:
      Nocedal & Wright, Numerical Optimization (1999), Algorithms 7.4-7.5 (L-BFGS) and 3.5-3.6
      (zoom line search).
    """
    check_beta(beta, "polish_step")
    optimizer = optax.lbfgs()

    def init(params, hparams=None) -> loop.TrainState:
        # optax's zoom line search starts its info (num_linesearch_steps, decrease_error,
        # curvature_error) as weakly typed scalars; as loop.fit's scan carry they made lax.scan
        # trace the step twice (the second pass with the carry's types promoted to the step's
        # outputs, the same dtypes): the line search's trace is most of a polish's compile
        opt_state = jax.tree.map(lambda a: jax.lax.convert_element_type(a, a.dtype),
                                 optimizer.init(params))
        return loop.TrainState(params, opt_state, jnp.zeros((), jnp.int32), hparams)

    def step(state: loop.TrainState, batch, key):
        dtype = jnp.real(jax.tree.leaves(state.params)[0]).dtype

        def value_fn(p):  # in the params' dtype, as the line search keeps its values
            return masked_loss(p, batch, hparams=state.hparams, cost=cost, beta=beta,
                               activation=activation)[0].astype(dtype)

        value, grad = optax.value_and_grad_from_state(value_fn)(state.params,
                                                                state=state.opt_state)
        updates, opt_state = optimizer.update(grad, state.opt_state, state.params, value=value,
                                              grad=grad, value_fn=value_fn)
        params = optax.apply_updates(state.params, updates)
        return (state._replace(params=params, opt_state=opt_state, step=state.step + 1),
                {"loss": value, "grad_norm": optax.tree.norm(grad)})

    return loop.TrainStep(init, step)


def plateau_start(widths: Sequence[int], losses: Sequence[float], *, rel_tol: float = 0.05,
                  reference: float | None = None) -> int:
    """Smallest width whose loss is within ``rel_tol`` of the plateau (default 5 %, the
    docs' one plateau definition; widths in any order; -1 when none is).

    .. math:: w^* = \\min\\{w : \\mathcal L(w) \\le (1 + \\text{rel\\_tol})\\,\\mathcal L_\\infty\\}

    with ``L_inf = reference`` or ``min_w L(w)``.
    """
    check_same_length(("widths", widths), ("losses", losses), fn="plateau_start")
    if len(widths) == 0:
        raise ValueError("plateau_start: widths and losses are empty.")
    check_scalar(rel_tol, "rel_tol", "plateau_start")
    check_number(rel_tol, "rel_tol", fn="plateau_start", min_value=0.0)
    losses = check_array(losses, "losses", fn="plateau_start", ndim=1, kind="real", xp="np")
    losses = np.asarray(losses, dtype=np.float64)
    if not np.all(np.isfinite(losses)):
        raise ValueError(f"plateau_start: losses must be finite, got {losses.tolist()}.")
    ref = float(np.min(losses)) if reference is None else float(reference)
    ok = losses <= ref * (1 + rel_tol) + 1e-12
    return int(np.min(np.asarray(widths)[ok])) if ok.any() else -1


def width_sweep(key: Array, x: ArrayLike, y: ArrayLike, *, widths: Sequence[int], depth: int,
                cost: Callable, lam: float, seeds: int = 3, max_width: int | None = None,
                adam_steps: int = 2000, adam_lr: float = 1e-3, gd_steps: int = 0,
                gd_lr: float = 1e-2, polish_steps: int = 0, lr_decay: float | None = 1e-2,
                beta: ArrayLike = 1.0,
                activation: Activation = jax.nn.relu, init: str = "he", w_std: float | None = None,
                batch_size: int | None = None, progress: bool = True, desc: str = "width sweep",
                checkpoint_dir: str | os.PathLike | None = None) -> dict:
    """Minimal regularised loss vs hidden width: widths x seeds in one program per phase.

    Trains ``len(widths) * seeds`` runs (all hidden layers of width ``w``, masked inside a
    ``max_width`` net) with Adam, then full-batch gradient descent, then (``polish_steps > 0``)
    a full-batch L-BFGS polish (:func:`polish_step`: ``optax.lbfgs`` with its zoom line search on
    each run's regularised loss), all three through ``layerlab.loop.fit(runs=True)``.  On an
    ill-conditioned loss (small ``lambda``) Adam and fixed-rate GD crawl along the flat
    directions; the quasi-Newton polish (no rate to tune) takes each run much closer to a
    critical point, so the final losses compare converged runs across widths.

    Args:
      key: PRNG key (inits and data order).
      x: ``[N, n_0]`` inputs (rows = samples; integer inputs are trained in JAX's default float,
        float32 or float64 under x64, half-precision ones in float32, see
        ``layerlab._checks.promote_float``).  y: targets for ``cost``; with
        :func:`mse_cost`, integer labels ``[N]`` are turned into one-hot rows ``[N, C]``
        (``C = max(y) + 1``).
      widths: hidden widths to try.  depth: ``L`` (number of weight matrices).
      cost: ``cost(Z_L [N, n_L], y) -> scalar`` (e.g. :func:`mse_cost`).
      lam: ``lambda``.  seeds: runs per width (best one kept).
      max_width: default ``max(widths)``.
      adam_steps, adam_lr, gd_steps, gd_lr: the first two phases (``adam_steps = 0`` skips
        Adam, ``gd_steps = 0`` skips GD).
      polish_steps: L-BFGS iterations after GD (``0``, the default, skips the polish); each
        costs one gradient evaluation per line-search trial (a few, more under ``vmap``, where
        the slowest run sets the count).
      lr_decay: cosine-decay the Adam rate to ``adam_lr * lr_decay`` (``None``: constant).
      beta: amount of bias (weighs ``||b||^2 / beta^2`` in the penalty; 0: no biases).
      activation, init, w_std: network (``init``, ``w_std`` for ``layerlab.nets.mlp_init``).
      batch_size: Adam batch (``None``: full batch).
      checkpoint_dir: resumable ``loop.fit`` checkpoints of every phase under this folder
        (``adam``, ``gd``, ``polish``).

    Returns:
      dict with ``widths`` ``[W]``, ``loss`` ``[W, seeds]`` (final full-data regularised loss),
      ``cost``, ``reg``, ``grad_norm`` (final full-batch gradient norm of the regularised loss;
      same shape; all after the last phase run), ``best`` ``[W]`` (min over seeds, NaN runs
      ignored), ``best_seed`` ``[W]``, ``history`` (Adam phase ``loss`` ``[T, R]``) and
      ``state`` (final ``TrainState`` with runs axis; ``state.params`` in the
      ``layerlab.nets`` layout).  A run that diverges in the GD phase ends as NaN (it does not
      stop the others, nor does the polish).
    """
    check_beta(beta, "width_sweep")
    fn = "width_sweep"
    activation = as_activation(activation, fn)   # one cached step per name / equal partial
    x = check_array(x, "x", fn=fn, ndim=2, kind="real", min_rows=1, finite=True)
    (x,) = promote_float(x)  # integer pixels/features: a float net, a float lambda
    y = check_array(y, "y", fn=fn, ndim=(1, 2), kind="real", finite=True)
    if y.shape[0] != x.shape[0]:
        raise ValueError(f"{fn}: x and y must have the same N rows, got {x.shape} and {y.shape}.")
    check_int(depth, "depth", fn=fn, min_value=1)
    check_int(seeds, "seeds", fn=fn, min_value=1)
    check_int(adam_steps, "adam_steps", fn=fn, min_value=0)
    check_int(gd_steps, "gd_steps", fn=fn, min_value=0)
    check_int(polish_steps, "polish_steps", fn=fn, min_value=0)
    check_number(lam, "lam", fn=fn, min_value=0.0, what="a regulariser")
    check_number(adam_lr, "adam_lr", fn=fn, min_value=0.0, lo_open=True)
    check_number(gd_lr, "gd_lr", fn=fn, min_value=0.0, lo_open=True)
    if widths is None or len(widths) == 0:
        raise ValueError(f"{fn}: widths must be a non-empty sequence of positive ints.")
    widths = [check_int(w, "widths[i]", fn=fn, min_value=1) for w in widths]
    max_width = max(widths) if max_width is None else check_int(
        max_width, "max_width", fn=fn, min_value=max(widths))
    n_out = int(cost_output_dim(y, cost, fn=fn))
    if cost is mse_cost and y.ndim == 1:  # integer labels -> one-hot MSE targets
        y = as_targets(y, n_out, name="y", n=x.shape[0], dtype=x.dtype, fn=fn)
    sizes = [x.shape[1]] + [max_width] * (depth - 1) + [n_out]
    R = len(widths) * seeds
    run_widths = np.repeat(widths, seeds)
    masks = width_masks(run_widths, max_width, depth - 1)
    hparams = {"masks": masks,  # x is float: lam too
               "lam": as_device_array(np.full((R,), lam, np.dtype(x.dtype)))}
    adam = _phase_step("adam", cost, beta, activation, adam_lr, adam_steps, lr_decay)
    state, k_fit, k_gd = jit_or_eager(_sweep_start, key, hparams, sizes=tuple(sizes),
                                      init=init, w_std=w_std, init_fn=adam.init)
    ck = (lambda name: None) if checkpoint_dir is None else (
        lambda name: os.path.join(os.fspath(checkpoint_dir), name))
    state, hist = loop.fit(adam.step, state, (x, y), key=k_fit, steps=adam_steps,
                           batch_size=batch_size, runs=True, progress=progress,
                           desc=f"{desc} (adam)", checkpoint_dir=ck("adam"))
    if gd_steps > 0:
        gd = _phase_step("gd", cost, beta, activation, gd_lr)
        state = _runs_init(state.params, hparams, init_fn=gd.init)
        state, _ = loop.fit(gd.step, state, (x, y), key=k_gd, steps=gd_steps, runs=True,
                            progress=progress, desc=f"{desc} (gd)", check_finite=False,
                            checkpoint_dir=ck("gd"))
    if polish_steps > 0:
        polish = _phase_step("polish", cost, beta, activation)
        state = _runs_init(state.params, hparams, init_fn=polish.init)
        state, _ = loop.fit(polish.step, state, (x, y), key=jax.random.fold_in(k_gd, 1),
                            steps=polish_steps, runs=True, progress=progress,
                            desc=f"{desc} (polish)", check_finite=False,
                            checkpoint_dir=ck("polish"))

    loss, aux, gn = _final_eval(state.params, hparams, x, y, cost=cost, beta=beta,
                                activation=activation)
    shape = (len(widths), seeds)
    loss = np.asarray(loss).reshape(shape)
    safe = np.where(np.isfinite(loss), loss, np.inf)
    return {"widths": np.asarray(widths), "loss": loss,
            "cost": np.asarray(aux["cost"]).reshape(shape),
            "reg": np.asarray(aux["reg"]).reshape(shape),
            "grad_norm": np.asarray(gn).reshape(shape),
            "best": np.min(safe, axis=1), "best_seed": np.argmin(safe, axis=1),
            "history": hist, "state": state}


@functools.partial(jax.jit, static_argnames=("sizes", "init", "w_std", "init_fn"))
def _sweep_start(key, hparams, *, sizes, init, w_std, init_fn):
    """:func:`width_sweep`'s keys and first state as one program per (sizes, init, w_std,
    phase step): ``R`` inits of ``sizes`` (``R`` = ``hparams["lam"]`` ``[R]``) and
    ``init_fn`` of each with its hparams.  Eagerly every split, draw and optimizer-state zero
    was its own program.  Returns ``(state, k_fit, k_gd)``."""
    k_init, k_fit, k_gd = jax.random.split(key, 3)
    inits = jax.vmap(lambda k: nets.mlp_init(k, sizes, init=init, w_std=w_std))(
        jax.random.split(k_init, hparams["lam"].shape[0]))
    return jax.vmap(init_fn)(inits, hparams), k_fit, k_gd


@functools.partial(jax.jit, static_argnames="init_fn")
def _runs_init(params: list[dict], hparams: dict, *, init_fn: Callable,
               learning_rates: jax.Array | None = None) -> loop.TrainState:
    """``init_fn`` vmapped over the runs axis (leaves ``[R, ...]``) as one program per
    (shapes, phase step): eagerly every zero of the optimizer state (L-BFGS: a dozen) was its
    own program.  With ``learning_rates`` ``[R]`` they are put in the state of an
    ``optax.inject_hyperparams`` optimizer."""
    st = jax.vmap(init_fn)(params, hparams)
    if learning_rates is None:
        return st
    return st._replace(opt_state=st.opt_state._replace(
        hyperparams={**st.opt_state.hyperparams, "learning_rate": learning_rates}))


def _final_values(params, hparams, x, y, *, cost, beta, activation):
    """Every run's full-data regularised loss, its parts and its gradient norm (runs axis)."""
    def final(params, hp):
        (val, aux), g = jax.value_and_grad(
            lambda p: masked_loss(p, (x, y), hparams=hp, cost=cost, beta=beta,
                                  activation=activation), has_aux=True)(params)
        return val, aux, optax.tree.norm(g)

    return jax.vmap(final)(params, hparams)


_final_values_jit = jax.jit(_final_values, static_argnames=("cost", "beta", "activation"))


def _final_eval(params, hparams, x, y, *, cost, beta, activation):
    """:func:`width_sweep`'s final evaluation, one compiled program per (shapes, cost, beta,
    activation): ``x`` and ``y`` are arguments (a function closing over them was a new
    function at every call, compiled again, with the data embedded as constants).  An
    unhashable ``beta`` (an array) is closed over in a program compiled for this call."""
    try:
        hash(beta)
    except TypeError:
        return jax.jit(functools.partial(_final_values, cost=cost, beta=beta,
                                         activation=activation))(params, hparams, x, y)
    return _final_values_jit(params, hparams, x, y, cost=cost, beta=beta,
                             activation=activation)


def _phase_step(phase: str, cost: Callable, beta, activation, *opt) -> loop.TrainStep:
    """A :func:`width_sweep` phase's step, one object per (phase, cost, beta, activation,
    optimizer settings): ``loop.fit`` compiles per step object, so two sweeps that differ only
    in lambda, data or widths of the same shape (paper A Fig. 2's two MNIST lambdas) share
    the compiled chunks.  Unhashable settings (an array ``beta``) build a fresh step."""
    try:
        return _phase_step_cached(phase, cost, beta, activation, *opt)
    except TypeError:  # unhashable argument
        return _phase_step_cached.__wrapped__(phase, cost, beta, activation, *opt)


@functools.lru_cache(maxsize=64, typed=True)  # typed: 1 and 1.0 fingerprint differently
def _phase_step_cached(phase, cost, beta, activation, *opt):
    if phase == "adam":
        adam_lr, adam_steps, lr_decay = opt
        lr = (adam_lr if lr_decay is None or adam_steps == 0  # 0 steps: no schedule to build
              else optax.cosine_decay_schedule(adam_lr, adam_steps, alpha=lr_decay))
        return sweep_step(cost, optax.adam(lr), beta=beta, activation=activation)
    if phase == "gd":
        return sweep_step(cost, optax.sgd(opt[0]), beta=beta, activation=activation)
    return polish_step(cost, beta=beta, activation=activation)


def cost_output_dim(y, cost, *, fn: str = "cost_output_dim") -> int:
    """Output width implied by the targets: ``y.shape[1]`` (regression) or ``max(y) + 1``."""
    y = np.asarray(y)
    if y.ndim == 2:
        return y.shape[1]
    if y.ndim == 1 and np.issubdtype(y.dtype, np.integer):
        return int(y.max()) + 1
    raise ValueError(f"{fn}: y must be [N, n_out] float targets or [N] integer labels, got "
                     f"shape {y.shape} dtype {y.dtype}.")
