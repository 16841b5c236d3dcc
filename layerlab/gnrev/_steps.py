"""Training steps on a RevMLP + fixed readout: exact Gauss–Newton, and SGD/Adam via optax.

All steps have the ``layerlab.loop`` signature ``step(state, batch, key) -> (state, metrics)``
with ``batch = (x [n, d], labels [n] or [n, C])`` and ``state`` a
``layerlab.loop.TrainState``; they can be driven by ``layerlab.loop.fit``.
"""
from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from layerlab import probes
from layerlab._checks import (
    check_array,
    check_choice,
    check_finite,
    check_key,
    check_number,
    is_concrete,
)
from layerlab.loop import TrainState, TrainStep, optax_step

from ._gauss_newton import (
    COMBINE,
    PinvConfig,
    _check_pinv,
    _loss_value,
    gn_direction,
    gn_residual,
    loss_value,
    output_target,
)
from ._revmlp import RevMLPFrozen, revmlp_apply

__all__ = ["gn_step", "revmlp_optax_step", "revmlp_logits", "revmlp_loss", "with_loss_after"]


def revmlp_logits(params: dict, frozen: RevMLPFrozen, readout: jax.Array,
                  x: jax.Array) -> jax.Array:
    """Logits ``revmlp_apply(params, frozen, x) @ P``; ``[n, d] -> [n, C]``."""
    return revmlp_apply(params, frozen, x) @ readout


def revmlp_loss(params: dict, frozen: RevMLPFrozen, readout: jax.Array,
                batch: tuple[jax.Array, jax.Array], *,
                loss: str = "ce") -> tuple[jax.Array, dict[str, jax.Array]]:
    """``(mean loss, {"accuracy": ...})`` of the RevMLP + readout on ``batch = (x, labels)``.

    ``accuracy`` is reported for class targets: integer labels ``[n]`` or one-hot / soft
    targets ``[n, C]`` with ``C > 1`` (argmax); a real-valued regression target (one output)
    gives no metric besides the loss (a NaN accuracy would stop ``loop.fit``'s default
    finiteness check at step 0).
    """
    x, labels = batch
    logits = revmlp_logits(params, frozen, readout, x)
    val = _loss_value(logits, labels, loss=loss, fn="revmlp_loss")
    if _has_classes(labels, logits):
        return val, {"accuracy": probes.accuracy(logits, labels)}
    return val, {}


def _has_classes(labels, logits) -> bool:
    """Integer labels, or ``[n, C]`` class targets with ``C > 1`` outputs (argmax-able)."""
    if jnp.issubdtype(labels.dtype, jnp.integer):
        return True
    return labels.ndim == 2 and labels.shape[1] > 1 and labels.shape[1] == logits.shape[-1]


