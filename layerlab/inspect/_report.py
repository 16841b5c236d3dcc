r"""Per-layer reports: the four papers' diagnostics on every layer of any model.

Every number is computed by the toolkit's own implementation (no second copy):

=======================  ==================================================================
``dgl_linear``           ``dgl.dgl_linear(H, Y, eps2) / n`` -- DGL@Linear, eq. (6) of
                         Ben-David & Ringel (2019), ridge ``eps2 = ridge_rel * mean diag(H^T H)``
                         (for ``d > n`` on ``H Q``, ``H^T = QR``: the same value, O(d n^2))
``dgl_nngp``             ``dgl.dgl_features(H, Y, dgl.top_kernel_fn(w_var, b_var),
                         eps_rel) / n`` -- DGL (eq. 3) under the NNGP (eq. 2) of the layers
                         above (mean-field variances for MLPs) or of a :class:`TopNetwork`
``cka``                  ``probes.linear_cka(H, H_ref)`` to a reference (Kornblith et al. 2019)
``effective_rank``       ``probes.effective_rank(s)``, ``s`` = singular values of centred ``H``
                         (constant columns exactly 0, as in ``probes.linear_cka``)
``stable_rank``          ``probes.stable_rank(s)`` (same ``s``)
``spectral_norm``        ``s_1(W)`` of each weight kernel read as the linear map it applies,
                         ``[fan_in, fan_out]`` (``probes.singular_values``; conv kernels
                         ``[kh, kw, c_in, c_out]`` as ``[kh kw c_in, c_out]``, attention
                         kernels ``[d, heads, head_dim]`` as ``[d, heads head_dim]``; biases
                         are not weights)
``weight_stable_rank``   ``probes.stable_rank(s(W))``
``near_one``             ``probes.count_near_one(s(W), tol)`` -- paper B's bottleneck signature
                         (Thm. 6 of Jacot 2023)
``ntk_alignment``        ``probes.kernel_alignment(Theta, Theta_ref)`` with
                         ``Theta = kernels.empirical_ntk(apply, params, x[:m])``
``ntk_target_alignment`` ``probes.kernel_alignment(Theta, Y Y^T, centered=True)``
=======================  ==================================================================

Representations ``H [n, ...]`` with more than two axes (convolutions; channels last, or
where ``InspectConfig.channel_axis`` says for a plain-JAX model) are
mean-pooled over the spatial axes (``conv="mean"``), max-pooled (``"max"``) or flattened
(``"flatten"``) to ``[n, d]`` first.  DGL values are per sample (divided by ``n``).
"""
from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import DTypeLike

from layerlab import dgl, kernels, probes
from layerlab._checks import (
    check_array,
    check_choice,
    check_finite,
    check_int,
    check_labels,
    check_number,
    check_scalar,
)
from layerlab._linalg import qr, svdvals
from layerlab.inspect._models import FeaturesFn, Inspectable, _weight_entries, _weight_matrices
from layerlab.probes._cka import _centre_columns

__all__ = [
    "LAYER_DIAGNOSTICS",
    "WEIGHT_DIAGNOSTICS",
    "MODEL_DIAGNOSTICS",
    "DIAGNOSTICS",
    "TopNetwork",
    "InspectConfig",
    "Reference",
    "Report",
    "representations",
    "make_reference",
    "layer_report",
]

LAYER_DIAGNOSTICS = ("dgl_linear", "dgl_nngp", "cka", "effective_rank", "stable_rank")
WEIGHT_DIAGNOSTICS = ("spectral_norm", "weight_stable_rank", "near_one")
MODEL_DIAGNOSTICS = ("ntk_alignment", "ntk_target_alignment")
DIAGNOSTICS = LAYER_DIAGNOSTICS + WEIGHT_DIAGNOSTICS + MODEL_DIAGNOSTICS
#: Computed only when named in ``InspectConfig.diagnostics`` (not in the default set):
#: ``probe_accuracy``, the held-out accuracy of a ridge linear classifier on each layer
#: (needs class labels).
OPTIONAL_DIAGNOSTICS = ("probe_accuracy",)
_LAYER = LAYER_DIAGNOSTICS + OPTIONAL_DIAGNOSTICS
_ORDER = LAYER_DIAGNOSTICS + OPTIONAL_DIAGNOSTICS + WEIGHT_DIAGNOSTICS + MODEL_DIAGNOSTICS
_NEEDS_Y = ("dgl_linear", "dgl_nngp", "ntk_target_alignment", "probe_accuracy")
_NEEDS_REF = ("cka", "ntk_alignment")
_NTK = ("ntk_alignment", "ntk_target_alignment")
_CONV = ("mean", "max", "flatten")
_NTK_METHODS = ("ntk_vp", "jacobian")  # kernels.empirical_ntk's methods


@dataclasses.dataclass(frozen=True)
class TopNetwork:
    r"""The default top network for ``dgl_nngp`` where the model gives no layers above.

    A ReLU network of ``depth`` hidden ReLU layers and a linear readout with fan-in
    variances ``w_var`` and bias variances ``b_var`` on every dense layer; its NNGP (eq. 2 of
    Ben-David & Ringel 2019) is ``dgl.top_kernel(h, w_var=[w_var]*(depth+1),
    b_var=[b_var]*(depth+1))``.  Defaults: one hidden layer, He-like ``w_var = 2``,
    ``b_var = 0`` (the kernel is then homogeneous of degree 2 in ``h``, so with the relative
    noise ``eps_rel`` the DGL does not depend on the scale of the representation).
    """

    depth: int = 1
    w_var: float = 2.0
    b_var: float = 0.0

    def variances(self, dtype: DTypeLike = jnp.float32) -> dgl.LayerVariances:
        if self.depth < 0:
            raise ValueError(f"TopNetwork.depth must be >= 0, got {self.depth}.")
        k = self.depth + 1
        return dgl.LayerVariances(jnp.full((k,), self.w_var, dtype), jnp.full((k,), self.b_var,
                                                                            dtype))


