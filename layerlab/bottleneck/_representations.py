"""The first reformulation L^r: the L2-regularised loss over hidden representations (Prop. 1).

Public functions take samples as rows (``x [N, n_0]``, ``Z_l [N, n_l]``) and ``layerlab.nets``
params; the private ``_``-functions hold paper A's column maths (``X [n_0, N]``,
``Z_l [n_l, N]``, ``W_l [n_l, n_{l-1} + 1]``, see ``_layout``) and the public ones transpose at
the edge.  In rows, with ``Z_{l-1}^sigma = [sigma(Z_{l-1}), beta 1]`` ``[N, n_{l-1} + 1]``
(``Z_0^sigma = [x, beta 1]``):

.. math:: Z_\\ell = Z_{\\ell-1}^\\sigma W_\\ell^T,\\qquad
          \\mathcal L_\\lambda(W) = C(Z_L) + \\lambda \\sum_\\ell \\|W_\\ell\\|_F^2,\\qquad
          \\mathcal L^r(Z) = C(Z_L) + \\lambda \\sum_\\ell \\|(Z_{\\ell-1}^\\sigma)^+ Z_\\ell\\|_F^2

References:
  (A) Jacot, Golikov, Hongler, Gabriel, "Feature Learning in L2-regularized DNNs:
  Attraction/Repulsion and Sparsity", NeurIPS 2022: Section 2 (setup, ``L_lambda``),
  Section 3.1 and Proposition 1 (``L^r``, the maps Phi and Psi).
"""
from __future__ import annotations

import functools
import types
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from layerlab._checks import check_array, check_number, is_traced, nonnegative_or_nan
from layerlab.bottleneck._layout import (
    Params,
    as_float,
    check_beta,
    check_params,
    check_reps,
    check_scalar,
    check_x,
    col_cost,
    cols,
    from_mlp_params,
    to_mlp_params,
)

Array = jax.Array
# an elementwise nonlinearity, or its name in ACTIVATIONS ("relu", "tanh", ...)
Activation = Callable[[Array], Array] | str
Cost = Callable[[Array], Array]


def _linear(z: Array) -> Array:
    """The identity nonlinearity (a linear network)."""
    return z


ACTIVATIONS = types.MappingProxyType({
    "relu": jax.nn.relu, "leaky_relu": jax.nn.leaky_relu, "tanh": jnp.tanh,
    "softplus": jax.nn.softplus, "gelu": jax.nn.gelu, "sigmoid": jax.nn.sigmoid,
    "elu": jax.nn.elu, "linear": _linear,
})
"""The activations accepted by name (one function object each, so that the functions that
compile inside, :func:`forces` and :func:`bottleneck_diagnostics`, compile once per name)."""

_PLAIN = (bool, int, float, complex, str, type(None))


class _SamePartial:
    """A ``functools.partial`` of plain-number arguments, equal (and hashing equal) to every
    other with the same function and arguments: a fresh ``partial(jax.nn.leaky_relu,
    negative_slope=0.1)`` per call is one static argument of a jitted function, not a new one
    (a ``functools.partial`` compares by identity)."""

    __slots__ = ("func", "args", "keywords")

    def __init__(self, p: functools.partial):
        self.func, self.args = p.func, p.args
        self.keywords = tuple(sorted(p.keywords.items()))

    def __call__(self, z):
        return self.func(*self.args, z, **dict(self.keywords))

    def _key(self):
        return (self.func, self.args, self.keywords)

    def __eq__(self, other):
        return isinstance(other, _SamePartial) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        return f"_SamePartial({self.func!r}, {self.args!r}, {dict(self.keywords)!r})"


