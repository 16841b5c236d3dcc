"""Pure training steps: ``step(state, batch, key) -> (state, metrics)`` built from a loss.

:func:`optax_step` turns a scalar loss and an optax optimizer into the ``(init, step)`` pair
the loop drives.  Any other pure function with the same signature (a Gauss-Newton step, a
layer-wise step, ...) can be passed to :func:`layerlab.loop.fit` instead.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

__all__ = ["TrainState", "TrainStep", "augment_inputs", "optax_step"]


class TrainState(NamedTuple):
    """State of an optax training run.

    Attributes:
      params: model parameters (any pytree).
      opt_state: the optimizer state (``optimizer.init(params)``).
      step: int32 scalar ``[]``, number of updates applied so far.
      hparams: optional per-run hyperparameters handed to the loss as ``hparams=`` (e.g. an L2
        strength ``{"l2": []}``); ``None`` when unused.  With ``fit(..., runs=True)`` each leaf
        carries the leading runs axis like every other state leaf, which is how a sweep over
        regularisation strengths runs in one program.
      model_state: optional non-trainable model state carried between steps (e.g. flax
        ``batch_stats`` of batch-norm layers); ``None`` when unused.  :func:`optax_step`
        carries it through unchanged and does not pass it to the loss: a model that updates
        such state (BatchNorm in train mode) needs a step of its own that returns the new
        ``model_state`` (``fit`` takes any ``step(state, batch, key)``).
    """

    params: Any
    opt_state: Any
    step: jax.Array
    hparams: Any = None
    model_state: Any = None


class TrainStep(NamedTuple):
    """The pair ``init(params, hparams=None) -> TrainState`` and ``step(state, batch, key)``."""

    init: Callable[..., TrainState]
    step: Callable[[TrainState, Any, jax.Array], tuple[TrainState, dict[str, jax.Array]]]


def optax_step(
    loss_fn: Callable[..., Any],
    optimizer: optax.GradientTransformation,
    *,
    has_aux: bool = False,
    with_key: bool = False,
    with_hparams: bool = False,
    grad_norm: bool = False,
) -> TrainStep:
    """Gradient step on ``loss_fn`` with an optax optimizer.

    .. math::

        g_t = \\nabla_\\theta L(\\theta_t; B_t), \\qquad
        (u_t, s_{t+1}) = \\mathrm{opt.update}(g_t, s_t, \\theta_t), \\qquad
        \\theta_{t+1} = \\theta_t + u_t .

    The reported ``"loss"`` is ``L(theta_t; B_t)``, the loss *before* the update.

    Args:
      loss_fn: ``loss_fn(params, batch) -> scalar`` or, with ``has_aux``,
        ``-> (scalar, aux)`` where ``aux`` is a dict of scalar metrics (logged next to
        ``"loss"``).  With ``with_key`` it is called as ``loss_fn(params, batch, key=key)``
        (dropout, sampled losses); with ``with_hparams`` also ``hparams=state.hparams``.
      optimizer: an ``optax.GradientTransformation``.  For learning-rate sweeps wrap it with
        ``optax.inject_hyperparams`` so the rate lives in ``opt_state.hyperparams`` and can
        differ per run (see ``docs/loop.md``).
      has_aux: whether ``loss_fn`` returns ``(loss, aux_dict)``.
      with_key: pass the step's PRNG key to ``loss_fn``.
      with_hparams: pass ``state.hparams`` to ``loss_fn``.
      grad_norm: also log the global gradient norm ``||g_t||_2`` as ``"grad_norm"``.

    Returns:
      ``TrainStep(init, step)``: ``init(params, hparams=None) -> TrainState`` and
      ``step(state, batch, key) -> (state, metrics)`` with ``metrics`` a dict of scalars.
    """
    if not callable(loss_fn):
        raise TypeError(f"optax_step: loss_fn must be callable, got {type(loss_fn).__name__}.")
    if not (hasattr(optimizer, "init") and hasattr(optimizer, "update")):
        raise TypeError(
            "optax_step: optimizer must be an optax.GradientTransformation (e.g. optax.adam(1e-3)),"
            f" got {type(optimizer).__name__}."
        )

    def init(params, hparams=None) -> TrainState:
        return TrainState(params, optimizer.init(params), jnp.zeros((), jnp.int32), hparams)

    def step(state: TrainState, batch, key):
        kwargs = {}
        if with_key:
            kwargs["key"] = key
        if with_hparams:
            kwargs["hparams"] = state.hparams

        def f(p):
            return loss_fn(p, batch, **kwargs)

        if has_aux:
            (loss, aux), grads = jax.value_and_grad(f, has_aux=True)(state.params)
            if not isinstance(aux, dict):
                raise TypeError(
                    "optax_step(has_aux=True): loss_fn must return (loss, dict_of_scalars), "
                    f"got aux of type {type(aux).__name__}."
                )
        else:
            loss, grads = jax.value_and_grad(f)(state.params)
            aux = {}
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        metrics = {"loss": loss, **aux}
        if grad_norm:
            metrics["grad_norm"] = optax.tree.norm(grads)
        return TrainState(params, opt_state, state.step + 1, state.hparams,
                          state.model_state), metrics

    return TrainStep(init, step)


def _augmented_step(step, state, batch, key, *, aug):
    x, y = batch
    return step(state, (aug(jax.random.fold_in(key, 0x5A), x), y), key)


def augment_inputs(ts: TrainStep, aug: Callable[[jax.Array, Any], Any]) -> TrainStep:
    """``ts`` whose step sees every batch ``(x, y)`` as ``(aug(key', x), y)``.

    ``key' = fold_in(key, 0x5A)`` of the step's own key (which is passed on unchanged), so the
    augmentation draws are a function of ``fit``'s key and the step index.  Pass the same
    ``aug`` object (e.g. a module-level ``functools.partial``) every time: it is part of the
    compiled program's key, so one ``aug`` gives one program per step and shapes.  Data
    augmentation on the training stream only; evaluation (``fit``'s ``eval_fn``) is untouched.
    """
    return ts._replace(step=jax.tree_util.Partial(_augment_wrapper(aug), ts.step))


@functools.lru_cache(maxsize=64)
def _augment_wrapper(aug):
    # one wrapper object per ``aug``: Partial compares its function by identity, so a fresh
    # functools.partial per call would compile a new program per call
    return functools.partial(_augmented_step, aug=aug)