@dataclasses.dataclass(frozen=True)
class InspectConfig:
    """Settings of a report (hashable: can be a static argument).

    Attributes:
      diagnostics: a tuple of names from :data:`DIAGNOSTICS` to compute (default all).  A
        single string is refused (``TypeError``): wrap it, ``("cka",)``.
      layers: a tuple of representation names to report, in this order (default: all of
        ``features``); a single string is refused likewise.
      conv: ``"mean"`` | ``"max"`` | ``"flatten"`` for representations with spatial axes.
      channel_axis: the channel axis of representations with spatial axes, counted on the
        whole ``[n, ...]`` array: ``-1`` (default: channels last, ``[n, H, W, C]``, flax's
        layout) or ``1`` (channels first, ``[n, C, H, W]``, the default layout of
        ``jax.lax.conv_general_dilated``); ``"mean"`` and ``"max"`` pool over every other
        axis but the samples'.  It applies to models of unknown layout (plain JAX: adapters
        ``from_features``, ``from_layers``); the flax adapters' maps are channels-last
        whatever it says (``Inspectable.channels_last``).  A 4-D representation that looks
        channels-first under ``-1`` (its last two axes equal, its axis 1 not) is warned
        about.
      num_classes: ``C`` for integer labels ``y [n]`` (turned into zero-mean one-hot targets,
        the DGL paper's encoding); not needed for ``y [n, C]`` targets.
      eps_rel: ``dgl_nngp`` noise ``eps^2 = eps_rel * mean diag K`` (``LegoConfig`` default).
      ridge_rel: ``dgl_linear`` ridge ``eps^2 = ridge_rel * mean diag(H^T H)``; ``0`` gives
        the exact eq. (6) (needs ``d < n`` and full-rank ``H``).
      top: default :class:`TopNetwork` for layers the model gives no top variances for.
      near_one_tol: tolerance of ``near_one`` (``> 0``).
      ntk_samples: NTK on the first ``m`` probe samples, an integer ``m >= 2`` (default all
        ``n``; an ``m`` above ``n`` uses all ``n`` with a warning; the NTK costs ``m * k``
        Jacobian-vector products).
      ntk_method: ``"ntk_vp"`` or ``"jacobian"`` (``kernels.empirical_ntk``).
      probe_holdout: ``probe_accuracy``'s held-out fraction of the probe batch (``0 < f < 1``,
        default 0.25): ``round(f n)`` samples, a fixed-seed random subset (the same in every
        report on ``n`` samples), are held out; the classifier is fitted on the rest (at
        least 2).

    Every setting is checked when the config is made (``TypeError`` / ``ValueError`` naming
    ``InspectConfig`` and the field), not when a report runs.
    """

    diagnostics: tuple[str, ...] = DIAGNOSTICS
    layers: tuple[str, ...] | None = None
    conv: str = "mean"
    num_classes: int | None = None
    eps_rel: float = 0.05
    ridge_rel: float = 1e-4
    top: TopNetwork = TopNetwork()
    near_one_tol: float = 0.1
    ntk_samples: int | None = None
    ntk_method: str = "ntk_vp"
    channel_axis: int = -1
    probe_holdout: float = 0.25

    def __post_init__(self):
        for field in ("diagnostics", "layers"):
            v = getattr(self, field)
            if isinstance(v, str):
                raise TypeError(
                    f"InspectConfig: {field} must be a tuple of names, got str {v!r} (wrap "
                    f"it: ({v!r},)).")
        diags = tuple(self.diagnostics)
        bad = [d for d in diags if d not in DIAGNOSTICS + OPTIONAL_DIAGNOSTICS]
        if bad:
            raise ValueError(
                f"InspectConfig: unknown diagnostics {bad}; choose from "
                f"{DIAGNOSTICS + OPTIONAL_DIAGNOSTICS}.")
        object.__setattr__(self, "diagnostics", diags)
        if self.layers is not None:
            object.__setattr__(self, "layers", tuple(self.layers))
            if not self.layers:
                raise ValueError(
                    "InspectConfig: layers must name at least one layer, got () (an empty "
                    "report); leave it None for all of features' layers.")
        if self.conv not in _CONV:
            raise ValueError(f"InspectConfig: conv must be one of {_CONV}, got {self.conv!r}.")
        object.__setattr__(self, "channel_axis",
                           check_int(self.channel_axis, "channel_axis", fn="InspectConfig"))
        if self.channel_axis == 0:
            raise ValueError("InspectConfig: channel_axis must not be 0 (axis 0 holds the "
                             "samples); -1 for channels last, 1 for channels first.")
        for name in ("ridge_rel", "eps_rel", "near_one_tol", "probe_holdout"):
            check_scalar(getattr(self, name), name, "InspectConfig")
        check_number(self.probe_holdout, "probe_holdout", fn="InspectConfig", min_value=0.0,
                     max_value=1.0, lo_open=True, hi_open=True)
        check_number(self.ridge_rel, "ridge_rel", fn="InspectConfig", min_value=0.0)
        check_number(self.eps_rel, "eps_rel", fn="InspectConfig", min_value=0.0, lo_open=True)
        check_number(self.near_one_tol, "near_one_tol", fn="InspectConfig", min_value=0.0,
                     lo_open=True)
        check_int(self.num_classes, "num_classes", fn="InspectConfig", min_value=1,
                  allow_none=True)
        check_int(self.ntk_samples, "ntk_samples", fn="InspectConfig", min_value=2,
                  allow_none=True)
        check_choice(self.ntk_method, "ntk_method", _NTK_METHODS, fn="InspectConfig")
        # numpy / jax scalars as Python numbers: the config stays hashable (a static argument)
        for field in ("num_classes", "ntk_samples"):
            if getattr(self, field) is not None:
                object.__setattr__(self, field, int(getattr(self, field)))
        for field in ("eps_rel", "ridge_rel", "near_one_tol", "probe_holdout"):
            object.__setattr__(self, field, float(getattr(self, field)))
        if not isinstance(self.top, TopNetwork):
            raise TypeError(
                f"InspectConfig: top must be an inspect.TopNetwork, got {type(self.top).__name__}.")
        check_int(self.top.depth, "top.depth", fn="InspectConfig", min_value=0)
        check_number(self.top.w_var, "top.w_var", fn="InspectConfig", min_value=0.0,
                     lo_open=True)
        check_number(self.top.b_var, "top.b_var", fn="InspectConfig", min_value=0.0)