def as_activation(activation, fn: str) -> Callable[[Array], Array]:
    """The nonlinearity ``activation`` names or is.

    A string is looked up in :data:`ACTIVATIONS`; a ``functools.partial`` whose arguments are
    plain numbers/strings is compared by content (:class:`_SamePartial`); any other callable is
    returned as is (compared by identity where it is a static argument of a jit: pass the same
    function object, not a fresh lambda per call).
    """
    if isinstance(activation, str):
        if activation not in ACTIVATIONS:
            raise ValueError(f"{fn}: activation must be a callable or one of "
                             f"{sorted(ACTIVATIONS)}, got {activation!r}.")
        return ACTIVATIONS[activation]
    if isinstance(activation, functools.partial) and all(
            isinstance(v, _PLAIN) for v in (*activation.args, *activation.keywords.values())):
        return _SamePartial(activation)
    if not callable(activation):
        raise TypeError(f"{fn}: activation must be a callable or one of {sorted(ACTIVATIONS)}, "
                        f"got {type(activation).__name__}.")
    return activation


# ----------------------------------------------------------------------------- paper A (columns)
def _augment(Z: Array, beta) -> Array:
    """``[Z; beta 1^T]``: ``[n, N]`` to ``[n + 1, N]``."""
    ones = jnp.ones((1, Z.shape[1]), Z.dtype)
    return jnp.concatenate([Z, beta * ones], axis=0)


def _phi(Ws: Sequence[Array], X: Array, beta, activation: Activation) -> list[Array]:
    """``Z_l = W_l Z_{l-1}^sigma`` with ``Z_0^sigma = [X; beta 1^T]`` (columns)."""
    A = _augment(X, beta)
    Zs = []
    for l, W in enumerate(Ws):  # noqa: E741
        Z = W @ A
        Zs.append(Z)
        if l < len(Ws) - 1:
            A = _augment(activation(Z), beta)
    return Zs


def _layer_inputs(Zs: Sequence[Array], X: Array, beta, activation) -> list[Array]:
    """``[Z_0^sigma, ..., Z_{L-1}^sigma]`` (columns)."""
    return [_augment(X, beta)] + [_augment(activation(Z), beta) for Z in Zs[:-1]]


def _psi(Zs: Sequence[Array], X: Array, beta, activation, ridge) -> list[Array]:
    """``W_l = Z_l (Z_{l-1}^sigma)^+_rho`` (columns)."""
    As = _layer_inputs(Zs, X, beta, activation)
    kind = _ridge_kind(ridge)
    return [Z @ _tikhonov_pinv(A, ridge, kind) for Z, A in zip(Zs, As)]


def _weight_loss(Ws, X, cost, lam, beta, activation) -> Array:
    """``C(Z_L) + lam sum_l ||W_l||_F^2`` (columns; ``cost`` on ``[n_L, N]``)."""
    return cost(_phi(Ws, X, beta, activation)[-1]) + lam * sum(jnp.sum(W * W) for W in Ws)


def _representation_loss(Zs, X, cost, lam, beta, activation, ridge) -> Array:
    """``C(Z_L) + lam sum_l ||Z_l (Z_{l-1}^sigma)^+||_F^2`` (columns)."""
    Ws = _psi(Zs, X, beta, activation, ridge)
    return cost(Zs[-1]) + lam * sum(jnp.sum(W * W) for W in Ws)


# ----------------------------------------------------------------------------- helpers
def _ridge_kind(ridge) -> str:
    """How to invert with Tikhonov parameter ``ridge`` (static: read at trace time).

    ``"zero"``: a concrete zero of any type (Python ``0``, ``np.float32(0)``, a concrete
    ``jnp.array(0.)``): the Moore-Penrose pseudo-inverse.  ``"positive"``: any other concrete
    value: the regularised solve.  ``"traced"``: a tracer (``ridge`` under ``jit``/``vmap``/
    ``grad``): both, chosen by the value at run time (:func:`traced_ridge_inverse`): the same
    numbers as the concrete kinds.
    """
    if is_traced(ridge):
        return "traced"
    return "zero" if bool(np.all(np.asarray(ridge) == 0)) else "positive"


