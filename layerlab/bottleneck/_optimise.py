"""Direct optimisation of L^r over the representations (projected, Tikhonov pseudo-inverses).

One step: ``Z <- Z - update(grad L^r_rho(Z))`` then the projection ``Z <- Phi(Psi_rho(Z))`` onto
representations realised by a network (the admissible set of Proposition 1, whose L^r is then the
true regularised loss of the network ``Psi_rho(Z)``, up to the ridge).  Papers (A)/(B) leave the
practicality of optimising L^r open; ``experiments.run_a_rank`` compares it with weight-space
training.

References:
  (A) Jacot, Golikov, Hongler, Gabriel, NeurIPS 2022, Proposition 1.
"""
from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax
from jax.typing import ArrayLike

from layerlab import loop
from layerlab._checks import check_number
from layerlab.bottleneck._layout import (
    check_beta,
    check_reps,
    check_scalar,
    check_x,
    col_cost,
    cols,
)
from layerlab.bottleneck._representations import (
    Activation,
    _phi,
    _psi,
    _representation_loss,
    _weight_loss,
    as_activation,
)

Array = jax.Array


def representation_step(x: ArrayLike, cost: Callable, optimizer: optax.GradientTransformation, *,
                        lam: ArrayLike, beta: ArrayLike = 1.0, activation: Activation = jax.nn.relu,
                        ridge: ArrayLike = 1e-4, project: bool = True) -> loop.TrainStep:
    """(Projected) gradient step on L^r over the representations of the full data set ``x``.

    .. math:: Z \\leftarrow \\Phi\\big(\\Psi_\\rho(Z - u_t)\\big),\\qquad
              u_t = \\text{opt}(\\nabla_Z \\mathcal L^r_\\rho(Z))

    ``batch`` and ``key`` are ignored (full data, deterministic), so the step plugs into
    :func:`layerlab.loop.fit` with any dummy data.  Metrics: ``loss`` (L^r_rho before the step)
    and ``weight_loss`` (``L_lambda`` of the network ``Psi_rho(Z)`` after the step).

    Args:
      x: ``[N, n_0]`` (rows are samples).
      cost: ``C(Z_L) -> scalar``, ``Z_L`` ``[N, n_L]``.
      optimizer: optax transformation on the list of ``Z_l``.
      lam: ``lambda``.  ridge: Tikhonov ``rho > 0``.
      project: apply ``Phi o Psi_rho`` after each update.

    Returns:
      :class:`layerlab.loop.TrainStep` whose state is a :class:`layerlab.loop.TrainState` with
      ``params = [Z_1, ..., Z_L]``, ``Z_l`` ``[N, n_l]`` (``init(Zs)``).

    References:
      (A) Proposition 1.
    """
    check_beta(beta, "representation_step")
    fn = "representation_step"
    check_scalar(lam, "lam", fn)
    check_number(lam, "lam", fn=fn, min_value=0.0, what="a regulariser")
    check_scalar(ridge, "ridge", fn)
    check_number(ridge, "ridge", fn=fn, min_value=0.0)
    x = check_x(x, fn)
    X, C = x.T, col_cost(cost, fn)  # paper A's columns inside the step
    kw = dict(beta=beta, activation=as_activation(activation, fn))

    def init(Zs, hparams=None):
        Zs = check_reps(Zs, x.shape[0], fn)   # one row per sample of x, as the step needs
        return loop.TrainState(list(Zs), optimizer.init(list(Zs)), jnp.zeros((), jnp.int32),
                               hparams)

    def step(state, batch, key):
        del batch, key
        loss, g = jax.value_and_grad(
            lambda Z: _representation_loss(cols(Z), X, C, lam, ridge=ridge, **kw))(
            state.params)
        upd, opt_state = optimizer.update(g, state.opt_state, state.params)
        Zs = cols(optax.apply_updates(state.params, upd))
        Ws = _psi(Zs, X, ridge=ridge, **kw)
        if project:
            Zs = _phi(Ws, X, **kw)
        wl = _weight_loss(Ws, X, C, lam, **kw)
        return loop.TrainState(cols(Zs), opt_state, state.step + 1, state.hparams), {
            "loss": loss, "weight_loss": wl}

    return loop.TrainStep(init, step)