class Reference(NamedTuple):
    """What the report compares against (from :func:`make_reference`).

    Attributes:
      representations: ``{name: [n, d]}`` reduced reference representations of the probe
        batch (for ``cka``), or ``None``.
      ntk: ``[m, m]`` reference empirical NTK on the first ``m`` probe samples, or ``None``.
    """

    representations: Mapping[str, jax.Array] | None
    ntk: jax.Array | None


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Report:
    """One report: diagnostics per layer, per weight kernel and for the whole model.

    A pytree (names static), so it can leave ``jit``.

    Attributes:
      layers: ``L`` representation names.  weights: ``W`` weight-kernel names.
      layer_values: ``{diagnostic: [L]}``.  weight_values: ``{diagnostic: [W]}``.
      spectra: ``W`` descending singular-value vectors (empty without weight diagnostics).
      model_values: ``{diagnostic: scalar}`` (NTK alignments, ``nonfinite_layers``).
    """

    layer_values: dict[str, jax.Array]
    weight_values: dict[str, jax.Array]
    spectra: tuple[jax.Array, ...]
    model_values: dict[str, jax.Array]
    layers: tuple[str, ...] = dataclasses.field(metadata=dict(static=True), default=())
    weights: tuple[str, ...] = dataclasses.field(metadata=dict(static=True), default=())

    def metrics(self) -> dict[str, jax.Array]:
        """Flat ``{"diagnostic/name": scalar}`` (what a ``loop.fit`` ``eval_fn`` returns)."""
        out = {}
        for d, v in self.layer_values.items():
            out.update({f"{d}/{n}": v[i] for i, n in enumerate(self.layers)})
        for d, v in self.weight_values.items():
            out.update({f"{d}/{n}": v[i] for i, n in enumerate(self.weights)})
        out.update(self.model_values)
        return out

    def table(self) -> str:
        """A plain-text table (layers x diagnostics, then weights, then model values)."""
        lines = []

        def block(names, values):
            if not values:
                return
            cols = list(values)
            w = max([len(n) for n in names] + [5])
            lines.append(" " * w + "  " + "  ".join(f"{c:>14s}" for c in cols))
            for i, n in enumerate(names):
                row = "  ".join(f"{float(np.asarray(values[c])[i]):14.4g}" for c in cols)
                lines.append(f"{n:<{w}s}  {row}")

        rank = {d: i for i, d in enumerate(_ORDER)}

        def order(v):
            return dict(sorted(v.items(), key=lambda kv: rank.get(kv[0], len(rank))))

        block(self.layers, order(self.layer_values))
        block(self.weights, order(self.weight_values))
        for k, v in self.model_values.items():
            lines.append(f"{k}: {float(np.asarray(v)):.4g}")
        return "\n".join(lines)


# ----------------------------------------------------------------------------- helpers
def _is_concrete(*xs) -> bool:
    return not any(isinstance(a, jax.core.Tracer) for a in jax.tree_util.tree_leaves(xs))


def _as_model(model) -> Inspectable:
    if isinstance(model, Inspectable):
        return model
    mods = [c.__module__ for c in type(model).__mro__]
    for pkg, adapter in (("flax.linen", "from_linen"), ("flax.nnx", "from_nnx")):
        if any(m.startswith(pkg) for m in mods):
            raise TypeError(
                f"model: a {pkg} module; wrap it with its adapter: "
                f"layer_report(inspect.{adapter}(model), ...).")
    if callable(model):
        return Inspectable(features=model)
    raise TypeError(
        "model must be a layerlab.inspect.Inspectable (from_linen, from_nnx, from_mlp, ...) or "
        f"a features(params, x) -> dict callable; got {type(model).__name__}."
    )


def _probe_batch(x: Any, fn: str) -> jax.Array:
    """``x`` as one ``[n, ...]`` array; a dict, tuple or list of arrays (a multi-input model's
    batch) is refused (``jnp.asarray`` stacked it or failed inside jax), so are ``None``, a
    string, a ragged list and (when concrete) NaN/inf entries, each naming ``x``."""
    if isinstance(x, (Mapping, tuple)) or (
            isinstance(x, list) and any(hasattr(e, "shape") for e in x)):
        got = jax.tree.map(lambda a: list(jnp.shape(a)), x)
        raise TypeError(
            f"x must be a single probe batch array [n, ...] (samples as rows), got a "
            f"{type(x).__name__} {got}.  For a model with several inputs, wrap it so that the "
            "probe batch is one array: from_features(lambda params, xb: ..., apply=...) taking "
            "one [n, ...] array (e.g. the inputs concatenated along the last axis, or sample "
            "indices into inputs it closes over).")
    x = check_array(x, "x", fn=fn, kind=None)
    check_finite(x, "x", fn=fn, hint="the probe batch must be finite; clean or impute it.")
    return x


def _check_config(config: Any) -> None:
    if not isinstance(config, InspectConfig):
        raise TypeError(
            f"config must be an inspect.InspectConfig, got {type(config).__name__}; build it "
            "with InspectConfig(...) (a dict d: InspectConfig(**d)).")