def _tikhonov_solve(A: Array, ridge) -> Array:
    """``A^T (A A^T + rho I)^{-1}`` through the smaller Gram matrix (``rho > 0``)."""
    m, N = A.shape
    if m <= N:
        G = A @ A.T + ridge * jnp.eye(m, dtype=A.dtype)
        return jax.scipy.linalg.solve(G, A, assume_a="pos").T
    G = A.T @ A + ridge * jnp.eye(N, dtype=A.dtype)
    return jax.scipy.linalg.solve(G, A.T, assume_a="pos")


def _tikhonov_pinv(A: Array, ridge, kind: str) -> Array:
    """:func:`tikhonov_pinv` with the branch chosen by ``kind`` (:func:`_ridge_kind`);
    ``"traced"``: :func:`traced_ridge_inverse`, with ``d A^+_rho / d rho = -A^+ A^{+T} A^+`` at
    ``rho = 0`` (``A^+_rho = V diag(s / (s^2 + rho)) U^T``)."""
    if kind == "zero":
        return jnp.linalg.pinv(A)
    if kind == "positive":
        return _tikhonov_solve(A, ridge)
    return traced_ridge_inverse(A, ridge, _tikhonov_solve, jnp.linalg.pinv,
                                lambda P: -(P @ P.T) @ P)


def traced_ridge_inverse(M: Array, ridge, solve, pinv, d_pinv) -> Array:
    """A regularised inverse for a traced ``ridge``, as for a concrete one: ``solve(M, ridge)``
    where ``ridge > 0``, the pseudo-inverse ``pinv(M)`` where ``ridge == 0``, NaN where it is
    negative or NaN (``nonnegative_or_nan``).

    ``lax.cond`` on the value; under ``vmap`` both branches run and a select keeps one, the
    unused solve computed at ``ridge = 1`` so no NaN leaks into values or gradients.  At
    ``ridge = 0`` the derivative in ``ridge`` is the one-sided one, ``d_pinv(pinv(M))``, added
    as ``(r - stop_gradient(r)) * d_pinv(P)`` (exactly 0 in value).  Before 2026-11-29 a traced
    zero took the solve at 0 wherever it was finite, which on a rank-deficient ``M`` whose
    solve stays finite (collinear inputs) gave silently wrong numbers under ``jit``/``vmap``
    only (``representation_loss`` +0.7 %, the attraction 31 % off under ``vmap``).
    """
    r = nonnegative_or_nan(jnp.asarray(ridge, M.dtype))
    pos = r > 0

    def at_zero(M, r):
        P = pinv(M)
        return P + (r - jax.lax.stop_gradient(r)) * d_pinv(P)

    def at_positive(M, r):
        return solve(M, jnp.where(pos, r, jnp.ones_like(r)))

    return jax.lax.cond(pos, at_positive, at_zero, M, r)


def augment(Z: Array, beta: ArrayLike) -> Array:
    """Append the bias column: ``Z^sigma = [Z, beta 1]``.

    Args:
      Z: ``[N, n]`` (rows are samples).
      beta: scalar, amount of bias.

    Returns:
      ``[N, n + 1]``.

    References:
      (A) Section 2 (``Z_l^sigma``, transposed).
    """
    check_beta(beta, "augment")
    Z = check_array(Z, "Z", fn="augment", ndim=2)
    ones = jnp.ones((Z.shape[0], 1), Z.dtype)
    return jnp.concatenate([Z, beta * ones], axis=1)


