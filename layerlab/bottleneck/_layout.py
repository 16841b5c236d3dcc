"""The one dense-net layout (``layerlab.nets``) and paper A's column view of it: the public edge.

Every public function of ``layerlab.bottleneck`` takes samples as rows and weights as
``layerlab.nets`` params; the paper's maths (columns are data points) stays in private functions
of each module.  This module holds the conversions between the two.

Rows (public)::

    x [N, n_0],   Z_l [N, n_l],   params[l - 1] = {"w": [n_{l-1}, n_l], "b": [n_l]}
    Z_1 = x w_1 + 1 b_1^T,   Z_l = sigma(Z_{l-1}) w_l + 1 b_l^T      (nets.mlp_apply)

Paper A's view (private), the transpose of the above::

    X = x^T [n_0, N],   Z_l^T [n_l, N],   W_l = [w_l^T, b_l / beta] [n_l, n_{l-1} + 1]
    Z_l^T = W_l [sigma(Z_{l-1})^T; beta 1^T]

The amount of bias ``beta`` does not change the function ``params`` compute (``beta`` times
``b / beta``); it weighs the biases in the paper's regulariser
``||W_l||_F^2 = ||w_l||^2 + ||b_l||^2 / beta^2`` and so in the minimal-norm map Psi.
``beta = 0`` is a net without biases: ``b`` is ignored (the bias column is zero) and Psi returns
``b = 0``.

References:
  (A) Jacot, Golikov, Hongler, Gabriel, "Feature Learning in L2-regularized DNNs:
  Attraction/Repulsion and Sparsity", NeurIPS 2022, Section 2.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from layerlab._checks import (  # check_scalar: re-exported, the bottleneck modules import it here
    check_array,
    check_finite,
    check_number,
    check_scalar,
    is_concrete,
    promote_float,
)

Array = jax.Array
Params = Sequence[dict]


# ----------------------------------------------------------------------------- converters
def from_mlp_layer(p: dict, beta: ArrayLike = 1.0) -> Array:
    """Paper A's view of one ``layerlab.nets`` layer: ``W = [w^T, b / beta]``.

    .. math:: W_\\ell = [\\,w_\\ell^T,\\ b_\\ell / \\beta\\,],\\qquad
              W_\\ell \\begin{pmatrix} h \\\\ \\beta \\end{pmatrix} = w_\\ell^T h + b_\\ell

    Args:
      p: ``{"w": [n_{l-1}, n_l], "b": [n_l]}``.
      beta: amount of bias; ``beta = 0`` (no bias) gives a zero bias column.

    Returns:
      ``W_l`` ``[n_l, n_{l-1} + 1]``.

    References:
      (A) Section 2 (``Z_l = W_l Z_{l-1}^sigma``).
    """
    check_beta(beta, "from_mlp_layer")
    beta = jnp.asarray(beta)  # traceable: jit / vmap / grad over beta
    zero = beta == 0
    inv = jnp.where(zero, 0.0, 1.0 / jnp.where(zero, 1.0, beta))
    w = p["w"].T
    return jnp.concatenate([w, (inv * p["b"][:, None]).astype(w.dtype)], axis=1)


def from_mlp_params(params: Params, beta: ArrayLike = 1.0) -> list[Array]:
    """Paper A's weights ``[W_1, ..., W_L]`` of ``layerlab.nets`` params (:func:`from_mlp_layer`
    on each layer)."""
    check_beta(beta, "from_mlp_params")
    return [from_mlp_layer(p, beta) for p in params]


def to_mlp_params(weights: Sequence[Array], beta: ArrayLike = 1.0) -> list[dict]:
    """``layerlab.nets`` params of paper A's weights ``W_l`` ``[n_l, n_{l-1} + 1]``: the inverse of
    :func:`from_mlp_params` (``w = W[:, :-1]^T``, ``b = beta W[:, -1]``)."""
    check_beta(beta, "to_mlp_params")
    return [{"w": W[:, :-1].T, "b": beta * W[:, -1]} for W in weights]


def weight_norm_sq(params: Params, *, beta: ArrayLike = 1.0) -> Array:
    """Paper A's squared parameter norm ``||W||^2 = sum_l ||W_l||_F^2`` of ``layerlab.nets`` params.

    .. math:: \\|\\mathbf W\\|^2 = \\sum_{\\ell=1}^L \\|W_\\ell\\|_F^2
              = \\sum_{\\ell=1}^L \\|w_\\ell\\|_F^2 + \\|b_\\ell\\|^2 / \\beta^2

    (biases left out for ``beta = 0``).

    Args:
      params: ``[{"w": [n_{l-1}, n_l], "b": [n_l]}, ...]``.
      beta: amount of bias.

    Returns:
      scalar.

    References:
      (A) Section 2.1 (``L_lambda(W) = C(Z_L) + lambda ||W||^2``).
    """
    check_beta(beta, "weight_norm_sq")
    return sum(jnp.sum(W * W) for W in from_mlp_params(params, beta))


# ----------------------------------------------------------------------------- edge helpers
def as_float(a: Array) -> Array:
    """``a`` in a floating dtype fit for the linear algebra: integer and boolean arrays in the
    default float (float64 under ``jax_enable_x64``, else float32), half precision (bfloat16,
    float16: no LAPACK kernels) in float32; float32/float64 unchanged."""
    return promote_float(jnp.asarray(a))[0]  # the shared rule


def check_x(x, fn: str, name: str = "x") -> Array:
    """Inputs ``[N, n_0]`` (rows are samples), finite when concrete, in a float dtype
    (:func:`as_float`: ``uint8`` pixels do not wrap around in ``x x^T``, integer inputs can be
    differentiated, half precision is computed in float32)."""
    x = check_array(x, name, fn=fn, kind="real")
    check_finite(x, name, fn=fn, hint="clean or impute the inputs first.")  # eager only
    if x.ndim != 2:
        raise ValueError(
            f"{fn}: {name} must be a matrix [N, n_0] with one row per sample; got shape "
            f"{x.shape}. Paper A writes the data as columns [n_0, N]: pass {name}.T."
        )
    return as_float(x)


def check_params(params: Params, n0: int, fn: str) -> None:
    """``layerlab.nets`` params whose first layer reads ``n0`` features."""
    if params is None or isinstance(params, (str, dict)) or len(params) == 0:
        raise ValueError(f"{fn}: params must be a non-empty list of layers "
                         "[{'w': [n_0, n_1], 'b': [n_1]}, ...] (layerlab.nets layout); got "
                         f"{type(params).__name__}.")
    n_prev = n0
    for i, p in enumerate(params):
        w, b = (p.get("w"), p.get("b")) if isinstance(p, dict) else (None, None)
        ok = (w is not None and b is not None and jnp.ndim(w) == 2 and jnp.ndim(b) == 1
              and w.shape[0] == n_prev and b.shape[0] == w.shape[1])
        if not ok:
            got = (f"w {tuple(jnp.shape(w))}, b {tuple(jnp.shape(b))}" if w is not None
                   and b is not None else f"{type(p).__name__}")
            raise ValueError(
                f"{fn}: params[{i}] (layer {i + 1}) must be {{'w': [n_{i}, n_{i + 1}], "
                f"'b': [n_{i + 1}]}} with n_{i} = {n_prev} (layerlab.nets layout); got {got}."
            )
        n_prev = w.shape[1]


def check_params_finite(params: Params, fn: str) -> None:
    """Eager only: raise ``ValueError`` naming the first leaf of ``params`` with NaN/Inf
    entries (``params[1]['w']``).  A no-op on traced params (the diagnostics give NaN there)."""
    if not is_concrete(params):
        return
    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
        arr = np.asarray(leaf)
        if not jnp.issubdtype(arr.dtype, jnp.inexact):
            continue
        ok = np.isfinite(arr)
        if not ok.all():
            raise ValueError(
                f"{fn}: params must be finite; params{jax.tree_util.keystr(path)} has "
                f"{arr.size - np.count_nonzero(ok)} non-finite (NaN/Inf) entries out of "
                f"{arr.size} (a diverged run?). Ranks and counts of such a net are undefined "
                "(under jit/vmap they are NaN).")


def check_reps(Zs: Sequence[Array], N: int, fn: str) -> list[Array]:
    """Representations ``[Z_1, ..., Z_L]``, each ``[N, n_l]``; returned in a float dtype
    (:func:`as_float`)."""
    if Zs is None or len(Zs) == 0:
        raise ValueError(f"{fn}: Zs is empty: pass a list [Z_1, ..., Z_L] with L >= 1.")
    for l, Z in enumerate(Zs, start=1):  # noqa: E741
        if jnp.ndim(Z) != 2 or Z.shape[0] != N:
            raise ValueError(
                f"{fn}: Z_{l} must have shape [N, n_{l}] = [{N}, ?] (rows are samples); "
                f"got {tuple(jnp.shape(Z))}."
            )
    return [as_float(jnp.asarray(Z)) for Z in Zs]


def cols(Zs: Sequence[Array]) -> list[Array]:
    """Transpose each matrix: rows to paper A's columns (and back)."""
    return [Z.T for Z in Zs]