def _check_reference(reference: Any) -> None:
    if reference is not None and not isinstance(reference, Reference):
        raise TypeError(
            f"reference must be an inspect.Reference or None, got {type(reference).__name__}; "
            "build it with make_reference(model, params_ref, x, config=config) (the reference "
            "params themselves are not a reference).")


def _reduce(h: jax.Array, conv: str, channel_axis: int = -1, name: str = "",
            warn_layout: bool = False) -> jax.Array:
    """A representation ``[n, ...]`` as ``[n, d]``: pooled over every axis but the samples'
    and ``channel_axis`` (``conv`` ``"mean"`` / ``"max"``), or flattened.  ``warn_layout``
    (a model of unknown layout): warn about a 4-D map that looks channels-first."""
    if h.ndim <= 2:
        return h
    if conv == "flatten":  # any layout: a permutation of the features
        return h.reshape(h.shape[0], -1)
    if not -h.ndim <= channel_axis < h.ndim or channel_axis % h.ndim == 0:
        raise ValueError(
            f"InspectConfig.channel_axis = {channel_axis} is not a feature axis of "
            f"representation {name!r} of shape {tuple(h.shape)} (axis 0 holds the samples).")
    if (warn_layout and channel_axis == -1 and h.ndim == 4
            and h.shape[-1] == h.shape[-2] != h.shape[1]):
        warnings.warn(
            f"representation {name!r} has shape {tuple(h.shape)}: it looks channels-first "
            f"([n, C, H, W], jax.lax.conv_general_dilated's default layout, C = {h.shape[1]}) "
            "but is read channels-last (InspectConfig.channel_axis = -1, flax's layout); if "
            "so, set InspectConfig(channel_axis=1).", RuntimeWarning, stacklevel=4)
    c = channel_axis % h.ndim
    axes = tuple(a for a in range(1, h.ndim) if a != c)  # the spatial axes
    return jnp.mean(h, axis=axes) if conv == "mean" else jnp.max(h, axis=axes)


def _check_probe_n(x: jax.typing.ArrayLike) -> None:
    """The diagnostics (DGL, CKA, ranks of centred representations) need n >= 2 samples."""
    shape = jnp.shape(x)
    if len(shape) >= 1 and shape[0] < 2:
        raise ValueError(
            f"x: the probe batch needs at least 2 samples (rows) for the diagnostics (DGL, CKA, "
            f"ranks of centred representations), got shape {tuple(shape)}.")


def _check_y(y: Any, fn: str) -> jax.Array:
    """``y`` as an array: not ``None``, a string or a ragged list, not complex (its imaginary
    part would be dropped) and, when concrete, without NaN/inf entries."""
    y = check_array(y, "y", fn=fn, kind=None)
    if jnp.issubdtype(y.dtype, jnp.complexfloating):
        raise TypeError(f"{fn}: y must hold real targets or integer labels, got dtype "
                        f"{y.dtype}.")
    check_finite(y, "y", fn=fn, hint="the targets must be finite; clean or impute them.")
    return y


def _check_samples(x: jax.Array, y: Any) -> None:
    """``y`` (if given) has the ``n = x.shape[0]`` samples of ``x``, checked before the model
    runs.  A 1-D ``x`` of another ``n`` is blamed, as a single sample without its batch axis
    (a 1-D ``x`` is a valid batch of one scalar per sample: not refused on its own)."""
    ys = tuple(jnp.shape(y)) if y is not None else ()
    n = x.shape[0]
    if not ys or ys[0] == n:
        return
    if x.ndim == 1:
        raise ValueError(
            f"x: the probe batch has n = {n} samples (the rows of x, shape {tuple(x.shape)}), "
            f"but y has {ys[0]} (shape {ys}); x is [n, ...] with samples as rows.  One sample "
            f"x[i] lacks the batch axis: x[None] (the reports need n >= 2: a batch x[i:j]).")
    transposed = (f"  x looks transposed (its last axis has y's {ys[0]}): samples as rows, "
                  "x.T?" if x.ndim == 2 and x.shape[-1] == ys[0] else "")
    raise ValueError(f"y: expected [n] labels or [n, C] targets with n = {n}, got {ys} (n is "
                     f"the rows of x, shape {tuple(x.shape)}: samples as rows).{transposed}")


def _one_sample_hint(x: jax.Array) -> str:
    """For an error about representations of a 1-D ``x``: it may be one sample."""
    if x.ndim != 1:
        return ""
    return (f"  x has shape {tuple(x.shape)}: a single sample without its batch axis?  x is "
            "[n, ...] with samples as rows: x[None] for one sample.")


