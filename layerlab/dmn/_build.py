"""Closed-form construction of the DMN layers by class-based PCA (the build), and its options."""
from __future__ import annotations

import dataclasses
import numbers
import warnings
from collections.abc import Sequence
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from layerlab._checks import check_int, check_labels, check_number
from layerlab.data import extract_patches
from layerlab.dmn._apply import (
    ACTIVATIONS,
    STANDARDIZE,
    _check_poolable,
    dmn_apply,
    grid_patches,
)
from layerlab.dmn._density import (
    CORRELATIONS,
    ORDERS,
    THRESHOLD_RULES,
    DensityState,
    data_fraction_indices,
    density_eigh,
    density_init,
    density_update,
    density_update_grouped,
    fix_signs,
    select_filters,
)
from layerlab.dmn._spec import Layer, check_layers, format_spec

SIGNS = ("mean", "max_abs", "none")
_DEFAULT_CUTOFF = 0.9  # DMNConfig.cutoff's default (and both presets')


@dataclasses.dataclass(frozen=True)
class DMNConfig:
    """How DMN layers are built: Table 2's columns and every selection rule, as options.

    The two presets differ where the paper's text and the authors' code
    (``github.com/nimadehmamy/DMN``, ``dmn2.py`` and ``2dmn-010818-classes.ipynb``) differ
    or where the text is silent; see ``DMNConfig.paper`` / ``DMNConfig.authors`` and
    docs/dmn.md.  The architecture token's width (``d6``) is a **cap** on the outcome of
    ``var_fraction`` and ``cutoff``; with ``var_fraction=None`` it is a fixed count (the top
    ``F`` filters after de-duplication; the authors' ``nf`` / ``TruncatedSVD`` mode).

    Attributes:
      pca: ``"class"`` (class-based PCA, eq. 15 per class) or ``"naive"`` (PCA of
        ``sum_c rho_c``); ``"naive_first"`` uses naive PCA for the first DMN layer only.
      var_fraction: per-class variance fraction selecting the candidates ("Var."); None =
        fixed-count mode; a tuple (a list is stored as a tuple) gives one value per DMN
        layer (the last one repeats; a ``None`` entry makes that layer fixed-count).
      cutoff: de-duplication threshold ("Cutoff"), a number in ``(0, 1]``; None disables.
        Not used by ``pca="naive"`` (one class-blind spectrum: nothing to de-duplicate across
        classes, as the authors' ``TruncatedSVD`` mode): there only None or the default 0.9
        (what the presets and the committed records carry) are accepted, another value
        raises ``ValueError``.
      threshold: ``"crossing"`` (keep the eigenvector that crosses Var) or ``"below"``
        (cumulative energy <= Var, the authors'); see ``num_components``.
      correlation: duplicate measure, ``"cosine"`` or ``"pearson"`` (the authors').
      within_class: compare candidates with kept filters of their own class too (authors);
        a bool.
      order: ``"eigenvalue"`` (global, by eigenvalue) or ``"class"`` (class by class).
      rho_norm: ``"total"`` (``rho_c`` divided by the total number of samples, eq. 15) or
        ``"class"`` (by the class's own count, the authors'); matters for ``order=
        "eigenvalue"`` only (a per-class scale).
      patches: ``"all"`` (every stride-1 patch, padded as ``padding``) or ``"grid"``
        (non-overlapping ``k x k`` grids at offsets ``{0..k-2}^2``, averaged per image).
      padding: ``"SAME"`` or ``"VALID"`` for convolutional DMN layers (and trained convs).
      input_noise: amplitude ``a`` of ``U[0, a)`` noise added to the input images against
        degenerate spectra (``Network.prepare``); the authors add ``U[0, 1)`` to 0-255
        pixels, i.e. ``a = 1/255`` on ``[0, 1]`` images.
      standardize: per-sample standardisation of the last DMN layer's output
        (``standardize_features``: ``"none"``, ``"sample"``, ``"sample_channel"``,
        ``"notebook"``).
      activation: after each DMN layer: ``"relu"`` (paper, Fig. 4 caption) or ``"linear"``
        (the authors' code).
      conv_activation: after each *trained* conv layer (``c`` tokens): ``"relu"`` (the paper's
        text: "a convolutional layer, ReLU activation layer and a maxpooling layer", Fig. 9)
        or ``"linear"`` (what a Keras ``Conv2D`` gives when no activation is passed; an
        ablation of the paper's ConvNet numbers, docs/dmn.md).
      signs: eigenvector sign convention: ``"mean"`` (non-negative overlap with the class
        mean), ``"max_abs"`` (largest-magnitude entry positive) or ``"none"`` (as ``eigh``
        returns them, the authors').
      frac_sampling: how ``input_fraction`` samples: ``"stratified"`` or ``"random"``.
      input_fraction: fraction of the training set used to build ("Input").
      patch: patch size ``k`` of convolutional DMN layers.
      chunk_size: images per streaming chunk while accumulating density matrices.
    """

    pca: str = "class"
    var_fraction: float | tuple | None = None
    cutoff: float | None = _DEFAULT_CUTOFF
    threshold: str = "crossing"
    correlation: str = "cosine"
    within_class: bool = False
    order: str = "eigenvalue"
    rho_norm: str = "total"
    patches: str = "all"
    padding: str = "SAME"
    input_noise: float = 0.0
    standardize: str = "none"
    activation: str = "relu"
    conv_activation: str = "relu"
    signs: str = "mean"
    frac_sampling: str = "stratified"
    input_fraction: float = 1.0
    patch: int = 3
    chunk_size: int = 500

    def layer_var(self, j: int) -> float | None:
        """``var_fraction`` of the ``j``-th DMN layer (0-based)."""
        v = self.var_fraction
        if isinstance(v, tuple):
            return v[min(j, len(v) - 1)]
        return v

    def __post_init__(self):
        choices = {
            "pca": ("class", "naive", "naive_first"), "threshold": THRESHOLD_RULES,
            "correlation": CORRELATIONS, "order": ORDERS, "rho_norm": ("total", "class"),
            "patches": ("all", "grid"), "padding": ("SAME", "VALID", "same", "valid"),
            "standardize": STANDARDIZE, "activation": ACTIVATIONS,
            "conv_activation": ACTIVATIONS, "signs": SIGNS,
            "frac_sampling": ("stratified", "random"),
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(
                    f"DMNConfig.{name} must be one of {allowed}; got {getattr(self, name)!r}."
                )
        if isinstance(self.var_fraction, list):  # one per DMN layer, as a tuple (hashable)
            object.__setattr__(self, "var_fraction", tuple(self.var_fraction))
        vs = self.var_fraction if isinstance(self.var_fraction, tuple) else (self.var_fraction,)
        want = ("DMNConfig.var_fraction must be a number in (0, 1], None, or a non-empty "
                "tuple/list of those (one per DMN layer)")
        if not vs:
            raise ValueError(f"{want}; got {self.var_fraction!r}.")
        for v in vs:
            if v is None:
                continue
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (numbers.Real, np.floating,
                                                                     np.integer)):
                raise TypeError(f"{want}; got {self.var_fraction!r} (an entry of type "
                                f"{type(v).__name__}).")
            if not 0.0 < v <= 1.0:  # NaN fails too
                raise ValueError(f"{want}; got {self.var_fraction!r}.")
        for name, none_ok in (("cutoff", True), ("input_fraction", False)):
            v = getattr(self, name)
            if v is None and none_ok:
                continue
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (numbers.Real, np.floating,
                                                                     np.integer)):
                raise TypeError(f"DMNConfig.{name} must be a number in (0, 1]"
                                f"{' or None' if none_ok else ''}; got {type(v).__name__} "
                                f"{v!r}.")
        if self.cutoff is not None and not 0.0 < self.cutoff <= 1.0:
            raise ValueError(f"DMNConfig.cutoff must be in (0, 1] or None; got {self.cutoff}.")
        if self.pca == "naive" and self.cutoff is not None and self.cutoff != _DEFAULT_CUTOFF:
            raise ValueError(
                f"DMNConfig.cutoff={self.cutoff} has no effect with DMNConfig.pca='naive': naive "
                "PCA keeps the top eigenvectors of one class-blind spectrum (no duplicates "
                "across classes to drop). Pass cutoff=None (or leave the default "
                f"{_DEFAULT_CUTOFF}), or pca='class' / 'naive_first' for a cutoff that acts.")
        if not isinstance(self.within_class, (bool, np.bool_)):
            raise TypeError(f"DMNConfig.within_class must be a bool; got "
                            f"{type(self.within_class).__name__} {self.within_class!r}.")
        object.__setattr__(self, "within_class", bool(self.within_class))
        if not 0.0 < self.input_fraction <= 1.0:
            raise ValueError(f"DMNConfig.input_fraction must be in (0, 1]; got "
                             f"{self.input_fraction}.")
        check_number(self.input_noise, "DMNConfig.input_noise", min_value=0.0,
                     what="the amplitude of U[0, a) input noise")
        if not isinstance(self.chunk_size, int) or isinstance(self.chunk_size, bool) \
                or self.chunk_size < 1:
            raise ValueError(f"DMNConfig.chunk_size must be a positive int (images per "
                             f"streaming chunk); got {self.chunk_size!r}.")
        check_int(self.patch, "DMNConfig.patch", min_value=1)  # 2.5 or True: TypeError

    @classmethod
    def paper(cls, **changes: Any) -> DMNConfig:
        """The paper's text: class PCA (eq. 15, ``rho_c`` over the total ``N``), the
        eigenvectors explaining Var (the crossing one kept), ReLU after each DMN layer
        (Fig. 4 caption), every patch (a convolution), Keras' default VALID padding (the
        paper used Keras), Cutoff 0.9 (Table 2).  Where the text is silent (duplicate
        measure, visiting order, signs, how "Input" samples) the toolkit's reading:
        |cosine| across classes, global eigenvalue order, signs by the class mean,
        stratified fraction."""
        base = dict(pca="class", cutoff=0.9, threshold="crossing", correlation="cosine",
                    within_class=False, order="eigenvalue", rho_norm="total", patches="all",
                    padding="VALID", input_noise=0.0, standardize="none", activation="relu",
                    signs="mean", frac_sampling="stratified")
        return cls(**(base | changes))

    @classmethod
    def authors(cls, **changes: Any) -> DMNConfig:
        """The authors' code (``layer2``/``DMN2`` in ``2dmn-010818-classes.ipynb``):
        cumulative energy <= Var, Pearson correlation over all pairs, class by class,
        ``rho_c`` per class count, non-overlapping grids at offsets ``{0, .., k-2}^2``,
        ``U[0, 1)`` noise on 0-255 pixels, linear layers, VALID convolution, the notebook's
        per-sample standardisation before the classifier, ``eigh``'s signs, a plain
        random fraction."""
        base = dict(pca="class", cutoff=0.9, threshold="below", correlation="pearson",
                    within_class=True, order="class", rho_norm="class", patches="grid",
                    padding="VALID", input_noise=1.0 / 255.0, standardize="notebook",
                    activation="linear", signs="none", frac_sampling="random")
        return cls(**(base | changes))


