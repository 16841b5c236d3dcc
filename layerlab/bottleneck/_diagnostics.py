"""Bottleneck-structure diagnostics of deep L2-regularised networks (paper B).

For large depth ``L`` the learned weights have ``k`` singular values close to 1 (the others
``O(L^{-1/2})``) in almost all layers, where ``k`` is the bottleneck rank of the task, and with
an NTK of order ``L`` almost all hidden representations are ``~k``-dimensional.

References:
  (B) Jacot, "Bottleneck Structure in Learned Features: Low-Dimension vs Regularity Tradeoff",
  NeurIPS 2023: Theorem 3 (R^(0) = bottleneck rank, R^(1) bounds the log pseudo-determinant of
  the Jacobian), Theorem 6 (k singular values ~ 1), Theorem 7 / Corollary 8 (representations of
  dimension k, NTK of order L).

Samples are rows (``x [B, n_0]``) and parameters are ``layerlab.nets`` params; the weight
spectra are those of paper A's ``W_l = [w_l^T, b_l / beta]`` (bias column dropped unless
``include_bias``), i.e. of ``w_l``.

Non-finite parameters: eagerly every diagnostic raises a ``ValueError`` naming the first
non-finite leaf of ``params``; under ``jit``/``vmap`` (e.g. a sweep with a diverged run) the
counts and ranks of an affected layer or point are NaN, never a plausible 0.  Counts and ranks
are therefore floats (whole numbers when finite), in the dtype of the spectra.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from layerlab import probes
from layerlab._checks import check_int, check_number
from layerlab._linalg import svdvals
from layerlab.bottleneck._layout import (
    Params,
    check_beta,
    check_params,
    check_params_finite,
    check_scalar,
    check_x,
    cols,
    from_mlp_params,
)
from layerlab.bottleneck._representations import Activation, _phi, as_activation

Array = jax.Array


def _finite_or_nan(value: Array, *inputs: Array) -> Array:
    """``value`` as a float, NaN where any of ``inputs`` has a NaN/Inf entry (a count or a rank
    of a non-finite matrix is undefined: never a plausible number)."""
    ok = jnp.all(jnp.stack([jnp.all(jnp.isfinite(a)) for a in inputs]))
    dt = jnp.result_type(*(a.dtype for a in inputs), jnp.float32)
    return jnp.where(ok, value.astype(dt), jnp.nan)


def layer_singular_values(params: Params, *, include_bias: bool = False,
                          beta: ArrayLike = 1.0) -> list[Array]:
    """Singular values of each weight matrix ``w_l`` (or of ``[w_l^T, b_l / beta]`` with
    ``include_bias``).

    Args:
      params: ``layerlab.nets`` params ``[{"w": [n_{l-1}, n_l], "b": [n_l]}, ...]``.
      include_bias: use paper A's ``W_l`` ``[n_l, n_{l-1} + 1]`` with its bias column.
      beta: amount of bias (only with ``include_bias``).

    Returns:
      list of ``L`` arrays ``[min(n_l, n_{l-1})]`` (``[min(n_l, n_{l-1} + 1)]`` with
      ``include_bias``), descending.
    """
    check_beta(beta, "layer_singular_values")
    check_params_finite(params, "layer_singular_values")
    return probes.singular_values(_layer_mats(params, include_bias, beta))


def _layer_mats(params, include_bias, beta) -> list[Array]:
    return [W if include_bias else W[:, :-1] for W in from_mlp_params(params, beta)]


def layer_counts_near_one(params: Params, *, tol: float = 0.25,
                          include_bias: bool = False, beta: ArrayLike = 1.0) -> Array:
    """Per-layer count of singular values within ``tol`` of 1: ``probes.count_near_one`` (the
    one definition) applied to each weight matrix's spectrum.

    .. math:: k_\\ell = \\#\\{i : |s_i(w_\\ell) - 1| < \\text{tol}\\}

    Args:
      params: ``layerlab.nets`` params.
      tol: tolerance.
      include_bias, beta: as in :func:`layer_singular_values`.

    Returns:
      float ``[L]``: whole numbers; NaN for a layer with non-finite weights under
      ``jit``/``vmap`` (eagerly a ``ValueError``).

    References:
      (B) Theorem 6.
    """
    check_beta(beta, "layer_counts_near_one")
    check_scalar(tol, "tol", "layer_counts_near_one")
    check_number(tol, "tol", fn="layer_counts_near_one", min_value=0.0, lo_open=True)
    check_params_finite(params, "layer_counts_near_one")
    mats = _layer_mats(params, include_bias, beta)
    return jnp.stack([_finite_or_nan(probes.count_near_one(s, tol), W)
                      for s, W in zip(probes.singular_values(mats), mats)])


def centred_weight_counts(params: Params, x: ArrayLike, *, tol: float = 0.25,
                          dominant_above: float = 0.5, beta: ArrayLike = 1.0,
                          activation: Activation = jax.nn.relu) -> dict:
    """Per-layer counts of the weight singular values with the mean input direction projected
    out, and the weight's gain along that direction (layers ``l = 2..L``).

    A ReLU representation lies in the positive orthant, so a ``k``-dimensional representation
    carried from layer to layer has an offset (its mean over the samples).  When the weights
    rather than the biases carry that offset, ``w_l`` has one more singular value near 1 than
    the bottleneck rank ``k`` and :func:`layer_counts_near_one` reads ``k + 1`` (docs/
    bottleneck.md, ``b_structure``).  Here ``w_l`` is restricted to the orthogonal complement
    of the unit mean ``m_l`` of its input activations ``sigma(Z_{l-1})``:

    .. math:: m_\\ell = \\frac{\\bar a}{\\|\\bar a\\|},\\quad
              \\bar a = \\tfrac1N \\sigma(Z_{\\ell-1})^T 1,\\qquad
              s = \\operatorname{svd}\\big((I - m_\\ell m_\\ell^T)\\, w_\\ell\\big),

    .. math:: k_\\ell = \\#\\{i : |s_i - 1| < \\text{tol}\\},\\quad
              d_\\ell = \\#\\{i : s_i > \\text{dominant\\_above}\\},\\quad
              g_\\ell = \\|m_\\ell^T w_\\ell\\|.

    ``d_l`` counts the dominant singular values: Thm. 6 of (B) splits the spectrum into ``k``
    values near 1 and the rest ``O(L^{-1/2})``, so the default ``1/2`` separates the two.  The
    first layer is skipped (its input ``x`` is not a ReLU representation).  A layer whose input
    activations are all zero has ``m_l = 0``: no projection and ``g_l = 0``.  jit- and
    vmap-able (e.g. over a stack of nets).

    Args:
      params: ``layerlab.nets`` params ``[{"w": [n_{l-1}, n_l], "b": [n_l]}, ...]``, ``L >= 2``
        layers.
      x: ``[N, n_0]`` (rows are samples).
      tol: tolerance of the count near 1 (as in :func:`layer_counts_near_one`).
      dominant_above: threshold of the dominant count.
      beta, activation: as in :func:`representations` (``activation`` also gives the input
        activations ``sigma(Z_{l-1})``).

    Returns:
      ``{"count_near_one": [L-1], "dominant": [L-1], "mean_gain": [L-1]}``, entry
      ``l - 2`` for layer ``l = 2..L``; the counts are floats (whole numbers), NaN for a layer
      whose projected weights are not finite under ``jit``/``vmap`` (eagerly non-finite
      ``params`` raise a ``ValueError``).

    References:
      (B) Theorem 6; docs/bottleneck.md (``b_structure``: the offset direction).
    """
    check_beta(beta, "centred_weight_counts")
    fn = "centred_weight_counts"
    x = check_x(x, fn)
    check_params(params, x.shape[1], fn)
    if len(params) < 2:
        raise ValueError(f"{fn}: params must have at least 2 layers (layer 1 is skipped: its "
                         f"input x is not a representation); got {len(params)}.")
    check_scalar(tol, "tol", fn)
    check_number(tol, "tol", fn=fn, min_value=0.0, lo_open=True)
    check_scalar(dominant_above, "dominant_above", fn)
    check_number(dominant_above, "dominant_above", fn=fn, min_value=0.0)
    check_params_finite(params, fn)
    activation = as_activation(activation, fn)
    Zs = cols(_phi(from_mlp_params(params, beta), x.T, beta, activation))   # Z_l [N, n_l]
    cnt, dom, gain = [], [], []
    for ll in range(1, len(params)):
        A = activation(Zs[ll - 1])                       # [N, n_{l-1}]
        m = jnp.mean(A, axis=0)
        m = m / (jnp.linalg.norm(m) + 1e-30)
        w = params[ll]["w"]                              # [n_{l-1}, n_l]
        wp = w - jnp.outer(m, m @ w)                     # (I - m m^T) w
        s = svdvals(wp)
        cnt.append(_finite_or_nan(probes.count_near_one(s, tol), wp))
        dom.append(_finite_or_nan(jnp.sum(s > dominant_above), wp))
        gain.append(jnp.linalg.norm(m @ w))
    return {"count_near_one": jnp.stack(cnt), "dominant": jnp.stack(dom),
            "mean_gain": jnp.stack(gain)}


def _checked_inputs(params: Params, x, rel_tol, activation, fn: str):
    """The shared checks of the rank diagnostics (``x``, ``params`` and their fit, ``rel_tol``
    >= 0, finite ``params``) and the activation resolved; returns ``(x, activation)``."""
    x = check_x(x, fn)
    check_params(params, x.shape[1], fn)
    check_scalar(rel_tol, "rel_tol", fn)
    check_number(rel_tol, "rel_tol", fn=fn, min_value=0.0)
    check_params_finite(params, fn)
    return x, as_activation(activation, fn)


def representation_dims(params: Params, x: ArrayLike, *, beta: ArrayLike = 1.0,
                        activation: Activation = jax.nn.relu, rel_tol: float = 1e-2,
                        centre: bool = True) -> dict:
    """Dimension of each hidden representation along depth.

    For each ``Z_l`` ``[N, n_l]`` (centred over the samples if ``centre``): the entropy
    effective rank of its singular values (``layerlab.probes.effective_rank``) and the numerical
    rank ``#{i : s_i > rel_tol * s_1}``.

    Args:
      params: ``layerlab.nets`` params.  x: ``[N, n_0]`` (rows are samples).

    Returns:
      ``{"effective_rank": [L], "numerical_rank": [L]}`` (``l = 1..L``, the last being the
      output); the numerical rank is a float (whole numbers), both NaN for a non-finite ``Z_l``
      under ``jit``/``vmap`` (eagerly non-finite ``params`` raise a ``ValueError``).

    References:
      (B) Theorem 7 and Corollary 8.
    """
    check_beta(beta, "representation_dims")
    x, activation = _checked_inputs(params, x, rel_tol, activation, "representation_dims")
    Zs = _phi(from_mlp_params(params, beta), x.T, beta, activation)  # paper A: [n_l, N]
    er, nr = [], []
    for Z in Zs:
        if centre:
            Z = Z - jnp.mean(Z, axis=1, keepdims=True)
        s = svdvals(Z)
        er.append(_finite_or_nan(probes.effective_rank(s), Z))
        nr.append(_finite_or_nan(jnp.sum(s > rel_tol * s[0]), Z))
    return {"effective_rank": jnp.stack(er), "numerical_rank": jnp.stack(nr)}


def _network_fn_paper(Ws, x, beta, activation) -> Array:
    """``f(x)`` ``[B, n_L]`` of paper A's weights ``Ws`` for rows ``x [B, n_0]``."""
    return _phi(Ws, x.T, beta, activation)[-1].T