def representations(model: Inspectable | FeaturesFn, params: Any, x: jax.typing.ArrayLike, *,
                    config: InspectConfig = InspectConfig()) -> dict[str, jax.Array]:
    """Validated, reduced per-layer representations ``{name: [n, d]}`` of the probe batch.

    Args:
      model: :class:`Inspectable` or a ``features(params, x)`` callable.
      params: the model's parameters.  x: ``[n, ...]`` probe batch.
      config: ``layers`` (selection and order) and ``conv``, ``channel_axis`` (reduction) are used.

    Returns:
      ``{name: [n, d]}`` in layer order.

    Raises:
      TypeError: ``features`` did not return a mapping of arrays.
      ValueError: a representation has no sample axis or a sample count other than ``n``,
        holds NaN/inf (checked when called outside ``jit``), or ``config.layers`` names an
        unknown layer.
    """
    model = _as_model(model)
    _check_config(config)
    x = _probe_batch(x, "representations")
    if x.ndim < 1:
        raise ValueError(f"x must be a probe batch [n, ...] with samples as rows, got {x.shape}.")
    n = x.shape[0]
    feats = model.features(params, x)
    if not isinstance(feats, Mapping):
        raise TypeError(
            f"features(params, x) must return a dict {{name: [n, ...]}}, got "
            f"{type(feats).__name__}."
        )
    if not feats:
        raise ValueError("features(params, x) returned no representations (an empty dict).")
    names = list(feats)
    if config.layers is not None:
        unknown = [k for k in config.layers if k not in feats]
        if unknown:
            raise ValueError(
                f"layers: unknown layer name(s) {unknown}; features(params, x) gives {names}."
            )
        names = list(config.layers)
    out = {}
    for k in names:
        v = feats[k]
        if isinstance(v, (Mapping, tuple, list)):
            raise TypeError(
                f"features: representation {k!r} is a {type(v).__name__}; return a flat dict "
                "{name: array [n, ...]} (e.g. join nested names with '/', one entry per tuple "
                "element).")
        h = jnp.asarray(v)
        if h.ndim < 2 or h.shape[0] != n:
            hint = ""
            if h.ndim >= 3 and h.shape[1] == n:
                hint = (
                    f"  Its leading axis of size {h.shape[0]} may be a stacked layer axis "
                    f"(a block repeated {h.shape[0]} times by nn.scan, nnx.scan or nnx.vmap, "
                    f"not recognised by the adapter): report one block's {k!r}[i] through "
                    "from_features, or leave it out with InspectConfig(layers=...).")
            raise ValueError(
                f"features: representation {k!r} has shape {h.shape}; expected [n, ...] with "
                f"n = {n} samples (the rows of x) and at least one feature axis.{hint}"
                f"{_one_sample_hint(x)}"
            )
        if _is_concrete(h) and not bool(jnp.all(jnp.isfinite(h))):
            bad = int(np.size(h) - np.count_nonzero(np.isfinite(np.asarray(h))))
            raise ValueError(
                f"features: representation {k!r} has {bad} non-finite (NaN/inf) entries; check "
                "params (a diverged run?) and x."
            )
        # a model of known layout (the flax adapters: channels last) ignores channel_axis
        out[k] = _reduce(h, config.conv, -1 if model.channels_last else config.channel_axis,
                         k, warn_layout=not model.channels_last)
    return out


def _targets(y, n: int, config: InspectConfig, fn: str) -> jax.Array:
    """``y`` (already checked by :func:`_check_y` at the public entry) as ``[n, C]``."""
    y = jnp.asarray(y)
    given = y.shape
    if y.dtype == jnp.bool_:
        raise TypeError(
            f"y: boolean array of shape {given}; pass binary labels as integers "
            "(y.astype(int), with InspectConfig(num_classes=2)) or targets as floats.")
    if y.ndim != 1 and jnp.issubdtype(y.dtype, jnp.integer):
        raise ValueError(
            f"y: integer array of shape {given}; pass class labels as [n] "
            "(e.g. y.ravel()) or regression / one-hot targets as a float [n, C] array."
        )
    c = config.num_classes
    if c is not None and jnp.issubdtype(y.dtype, jnp.floating):
        # class labels given as floats: check_labels' rule (floats holding whole numbers are
        # refused), so that [n] floats are not taken as one regression target
        if y.ndim == 1 or (y.ndim == 2 and y.shape[1] == 1 and c != 1):
            raise TypeError(
                f"y: expected integer class labels [n] with InspectConfig(num_classes={c}) "
                f"(or float targets [n, {c}]), got a {y.dtype} array of shape {given}: cast "
                "to int (y.astype(int).ravel()); floats holding whole numbers are refused, as "
                "they would be read as one regression target.")
        if y.ndim == 2 and y.shape[1] != c:
            raise ValueError(
                f"y: float targets of shape {given} have C = {y.shape[1]} columns, but "
                f"InspectConfig(num_classes={c}); pass [n, {c}] targets or set num_classes="
                f"{y.shape[1]} (or None).")
    if y.ndim == 1 and jnp.issubdtype(y.dtype, jnp.integer):
        if c is None:
            raise ValueError(
                "y: integer labels [n] need InspectConfig(num_classes=C) (or pass targets "
                "[n, C])."
            )
        y = check_labels(y, c)  # eager: the range (one_hot would give zero rows outside it)
        y = jax.nn.one_hot(y, c, dtype=jnp.float32) - 1.0 / c
    elif y.ndim == 1:
        y = y[:, None]
    if y.ndim != 2 or y.shape[0] != n:
        raise ValueError(f"y: expected [n] labels or [n, C] targets with n = {n}, got {given}.")
    return y


def _probe_labels(y, config: InspectConfig) -> jax.Array:
    """``probe_accuracy``'s class labels ``[n]``: integer ``y [n]`` as given, float targets
    ``[n, C]`` (one-hot or scores, ``C >= 2``) by their argmax."""
    y = jnp.asarray(y)
    if y.ndim == 1 and jnp.issubdtype(y.dtype, jnp.integer):
        return y
    if y.ndim == 2 and y.shape[1] >= 2:
        return jnp.argmax(y, axis=1)
    raise ValueError(
        f"y: probe_accuracy needs class labels (integer [n], or one-hot / score targets "
        f"[n, C] with C >= 2), got a {y.dtype} array of shape {tuple(y.shape)}; leave "
        "probe_accuracy out of InspectConfig.diagnostics for regression targets.")


def _holdout_mask(n: int, frac: float) -> np.ndarray:
    """``[n]`` bool: ``k = round(frac n)`` (at least 1) held-out samples, drawn without
    replacement by a fixed-seed generator (the same for every call with this ``n`` and
    ``frac``): not every ``(n/k)``-th sample, which aliases with a probe batch ordered
    periodically by class (labels ``0, 1, 0, 1, ...`` held out one class)."""
    k = max(1, int(round(frac * n)))
    if n - k < 2:
        raise ValueError(
            f"x: probe_accuracy holds out {k} of the n = {n} probe samples "
            f"(InspectConfig.probe_holdout={frac}) and fits on the {n - k} left; it needs at "
            "least 2 to fit: pass a larger probe batch or a smaller probe_holdout.")
    held = np.zeros(n, bool)
    held[np.random.default_rng(0).choice(n, size=k, replace=False)] = True
    return held