class BuildInfo(NamedTuple):
    """Per DMN layer ``j``: filters kept (``widths``), their eigenvalues (``eigvals``), source
    classes (``sources``), input dim, the full per-class spectra (``spectra[j]`` ``[C, d]``,
    descending; ``[1, d]`` for naive PCA) and each kept filter's rank in its class spectrum
    (``indices``): ``spectra[j][sources[j][f], indices[j][f]] == eigvals[j][f]``.  The
    per-class energy of each filter is :func:`filter_energies`."""

    widths: list
    eigvals: list
    sources: list
    input_dims: list
    spectra: list | None = None
    indices: list | None = None


def _layer_inputs(below_params, xc, *, below, kind, k, padding, activation, patches):
    """Inputs of a DMN layer for a chunk of images: ``([n, P, d], weights [P])`` patches or
    ``([n, D], None)``."""
    h = dmn_apply(below_params, below, xc, padding=padding, activation=activation)
    if kind == "dmn_conv":
        if patches == "grid":
            return grid_patches(h, k)
        p = extract_patches(h, k, padding=padding)
        return p.reshape(p.shape[0], -1, p.shape[-1]), None
    return h.reshape(h.shape[0], -1), None


def _density_chunk(state, below_params, xc, yc, mc, **static):
    """Add one chunk of images to the running density sums of the layer above ``below``."""
    h, w = _layer_inputs(below_params, xc, **static)
    if h.ndim == 3:  # the patches of one image share its label: per-image Gram matrices
        if w is not None:
            h = h * jnp.sqrt(w)[None, :, None]
        return density_update_grouped(state, h, yc, mc)
    return density_update(state, h, yc, mc)