def network_fn(params: Params, x: Array, *, beta: ArrayLike = 1.0,
               activation: Activation = jax.nn.relu) -> Array:
    """The network function on a batch: ``x [B, n_0] -> [B, n_L]``.

    .. math:: f(x) = Z_L = \\sigma(\\cdots\\sigma(x w_1 + 1 b_1^T)\\cdots) w_L + 1 b_L^T

    Equals ``layerlab.nets.mlp_apply(params, x)`` for ``beta > 0`` (``beta = 0`` drops the
    biases).

    Args:
      params: ``layerlab.nets`` params.  x: ``[B, n_0]`` (rows are samples).

    Returns:
      ``[B, n_L]``.

    References:
      (A) Section 2 (the network function ``f_W``).
    """
    check_beta(beta, "network_fn")
    x = check_x(x, "network_fn")
    check_params(params, x.shape[1], "network_fn")
    return _network_fn_paper(from_mlp_params(params, beta), x, beta,
                             as_activation(activation, "network_fn"))


def jacobian_stats(params: Params, x: Array, *, beta: ArrayLike = 1.0,
                   activation: Activation = jax.nn.relu, rel_tol: float = 1e-2) -> dict:
    """Rank and log pseudo-determinant of the input-output Jacobian, averaged over inputs.

    .. math:: \\operatorname{rank} J f(x_i) = \\#\\{j : s_j > \\text{rel\\_tol}\\, s_1\\},\\qquad
              \\log|J f(x_i)|_+ = \\sum_{j \\le \\text{rank}} \\log s_j

    Args:
      params: ``layerlab.nets`` params.  x: ``[B, n_0]`` (rows are samples).

    Returns:
      ``{"rank": [], "log_pdet": [], "rank_per_point": [B], "singular_values": [B, r]}``;
      ``rank_per_point`` is a float (whole numbers); a point whose Jacobian or output is not
      finite (non-finite weights or an overflow, under ``jit``/``vmap``) has NaN rank, log
      pseudo-determinant and singular values, and so have the means (eagerly non-finite
      ``params`` raise a ``ValueError``).

    References:
      (B) Theorem 3 (R^(1) >= log pseudo-determinant of the Jacobian on the data).
    """
    check_beta(beta, "jacobian_stats")
    x, activation = _checked_inputs(params, x, rel_tol, activation, "jacobian_stats")
    Ws = from_mlp_params(params, beta)

    def one(xi):
        def f(v):
            out = _network_fn_paper(Ws, v[None], beta, activation)[0]
            return out, out
        return jax.jacfwd(f, has_aux=True)(xi)           # (J [n_L, n_0], f(x_i) [n_L])

    J, out = jax.vmap(one)(x)                            # [B, n_L, n_0], [B, n_L]
    s = svdvals(J)
    keep = s > rel_tol * s[:, :1]
    # a NaN output with a finite Jacobian (a NaN unit behind a ReLU: relu'(NaN) = 0) too
    ok = jnp.all(jnp.isfinite(J), axis=(1, 2)) & jnp.all(jnp.isfinite(out), axis=1)   # [B]
    rank = jnp.where(ok, jnp.sum(keep, axis=1).astype(s.dtype), jnp.nan)
    logp = jnp.sum(jnp.where(keep, jnp.log(jnp.where(keep, s, 1.0)), 0.0), axis=1)
    logp = jnp.where(ok, logp, jnp.nan)
    s = jnp.where(ok[:, None], s, jnp.nan)
    return {"rank": jnp.mean(rank), "log_pdet": jnp.mean(logp),
            "rank_per_point": rank, "singular_values": s}