def _probe_accuracy(h: jax.Array, Y: jax.Array, labels: jax.Array, held: np.ndarray,
                    ridge_rel: float) -> jax.Array:
    """Held-out accuracy of a ridge linear classifier with an unpenalised bias.

    Fitted on the samples ``~held`` to one-hot targets of ``labels`` (``C = Y.shape[1]``
    classes): ``W = argmin ||Tc - Hc W||^2 + eps2 ||W||^2`` with ``Hc``, ``Tc`` centred by their
    fit-split means (the bias) and ``eps2 = ridge_rel * sum(Hc^2) / d`` on the centred fit
    split; ``ridge_rel = 0`` takes the minimum-norm least-squares ``W`` (singular values below
    numpy's ``lstsq`` cut-off dropped).  Solved through the SVD ``Hc = U S V^T``
    (``W = V S/(S^2 + eps2) U^T Tc``): stable for wide, collapsed layers, where a Cholesky of
    ``Hc^T Hc + eps2 I`` in float32 is not.  A held-out sample is predicted as the argmax of
    ``(h - mean) W + mean(T)``: sklearn's ``RidgeClassifier(alpha=eps2)``.  NaN when ``h`` or
    the predictions are not finite (a diverged layer under ``jit``).
    """
    fit = ~held
    hf, hh = h[fit], h[held]
    mu = hf.mean(0, keepdims=True)
    hf, hh = hf - mu, hh - mu
    T = jax.nn.one_hot(labels, Y.shape[1], dtype=h.dtype)
    Tf = T[fit]
    tm = Tf.mean(0, keepdims=True)
    Tf = Tf - tm
    nf, d = hf.shape
    finite = jnp.all(jnp.isfinite(h))
    hs = jnp.where(finite, hf, jnp.zeros_like(hf))  # the SVD never sees a NaN
    u, sv, vt = jnp.linalg.svd(hs, full_matrices=False)
    if ridge_rel == 0.0:
        cut = max(nf, d) * jnp.finfo(h.dtype).eps * sv[0]
        coef = jnp.where(sv > cut, 1.0 / jnp.where(sv > cut, sv, 1.0), 0.0)
    else:
        eps2 = ridge_rel * jnp.sum(hs * hs) / d
        # a constant (dead) layer: every singular value is 0 and its prediction the fit
        # split's mean target (the majority class)
        coef = jnp.where(sv > 0, sv / (sv * sv + jnp.where(eps2 > 0, eps2, 1.0)), 0.0)
    pred = (hh @ vt.T) @ (coef[:, None] * (u.T @ Tf)) + tm
    hit = jnp.argmax(pred, axis=1) == labels[held]
    acc = jnp.mean(hit.astype(h.dtype))
    return jnp.where(finite & jnp.all(jnp.isfinite(pred)), acc, jnp.nan)


def _report_diagnostics(config: InspectConfig, reference: Any) -> list[str]:
    """The diagnostics a report computes: those that need a reference are dropped without
    one, unless that leaves none of those asked for (an empty report): then an error."""
    diags = [d for d in config.diagnostics if reference is not None or d not in _NEEDS_REF]
    if config.diagnostics and not diags:
        raise ValueError(
            f"reference: the diagnostics asked for, {list(config.diagnostics)}, all compare "
            "against a reference and none was given (the report would be empty); pass "
            "reference=make_reference(model, params_ref, x, config=config) or ask for other "
            "diagnostics in InspectConfig.diagnostics.")
    return diags


def _numeric_leaf(leaf: Any) -> bool:
    """An array or number the NTK can differentiate or hold fixed (a PRNG key, a tracer,
    a numpy scalar), not a string, a numpy string or an object."""
    if isinstance(leaf, jax.Array):
        return True
    try:
        return np.result_type(leaf).kind in "biufc"
    except TypeError:
        return False


def _ntk(model: Inspectable, params, x, config: InspectConfig) -> jax.Array:
    if model.apply is None:
        raise ValueError(
            "model: the NTK diagnostics need the model's outputs; build the Inspectable with "
            "apply=... (from_features(..., apply=f)) or drop 'ntk_alignment' and "
            "'ntk_target_alignment' from InspectConfig.diagnostics."
        )
    m = x.shape[0] if config.ntk_samples is None else min(config.ntk_samples, x.shape[0])
    if config.ntk_samples is not None and config.ntk_samples > x.shape[0]:
        warnings.warn(f"InspectConfig.ntk_samples = {config.ntk_samples} exceeds the {x.shape[0]} "
                      f"probe samples; the NTK uses all {x.shape[0]}.", stacklevel=3)
    if model.trainable is None:  # every leaf is differentiated: non-arrays cannot be
        bad = [jax.tree_util.keystr(path) for path, leaf in
               jax.tree_util.tree_leaves_with_path(params)
               if not _numeric_leaf(leaf)]
        if bad:
            raise TypeError(
                f"params: the NTK diagnostics differentiate every leaf of params, but "
                f"params{bad[0]} is not an array ({len(bad)} such leaves: "
                f"{', '.join('params' + b for b in bad[:4])}); keep settings such as "
                "activation names out of params (close over them in features/apply), give "
                "the Inspectable a trainable= split (Inspectable.trainable), or drop "
                "'ntk_alignment' and 'ntk_target_alignment' from InspectConfig.diagnostics.")
    out = jax.eval_shape(model.apply, params, x[:m])
    if not (isinstance(out, jax.ShapeDtypeStruct) and out.ndim in (1, 2) and out.shape[0] == m):
        got = jax.tree.map(lambda a: list(a.shape), out)
        got = (f"shape {got}" if isinstance(got, list) else f"a {type(out).__name__} {got}")
        raise ValueError(
            f"model.apply(params, x) must return the model's outputs as one [n, k] (or [n]) "
            f"array for the NTK diagnostics; on {m} samples it returned {got}.  For a model "
            "with several outputs pick the array with the adapter's output= (e.g. "
            "from_linen(model, output=0), from_nnx(model, output='logits'), "
            "from_features(features, apply=f, output=0) or "
            "output=lambda out: out[0]), or drop 'ntk_alignment' and 'ntk_target_alignment' "
            "from InspectConfig.diagnostics.")
    if model.trainable is None:
        return kernels.empirical_ntk(model.apply, params, x[:m], method=config.ntk_method)
    theta, rebuild = model.trainable(params)  # non-trainable state (BatchNorm stats) held fixed
    return kernels.empirical_ntk(lambda t, xx: model.apply(rebuild(t), xx), theta, x[:m],
                                 method=config.ntk_method)


