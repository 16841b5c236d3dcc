"""The symmetry-learning task of paper B (a task of bottleneck rank 2).

Inputs are starting points ``w_0`` of gradient descent on
``f(w) = ||w w^T - e e^T - E||_F^2`` (``e`` a fixed unit vector, ``E`` small fixed symmetric
noise); targets are the losses ``f(w_1), ..., f(w_T)`` of the next ``T`` GD steps.  Without
``E`` the dynamics are symmetric under rotations fixing ``e``, so the targets depend on ``w_0``
only through two summary statistics (``w_0 . e`` and the distance to the ``e`` axis): the task
has bottleneck rank 2.

References:
  (B) Jacot, NeurIPS 2023, Section 5 and Appendix E (symmetry learning).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from layerlab._checks import check_int, check_number
from layerlab.data import Dataset


def symmetry_objective(w: ArrayLike, M: ArrayLike) -> jax.Array:
    """``f(w) = ||w w^T - M||_F^2`` for ``w [d]``, ``M [d, d]``."""
    return jnp.sum(jnp.square(jnp.outer(w, w) - M))


def symmetry_task(key: jax.Array, n: int, *, d: int = 10, steps: int = 10, lr: float = 0.02,
                  noise: float = 0.05, w_scale: float = 1.0, log_loss: bool = True,
                  return_info: bool = False) -> Dataset | tuple[Dataset, dict[str, np.ndarray]]:
    """Predict the next ``T`` losses of GD on ``||w w^T - e e^T - E||^2`` from ``w_0``.

    .. math:: w_{t+1} = w_t - \\eta\\, 4 (w_t w_t^T - M) w_t,\\qquad M = e e^T + E,\\qquad
              y = (f(w_1), \\dots, f(w_T))

    Args:
      key: PRNG key (``E``, and the ``w_0``).
      n: number of samples (``>= 1``).  d: dimension of ``w`` (``>= 2``).  steps: ``T``
        (``>= 1``).  lr: GD step ``eta > 0``.
      noise: scale of the symmetric noise ``E = (G + G^T) / 2``, ``G_ij ~ N(0, noise^2 / d)``
        i.i.d.: diagonal entries of std ``noise / sqrt(d)``, off-diagonal ones of std
        ``noise / sqrt(2 d)`` (``>= 0``; ``0``: no noise, the exact symmetry).
      w_scale: ``w_0 ~ N(0, w_scale^2 I_d / d)``: entries of std ``w_scale / sqrt(d)``, so
        ``E ||w_0||^2 = w_scale^2`` (``>= 0``).
      log_loss: targets ``log f(w_t)`` (better conditioned) instead of ``f(w_t)``.
      return_info: also return ``{"e", "E", "stats" [n, 2]}`` with the two summary statistics.

    Returns:
      :class:`layerlab.data.Dataset` with ``x [n, d]`` and ``y [n, T]`` float32.
    """
    fn = "symmetry_task"
    n = check_int(n, "n", fn=fn, min_value=1)
    d = check_int(d, "d", fn=fn, min_value=2)
    steps = check_int(steps, "steps", fn=fn, min_value=1)
    check_number(lr, "lr", fn=fn, min_value=0.0, lo_open=True, what="a gradient-descent step")
    check_number(noise, "noise", fn=fn, min_value=0.0)
    check_number(w_scale, "w_scale", fn=fn, min_value=0.0)
    kE, kw = jax.random.split(key)
    e = jnp.zeros((d,)).at[0].set(1.0)
    G = jax.random.normal(kE, (d, d)) * noise / np.sqrt(d)
    E = (G + G.T) / 2
    M = jnp.outer(e, e) + E
    w0 = w_scale * jax.random.normal(kw, (n, d)) / np.sqrt(d)

    grad = jax.grad(symmetry_objective)

    def traj(w):
        def body(w, _):
            w = w - lr * grad(w, M)
            return w, symmetry_objective(w, M)
        _, losses = jax.lax.scan(body, w, None, length=steps)
        return losses

    y = jax.vmap(traj)(w0)
    if log_loss:
        y = jnp.log(y)
    if not bool(jnp.all(jnp.isfinite(y))):
        raise FloatingPointError("symmetry_task: GD diverged; lower lr or w_scale.")
    ds = Dataset(np.asarray(w0, np.float32), np.asarray(y, np.float32), 0, "symmetry", "train")
    if return_info:
        stats = jnp.stack([w0 @ e, jnp.linalg.norm(w0 - (w0 @ e)[:, None] * e[None, :], axis=1)], 1)
        return ds, {"e": e, "E": E, "stats": np.asarray(stats)}
    return ds