def _ntk_trace_paper(Ws, x, beta, activation, chunk_size=None) -> Array:
    """``(1/B) sum_i ||d f(x_i) / d W||_F^2`` for paper A's weights ``Ws`` and rows ``x``."""
    def one(xi):  # the [n_L, ...] Jacobian of one sample's outputs: n_L backward passes
        J = jax.jacrev(lambda W: _network_fn_paper(W, xi[None], beta, activation)[0])(Ws)
        return sum(jnp.sum(j * j) for j in jax.tree.leaves(J))

    per_sample = (jax.vmap(one)(x) if chunk_size is None
                  else jax.lax.map(one, x, batch_size=chunk_size))
    return jnp.mean(per_sample)


def ntk_trace(params: Params, x: Array, *, beta: ArrayLike = 1.0,
              activation: Activation = jax.nn.relu, chunk_size: int | None = None) -> Array:
    """Mean trace of the empirical NTK on the data, ``(1/B) sum_i Tr Theta(x_i, x_i)``.

    .. math:: \\frac1B \\sum_{i=1}^B \\operatorname{Tr}\\Theta(x_i, x_i)
              = \\frac1B \\sum_{i=1}^B \\sum_{a=1}^{n_L}
              \\Big\\|\\frac{\\partial f_a(x_i)}{\\partial W}\\Big\\|_F^2

    with respect to paper A's parameters ``W_l = [w_l^T, b_l / beta]`` (for ``beta = 1`` the
    NTK of ``params``): the squared Frobenius norm of each sample's Jacobian (``jax.jacrev`` of
    a one-sample forward pass), summed.  Cost ``O(B)``: ``n_L`` backward passes per sample and
    never the ``[B, B]`` kernel (``layerlab.kernels.empirical_ntk``, whose diagonal it equals,
    costs ``O(B^2)`` time and memory).  Memory: the per-sample Jacobians, ``B * n_L * P``
    numbers at once (``P`` parameters), or ``chunk_size * n_L * P`` with ``chunk_size``.
    Paper B: of order ``L`` at large learning rates.  jit- and vmap-able.

    Args:
      params: ``layerlab.nets`` params.  x: ``[B, n_0]`` (rows are samples).
      beta, activation: as in :func:`representations`.  Compiled once per shapes,
        activation and ``chunk_size``: pass the activation by name or as the same function
        object (a fresh ``lambda`` per call compiles anew, and the compile cache keeps each
        such function and what it captures alive), as for :func:`forces`; an unhashable
        callable runs eagerly, op by op.
      chunk_size: ``None`` (all samples in one ``vmap``) or the number of samples whose
        Jacobians are held at once (``jax.lax.map`` over chunks).

    Returns:
      scalar.

    References:
      (B) Theorem 7 / Corollary 8 (NTK of order L).
    """
    check_beta(beta, "ntk_trace")
    fn = "ntk_trace"
    x = check_x(x, fn)
    check_params(params, x.shape[1], fn)
    chunk_size = check_int(chunk_size, "chunk_size", fn=fn, min_value=1, allow_none=True)
    check_params_finite(params, fn)
    act = as_activation(activation, fn)
    try:
        hash(act)
    except TypeError:  # an unhashable callable cannot be a static argument: the eager route
        return _ntk_trace_paper(from_mlp_params(params, beta), x, beta, act, chunk_size)
    return _ntk_trace_jit(params, x, beta, activation=act, chunk_size=chunk_size)