def tikhonov_pinv(A: Array, ridge: ArrayLike = 0.0) -> Array:
    """Tikhonov-regularised pseudo-inverse ``A^+_rho = A^T (A A^T + rho I)^{-1}`` of any matrix.

    .. math:: A^+_\\rho = A^T (A A^T + \\rho I)^{-1} = (A^T A + \\rho I)^{-1} A^T
              \\xrightarrow{\\rho \\to 0} A^+

    ``ridge = 0`` gives the Moore-Penrose pseudo-inverse ``jnp.linalg.pinv(A)``, for a zero of
    any type, concrete or traced (under ``jit``/``vmap``/``grad`` the branch is chosen by the
    value at run time, so eager, ``jit`` and ``vmap`` give the same numbers; the derivative in
    ``ridge`` at 0 is the one-sided ``-A^+ A^{+T} A^+``).  ``ridge > 0`` solves with the smaller
    of the two Gram matrices.  A traced negative ``ridge`` gives NaN.  No samples axis: a plain
    matrix function.

    Args:
      A: ``[m, n]``.
      ridge: scalar ``rho >= 0``.

    Returns:
      ``[n, m]``: float32 for a half-precision ``A`` (LAPACK has no bfloat16/float16 kernels:
      computed in float32, as by ``_layout.as_float``), the default float for an integer one,
      ``A``'s dtype otherwise.
    """
    check_scalar(ridge, "ridge", "tikhonov_pinv")
    check_number(ridge, "ridge", fn="tikhonov_pinv", min_value=0.0)
    A = check_array(A, "A", fn="tikhonov_pinv", ndim=2)
    return _tikhonov_pinv(as_float(A), ridge, _ridge_kind(ridge))


# ----------------------------------------------------------------------------- Phi and Psi
def representations(params: Params, x: ArrayLike, *, beta: ArrayLike = 1.0,
                    activation: Activation = jax.nn.relu) -> list[Array]:
    """Forward pass Phi: parameters to the pre-activations ``[Z_1, ..., Z_L]``.

    .. math:: Z_\\ell = Z_{\\ell-1}^\\sigma W_\\ell^T = \\sigma(Z_{\\ell-1}) w_\\ell + 1 b_\\ell^T,
              \\qquad Z_0^\\sigma = [x,\\ \\beta 1]

    ``Z_L`` is ``layerlab.nets.mlp_apply(params, x)`` for any ``beta > 0``.

    Args:
      params: ``layerlab.nets`` params ``[{"w": [n_{l-1}, n_l], "b": [n_l]}, ...]``.
      x: ``[N, n_0]`` (rows are samples).
      beta: amount of bias (``0``: the biases ``b`` are ignored).
      activation: elementwise nonlinearity (not applied to the output ``Z_L``), or its name in
        :data:`ACTIVATIONS` (``"relu"``, ``"tanh"``, ...), as everywhere in this package.

    Returns:
      ``[Z_1, ..., Z_L]``, ``Z_l`` of shape ``[N, n_l]``.

    References:
      (A) Section 2 and the map Phi of Proposition 1.
    """
    check_beta(beta, "representations")
    fn = "representations"
    x = check_x(x, fn)
    check_params(params, x.shape[1], fn)
    activation = as_activation(activation, fn)
    return cols(_phi(from_mlp_params(params, beta), x.T, beta, activation))


def weights_from_representations(Zs: Sequence[Array], x: ArrayLike, *, beta: ArrayLike = 1.0,
                                 activation: Activation = jax.nn.relu,
                                 ridge: ArrayLike = 0.0) -> list[dict]:
    """Psi: representations to the minimal-norm parameters, ``W_l^T = (Z_{l-1}^sigma)^+ Z_l``.

    .. math:: \\Psi(Z)_\\ell^T = (Z_{\\ell-1}^\\sigma)^+_\\rho Z_\\ell,
              \\qquad W_\\ell = [w_\\ell^T,\\ b_\\ell / \\beta]

    (minimal in ``||W_l||_F^2 = ||w_l||^2 + ||b_l||^2 / beta^2``).

    Args:
      Zs: ``[Z_1, ..., Z_L]``, ``Z_l`` of shape ``[N, n_l]``.
      x: ``[N, n_0]``.
      beta: amount of bias (``0``: ``b = 0``).
      activation: elementwise nonlinearity.
      ridge: ``rho >= 0``; ``> 0`` uses the Tikhonov pseudo-inverse (differentiable everywhere).

    Returns:
      ``layerlab.nets`` params ``[{"w": [n_{l-1}, n_l], "b": [n_l]}, ...]``.

    References:
      (A) Proposition 1 (the map Psi; Phi o Psi = id on the admissible set
      ``Im Z_{l+1} subset Im Z_l^sigma``, column spaces in rows).
    """
    check_beta(beta, "weights_from_representations")
    fn = "weights_from_representations"
    check_scalar(ridge, "ridge", fn)
    check_number(ridge, "ridge", fn=fn, min_value=0.0)
    activation = as_activation(activation, fn)
    x = check_x(x, fn)
    Zs = check_reps(Zs, x.shape[0], fn)
    return to_mlp_params(_psi(cols(Zs), x.T, beta, activation, ridge), beta)