def make_reference(
    model: Inspectable | FeaturesFn,
    params: Any,
    x: jax.typing.ArrayLike,
    *,
    config: InspectConfig = InspectConfig(),
    rename: Mapping[str, str] | None = None,
) -> Reference:
    """Reference representations (and NTK) for ``cka`` / ``ntk_alignment``.

    The same model at initialisation or at another checkpoint, or another model whose layers
    are mapped to ours with ``rename`` (``{their name: our name}``).

    Args:
      model: :class:`Inspectable` or ``features`` callable of the reference model.
      params: its parameters.  x: ``[n, ...]`` the *same* probe batch as the reports.
      config: the reports' config (``conv``, ``channel_axis``, ``ntk_samples``,
        ``ntk_method``); the reference keeps all of its layers.
      rename: optional name map applied to the reference's layers.

    Returns:
      :class:`Reference`.
    """
    model = _as_model(model)
    _check_config(config)
    x = _probe_batch(x, "make_reference")
    _check_probe_n(x)
    reps = representations(model, params, x, config=dataclasses.replace(config, layers=None))
    if rename:
        reps = {rename.get(k, k): v for k, v in reps.items()}
    want_ntk = any(d in config.diagnostics for d in _NTK) and model.apply is not None
    ntk = _ntk(model, params, x, config) if want_ntk else None
    return Reference(reps, ntk)


