"""Representation (L^r) and covariance (L^k) reformulations of the L2-regularised loss.

Convention of paper (A): columns are data points.

* ``X``: inputs ``[n_0, N]``; ``Z_0^sigma = [X; beta 1^T]`` is ``[n_0 + 1, N]``.
* ``W_l``: ``[n_l, n_{l-1} + 1]``; its last column multiplies the bias row ``beta 1^T``.
* ``Z_l = W_l Z_{l-1}^sigma`` is ``[n_l, N]``; ``Z_l^sigma = [sigma(Z_l); beta 1^T]``.
* The output ``Z_L`` has no nonlinearity; the cost ``C`` acts on ``Z_L``.

References:
  (A) Jacot, Golikov, Hongler, Gabriel, "Feature Learning in L2-regularized DNNs:
  Attraction/Repulsion and Sparsity", NeurIPS 2022: Section 2 (setup), Proposition 1 (L^r),
  Section 3.1 (attraction/repulsion, linear networks), Proposition 3 (L^k), eq. (4.1)
  (Rank_sigma), Propositions 13-14 and Remark 23 (tightness).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from layerlab._checks import check_array, check_finite, check_number

Array = jax.Array
Activation = Callable[[Array], Array]
Cost = Callable[[Array], Array]


# ----------------------------------------------------------------------------- helpers
def _check_x(X) -> Array:
    X = check_array(X, "X", kind="real")
    check_finite(X, "X", hint="clean or impute the inputs first.")  # eager only
    if X.ndim != 2:
        raise ValueError(
            f"X must be a matrix [n_0, N] with one column per data point; got shape {X.shape}. "
            "If your data is [N, d] (rows = samples), pass X.T."
        )
    return X


def _check_weights(weights: Sequence[Array], n0: int) -> None:
    if len(weights) == 0:
        raise ValueError("weights is empty: pass a list [W_1, ..., W_L] with L >= 1.")
    n_prev = n0
    for l, W in enumerate(weights, start=1):  # noqa: E741
        if W.ndim != 2 or W.shape[1] != n_prev + 1:
            raise ValueError(
                f"W_{l} must have shape [n_{l}, n_{l - 1} + 1] = [?, {n_prev + 1}] (last column is "
                f"the bias); got {tuple(W.shape)}."
            )
        n_prev = W.shape[0]


def _check_reps(Zs: Sequence[Array], N: int) -> None:
    if len(Zs) == 0:
        raise ValueError("Zs is empty: pass a list [Z_1, ..., Z_L] with L >= 1.")
    for l, Z in enumerate(Zs, start=1):  # noqa: E741
        if Z.ndim != 2 or Z.shape[1] != N:
            raise ValueError(
                f"Z_{l} must have shape [n_{l}, N] = [?, {N}] (columns are data points); "
                f"got {tuple(Z.shape)}."
            )


def augment(Z: Array, beta) -> Array:
    """Append the bias row: ``[Z; beta 1^T]``.

    Args:
      Z: ``[n, N]``.
      beta: scalar, amount of bias.

    Returns:
      ``[n + 1, N]``.
    """
    ones = jnp.ones((1, Z.shape[1]), Z.dtype)
    return jnp.concatenate([Z, beta * ones], axis=0)


def _is_zero(ridge) -> bool:
    return isinstance(ridge, (int, float)) and ridge == 0


def tikhonov_pinv(A: Array, ridge=0.0) -> Array:
    """Tikhonov-regularised pseudo-inverse ``A^+_rho = A^T (A A^T + rho I)^{-1}``.

    .. math:: A^+_\\rho = A^T (A A^T + \\rho I)^{-1} = (A^T A + \\rho I)^{-1} A^T
              \\xrightarrow{\\rho \\to 0} A^+

    ``ridge = 0`` (a Python zero) gives the Moore-Penrose pseudo-inverse; the solve uses the
    smaller of the two Gram matrices.

    Args:
      A: ``[m, N]``.
      ridge: scalar ``rho >= 0``.

    Returns:
      ``[N, m]``.
    """
    if _is_zero(ridge):
        return jnp.linalg.pinv(A)
    m, N = A.shape
    if m <= N:
        G = A @ A.T + ridge * jnp.eye(m, dtype=A.dtype)
        return jax.scipy.linalg.solve(G, A, assume_a="pos").T
    G = A.T @ A + ridge * jnp.eye(N, dtype=A.dtype)
    return jax.scipy.linalg.solve(G, A.T, assume_a="pos")


def psd_pinv(K: Array, ridge=0.0) -> Array:
    """Regularised pseudo-inverse of a Gram matrix, matching :func:`tikhonov_pinv`.

    .. math:: K^{+}_\\rho = (K + \\rho I)^{-1} K (K + \\rho I)^{-1},
       \\quad\\text{so that}\\quad A^+_\\rho (A^+_\\rho)^T = (A^T A)^+_\\rho .

    Args:
      K: ``[N, N]`` symmetric PSD.
      ridge: scalar ``rho >= 0`` (Python 0 gives ``pinv(K)``).

    Returns:
      ``[N, N]``.
    """
    if _is_zero(ridge):
        return jnp.linalg.pinv(K, hermitian=True)
    N = K.shape[0]
    M = jax.scipy.linalg.solve(K + ridge * jnp.eye(N, dtype=K.dtype), K, assume_a="pos")
    return jax.scipy.linalg.solve(K + ridge * jnp.eye(N, dtype=K.dtype), M.T, assume_a="pos")


# ----------------------------------------------------------------------------- Phi and Psi
def representations(weights: Sequence[Array], X, *, beta=1.0,
                    activation: Activation = jax.nn.relu) -> list[Array]:
    """Forward pass Phi: weights to pre-activations ``[Z_1, ..., Z_L]``.

    .. math:: Z_\\ell = W_\\ell Z_{\\ell-1}^\\sigma,\\quad
              Z_\\ell^\\sigma = [\\sigma(Z_\\ell);\\ \\beta 1^T],\\quad
              Z_0^\\sigma = [X;\\ \\beta 1^T]

    Args:
      weights: ``[W_1, ..., W_L]``, ``W_l`` of shape ``[n_l, n_{l-1} + 1]``.
      X: ``[n_0, N]`` (columns are data points).
      beta: amount of bias.
      activation: elementwise nonlinearity (not applied to the output ``Z_L``).

    Returns:
      ``[Z_1, ..., Z_L]``, ``Z_l`` of shape ``[n_l, N]``.

    References:
      (A) Section 2 and the map Phi of Proposition 1.
    """
    X = _check_x(X)
    _check_weights(weights, X.shape[0])
    A = augment(X, beta)
    Zs = []
    for l, W in enumerate(weights):  # noqa: E741
        Z = W @ A
        Zs.append(Z)
        if l < len(weights) - 1:
            A = augment(activation(Z), beta)
    return Zs


def _inputs_of_layers(Zs, X, beta, activation) -> list[Array]:
    """``[Z_0^sigma, ..., Z_{L-1}^sigma]``."""
    return [augment(X, beta)] + [augment(activation(Z), beta) for Z in Zs[:-1]]


def weights_from_representations(Zs: Sequence[Array], X, *, beta=1.0,
                                 activation: Activation = jax.nn.relu,
                                 ridge=0.0) -> list[Array]:
    """Psi: representations to the minimal-norm weights ``W_l = Z_l (Z_{l-1}^sigma)^+``.

    .. math:: \\Psi(Z)_\\ell = Z_\\ell\\, (Z_{\\ell-1}^\\sigma)^+_\\rho

    Args:
      Zs: ``[Z_1, ..., Z_L]``, ``Z_l`` of shape ``[n_l, N]``.
      X: ``[n_0, N]``.
      beta: amount of bias.
      activation: elementwise nonlinearity.
      ridge: ``rho >= 0``; ``> 0`` uses the Tikhonov pseudo-inverse (differentiable everywhere).

    Returns:
      ``[W_1, ..., W_L]``, ``W_l`` of shape ``[n_l, n_{l-1} + 1]``.

    References:
      (A) Proposition 1 (the map Psi; Phi o Psi = id on the admissible set
      ``Im Z_{l+1}^T subset Im (Z_l^sigma)^T``).
    """
    X = _check_x(X)
    _check_reps(Zs, X.shape[1])
    As = _inputs_of_layers(Zs, X, beta, activation)
    return [Z @ tikhonov_pinv(A, ridge) for Z, A in zip(Zs, As)]


# ----------------------------------------------------------------------------- losses
def weight_loss(weights: Sequence[Array], X, *, cost: Cost, lam, beta=1.0,
                activation: Activation = jax.nn.relu) -> Array:
    """L2-regularised loss in weight space.

    .. math:: \\mathcal L_\\lambda(W) = C(Z_L) + \\lambda \\sum_\\ell \\|W_\\ell\\|_F^2

    Args:
      weights: ``[W_1, ..., W_L]``, ``W_l`` of shape ``[n_l, n_{l-1} + 1]`` (bias included).
      X: ``[n_0, N]``.
      cost: ``C(Z_L) -> scalar`` with ``Z_L`` of shape ``[n_L, N]``.
      lam: regularisation ``lambda``.
      beta, activation: as in :func:`representations`.

    Returns:
      scalar.

    References:
      (A) Section 2.
    """
    Zs = representations(weights, X, beta=beta, activation=activation)
    check_number(lam, "lam", fn="weight_loss", min_value=0.0, what="a regulariser")
    return cost(Zs[-1]) + lam * sum(jnp.sum(W * W) for W in weights)


def representation_loss(Zs: Sequence[Array], X, *, cost: Cost, lam, beta=1.0,
                        activation: Activation = jax.nn.relu, ridge=0.0) -> Array:
    """First reformulation L^r: the loss as a function of the representations.

    .. math:: \\mathcal L^r(Z_1, \\dots, Z_L) = C(Z_L)
              + \\lambda \\sum_{\\ell=1}^L \\|Z_\\ell (Z_{\\ell-1}^\\sigma)^+\\|_F^2

    Args:
      Zs: ``[Z_1, ..., Z_L]``, ``Z_l`` of shape ``[n_l, N]``.
      X: ``[n_0, N]``.
      cost: ``C(Z_L) -> scalar``.
      lam: ``lambda``.
      beta, activation: as in :func:`representations`.
      ridge: Tikhonov parameter of the pseudo-inverses (0: exact Moore-Penrose).

    Returns:
      scalar; equals ``weight_loss(weights_from_representations(Zs, X), X)``.

    References:
      (A) Proposition 1.
    """
    check_number(lam, "lam", fn="representation_loss", min_value=0.0,
                 what="a regulariser; a negative one rewards large weights")
    check_number(ridge, "ridge", fn="representation_loss", min_value=0.0)
    Ws = weights_from_representations(Zs, X, beta=beta, activation=activation, ridge=ridge)
    return cost(Zs[-1]) + lam * sum(jnp.sum(W * W) for W in Ws)


class Covariances(NamedTuple):
    """Output of Gamma: the covariances of the representations.

    Fields:
      K: ``[K_1, ..., K_L]``, ``K_l = Z_l^T Z_l`` of shape ``[N, N]``.
      K_sigma: ``[K_0^sigma, ..., K_{L-1}^sigma]``,
        ``K_l^sigma = (Z_l^sigma)^T Z_l^sigma = sigma(Z_l)^T sigma(Z_l) + beta^2 1 1^T`` and
        ``K_0^sigma = X^T X + beta^2 1 1^T``; each ``[N, N]``.
    """

    K: list
    K_sigma: list


def covariances(Zs: Sequence[Array], X, *, beta=1.0,
                activation: Activation = jax.nn.relu) -> Covariances:
    """Gamma: representations to covariance pairs ``(K_l, K_l^sigma)``.

    .. math:: K_\\ell = Z_\\ell^T Z_\\ell,\\quad
              K_\\ell^\\sigma = \\sigma(Z_\\ell)^T\\sigma(Z_\\ell)
              + \\beta^2 1 1^T,\\quad K_0^\\sigma = X^T X + \\beta^2 1 1^T

    Args:
      Zs: ``[Z_1, ..., Z_L]``, ``Z_l`` of shape ``[n_l, N]``.
      X: ``[n_0, N]``.

    Returns:
      :class:`Covariances` with ``L`` matrices ``[N, N]`` in each field.

    References:
      (A) Section 3.2, Proposition 3.
    """
    X = _check_x(X)
    _check_reps(Zs, X.shape[1])
    As = _inputs_of_layers(Zs, X, beta, activation)
    return Covariances(K=[Z.T @ Z for Z in Zs], K_sigma=[A.T @ A for A in As])


def covariance_loss(K: Sequence[Array], K_sigma: Sequence[Array], Z_L: Array, *, cost: Cost,
                    lam, ridge=0.0) -> Array:
    """Second reformulation L^k (homogeneous sigma): loss in terms of covariances.

    .. math:: \\mathcal L^k = C(Z_L) + \\lambda \\sum_{\\ell=1}^{L}
              \\operatorname{Tr}[K_\\ell (K_{\\ell-1}^\\sigma)^+],\\qquad K_L = Z_L^T Z_L

    Args:
      K: hidden covariances ``[K_1, ..., K_{L-1}]`` (or all ``L`` of them, as returned by
        :func:`covariances`; ``K_L`` is then ignored and recomputed from ``Z_L``), ``[N, N]``.
      K_sigma: ``[K_0^sigma, ..., K_{L-1}^sigma]``, each ``[N, N]``.
      Z_L: outputs ``[n_L, N]``.
      cost: ``C(Z_L) -> scalar``.
      lam: ``lambda``.
      ridge: regularisation of the pseudo-inverses, matching :func:`psd_pinv`.

    Returns:
      scalar; equals ``representation_loss(Zs, ...)`` at ``(K, K_sigma) = Gamma(Zs)``.

    References:
      (A) Proposition 3.
    """
    L = len(K_sigma)
    if len(K) not in (L - 1, L):
        raise ValueError(
            f"K must hold the L-1 hidden covariances (or all L); got {len(K)} with "
            f"len(K_sigma) = L = {L}."
        )
    Ks = list(K[: L - 1]) + [Z_L.T @ Z_L]
    reg = sum(jnp.sum(Kl * psd_pinv(Ks_prev, ridge)) for Kl, Ks_prev in zip(Ks, K_sigma))
    check_number(lam, "lam", fn="covariance_loss", min_value=0.0, what="a regulariser")
    return cost(Z_L) + lam * reg


# ----------------------------------------------------------------------------- forces
class Forces(NamedTuple):
    """Attraction and repulsion on each representation (negative gradients).

    Fields:
      attraction: ``[F_1, ..., F_L]``, ``F_l = -lambda d/dZ_l ||Z_l (Z_{l-1}^sigma)^+||^2``,
        each ``[n_l, N]``.
      repulsion: ``[R_1, ..., R_L]``, ``R_l = -lambda d/dZ_l ||Z_{l+1} (Z_l^sigma)^+||^2``,
        ``R_L = 0``.
    """

    attraction: list
    repulsion: list


def forces(Zs: Sequence[Array], X, *, lam, beta=1.0, activation: Activation = jax.nn.relu,
           ridge=0.0) -> Forces:
    """Attraction/repulsion forces on the hidden representations.

    .. math:: F^{att}_\\ell =
              -\\lambda\\,\\partial_{Z_\\ell}\\|Z_\\ell (Z_{\\ell-1}^\\sigma)^+\\|_F^2
              = -2\\lambda Z_\\ell (K_{\\ell-1}^\\sigma)^+,\\qquad
              F^{rep}_\\ell =
              -\\lambda\\,\\partial_{Z_\\ell}\\|Z_{\\ell+1}(Z_\\ell^\\sigma)^+\\|_F^2

    At a critical point of L^r, ``F^att_l + F^rep_l = 0`` for hidden layers and
    ``F^att_L = dC/dZ_L``.  This holds as stated in the wide regime where every ``Z`` is
    admissible (``Z_{l-1}^sigma`` of full column rank ``N``, e.g. ``n_{l-1} + 1 >= N``); otherwise
    only the components tangent to the admissible set cancel.

    Args:
      Zs: ``[Z_1, ..., Z_L]``, ``Z_l`` of shape ``[n_l, N]``.
      X: ``[n_0, N]``.
      lam: ``lambda``.
      ridge: Tikhonov parameter of the pseudo-inverses (``> 0`` recommended away from minima).

    Returns:
      :class:`Forces`, two lists of ``L`` arrays ``[n_l, N]``.

    References:
      (A) Section 3.1 and Figure 1.
    """
    X = _check_x(X)
    _check_reps(Zs, X.shape[1])
    L = len(Zs)

    def term(Z_prev_sigma, Z):
        return lam * jnp.sum(jnp.square(Z @ tikhonov_pinv(Z_prev_sigma, ridge)))

    A0 = augment(X, beta)
    att, rep = [], []
    for l in range(L):  # noqa: E741
        A_prev = A0 if l == 0 else augment(activation(Zs[l - 1]), beta)
        att.append(-jax.grad(term, argnums=1)(A_prev, Zs[l]))
        if l < L - 1:
            g = jax.grad(lambda Z: term(augment(activation(Z), beta), Zs[l + 1]))(Zs[l])
            rep.append(-g)
        else:
            rep.append(jnp.zeros_like(Zs[l]))
    return Forces(attraction=att, repulsion=rep)


# ----------------------------------------------------------------------------- linear closed form
def _psd_power(M: np.ndarray | Array, p: float, *, rtol: float | None = None) -> Array:
    r"""``M^p`` of a symmetric PSD matrix, with numerically-zero eigenvalues set to zero first.

    .. math:: M^p = V \operatorname{diag}(\tilde w_i^{\,p}) V^T,\qquad
              \tilde w_i = w_i\,[w_i > \text{rtol}\cdot \max_j w_j]

    Without the threshold an eigenvalue that is zero in exact arithmetic but ``~eps * |M|``
    in floating point is raised to ``p`` (``(1e-16)^{1/24} = 0.22``), which inflated the deep
    linear closed forms by several percent whenever ``M`` is singular (issue 14).

    Args:
      M: ``[N, N]`` symmetric positive semi-definite.
      p: power ``> 0``.
      rtol: eigenvalues ``<= rtol * max(w)`` are treated as 0; default
        ``100 * N * eps(dtype)``.

    Returns:
      ``[N, N]``.
    """
    M = jnp.asarray(M)
    if rtol is None:
        rtol = 100.0 * M.shape[-1] * float(jnp.finfo(M.dtype).eps)
    w, V = jnp.linalg.eigh((M + M.T) / 2)
    keep = w > rtol * jnp.max(w)
    w = jnp.where(keep, w, 0.0)
    wp = jnp.where(keep, jnp.where(keep, w, 1.0) ** p, 0.0)
    return (V * wp[None, :]) @ V.T


def linear_optimal_covariances(X, Z_L, depth: int) -> list[Array]:
    """Hidden covariances of the optimal deep linear network (no bias) reaching ``Z_L``.

    .. math:: K_\\ell = X^T \\left(X^{-T} Z_L^T Z_L X^{-1}\\right)^{\\ell / L} X,
              \\qquad \\ell = 1, \\dots, L-1

    (geometric interpolation between ``K_0 = X^T X`` and ``K_L = Z_L^T Z_L``; the minimal
    regulariser is then ``L Tr[(X^{-T} Z_L^T Z_L X^{-1})^{1/L}]``).

    Args:
      X: ``[N, N]`` square invertible inputs.
      Z_L: ``[n_L, N]`` outputs.
      depth: ``L``.

    Returns:
      ``[K_1, ..., K_{L-1}]``, each ``[N, N]``.

    References:
      (A) Section 3.1, item 2 (linear networks).
    """
    X = _check_x(X)
    if X.shape[0] != X.shape[1]:
        raise ValueError(f"the closed form needs a square invertible X; got shape {X.shape}.")
    Xinv = jnp.linalg.inv(X)
    M = Xinv.T @ (Z_L.T @ Z_L) @ Xinv
    return [X.T @ _psd_power(M, l / depth) @ X for l in range(1, depth)]  # noqa: E741


def linear_optimal_regulariser(X, Z_L, depth: int) -> Array:
    """Minimal ``sum_l ||W_l||^2`` of a bias-free depth-``L`` linear net mapping X to Z_L.

    .. math:: \\min \\sum_\\ell \\|W_\\ell\\|_F^2 = L\\,\\operatorname{Tr}
              \\left[(X^{-T} Z_L^T Z_L X^{-1})^{1/L}\\right]

    Args:
      X: ``[N, N]`` invertible.  Z_L: ``[n_L, N]``.  depth: ``L``.

    Returns:
      scalar.

    References:
      (A) Section 3.1, item 2.
    """
    X = _check_x(X)
    Xinv = jnp.linalg.inv(X)
    M = Xinv.T @ (Z_L.T @ Z_L) @ Xinv
    return depth * jnp.trace(_psd_power(M, 1.0 / depth))


# ----------------------------------------------------------------------------- Rank_sigma
def _sym_vec(M: np.ndarray) -> np.ndarray:
    iu = np.triu_indices(M.shape[-1])
    return M[..., iu[0], iu[1]]


def neuron_pairs(Z, *, activation: Activation = jax.nn.relu) -> np.ndarray:
    """Rows ``(vec z_i z_i^T, vec sigma(z_i) sigma(z_i)^T)`` of the conic-hull problem.

    ``(K, K^sigma - beta^2 11^T) = sum_i (z_i z_i^T, sigma(z_i) sigma(z_i)^T)`` over the neurons
    ``z_i`` (rows of ``Z``); the pairs live in a space of dimension ``N (N + 1)``.

    Args:
      Z: ``[n, N]`` (numpy or jax).

    Returns:
      numpy ``[n, N (N + 1)]`` (upper triangles of both outer products).
    """
    Z = np.asarray(Z, dtype=np.float64)
    S = np.asarray(activation(jnp.asarray(Z)), dtype=np.float64)
    P = np.einsum("ia,ib->iab", Z, Z)
    Q = np.einsum("ia,ib->iab", S, S)
    return np.concatenate([_sym_vec(P), _sym_vec(Q)], axis=1)


def rank_sigma_bounds(Z, *, activation: Activation = jax.nn.relu, tol: float = 1e-9) -> dict:
    """Bounds on ``Rank_sigma(K, K^sigma)`` for the covariance pair realised by ``Z``.

    .. math:: \\max(\\operatorname{Rank} K, \\operatorname{Rank}(K^\\sigma - \\beta^2 11^T))
              \\le \\operatorname{Rank}_\\sigma(K, K^\\sigma) \\le
              \\min\\big(n,\\ \\operatorname{rank}[\\text{neuron pairs}]\\big) \\le N(N+1)

    The upper bound is Caratheodory's theorem for cones (attained by
    :func:`caratheodory_reduce`, homogeneous sigma).  Host-side numpy; not jittable.

    Args:
      Z: ``[n, N]`` a hidden representation (rows = neurons).
      activation: the (positively homogeneous) nonlinearity.
      tol: relative tolerance of the numerical ranks.

    Returns:
      dict with ``lower``, ``upper``, ``rank_K``, ``rank_K_sigma``, ``width`` (= n) and
      ``N_times_N_plus_1``.

    References:
      (A) eq. (4.1) and Theorem 4 (sparsity, ``Rank_sigma <= N(N+1)``).
    """
    Z = np.asarray(Z, dtype=np.float64)
    if Z.ndim != 2:
        raise ValueError(f"Z must be [n, N]; got shape {Z.shape}.")
    n, N = Z.shape
    S = np.asarray(activation(jnp.asarray(Z)), dtype=np.float64)

    def rank(M):
        s = np.linalg.svd(M, compute_uv=False)
        return int(np.sum(s > tol * max(s.max(initial=0.0), 1e-300))) if s.size else 0

    rK, rS = rank(Z), rank(S)
    rP = rank(neuron_pairs(Z, activation=activation))
    return {"lower": max(rK, rS), "upper": min(n, rP), "rank_K": rK, "rank_K_sigma": rS,
            "width": n, "N_times_N_plus_1": N * (N + 1)}


def caratheodory_reduce(Z, *, activation: Activation = jax.nn.relu,
                        tol: float = 1e-10) -> np.ndarray:
    """Remove neurons while keeping ``(K, K^sigma)`` exactly (positively homogeneous sigma).

    Writes the pair as a conic combination ``sum_i c_i v_i`` (``c_i = 1``, ``v_i`` the neuron
    pairs), and while the ``v_i`` with ``c_i > 0`` are linearly dependent moves ``c`` along a null
    vector until one weight hits zero (Caratheodory).  Returns ``sqrt(c_i) z_i`` for the kept
    neurons: since ``sigma(a z) = a sigma(z)`` for ``a >= 0`` this realises the same pair with at
    most ``rank(v) <= N (N + 1)`` neurons.  Host-side numpy.

    Args:
      Z: ``[n, N]``.
      activation: positively homogeneous nonlinearity.
      tol: null-space tolerance.

    Returns:
      numpy ``[m, N]`` with ``m <= min(n, N (N + 1))``.

    References:
      (A) Theorem 4 (proof of the ``N(N+1)`` sparsity bound via Caratheodory).
    """
    Z = np.asarray(Z, dtype=np.float64)
    V = neuron_pairs(Z, activation=activation)
    c = np.ones(Z.shape[0])
    keep = np.arange(Z.shape[0])
    keep = keep[np.linalg.norm(V, axis=1) > 0]
    while keep.size > 0:
        M = V[keep].T  # [dim, m]
        _, s, vt = np.linalg.svd(M, full_matrices=True)
        rank = int(np.sum(s > tol * max(s.max(), 1e-300)))
        if rank == keep.size:
            break
        a = vt[-1]  # null vector of M
        if a.max() <= 0:
            a = -a
        pos = a > tol
        t = np.min(c[keep][pos] / a[pos])
        c[keep] = c[keep] - t * a
        c[keep] = np.where(np.abs(c[keep]) < tol, 0.0, c[keep])
        keep = keep[c[keep] > 0]
    return np.sqrt(c[keep])[:, None] * Z[keep]