# ----------------------------------------------------------------------------- losses
def weight_loss(params: Params, x: ArrayLike, *, cost: Cost, lam: ArrayLike, beta: ArrayLike = 1.0,
                activation: Activation = jax.nn.relu) -> Array:
    """L2-regularised loss in parameter space.

    .. math:: \\mathcal L_\\lambda(W) = C(Z_L) + \\lambda \\sum_\\ell \\|W_\\ell\\|_F^2
              = C(Z_L) + \\lambda \\sum_\\ell \\|w_\\ell\\|_F^2 + \\|b_\\ell\\|^2 / \\beta^2

    Args:
      params: ``layerlab.nets`` params (biases left out of the norm for ``beta = 0``).
      x: ``[N, n_0]``.
      cost: ``C(Z_L) -> scalar`` with ``Z_L`` of shape ``[N, n_L]``.
      lam: regularisation ``lambda``.
      beta, activation: as in :func:`representations`.

    Returns:
      scalar.

    References:
      (A) Section 2.1.
    """
    check_beta(beta, "weight_loss")
    fn = "weight_loss"
    x = check_x(x, fn)
    check_params(params, x.shape[1], fn)
    check_scalar(lam, "lam", fn)
    check_number(lam, "lam", fn=fn, min_value=0.0, what="a regulariser")
    activation = as_activation(activation, fn)
    return _weight_loss(from_mlp_params(params, beta), x.T, col_cost(cost, fn), lam, beta,
                        activation)


def representation_loss(Zs: Sequence[Array], x: ArrayLike, *, cost: Cost, lam: ArrayLike,
                        beta: ArrayLike = 1.0, activation: Activation = jax.nn.relu,
                        ridge: ArrayLike = 0.0) -> Array:
    """First reformulation L^r: the loss as a function of the representations.

    .. math:: \\mathcal L^r(Z_1, \\dots, Z_L) = C(Z_L)
              + \\lambda \\sum_{\\ell=1}^L \\|(Z_{\\ell-1}^\\sigma)^+ Z_\\ell\\|_F^2

    Args:
      Zs: ``[Z_1, ..., Z_L]``, ``Z_l`` of shape ``[N, n_l]``.
      x: ``[N, n_0]``.
      cost: ``C(Z_L) -> scalar``, ``Z_L`` ``[N, n_L]``.
      lam: ``lambda``.
      beta, activation: as in :func:`representations`.
      ridge: Tikhonov parameter of the pseudo-inverses (0: exact Moore-Penrose).

    Returns:
      scalar; equals ``weight_loss(weights_from_representations(Zs, x), x)``.

    References:
      (A) Proposition 1.
    """
    check_beta(beta, "representation_loss")
    fn = "representation_loss"
    check_scalar(lam, "lam", fn)
    check_number(lam, "lam", fn=fn, min_value=0.0,
                 what="a regulariser; a negative one rewards large weights")
    check_scalar(ridge, "ridge", fn)
    check_number(ridge, "ridge", fn=fn, min_value=0.0)
    x = check_x(x, fn)
    Zs = check_reps(Zs, x.shape[0], fn)
    activation = as_activation(activation, fn)
    return _representation_loss(cols(Zs), x.T, col_cost(cost, fn), lam, beta, activation,
                                ridge)