def gn_step(
    frozen: RevMLPFrozen,
    readout: jax.Array,
    *,
    learning_rate: float = 0.5,
    weight_decay: float = 0.0,
    loss: str = "ce",
    target: str = "gradient",
    pinv: PinvConfig | None = None,
    combine: str = "average",
    residual: bool = True,
    loss_after: bool = False,
) -> TrainStep:
    """Exact Gauss–Newton training step (Prop. 4.4) for ``layerlab.loop.fit``.

    .. math::
        θ \\leftarrow θ - α\\,(c\\, J^{⊣} P^\\top ε + λ θ),\\quad c = 1\\ (\\text{average})\\
        \\text{or } L\\ (\\text{per\\_block}),\\qquad ε = \\nabla_f \\tilde L\\
        \\text{(Eq. 5) or } H^+\\nabla_f \\tilde L\\ \\text{(Eq. 19)}

    The state is a ``layerlab.loop.TrainState`` with ``opt_state=()`` and
    ``hparams={"learning_rate": [], "weight_decay": []}`` (arrays, so a sweep over them is one
    program with ``fit(..., runs=True)``).

    Args:
      frozen: :class:`RevMLPFrozen` (fixed bottlenecks).
      readout: ``[d, C]`` fixed orthonormal projection (:func:`readout_init`); a concrete
        one whose ``PᵀP`` deviates from ``I`` by more than ``max(1e-5, 10 eps)`` is refused
        (ValueError).
      learning_rate: ``α`` (default in ``init``).
      weight_decay: ``λ`` (default in ``init``); decoupled, added to the GN direction.
      loss: ``"ce"`` or ``"mse"``.
      target: ``"gradient"`` (Eq. 5) or ``"newton"`` (Eq. 19).
      pinv: :class:`PinvConfig` (App. K regularisation and solver).
      combine: step-size convention, ``"average"`` (Eqs. 16–17: ``α`` is the function-space
        step) or ``"per_block"`` (authors' code: every block takes its full ``J_ℓ⁺ε``, the
        update is ``L ×`` the averaged one, so ``α_per_block = α_average / L``).
      residual: log the certificate ``residual = ‖J Δ − ε‖/‖ε‖`` of the averaged direction
        ``Δ`` (one extra jvp per step; 0 for an exact right inverse, in both conventions).
      loss_after: also log the loss on the same batch after the update (``loss_after``) and
        its percentage change ``loss_change_pct`` (Fig. 3); one extra forward pass.

    Returns:
      ``TrainStep(init, step)``; ``step`` is a ``jax.tree_util.Partial`` binding the
      bottlenecks and the readout, so ``loop.fit`` passes them as inputs of its compiled chunk
      (one program for every net of the same shapes and settings, e.g. the seeds of a study);
      metrics ``loss``, ``accuracy``, ``min_rank`` (float32, smallest rank
      of all pseudo-inverses, compare to the batch size), ``max_cond``, ``update_norm`` and
      optionally ``residual``, ``loss_after``, ``loss_change_pct``.

    Examples:
      Five full-batch GN steps on six points (``fit`` compiles the step once):

      >>> import jax
      >>> from layerlab import gnrev, loop
      >>> params, frozen = gnrev.revmlp_init(jax.random.key(0), dim=4, depth=2, bottleneck=8)
      >>> P = gnrev.readout_init(jax.random.key(1), 4, 2)
      >>> x = jax.random.normal(jax.random.key(2), (6, 4))
      >>> labels = (x[:, 0] > 0).astype(int)
      >>> gn = gnrev.gn_step(frozen, P, learning_rate=0.5)
      >>> state, hist = loop.fit(gn.step, gn.init(params), (x, labels),
      ...                        key=jax.random.key(3), steps=5, progress=False)
      >>> loss = hist["train"]["loss"]
      >>> bool(loss[-1] < 0.5 * loss[0])
      True

    References:
      Eqs. (5), (19), Prop. 4.4 of Buffelli et al. 2024.
    """
    readout = _check_readout(frozen, readout, "gn_step")
    _check_orthonormal(readout, "gn_step")
    check_number(learning_rate, "learning_rate", fn="gn_step", min_value=0.0, lo_open=True,
                 what="a step size; a negative one ascends the loss")
    check_number(weight_decay, "weight_decay", fn="gn_step", min_value=0.0)
    check_choice(loss, "loss", ("ce", "mse"), fn="gn_step")
    check_choice(target, "target", ("gradient", "newton"), fn="gn_step")
    check_choice(combine, "combine", COMBINE, fn="gn_step")
    _check_pinv(pinv, "gn_step")
    lr0, wd0 = float(learning_rate), float(weight_decay)

    def init(params, hparams=None) -> TrainState:
        if isinstance(hparams, dict):  # eager only (a traced/vmapped hparams passes through)
            check_number(hparams.get("learning_rate", 1.0), "hparams['learning_rate']",
                         fn="gn_step init", min_value=0.0, lo_open=True)
            check_number(hparams.get("weight_decay", 0.0), "hparams['weight_decay']",
                         fn="gn_step init", min_value=0.0)
        dt = jax.tree.leaves(params)[0].dtype
        defaults = {"learning_rate": jnp.asarray(lr0, dt), "weight_decay": jnp.asarray(wd0, dt)}
        if hparams is None:
            hparams = defaults
        elif isinstance(hparams, dict):
            unknown = sorted(set(hparams) - set(defaults))
            if unknown:
                raise ValueError(f"gn_step init: unknown hparams {unknown}; the step reads "
                                 "'learning_rate' and 'weight_decay'.")
            hparams = {**defaults, **hparams}  # a missing entry takes gn_step's value
        return TrainState(params, (), jnp.zeros((), jnp.int32), hparams)

    opts = (loss, target, pinv, combine, bool(residual), bool(loss_after))
    return TrainStep(init, _bind_net(_gn_update, opts, frozen, readout))


def _check_readout(frozen: RevMLPFrozen, readout, fn: str) -> jax.Array:
    """Static: ``frozen`` is a :class:`RevMLPFrozen` and ``readout`` a float ``[d, C]`` array
    (``d = 2 h`` read from ``frozen.v1`` when the net has a bottleneck; without one ``d`` is
    checked at the first step, :func:`_check_readout_params`)."""
    if not isinstance(frozen, RevMLPFrozen):
        raise TypeError(f"{fn}: frozen must be a RevMLPFrozen (from revmlp_init), got "
                        f"{type(frozen).__name__}.")
    readout = check_array(readout, "readout", fn=fn, ndim=2, kind="float")
    if frozen.v1 is not None:
        d = 2 * frozen.v1.shape[1]
        if readout.shape[0] != d:
            raise ValueError(
                f"{fn}: readout must have shape ({d}, C) for a net on d = {d} features "
                f"(frozen.v1 has shape {tuple(frozen.v1.shape)}), got {tuple(readout.shape)}; "
                f"make it with readout_init(key, {d}, C).")
    return readout