@functools.partial(jax.jit, static_argnames=("activation", "chunk_size"))
def _ntk_trace_jit(params, x, beta, *, activation, chunk_size):
    """:func:`ntk_trace` as one program per shapes, activation and chunk size (eagerly, its
    per-sample Jacobians were compiled op by op: ~85 programs for a 3-layer net); under an
    outer ``jit``/``vmap`` it is inlined as before."""
    return _ntk_trace_paper(from_mlp_params(params, beta), x, beta, activation, chunk_size)


def bottleneck_diagnostics(params: Params, x: Array, *, beta: ArrayLike = 1.0,
                           activation: Activation = jax.nn.relu, tol: float = 0.25,
                           rel_tol: float = 1e-2, ntk: bool = True) -> dict:
    """All diagnostics at once (host dict of arrays): weight spectra, counts of singular values
    near 1, representation dimensions, Jacobian rank / log pseudo-determinant, NTK trace.

    Compiled as one program per shapes, ``ntk`` and activation: pass the activation by name
    (``"relu"``, ``"tanh"``: ``ACTIVATIONS``) or as the same function object on every call; a
    fresh ``lambda`` per call compiles anew (a ``functools.partial`` of plain numbers is
    compared by content).

    Args:
      params: ``layerlab.nets`` params.  x: ``[B, n_0]`` (rows are samples).
      activation: a callable or its name in ``ACTIVATIONS``.

    Returns:
      dict of arrays (see the individual functions): ``singular_values``, ``count_near_one``
      ``[L]``, ``effective_rank`` ``[L]``, ``numerical_rank`` ``[L]``, ``jacobian_rank``,
      ``jacobian_log_pdet`` and (``ntk``) ``ntk_trace``; the counts and ranks are floats, NaN
      where undefined under ``jit``/``vmap`` (non-finite weights); eagerly non-finite
      ``params`` raise a ``ValueError`` naming the first non-finite leaf.

    References:
      (B) Theorems 3, 6, 7 and Corollary 8.
    """
    check_beta(beta, "bottleneck_diagnostics")
    x = check_x(x, "bottleneck_diagnostics")
    check_params(params, x.shape[1], "bottleneck_diagnostics")
    check_scalar(tol, "tol", "bottleneck_diagnostics")
    check_number(tol, "tol", fn="bottleneck_diagnostics", min_value=0.0, lo_open=True)
    check_scalar(rel_tol, "rel_tol", "bottleneck_diagnostics")
    check_number(rel_tol, "rel_tol", fn="bottleneck_diagnostics", min_value=0.0)
    check_params_finite(params, "bottleneck_diagnostics")
    activation = as_activation(activation, "bottleneck_diagnostics")  # one static argument
    beta = jnp.asarray(beta, jnp.promote_types(x.dtype, jnp.float32))  # never an integer beta
    return _diagnostics_jit(params, x, tol, rel_tol, beta,
                            activation=activation, ntk=bool(ntk))


@functools.partial(jax.jit, static_argnames=("activation", "ntk"))
def _diagnostics_jit(params, x, tol, rel_tol, beta, *, activation, ntk):
    """:func:`bottleneck_diagnostics` as one program (eagerly, its SVDs, Jacobians and NTK
    compiled op by op: ~6 s for a small net)."""
    out = {"singular_values": layer_singular_values(params, beta=beta),
           "count_near_one": layer_counts_near_one(params, tol=tol, beta=beta)}
    out.update(representation_dims(params, x, beta=beta, activation=activation,
                                   rel_tol=rel_tol))
    js = jacobian_stats(params, x, beta=beta, activation=activation, rel_tol=rel_tol)
    out["jacobian_rank"] = js["rank"]
    out["jacobian_log_pdet"] = js["log_pdet"]
    if ntk:
        out["ntk_trace"] = ntk_trace(params, x, beta=beta, activation=activation)
    return out