# build_dmn is a host-side loop (a jit boundary, like layerlab.loop.fit): one module-level
# compiled chunk update, so repeated builds with the same shapes reuse the compilation.
_STATIC = ("below", "kind", "k", "padding", "activation", "patches")
_density_chunk_jit = jax.jit(_density_chunk, static_argnames=_STATIC)


def _check_layer_sizes(layers, image_shape, *, k, padding, patches):
    """Every layer's input has positive size: walk the per-image shapes ``[H, W, C]`` / ``[D]``
    through the prefix (a DMN layer's width is an upper bound, at least 1 is kept)."""
    shape = tuple(image_shape)
    for i, lay in enumerate(layers):
        where = f"build_dmn: layer {i} ({format_spec([lay])}) of {format_spec(layers)}"
        if min(shape) < 1:
            raise ValueError(f"{where} gets an empty input of shape {shape} per image; the "
                             "images are too small for the layers below it.")
        if lay.kind == "pool":
            if len(shape) == 3:
                _check_poolable(shape, where)
                shape = (shape[0] // 2, shape[1] // 2, shape[2])
        elif lay.kind == "dmn_conv" and len(shape) == 3:
            h, w = shape[:2]
            need = max(k, 2 * k - 2) if patches == "grid" else k if padding == "VALID" else 1
            if h < need or w < need:
                how = ("non-overlapping grids at offsets up to k-2" if patches == "grid"
                       else "VALID padding")
                raise ValueError(f"{where}: {k}x{k} patches with {how} need maps of at least "
                                 f"{need}x{need}, got {h}x{w} (input shape {shape}).")
            if padding == "VALID":
                h, w = h - k + 1, w - k + 1
            shape = (h, w, lay.width)
        elif lay.kind == "dmn_dense":
            shape = (lay.width,)


def _signs(vec, means, rule):
    if rule == "mean":
        return fix_signs(vec, means)
    if rule == "max_abs":
        idx = jnp.argmax(jnp.abs(vec), axis=-2)
        big = jnp.take_along_axis(vec, idx[..., None, :], axis=-2)[..., 0, :]
        return vec * jnp.where(big < 0, -1.0, 1.0).astype(vec.dtype)[..., None, :]
    return vec


def _spectrum(state: DensityState, *, naive: bool, class_norm: bool,
              signs: str) -> tuple[jax.Array, jax.Array]:
    """A DMN layer's eigenvalues ``[C', d]`` and sign-fixed eigenvectors ``[C', d, d]`` from
    its accumulated densities: one pooled ``rho`` (``naive``, ``C' = 1``) or one per class
    (normalised by the class count with ``class_norm``, else by all samples)."""
    if naive:
        rho = state.outer.sum(0, keepdims=True) / jnp.maximum(state.n, 1.0)
        means = state.total.sum(0, keepdims=True) / jnp.maximum(state.n, 1.0)
    else:
        denom = state.count if class_norm else state.n[None]
        rho = state.outer / jnp.maximum(denom, 1.0)[:, None, None]
        means = state.total / jnp.maximum(state.count, 1.0)[:, None]
    lam, vec = density_eigh(rho)
    return lam, _signs(vec, means, signs)


# build_dmn(jit=True): one program per layer shape and rule (eagerly, ~15 ops each)
_spectrum_jit = jax.jit(_spectrum, static_argnames=("naive", "class_norm", "signs"))


def build_dmn(
    key: jax.Array,
    layers: Sequence[Layer],
    x: ArrayLike,
    y: ArrayLike,
    num_classes: int,
    config: DMNConfig = DMNConfig(),
    *,
    jit: bool = True,
) -> tuple[list, BuildInfo]:
    """Build the closed-form DMN prefix layer by layer from data (host-side loop).

    For each DMN layer the class density matrices of its inputs (patches for ``d``, the
    flattened features for ``dd``) are accumulated in chunks of images, each chunk pushed
    through the already built layers below; the filters are the selected eigenvectors
    (``select_filters`` with the config's rules), signs fixed by ``config.signs``.

    Args:
      key: PRNG key (for the data fraction).
      layers: the parsed prefix (DMN layers and pools only).
      x: ``[N, H, W, C]`` training images (float32 or float64: the build follows it;
        integer and float16 images are built in float32).
      y: ``[N]`` integer labels.  A class of ``range(num_classes)`` without samples (after
        ``config.input_fraction``) gets a ``UserWarning``: it contributes no filters.
      num_classes: ``C``.
      config: ``DMNConfig``.
      jit: compile the per-chunk work (the boundary: this is a host loop).

    Returns:
      ``(params, info)``: ``params`` a list with ``{"w": kernel [k, k, C, F]}`` (conv),
      ``{"w": [D, F]}`` (dense) or ``None`` (pool) per layer, and a ``BuildInfo``.

    Examples:
      The filters are unit eigenvectors of class density matrices of 3x3 patches:

      >>> import jax, numpy as np
      >>> from layerlab import data, dmn
      >>> tr = data.load("digits", n=100, seed=0)
      >>> prefix, head = dmn.split_spec(dmn.parse_spec("d3,m,de10"))    # (d3, m), (de10,)
      >>> params, info = dmn.build_dmn(jax.random.key(0), prefix, tr.x, tr.y, 10, jit=False)
      >>> params[0]["w"].shape, params[1], info.widths, info.input_dims
      ((3, 3, 1, 3), None, [3], [9])
      >>> w = np.asarray(params[0]["w"]).reshape(9, 3)
      >>> bool(np.allclose(np.linalg.norm(w, axis=0), 1.0, atol=1e-5))
      True

    References:
      Eqs. (15), (19)-(24) and Table 2 of Dehmamy et al., arXiv:1703.04757.
    """
    layers = check_layers(layers, fn="build_dmn", head=False)
    n_dmn = sum(lay.kind in ("dmn_conv", "dmn_dense") for lay in layers)
    if isinstance(config.var_fraction, tuple) and n_dmn and len(config.var_fraction) > n_dmn:
        raise ValueError(
            f"build_dmn: DMNConfig.var_fraction has {len(config.var_fraction)} entries "
            f"{config.var_fraction} but the prefix {format_spec(layers)!r} has {n_dmn} DMN "
            f"layer(s): give at most one per DMN layer (the last one repeats for deeper "
            "layers); the extra entries would never be used.")
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.floating) or x.dtype.itemsize < 4:
        x = x.astype(np.float32)  # integer pixels; float16 (no half-precision LAPACK eigh)
    dtype = jax.dtypes.canonicalize_dtype(x.dtype)  # float64 only when jax x64 is enabled
    y = np.asarray(y)
    if x.ndim != 4:
        raise ValueError(f"x must be images [N, H, W, C]; got shape {x.shape}.")
    if x.shape[1] in (1, 3) and x.shape[3] > 4 and x.shape[2] > 4:
        warnings.warn(f"build_dmn: x of shape {x.shape} looks channels-first (NCHW); the "
                      f"layers read [N, H, W, C] (here H = {x.shape[1]}, C = {x.shape[3]}): "
                      "transpose with x.transpose(0, 2, 3, 1) if these are images.",
                      stacklevel=2)
    if x.shape[0] == 0:
        raise ValueError(f"build_dmn: x must hold at least one training image, got shape "
                         f"{x.shape}.")
    if y.shape != (x.shape[0],):
        raise ValueError(f"y must have shape ({x.shape[0]},); got {y.shape}.")
    y = check_labels(y, num_classes, fn="build_dmn", xp="np")  # an outside label: no class
    if not np.all(np.isfinite(x)):
        raise ValueError("build_dmn: x contains NaN or inf; clean the data before building DMN "
                         "layers.")
    if config.input_fraction < 1.0:
        idx = data_fraction_indices(key, y, config.input_fraction,
                                    sampling=config.frac_sampling)
        x, y = x[idx], y[idx]
    missing = np.setdiff1d(np.arange(num_classes), y).tolist()
    if missing:
        shown = (", ".join(map(str, missing[:20])) + (", ..." if len(missing) > 20 else ""))
        frac = (f" after input_fraction={config.input_fraction} "
                f"(frac_sampling={config.frac_sampling!r})" if config.input_fraction < 1.0
                else "")
        warnings.warn(
            f"build_dmn: {len(missing)} of the {num_classes} classes have no training samples "
            f"among the {x.shape[0]} images used{frac}: class(es) {shown}. Their density "
            "matrices are zero and give no filters; use more data, a larger input_fraction "
            "or frac_sampling='stratified'.", UserWarning, stacklevel=2)
    _check_layer_sizes(layers, x.shape[1:], k=config.patch, padding=config.padding.upper(),
                       patches=config.patches)
    params: list = []
    info = BuildInfo([], [], [], [], [], [])
    k = config.patch
    padding = config.padding.upper()
    first_dmn = True
    j_dmn = 0
    for i, lay in enumerate(layers):
        if lay.kind == "pool":
            params.append(None)
            continue
        if lay.kind not in ("dmn_conv", "dmn_dense"):
            raise ValueError(f"build_dmn builds closed-form layers only; got {lay.kind!r}.")
        below, below_params = layers[:i], list(params)
        static = dict(below=below, kind=lay.kind, k=k, padding=padding,
                      activation=config.activation, patches=config.patches)
        d = jax.eval_shape(
            partial(_layer_inputs, **static), below_params,
            jax.ShapeDtypeStruct((1, *x.shape[1:]), dtype),
        )[0].shape[-1]
        upd = partial(_density_chunk_jit if jit else _density_chunk, **static)
        state = density_init(num_classes, d, dtype)
        cs = min(config.chunk_size, x.shape[0])
        for s in range(0, x.shape[0], cs):
            xc, yc = x[s : s + cs].astype(dtype), y[s : s + cs]
            mc = np.ones(xc.shape[0], dtype)
            if xc.shape[0] < cs:  # pad so the jitted update compiles once
                pad = cs - xc.shape[0]
                xc = np.concatenate([xc, np.zeros((pad, *xc.shape[1:]), xc.dtype)])
                yc = np.concatenate([yc, np.zeros(pad, yc.dtype)])
                mc = np.concatenate([mc, np.zeros(pad, dtype)])
            state = upd(state, below_params, xc, yc, mc)
        naive = config.pca == "naive" or (config.pca == "naive_first" and first_dmn)
        lam, vec = (_spectrum_jit if jit else _spectrum)(
            state, naive=naive, class_norm=config.rho_norm == "class", signs=config.signs)
        f = select_filters(
            lam, vec, num_filters=lay.width, var_fraction=config.layer_var(j_dmn),
            cutoff=None if naive else config.cutoff, threshold=config.threshold,
            correlation=config.correlation, within_class=config.within_class,
            order=config.order,
        )
        if f.w.shape[1] == 0:
            raise ValueError(
                f"layer {i} ({format_spec([lay])}) kept no filters: var_fraction="
                f"{config.layer_var(j_dmn)} with threshold={config.threshold!r} keeps none of the "
                "eigenvectors; raise var_fraction or use threshold='crossing'."
            )
        w = f.w
        if lay.kind == "dmn_conv":
            c_in = d // (k * k)
            w = w.reshape(k, k, c_in, w.shape[1])
        params.append({"w": jnp.asarray(w, dtype)})
        info.widths.append(int(f.w.shape[1]))
        info.eigvals.append(f.eigvals.tolist())
        info.sources.append(f.source.tolist())
        info.indices.append(f.index.tolist())
        info.input_dims.append(int(d))
        info.spectra.append(np.asarray(lam))
        first_dmn = False
        j_dmn += 1
    return params, info


# ------------------------------------------------------------------------------ head