def _check_orthonormal(readout, fn: str) -> None:
    """Eager only: ``readout`` has orthonormal columns, ``PᵀP = I_C``.

    The GN target ``ε Pᵀ`` moves the logits by ``ε`` only then: a ``2 P`` readout took the
    step ``4 α`` while the residual certificate (body space) still read ~1e-14.  Tolerance
    ``max(1e-5, 10 eps)`` of the readout's dtype (a bfloat16 :func:`readout_init` is the float32
    one rounded).  A traced readout is not checked.
    """
    if not is_concrete(readout):
        return
    pn = np.asarray(readout, dtype=np.float64)
    if not np.all(np.isfinite(pn)):
        return  # reported as non-finite by the step's checks / NaN propagates
    dev = float(np.max(np.abs(pn.T @ pn - np.eye(pn.shape[1])), initial=0.0))
    tol = max(1e-5, 10.0 * float(jnp.finfo(readout.dtype).eps))
    if dev > tol:
        d, c = pn.shape
        raise ValueError(
            f"{fn}: readout must have orthonormal columns (readoutᵀ readout = I_{c}), got "
            f"max |readoutᵀ readout - I| = {dev:.3g} (tolerance {tol:.3g}); the GN target "
            f"ε readoutᵀ then does not move the logits by ε.  Make it with "
            f"readout_init(key, {d}, {c}) (or orthonormalise it: Q of jnp.linalg.qr).")


def _check_readout_params(readout, params: dict, fn: str) -> None:
    """Static, at the step: the readout's rows match the parameters' ``d`` and its dtype is
    not wider than theirs (the body target ``ε Pᵀ`` must keep the parameters' dtype)."""
    d = 2 * params["b1"].shape[1]
    dt = params["b1"].dtype
    if readout.shape[0] != d:
        raise ValueError(f"{fn}: readout must have shape ({d}, C) for a net on d = {d} "
                         f"features, got {tuple(readout.shape)}; make it with "
                         f"readout_init(key, {d}, C).")
    if jnp.promote_types(readout.dtype, dt) != dt:
        raise TypeError(f"{fn}: readout has dtype {readout.dtype} but the parameters are {dt}; "
                        f"cast it with readout.astype(jnp.{jnp.dtype(dt).name}) or make it "
                        f"with readout_init(..., dtype=jnp.{jnp.dtype(dt).name}).")


def _bind_net(update: Callable, opts: tuple, frozen: RevMLPFrozen, readout):
    """``step(state, batch, key) = update(frozen, readout, opts, state, batch, key)`` as a
    ``jax.tree_util.Partial`` binding ``(v1, v2, readout)``: ``loop.fit`` passes them to its
    compiled chunk as inputs, so nets that differ only in them (seeds) share one program.
    The block pattern ``frozen.linear`` stays static (it sets the rank bounds the warning
    checks).  A traced net or unhashable ``opts``/activation gets a plain closure."""
    try:
        linear = tuple(bool(v) for v in np.asarray(frozen.linear).tolist())
        fn = _net_step_fn(update, opts, linear, frozen.activation)
    except (TypeError, jax.errors.TracerArrayConversionError,
            jax.errors.ConcretizationTypeError):
        return functools.partial(update, frozen, readout, opts)
    return jax.tree_util.Partial(fn, frozen.v1, frozen.v2, readout)


@functools.lru_cache(maxsize=256)
def _net_step_fn(update: Callable, opts: tuple, linear: tuple[bool, ...], activation: Callable):
    """``fn(v1, v2, readout, state, batch, key)``: ``update`` on the rebuilt net, one per
    setting (the compile-cache key of :func:`_bind_net`'s Partial)."""
    lin = np.asarray(linear, bool)

    def fn(v1, v2, readout, state, batch, key):
        return update(RevMLPFrozen(v1, v2, lin, activation), readout, opts, state, batch, key)

    fn.__qualname__ = f"{update.__name__.lstrip('_')}.<step>"
    return fn


