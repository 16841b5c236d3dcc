"""DMN layers: dense and convolutional layers whose weights are class-PCA filters.

A DMN (density-matrix network) layer replaces a trained layer by the leading eigenvectors
of the class density matrices of its inputs (eqs. 15, 19-24 of Dehmamy, Rohani &
Katsaggelos, arXiv:1703.04757), with zero bias and a ReLU (``DMNConfig(activation=...)``):

.. math::  h^{(k)} = \\mathrm{ReLU}(W^{(k)\\top} h^{(k-1)}),
   \\qquad W^{(k)} = [v_1, \\dots, v_F],\\ \\rho_c v = \\lambda v .

Convolutional DMN layers do the same on ``k x k`` patches (``k*k*C`` dims): the filters
are eigenvectors of the patch density matrices reshaped to ``[k, k, C, F]`` kernels.

Architectures are written as in the paper's tables, comma separated:

* ``d<F>``  convolutional DMN layer with ``F`` filters (3x3 patches by default),
* ``dd<F>`` dense DMN layer on the flattened input,
* ``m``     2x2 max-pooling (stride 2),
* ``c<F>``  trainable (backprop) 3x3 convolution + ReLU (flax ``nn.Conv``),
* ``bn``    trainable batch-norm (flax ``nn.BatchNorm``),
* ``de<K>`` trainable dense layer; the last one is the softmax classifier (logits).

DMN layers must come first (a closed-form layer is built on the outputs of the layers below
it, which must already be fixed); the trainable "head" follows and is trained by
``layerlab.loop.fit`` on the frozen DMN features, so the DMN part never enters
back-propagation (eqs. 25-26).
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.typing import ArrayLike

from layerlab import loop, probes
from layerlab.data import extract_patches
from layerlab.dmn._density import (
    CORRELATIONS,
    ORDERS,
    THRESHOLD_RULES,
    data_fraction_indices,
    density_eigh,
    density_init,
    density_update,
    density_update_grouped,
    fix_signs,
    select_filters,
)

_TOKEN = re.compile(r"^(dd|de|d|c)(\d+)$")


class Layer(NamedTuple):
    """One parsed architecture token: ``kind`` in {dmn_conv, dmn_dense, pool, conv, bn,
    dense} and ``width`` (filters/units; 0 for pool and bn)."""

    kind: str
    width: int = 0


_KINDS = {"d": "dmn_conv", "dd": "dmn_dense", "c": "conv", "de": "dense"}
_NAMES = {v: k for k, v in _KINDS.items()} | {"pool": "m", "bn": "bn"}


def parse_spec(spec: str | Sequence[Layer]) -> tuple[Layer, ...]:
    """Parse an architecture string such as ``"d15, m, c80, m, de10"``.

    Args:
      spec: comma-separated tokens (see the module docstring) or already-parsed layers.

    Returns:
      A tuple of ``Layer``.
    """
    if not isinstance(spec, str):
        return tuple(Layer(*t) for t in spec)
    out = []
    for tok in spec.replace(" ", "").lower().split(","):
        if tok == "m":
            out.append(Layer("pool"))
        elif tok == "bn":
            out.append(Layer("bn"))
        else:
            m = _TOKEN.match(tok)
            if not m or int(m.group(2)) < 1:
                raise ValueError(
                    f"bad architecture token {tok!r} in {spec!r}: use d<F> (conv DMN), dd<F> "
                    "(dense DMN), m (2x2 max-pool), c<F> (trained conv), bn, de<K> (dense)."
                )
            out.append(Layer(_KINDS[m.group(1)], int(m.group(2))))
    if not out or out[-1].kind != "dense":
        raise ValueError(f"architecture {spec!r} must end with the classifier de<num_classes>.")
    return tuple(out)


def format_spec(layers: Sequence[Layer]) -> str:
    """Inverse of ``parse_spec``: ``(Layer('dmn_conv', 6), Layer('pool'), ...) -> "d6,m,..."``."""
    return ",".join(_NAMES[lay.kind] + (str(lay.width) if lay.width else "") for lay in layers)


def convnet_spec(spec: str | Sequence[Layer]) -> tuple[Layer, ...]:
    """The same architecture with every DMN layer replaced by a trainable one (d->c, dd->de)."""
    swap = {"dmn_conv": "conv", "dmn_dense": "dense"}
    return tuple(Layer(swap.get(lay.kind, lay.kind), lay.width) for lay in parse_spec(spec))


def split_spec(layers: Sequence[Layer]) -> tuple[tuple[Layer, ...], tuple[Layer, ...]]:
    """Split into the closed-form DMN prefix (DMN layers and pools) and the trainable head.

    Pools right after the last DMN layer belong to the prefix.
    """
    layers = tuple(layers)
    cut = 0
    for i, lay in enumerate(layers):
        if lay.kind in ("dmn_conv", "dmn_dense"):
            cut = i + 1
    while cut and cut < len(layers) and layers[cut].kind == "pool":  # pools after the last
        cut += 1  # DMN layer are parameter-free: precompute them with the DMN features
    prefix, head = layers[:cut], layers[cut:]
    bad = [lay for lay in prefix if lay.kind in ("conv", "bn", "dense")]
    if bad:
        raise ValueError(
            f"DMN layers must come before trainable layers, got {format_spec(layers)!r}: a "
            "closed-form layer needs fixed inputs. Put d/dd/m tokens first."
        )
    return prefix, head


# ------------------------------------------------------------------------------ apply


def max_pool_2x2(x: jax.Array) -> jax.Array:
    """2x2 max-pooling with stride 2 (VALID) on ``[..., H, W, C]``; odd edges are dropped."""
    return nn.max_pool(x, (2, 2), strides=(2, 2), padding="VALID")


ACTIVATIONS = ("relu", "linear")
STANDARDIZE = ("none", "sample", "sample_channel", "notebook")


def _activate(y: jax.Array, activation: str) -> jax.Array:
    if activation == "relu":
        return jax.nn.relu(y)
    if activation == "linear":
        return y
    raise ValueError(f"activation must be one of {ACTIVATIONS}; got {activation!r}.")


def dmn_conv_apply(
    kernel: jax.Array, x: jax.Array, *, padding: str = "SAME", activation: str = "relu"
) -> jax.Array:
    """Convolutional DMN layer: the projections of every patch on the filters (then ReLU).

    .. math::  y[n, i, j, f] = \\sigma\\Big(\\sum_{a,b,c} K[a,b,c,f]\\,
       \\tilde x[n, i + a, j + b, c]\\Big) = \\sigma(P[n,i,j,:] \\cdot v_f)

    where ``P = extract_patches(x, k, padding=padding)``, ``v_f = K[..., f].ravel()`` and
    ``sigma`` is ReLU (the paper's Fig. 4 caption) or the identity (the authors' code).

    Args:
      kernel: ``[k, k, C, F]`` filters (HWIO).
      x: ``[N, H, W, C]`` images (or a single ``[H, W, C]`` image).
      padding: ``"SAME"`` (output ``H x W``, zero padding) or ``"VALID"``.
      activation: ``"relu"`` or ``"linear"``.

    Returns:
      ``[N, H', W', F]`` (or ``[H', W', F]``) in the dtype of ``x``.

    References:
      Sec. "Convolutional DMN" of Dehmamy et al., arXiv:1703.04757.
    """
    single = x.ndim == 3
    xb = x[None] if single else x
    if xb.ndim != 4 or xb.shape[-1] != kernel.shape[2]:
        raise ValueError(
            f"x must be [N, H, W, C={kernel.shape[2]}] for a kernel of shape {kernel.shape}; "
            f"got {x.shape}."
        )
    y = jax.lax.conv_general_dilated(
        xb, kernel.astype(xb.dtype), (1, 1), padding.upper(),
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
    )
    y = _activate(y, activation)
    return y[0] if single else y


def dmn_dense_apply(w: jax.Array, x: jax.Array, *, activation: str = "relu") -> jax.Array:
    """Dense DMN layer ``sigma(flatten(x) @ W)``: ``W [D, F]``, ``x [N, ...]`` -> ``[N, F]``."""
    return _activate(x.reshape(x.shape[0], -1) @ w.astype(x.dtype), activation)


def standardize_features(h: jax.Array, mode: str = "sample") -> jax.Array:
    """Per-sample standardisation of a DMN layer's output ``h [N, H, W, F]`` (or ``[N, F]``).

    * ``"none"``: unchanged.
    * ``"sample"``: zero mean, unit std over all of a sample's features.
    * ``"sample_channel"``: per sample and channel over the spatial axes (``dmn2.py``'s
      ``tf.nn.moments(axes=[2, 3])`` in NCHW).
    * ``"notebook"``: per sample and image column over (rows, channels) -- what the
      authors' notebook's numpy override ``ims.mean(axis=(1, 2))`` on NCHW computes.

    A zero std leaves the (centred) values as they are.
    """
    if mode == "none":
        return h
    if mode not in STANDARDIZE:
        raise ValueError(f"standardize must be one of {STANDARDIZE}; got {mode!r}.")
    if h.ndim == 2 or mode == "sample":
        axes = tuple(range(1, h.ndim))
    elif h.ndim != 4:
        raise ValueError(f"h must be [N, H, W, F] or [N, F]; got shape {h.shape}.")
    elif mode == "sample_channel":
        axes = (1, 2)
    else:  # notebook: NCHW axes (1, 2) = channels and rows
        axes = (1, 3)
    mu = h.mean(axes, keepdims=True)
    sd = h.std(axes, keepdims=True)
    return (h - mu) / jnp.where(sd > 0, sd, 1.0)


def dmn_apply(
    params: Sequence[Any],
    layers: Sequence[Layer],
    x: jax.Array,
    *,
    padding: str = "SAME",
    activation: str = "relu",
    standardize: str = "none",
) -> jax.Array:
    """Run a closed-form DMN prefix (``d``, ``dd`` and ``m`` layers) on a batch ``[N, H, W, C]``.

    Args:
      params: one entry per layer: ``{"w": kernel}`` for DMN layers, ``None`` for pools.
      layers: the parsed prefix (``split_spec(...)[0]``).
      x: ``[N, H, W, C]`` images.
      padding: padding of the convolutional DMN layers.
      activation: after each DMN layer, ``"relu"`` or ``"linear"``.
      standardize: ``standardize_features`` mode applied right after the *last* DMN layer
        (before its pooling), as the authors do before the classifier.

    Returns:
      The prefix's output features (``[N, H', W', F]`` or ``[N, F]``).
    """
    last = max((i for i, lay in enumerate(layers) if lay.kind != "pool"), default=-1)
    for i, (lay, p) in enumerate(zip(layers, params, strict=True)):
        if lay.kind == "dmn_conv":
            x = dmn_conv_apply(p["w"], x, padding=padding, activation=activation)
        elif lay.kind == "dmn_dense":
            x = dmn_dense_apply(p["w"], x, activation=activation)
        elif lay.kind == "pool":
            x = max_pool_2x2(x)
        else:
            raise ValueError(f"{lay.kind!r} is not a closed-form layer.")
        if i == last:
            x = standardize_features(x, standardize)
    return x


def grid_patches(x: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
    """Non-overlapping ``k x k`` blocks at the grid offsets ``(a, b) in {0..k-2}^2`` (the
    authors' ``get_rho_fast``/``sub_rho``), flattened like ``extract_patches``.

    Args:
      x: ``[N, H, W, C]`` images.
      k: block size (``k >= 2``; ``k = 1`` uses the single offset 0).

    Returns:
      ``(patches [N, P, k*k*C], weights [P])``: the weights make every offset count equally
      and sum to ``P`` (so a weighted sum over an image's patches, divided by ``P``, is the
      authors' per-image density matrix ``mean_offsets mean_blocks p p^T``).
    """
    if x.ndim != 4:
        raise ValueError(f"x must be [N, H, W, C]; got shape {x.shape}.")
    n, H, W, C = x.shape
    offs = range(max(k - 1, 1))
    blocks, counts = [], []
    for a in offs:
        for b in offs:
            sx, sy = (H - a) // k, (W - b) // k
            if sx < 1 or sy < 1:
                raise ValueError(f"images {H}x{W} are too small for {k}x{k} blocks at ({a}, {b}).")
            blk = x[:, a : a + k * sx, b : b + k * sy].reshape(n, sx, k, sy, k, C)
            blocks.append(blk.transpose(0, 1, 3, 2, 4, 5).reshape(n, sx * sy, k * k * C))
            counts.append(sx * sy)
    p = sum(counts)
    w = jnp.concatenate([jnp.full((c,), p / (len(counts) * c), x.dtype) for c in counts])
    return jnp.concatenate(blocks, axis=1), w


# ------------------------------------------------------------------------------ build


SIGNS = ("mean", "max_abs", "none")


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
        fixed-count mode; a tuple gives one value per DMN layer (the last one repeats; a
        ``None`` entry makes that layer fixed-count).
      cutoff: de-duplication threshold ("Cutoff"); None disables.
      threshold: ``"crossing"`` (keep the eigenvector that crosses Var) or ``"below"``
        (cumulative energy <= Var, the authors'); see ``num_components``.
      correlation: duplicate measure, ``"cosine"`` or ``"pearson"`` (the authors').
      within_class: compare candidates with kept filters of their own class too (authors).
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
    cutoff: float | None = 0.9
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
            "standardize": STANDARDIZE, "activation": ACTIVATIONS, "signs": SIGNS,
            "frac_sampling": ("stratified", "random"),
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(
                    f"DMNConfig.{name} must be one of {allowed}; got {getattr(self, name)!r}."
                )
        vs = self.var_fraction if isinstance(self.var_fraction, tuple) else (self.var_fraction,)
        if not vs or any(v is not None and not 0.0 < v <= 1.0 for v in vs):
            raise ValueError(f"DMNConfig.var_fraction must be in (0, 1], None, or a non-empty "
                             f"tuple of those; got {self.var_fraction}.")
        if self.cutoff is not None and not 0.0 < self.cutoff <= 1.0:
            raise ValueError(f"DMNConfig.cutoff must be in (0, 1] or None; got {self.cutoff}.")
        if not 0.0 < self.input_fraction <= 1.0:
            raise ValueError(f"DMNConfig.input_fraction must be in (0, 1]; got "
                             f"{self.input_fraction}.")
        if self.input_noise < 0:
            raise ValueError(f"DMNConfig.input_noise must be >= 0; got {self.input_noise}.")
        if self.patch < 1:
            raise ValueError(f"DMNConfig.patch must be >= 1; got {self.patch}.")

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
    """Per DMN layer: filters kept, their eigenvalues and source classes, input dim, and
    the full per-class spectra (``spectra[j]`` ``[C, d]``, for the energy view)."""

    widths: list
    eigvals: list
    sources: list
    input_dims: list
    spectra: list | None = None


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


def _signs(vec, means, rule):
    if rule == "mean":
        return fix_signs(vec, means)
    if rule == "max_abs":
        idx = jnp.argmax(jnp.abs(vec), axis=-2)
        big = jnp.take_along_axis(vec, idx[..., None, :], axis=-2)[..., 0, :]
        return vec * jnp.where(big < 0, -1.0, 1.0).astype(vec.dtype)[..., None, :]
    return vec


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
      x: ``[N, H, W, C]`` training images (float32 or float64; the build follows it).
      y: ``[N]`` integer labels.
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
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.floating):
        x = x.astype(np.float32)
    dtype = jax.dtypes.canonicalize_dtype(x.dtype)  # float64 only when jax x64 is enabled
    y = np.asarray(y)
    if x.ndim != 4:
        raise ValueError(f"x must be images [N, H, W, C]; got shape {x.shape}.")
    if y.shape != (x.shape[0],):
        raise ValueError(f"y must have shape ({x.shape[0]},); got {y.shape}.")
    if not np.all(np.isfinite(x)):
        raise ValueError("x contains NaN or inf; clean the data before building DMN layers.")
    if config.input_fraction < 1.0:
        idx = data_fraction_indices(key, y, config.input_fraction,
                                    sampling=config.frac_sampling)
        x, y = x[idx], y[idx]
    layers = tuple(layers)
    params: list = []
    info = BuildInfo([], [], [], [], [])
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
        if naive:
            rho = state.outer.sum(0, keepdims=True) / jnp.maximum(state.n, 1.0)
            means = state.total.sum(0, keepdims=True) / jnp.maximum(state.n, 1.0)
        else:
            denom = state.count if config.rho_norm == "class" else state.n[None]
            rho = state.outer / jnp.maximum(denom, 1.0)[:, None, None]
            means = state.total / jnp.maximum(state.count, 1.0)[:, None]
        lam, vec = density_eigh(rho)
        vec = _signs(vec, means, config.signs)
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
        info.input_dims.append(int(d))
        info.spectra.append(np.asarray(lam))
        first_dmn = False
        j_dmn += 1
    return params, info


# ------------------------------------------------------------------------------ head


class Head(nn.Module):
    """Trainable layers (``c``, ``bn``, ``m``, ``de``) as a flax module; last ``de`` = logits.

    Keras' defaults, as the paper used Keras: Glorot-uniform kernels, zero biases, 3x3
    convolutions with ReLU, batch-norm momentum 0.99 and epsilon 1e-3.
    """

    layers: tuple
    padding: str = "SAME"

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
        n_dense = sum(lay.kind == "dense" for lay in self.layers)
        seen = 0
        init = nn.initializers.glorot_uniform()
        for lay in self.layers:
            if lay.kind == "conv":
                x = jax.nn.relu(nn.Conv(lay.width, (3, 3), padding=self.padding.upper(),
                                        kernel_init=init, dtype=x.dtype,
                                        param_dtype=x.dtype)(x))
            elif lay.kind == "bn":
                x = nn.BatchNorm(use_running_average=not train, momentum=0.99, epsilon=1e-3,
                                 dtype=x.dtype, param_dtype=x.dtype)(x)
            elif lay.kind == "pool":
                x = max_pool_2x2(x)
            elif lay.kind == "dense":
                seen += 1
                x = nn.Dense(lay.width, kernel_init=init, dtype=x.dtype,
                             param_dtype=x.dtype)(x.reshape(x.shape[0], -1))
                if seen < n_dense:
                    x = jax.nn.relu(x)
            else:
                raise ValueError(f"{lay.kind!r} layers are closed-form; build them with build_dmn.")
        return x


class Network(NamedTuple):
    """A DMN/hybrid/ConvNet classifier as pure functions.

    ``prepare(key, x)`` (the config's input noise), ``build(key, x, y) -> (dmn_params,
    info)`` (closed form), ``features(dmn_params, x)``, ``init_head(key, feats) ->
    variables``, ``head_apply(variables, feats)`` and ``apply(params, x) -> logits`` with
    ``params = {"dmn": ..., "head": variables}``.
    """

    layers: tuple
    prefix: tuple
    head: Head
    build: Callable
    features: Callable
    init_head: Callable
    head_apply: Callable
    apply: Callable
    prepare: Callable


def add_input_noise(key: jax.Array, x: jax.typing.ArrayLike, amplitude: float) -> jax.Array:
    """``x + U[0, amplitude)`` elementwise (the authors' guard against degenerate spectra);
    ``x`` unchanged when ``amplitude == 0``.  Dtype follows ``x``."""
    x = jnp.asarray(x)
    if amplitude == 0:
        return x
    return x + amplitude * jax.random.uniform(key, x.shape, x.dtype)


def make_network(
    spec: str | Sequence[Layer], num_classes: int, config: DMNConfig = DMNConfig()
) -> Network:
    """Pure functions of a network written as in the paper, e.g. ``"d15,m,c80,m,de10"``.

    Args:
      spec: architecture string or parsed layers; must end with ``de<num_classes>``.
      num_classes: number of classes.
      config: how the DMN layers are built (and the padding of trained convolutions).

    Returns:
      A ``Network``.  For a pure ConvNet pass ``convnet_spec(spec)`` (empty DMN prefix).

    Examples:
      One closed-form conv layer of 3 filters (eager build: ``jit=False`` is quicker for a
      tiny data set) and a 2x2 max-pool give the features a trainable dense classifier
      (``de10``; ``net.init_head``, :func:`classifier_step`) is then trained on:

      >>> import jax
      >>> from layerlab import data, dmn
      >>> tr = data.load("digits", n=100, seed=0)                      # x [100, 8, 8, 1]
      >>> net = dmn.make_network("d3,m,de10", 10)
      >>> dmn_params, info = net.build(jax.random.key(0), tr.x, tr.y, jit=False)
      >>> net.features(dmn_params, tr.x[:5]).shape                     # [n, H/2, W/2, F]
      (5, 4, 4, 3)
    """
    layers = parse_spec(spec)
    if layers[-1].width != num_classes:
        raise ValueError(
            f"the classifier {format_spec(layers[-1:])} must have num_classes={num_classes} units."
        )
    prefix, head_layers = split_spec(layers)
    head = Head(head_layers, padding=config.padding)
    padding = config.padding

    def prepare(key, x):
        return add_input_noise(key, x, config.input_noise) if prefix else jnp.asarray(x)

    def build(key, x, y, *, jit=True):
        return build_dmn(key, prefix, x, y, num_classes, config, jit=jit)

    def features(dmn_params, x):
        return dmn_apply(dmn_params, prefix, x, padding=padding, activation=config.activation,
                         standardize=config.standardize)

    def init_head(key, feats):
        v = head.init(key, feats, train=False)
        return {"params": v["params"], "batch_stats": v.get("batch_stats", {})}

    def head_apply(variables, feats, train=False):
        v = {"params": variables["params"]}
        if variables.get("batch_stats"):
            v["batch_stats"] = variables["batch_stats"]
        return head.apply(v, feats, train=False)

    def apply(params, x):
        return head_apply(params["head"], features(params["dmn"], x))

    return Network(layers, prefix, head, build, features, init_head, head_apply, apply,
                   prepare)


def classifier_step(net: Network, optimizer: optax.GradientTransformation) -> loop.TrainStep:
    """``loop.TrainStep`` training the trainable head by softmax cross-entropy.

    .. math::  L = -\\frac{1}{B} \\sum_i \\log \\mathrm{softmax}(f(h_i))_{y_i}

    ``init(variables) -> loop.TrainState`` (flax ``params`` as ``params``, ``batch_stats``
    as ``model_state``); ``step(state, (feats, y), key) -> (state, metrics)`` (metrics:
    ``loss``, ``accuracy``), batch-norm statistics updated in train mode.  Drive it with
    ``layerlab.loop.fit``.
    """

    def init(variables, hparams=None):
        return loop.TrainState(variables["params"], optimizer.init(variables["params"]),
                               jnp.zeros((), jnp.int32), hparams,
                               variables.get("batch_stats", {}))

    def loss_fn(p, stats, feats, y):
        v = {"params": p}
        if stats:
            v["batch_stats"] = stats
            logits, upd = net.head.apply(v, feats, train=True, mutable=["batch_stats"])
            stats = upd["batch_stats"]
        else:
            logits = net.head.apply(v, feats, train=True)
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
        acc = probes.accuracy(logits, y)
        return loss, (stats, acc)

    def step(state, batch, key):
        del key
        feats, y = batch
        (loss, (stats, acc)), g = jax.value_and_grad(loss_fn, has_aux=True)(
            state.params, state.model_state, feats, y
        )
        upd, opt_state = optimizer.update(g, state.opt_state, state.params)
        params = optax.apply_updates(state.params, upd)
        new = loop.TrainState(params, opt_state, state.step + 1, state.hparams, stats)
        return new, {"loss": loss, "accuracy": acc}

    return loop.TrainStep(init, step)


def head_variables(state: loop.TrainState) -> dict:
    """The head's flax variables from a training state."""
    return {"params": state.params, "batch_stats": state.model_state or {}}


def map_batches(fn: Callable, x: np.ndarray | jax.Array, *, batch_size: int = 1000) -> np.ndarray:
    """``concat([fn(x[i:i+b]) ...])`` as numpy: features of a large set chunk by chunk."""
    x = np.asarray(x)
    return np.concatenate(
        [np.asarray(fn(x[s : s + batch_size])) for s in range(0, x.shape[0], batch_size)]
    )
