"""Synthetic regression tasks: random teacher networks and low-dimensional latents."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from layerlab._checks import check_number, jit_or_eager
from layerlab._types import PyTree
from layerlab.data._dataset import Dataset
from layerlab.nets import mlp_apply, mlp_init

__all__ = ["teacher", "latent", "ACTIVATIONS"]

ACTIVATIONS: dict[str, Callable] = {
    "relu": jax.nn.relu,
    "tanh": jnp.tanh,
    "erf": jax.scipy.special.erf,
    "gelu": jax.nn.gelu,
    "sigmoid": jax.nn.sigmoid,
    "softplus": jax.nn.softplus,
    "linear": lambda a: a,
}


def _activation(act) -> Callable:
    if callable(act):
        return act
    try:
        return ACTIVATIONS[act]
    except KeyError:
        raise ValueError(
            f"unknown activation {act!r}; use a callable or one of {list(ACTIVATIONS)}."
        ) from None


def teacher(
    key: jax.Array,
    n: int,
    widths: Sequence[int] = (50, 10, 10, 10),
    *,
    activation: str | Callable[[jax.Array], jax.Array] = "relu",
    noise: float = 0.0,
    w_std: float | None = None,
    b_std: float = 0.0,
    x_key: jax.Array | None = None,
    return_params: bool = False,
    split: str = "train",
) -> Dataset | tuple[Dataset, PyTree]:
    r"""Teacher-network regression: Gaussian inputs, targets from a random network.

    .. math:: x_i \sim \mathcal N(0, I_{d_0}),\qquad y_i = f_\theta(x_i) + \sigma\,\varepsilon_i,
              \ \varepsilon_i \sim \mathcal N(0, I_{d_L})

    with :math:`f_\theta` a random fully connected net of ``widths`` (``layerlab.nets``
    layout, fan-in scaled weights :math:`W_\ell \sim \mathcal N(0, \sigma_w^2/d_{\ell-1})`,
    biases :math:`\mathcal N(0, \sigma_b^2)`, activation on hidden layers only).
    The width-plateau experiment uses ``widths=(50, 10, 10, 10)``, ``n=1000`` (Jacot, Golikov,
    Hongler, Gabriel, "Feature Learning in L2-regularized DNNs: Attraction/Repulsion and
    Sparsity", NeurIPS 2022, §4 / Fig. 2).

    A dataset generator, run outside JAX transformations like :func:`load` (it returns numpy
    arrays in a :class:`Dataset`): not traceable under ``jit`` / ``vmap``; draw several seeds
    in a Python loop.

    Args:
      key: PRNG key of the teacher (and of the inputs unless ``x_key`` is given). To get a
        train and a test set of the *same* teacher, reuse ``key`` and pass two ``x_key``s --
        ``load("teacher", split=...)`` does exactly that.
      n: number of samples.
      widths: ``(d_in, hidden..., d_out)``.
      activation: name (``"relu"``, ``"tanh"``, ...) or callable.
      noise: target noise std :math:`\sigma`.
      w_std: weight std multiplier (fan-in scaled); default ``sqrt(2)`` for ReLU (keeps the
        scale through depth), ``1`` otherwise.
      b_std: bias std.
      x_key: key for the inputs and the noise.
      return_params: also return the teacher parameters.
      split: name recorded in the returned dataset.

    Returns:
      :class:`Dataset` with ``x [n, d_in]``, ``y [n, d_out]`` float32, ``num_classes=0``
      (and the teacher's params if ``return_params``).
    """
    act = _activation(activation)
    if w_std is None:
        w_std = float(np.sqrt(2.0)) if activation in ("relu", jax.nn.relu) else 1.0
    if n < 1:
        raise ValueError(f"teacher: n must be >= 1, got {n}.")
    if np.ndim(noise) == 0:  # (an array noise, e.g. per output, keeps the op-by-op route)
        check_number(noise, "noise", fn="teacher", min_value=0.0, what="a noise std")
    # one compiled program per (n, widths, activation, scales) -- the noise is traced: a sweep
    # over it compiles once; else (an unhashable or array setting) op by op
    params, x, y = jit_or_eager(_teacher_draw, key, x_key, noise, n=n, widths=tuple(widths),
                                act=act, w_std=w_std, b_std=b_std)
    ds = Dataset(np.asarray(x, np.float32), np.asarray(y, np.float32), 0, "teacher", split)
    return (ds, params) if return_params else ds


@functools.partial(jax.jit, static_argnames=("n", "widths", "act", "w_std", "b_std"))
def _teacher_draw(key, x_key, noise, *, n, widths, act, w_std, b_std):
    """:func:`teacher`'s draws as one program per (n, widths, activation, scales), ``noise``
    traced: the teacher's params, ``x`` ``[n, d_0]`` and ``y`` ``[n, d_L]``.  Eagerly each
    split, normal, matmul and add was its own program.  The scales are static (``mlp_init``
    sees Python floats): the default teacher (ReLU, no noise, zero biases) in float32 gets the
    eager draws' bits; with noise, bias draws or float64 an entry may differ by a rounding
    (XLA may fuse a multiply and an add that ran as two ops eagerly)."""
    k_teacher, k_default = jax.random.split(key)
    kx, ke = jax.random.split(k_default if x_key is None else x_key)
    params = mlp_init(k_teacher, widths, init="ntk", w_std=w_std, b_std=b_std)
    x = jax.random.normal(kx, (n, int(widths[0])))
    y = mlp_apply(params, x, activation=act) + noise * jax.random.normal(ke, (n, int(widths[-1])))
    return params, x, y


def latent(
    key: jax.Array,
    n: int,
    *,
    k: int = 2,
    d_in: int = 20,
    d_out: int = 20,
    hidden: int = 100,
    activation: str | Callable[[jax.Array], jax.Array] = "tanh",
    noise: float = 0.0,
    z_key: jax.Array | None = None,
    return_latent: bool = False,
    split: str = "train",
) -> Dataset | tuple[Dataset, dict[str, Any]]:
    r"""Data with a ``k``-dimensional latent: :math:`x = g(z)`, :math:`y = h(z)`.

    .. math:: z_i \sim \mathcal N(0, I_k),\quad x_i = g(z_i),\quad
              y_i = h(z_i) + \sigma\,\varepsilon_i

    with :math:`g: \mathbb R^k\to\mathbb R^{d_{in}}` and
    :math:`h: \mathbb R^k\to\mathbb R^{d_{out}}`
    independent random shallow nets (one hidden layer of ``hidden`` units, weights
    :math:`\mathcal N(0, 1/\text{fan\_in})`, zero biases).  The map ``x -> y`` has
    bottleneck rank ``k``
    (Jacot, "Bottleneck Structure in Learned Features: Low-Dimension vs Regularity Tradeoff",
    NeurIPS 2023, §5 / App. E).

    A dataset generator like :func:`teacher`: numpy arrays, not traceable under ``jit`` /
    ``vmap``.

    Args:
      key: PRNG key of ``g`` and ``h`` (and of ``z`` unless ``z_key`` is given).
      n: number of samples.
      k: latent dimension.
      d_in, d_out: input and output dimensions.
      hidden: hidden width of ``g`` and ``h``.
      activation: their nonlinearity (name or callable).
      noise: target noise std.
      z_key: key for the latents and the noise (reuse ``key`` with two ``z_key`` for train
        and test sets of the same task).
      return_latent: also return ``{"z": z [n, k], "g": g_params, "h": h_params}``.
      split: name recorded in the returned dataset.

    Returns:
      :class:`Dataset` with ``x [n, d_in]``, ``y [n, d_out]`` float32, ``num_classes=0``
      (and the latent dict if ``return_latent``).
    """
    act = _activation(activation)
    if n < 1 or k < 1:
        raise ValueError(f"latent: need n >= 1 and k >= 1, got n={n}, k={k}.")
    kg, kh, k_default = jax.random.split(key, 3)
    kz, ke = jax.random.split(k_default if z_key is None else z_key)
    g = mlp_init(kg, (k, hidden, d_in), init="ntk")
    h = mlp_init(kh, (k, hidden, d_out), init="ntk")
    z = jax.random.normal(kz, (n, k))
    x = mlp_apply(g, z, activation=act)
    y = mlp_apply(h, z, activation=act) + noise * jax.random.normal(ke, (n, d_out))
    ds = Dataset(np.asarray(x, np.float32), np.asarray(y, np.float32), 0, "latent", split)
    return (ds, {"z": np.asarray(z, np.float32), "g": g, "h": h}) if return_latent else ds