def _gn_update(frozen: RevMLPFrozen, readout, opts: tuple, state: TrainState, batch, key):
    """One step of :func:`gn_step` (``opts`` = its keyword settings)."""
    loss, target, pinv, combine, residual, loss_after = opts
    x, labels = batch
    if jnp.shape(labels)[:1] != jnp.shape(x)[:1]:
        raise ValueError(f"gn_step: the batch's labels/targets must have one row per input row; "
                         f"got x {jnp.shape(x)} and labels {jnp.shape(labels)}.")
    params = state.params
    _check_readout_params(readout, params, "gn_step")
    key = check_key(key, fn="gn_step", allow_none=True)  # used by the noise / rsvd pinvs
    # eager only (no-ops under jit): name the parameters, not gn_direction's target
    check_finite(params, "state.params", fn="gn_step",
                 hint="the parameters diverged (learning_rate too large?) or were initialised "
                      "non-finite; restart from finite parameters.")
    y = revmlp_apply(params, frozen, x)
    logits = y @ readout
    val = _loss_value(logits, labels, loss=loss, fn="gn_step")
    eps = output_target(logits, labels, loss=loss, target=target) @ readout.T
    check_finite(eps, "the output-space target ε Pᵀ", fn="gn_step",
                 hint="the forward pass produced non-finite outputs from finite parameters "
                      "(overflow, or non-finite inputs x); check x, rescale the inputs or lower "
                      "the learning rate.")
    delta, info = gn_direction(params, frozen, x, eps, y=y, pinv=pinv, combine=combine,
                               key=key, return_info=True)
    lr = state.hparams["learning_rate"]
    wd = state.hparams["weight_decay"]
    new = jax.tree.map(lambda p, d: p - lr * (d + wd * p), params, delta)
    metrics = {
        "loss": val,
        # float32 whatever the params dtype: bfloat16 rounds ranks above 256 (301 -> 300)
        "min_rank": jnp.min(info.rank).astype(jnp.float32),
        "max_cond": jnp.max(info.cond),
        "update_norm": optax.tree.norm(delta),
    }
    if _has_classes(labels, logits):
        metrics["accuracy"] = probes.accuracy(logits, labels)
    if residual:
        avg = delta if combine == "average" else jax.tree.map(
            lambda d: d / frozen.depth, delta)
        metrics["residual"] = gn_residual(params, frozen, x, avg, eps)
    if loss_after:
        after = loss_value(revmlp_logits(new, frozen, readout, x), labels, loss=loss)
        metrics["loss_after"] = after
        metrics["loss_change_pct"] = 100.0 * (after - val) / val
    return TrainState(new, (), state.step + 1, state.hparams), metrics


def with_loss_after(train_step: TrainStep, loss_fn: Callable) -> TrainStep:
    """Wrap a step to also log the same-batch loss after the update (Fig. 3).

    Args:
      train_step: any ``TrainStep``.
      loss_fn: ``loss_fn(params, batch) -> scalar``.

    Returns:
      ``TrainStep`` whose metrics add ``loss_after`` and ``loss_change_pct``
      ``= 100 (L_after − L_before) / L_before``.
    """

    def step(state, batch, key):
        new, metrics = train_step.step(state, batch, key)
        after = loss_fn(new.params, batch)
        metrics = dict(metrics)
        metrics["loss_after"] = after
        metrics["loss_change_pct"] = 100.0 * (after - metrics["loss"]) / metrics["loss"]
        return new, metrics

    return TrainStep(train_step.init, step)


def revmlp_optax_step(
    frozen: RevMLPFrozen,
    readout: jax.Array,
    optimizer: optax.GradientTransformation,
    *,
    loss: str = "ce",
    loss_after: bool = False,
) -> TrainStep:
    """SGD/Adam/any optax step on the same RevMLP + readout (via ``layerlab.loop.optax_step``).

    Args:
      frozen: :class:`RevMLPFrozen`.
      readout: ``[d, C]`` readout.
      optimizer: e.g. ``optax.sgd(0.1)`` or ``optax.inject_hyperparams(optax.adam)(1e-3)``.
      loss: ``"ce"`` or ``"mse"``.
      loss_after: log the same-batch loss after the update (Fig. 3).

    Returns:
      ``TrainStep``; metrics ``loss`` and ``accuracy``.  ``step`` is a
      ``jax.tree_util.Partial`` binding the bottlenecks and the readout (as in
      :func:`gn_step`): nets of the same shapes trained with the same ``optimizer`` object
      share one compiled ``fit`` program.
    """

    readout = _check_readout(frozen, readout, "revmlp_optax_step")
    ts = _optax_closure_step(frozen, readout, optimizer, loss, loss_after)
    # as in gn_step: the fixed arrays are inputs of fit's compiled chunk, not constants
    return TrainStep(ts.init, _bind_net(_optax_update, (optimizer, loss, bool(loss_after)),
                                        frozen, readout))


def _optax_update(frozen, readout, opts, state, batch, key):
    optimizer, loss, loss_after = opts
    return _optax_closure_step(frozen, readout, optimizer, loss, loss_after).step(
        state, batch, key)


def _optax_closure_step(frozen, readout, optimizer, loss, loss_after) -> TrainStep:
    def loss_fn(params, batch):
        return revmlp_loss(params, frozen, readout, batch, loss=loss)

    ts = optax_step(loss_fn, optimizer, has_aux=True)
    if loss_after:
        ts = with_loss_after(ts, lambda p, b: loss_fn(p, b)[0])
    return ts