def col_cost(cost: Callable[[Array], Array], fn: str = "cost") -> Callable[[Array], Array]:
    """A cost on outputs ``[N, n_L]`` as the paper's ``C(Z_L)`` on ``[n_L, N]``; its value must be
    a scalar (checked at trace time: a per-sample cost would broadcast against the
    regulariser and return an array)."""
    def C(Z):
        c = cost(Z.T)
        if jnp.ndim(c) != 0:
            raise ValueError(f"{fn}: cost must return a scalar C(Z_L) (e.g. a mean over the "
                             f"samples), got shape {tuple(jnp.shape(c))}.")
        return c

    return C


def check_beta(beta, fn: str) -> None:
    """The amount of bias ``beta``: a real scalar (static shape check, so a per-layer vector
    is refused under ``jit``/``vmap`` too) and finite (eager only).

    Paper A has one ``beta`` for the whole net: the bias row ``beta 1^T`` of every
    ``Z_l^sigma``, and with it the covariances ``K_l^sigma = sigma(Z_l) sigma(Z_l)^T +
    beta^2 1 1^T`` and the norm ``||b_l||^2 / beta^2``.  A vector used to broadcast against
    the samples or the biases: a raw broadcasting error, or (``from_mlp_params``,
    ``weight_norm_sq``, ``augment``) silently a matrix of the wrong shape."""
    check_scalar(beta, "beta", fn, what="paper A's one amount of bias, shared by every layer")
    check_number(beta, "beta", fn=fn, what="the amount of bias")
