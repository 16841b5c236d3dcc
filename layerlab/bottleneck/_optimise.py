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

from layerlab import loop
from layerlab.bottleneck._reformulations import (
    representation_loss,
    representations,
    weight_loss,
    weights_from_representations,
)

Array = jax.Array


def representation_step(X, cost: Callable, optimizer: optax.GradientTransformation, *, lam,
                        beta=1.0, activation=jax.nn.relu, ridge=1e-4,
                        project: bool = True) -> loop.TrainStep:
    """(Projected) gradient step on L^r over the representations of the full data set ``X``.

    .. math:: Z \\leftarrow \\Phi\\big(\\Psi_\\rho(Z - u_t)\\big),\\qquad
              u_t = \\text{opt}(\\nabla_Z \\mathcal L^r_\\rho(Z))

    ``batch`` and ``key`` are ignored (full data, deterministic), so the step plugs into
    :func:`layerlab.loop.fit` with any dummy data.  Metrics: ``loss`` (L^r_rho before the step)
    and ``weight_loss`` (``L_lambda`` of the network ``Psi_rho(Z)`` after the step).

    Args:
      X: ``[n_0, N]``.
      cost: ``C(Z_L) -> scalar``.
      optimizer: optax transformation on the list of ``Z_l``.
      lam: ``lambda``.  ridge: Tikhonov ``rho > 0``.
      project: apply ``Phi o Psi_rho`` after each update.

    Returns:
      :class:`layerlab.loop.TrainStep` whose state is a :class:`layerlab.loop.TrainState` with
      ``params = [Z_1, ..., Z_L]`` (``init(Zs)``).
    """
    from layerlab._checks import check_number

    check_number(lam, "lam", fn="representation_step", min_value=0.0, what="a regulariser")
    check_number(ridge, "ridge", fn="representation_step", min_value=0.0)
    kw = dict(beta=beta, activation=activation)

    def init(Zs, hparams=None):
        return loop.TrainState(list(Zs), optimizer.init(list(Zs)), jnp.zeros((), jnp.int32),
                               hparams)

    def step(state, batch, key):
        del batch, key
        loss, g = jax.value_and_grad(
            lambda Z: representation_loss(Z, X, cost=cost, lam=lam, ridge=ridge, **kw))(
            state.params)
        upd, opt_state = optimizer.update(g, state.opt_state, state.params)
        Zs = optax.apply_updates(state.params, upd)
        Ws = weights_from_representations(Zs, X, ridge=ridge, **kw)
        if project:
            Zs = representations(Ws, X, **kw)
        wl = weight_loss(Ws, X, cost=cost, lam=lam, **kw)
        return loop.TrainState(Zs, opt_state, state.step + 1, state.hparams), {
            "loss": loss, "weight_loss": wl}

    return loop.TrainStep(init, step)