# ----------------------------------------------------------------------------- report
def layer_report(
    model: Inspectable | FeaturesFn,
    params: Any,
    x: jax.typing.ArrayLike,
    y: jax.typing.ArrayLike | None = None,
    *,
    reference: Reference | None = None,
    config: InspectConfig = InspectConfig(),
) -> Report:
    r"""The per-layer report of ``model`` at ``params`` on the probe batch ``x``.

    Pure and jit-able (close over ``model`` and ``config``; see :func:`monitor` for training).
    Diagnostics and their formulas: see the module docstring.

    Args:
      model: :class:`Inspectable` (``from_linen``, ``from_nnx``, ``from_mlp``, ...) or a
        ``features(params, x) -> {name: [n, ...]}`` callable.
      params: the model's parameters.
      x: ``[n, ...]`` probe batch (samples as rows).
      y: ``[n, C]`` targets or ``[n]`` integer labels (with ``config.num_classes``); needed
        by ``dgl_linear``, ``dgl_nngp`` and ``ntk_target_alignment``.  Its ``n`` is checked
        against ``x``'s before the model runs (a 1-D ``x`` of another ``n`` is blamed: one
        sample without its batch axis).
      reference: :func:`make_reference` output; needed by ``cka`` and ``ntk_alignment``
        (those are skipped when ``reference`` is ``None``).
      config: :class:`InspectConfig`.

    Returns:
      :class:`Report`.

    Examples:
      Two diagnostics of a small MLP's hidden layers; against itself as the reference each
      layer has CKA 1:

      >>> import jax
      >>> from layerlab import inspect, nets
      >>> x = jax.random.normal(jax.random.key(0), (16, 5))          # probe batch [n, d]
      >>> y = (x[:, 0] > 0).astype(int)
      >>> params = nets.mlp_init(jax.random.key(1), [5, 8, 8, 2])
      >>> model = inspect.from_mlp()
      >>> cfg = inspect.InspectConfig(diagnostics=("dgl_linear", "cka"), num_classes=2)
      >>> ref = inspect.make_reference(model, params, x, config=cfg)
      >>> rep = inspect.layer_report(model, params, x, y, reference=ref, config=cfg)
      >>> rep.layers, rep.layer_values["dgl_linear"].shape
      (('hidden_1', 'hidden_2'), (2,))
      >>> [round(v, 3) for v in rep.layer_values["cka"].tolist()]
      [1.0, 1.0]

    References:
      DGL: eqs. (2), (3), (6) of Ben-David & Ringel (2019).  CKA: Kornblith et al. (2019).
      Singular values near 1: Thm. 6 of Jacot (2023).  NTK: Jacot et al. (2018).
    """
    model = _as_model(model)
    _check_config(config)
    _check_reference(reference)
    x = _probe_batch(x, "layer_report")
    diags = _report_diagnostics(config, reference)
    if y is None and any(d in _NEEDS_Y for d in diags):
        raise ValueError(
            f"y: the diagnostics {[d for d in diags if d in _NEEDS_Y]} need targets; pass y or "
            "leave them out of InspectConfig.diagnostics."
        )
    _check_probe_n(x)
    if y is not None:
        y = _check_y(y, "layer_report")
    _check_samples(x, y)
    n = x.shape[0]
    if reference is not None and reference.representations:  # (before the model runs)
        got = {np.shape(v)[0] for v in reference.representations.values()}
        if got != {n}:
            raise ValueError(
                f"reference: built on a probe batch of {sorted(got)} samples, but x has n = {n}; "
                "pass make_reference(model, params, x) the same probe batch x as layer_report.")
    reps = representations(model, params, x, config=config)
    names = tuple(reps)
    Y = _targets(y, n, config, "layer_report") if any(d in _NEEDS_Y for d in diags) else None
    tops = model.top_variances(params) if (model.top_variances and "dgl_nngp" in diags) else {}

    layer_values: dict[str, list] = {d: [] for d in diags if d in _LAYER}
    if "probe_accuracy" in layer_values:
        labels = _probe_labels(y, config)
        held = _holdout_mask(n, config.probe_holdout)
    for name, h in reps.items():
        dt = jnp.result_type(h.dtype, jnp.float32)
        h = h.astype(dt)
        d = h.shape[1]
        if "dgl_linear" in layer_values:
            ss = jnp.sum(h * h)
            if config.ridge_rel == 0.0:
                if d >= n:
                    raise ValueError(
                        f"config.ridge_rel=0 (exact DGL@Linear, eq. 6) needs d < n, but layer "
                        f"{name!r} has d = {d} features for n = {n} samples; use ridge_rel > 0, "
                        "conv='mean' or a larger probe batch."
                    )
                eps2 = jnp.zeros((), dt)
            else:
                eps2 = config.ridge_rel * ss / d
            # an all-zero (dead) layer predicts 0: its value is sum(Y^2) / n, where the ridge
            # eps2 = 0 would make H^T H + eps2 I singular.  The solve runs on a full-rank
            # stand-in there, so no NaN reaches the value or its gradient (under jit too)
            dead = ss == 0
            Yd = Y.astype(dt)
            hs = jnp.where(dead, jnp.eye(n, d, dtype=dt), h)
            eps2 = jnp.where(dead, jnp.ones((), dt), eps2)
            # d > n (e.g. flattened convolutions): the same loss on the n coordinates of the
            # row space, H Q with H^T = Q R; exact, as eq. (6) is invariant under H -> H V for
            # orthogonal V, and O(d n^2) instead of O(d^3)
            hl = hs @ qr(hs.T)[0] if d > n else hs
            layer_values["dgl_linear"].append(
                jnp.where(dead, jnp.sum(Yd * Yd), dgl.dgl_linear(hl, Yd, eps2=eps2)) / n)
        if "dgl_nngp" in layer_values:
            v = tops[name] if name in tops else config.top.variances(dt)
            kfn = dgl.top_kernel_fn(v.w_var, v.b_var)
            layer_values["dgl_nngp"].append(
                dgl.dgl_features(h, Y.astype(dt), kfn, eps_rel=config.eps_rel) / n)
        if "cka" in layer_values:
            ref = reference.representations
            if ref is None or name not in ref:
                raise ValueError(
                    f"reference: no representation for layer {name!r} (reference has "
                    f"{None if ref is None else list(ref)}); map names with "
                    "make_reference(..., rename={their: ours}) or select layers."
                )
            layer_values["cka"].append(probes.linear_cka(h, ref[name]))
        if "probe_accuracy" in layer_values:
            layer_values["probe_accuracy"].append(
                _probe_accuracy(h, Y, labels, held, config.ridge_rel))
        if "effective_rank" in layer_values or "stable_rank" in layer_values:
            # centred as probes.linear_cka does: constant columns exactly 0 (one centring
            # pass left a rounding offset: a collapsed layer had rank 1, not 0)
            s = svdvals(_centre_columns(h)[0])
            if "effective_rank" in layer_values:
                layer_values["effective_rank"].append(probes.effective_rank(s))
            if "stable_rank" in layer_values:
                layer_values["stable_rank"].append(probes.stable_rank(s))

    weight_values: dict[str, list] = {d: [] for d in diags if d in WEIGHT_DIAGNOSTICS}
    spectra: tuple = ()
    wnames: tuple = ()
    if weight_values:
        ws = _weight_entries(model.weights(params)) if model.weights else \
            _weight_matrices(params)
        wnames = tuple(ws)
        sv = probes.singular_values(dict(enumerate(ws.values())))
        spectra = tuple(sv[i] for i in range(len(wnames)))
        for s in spectra:
            if "spectral_norm" in weight_values:
                weight_values["spectral_norm"].append(s[0])
            if "weight_stable_rank" in weight_values:
                weight_values["weight_stable_rank"].append(probes.stable_rank(s))
            if "near_one" in weight_values:
                weight_values["near_one"].append(
                    probes.count_near_one(s, config.near_one_tol).astype(s.dtype))

    model_values = {}
    if any(d in diags for d in _NTK):
        K = _ntk(model, params, x, config)
        if "ntk_alignment" in diags:
            if reference.ntk is None or reference.ntk.shape != K.shape:
                raise ValueError(
                    f"reference: ntk_alignment needs a reference NTK of shape {K.shape} "
                    "(make_reference with the same config and probe batch and a model with "
                    "apply); got "
                    f"{None if reference.ntk is None else reference.ntk.shape}."
                )
            model_values["ntk_alignment"] = probes.kernel_alignment(K, reference.ntk)
        if "ntk_target_alignment" in diags:
            Ym = Y[: K.shape[0]].astype(K.dtype)
            model_values["ntk_target_alignment"] = probes.kernel_alignment(
                K, Ym @ Ym.T, centered=True)
    model_values["nonfinite_layers"] = sum(
        (jnp.any(~jnp.isfinite(h)).astype(jnp.float32) for h in reps.values()),
        jnp.zeros((), jnp.float32))

    def stack(vals):
        return {k: jnp.stack(v) for k, v in vals.items() if v}

    return Report(
        layer_values=stack(layer_values),
        weight_values=stack(weight_values),
        spectra=spectra,
        model_values=model_values,
        layers=names,
        weights=wnames,
    )
