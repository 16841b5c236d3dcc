"""Looking at DMN filters: back-projection to image space, filter pictures, energy spectra.

What the authors' code offers besides the layers themselves (``viz_filters``,
``image_filter``/``get_mask`` and the energies ``-log(lambda / sum lambda)`` in
``github.com/nimadehmamy/DMN``), as pure functions of a built prefix.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
from jax.typing import ArrayLike

from layerlab._checks import check_int
from layerlab._plotting import subplots
from layerlab.dmn._apply import _check_params
from layerlab.dmn._build import BuildInfo
from layerlab.dmn._density import energies
from layerlab.dmn._spec import Layer, check_layers


def back_project(
    params: Sequence[Any], layers: Sequence[Layer], *, pooling: str = "stride"
) -> np.ndarray:
    """Image-space kernels of the last convolutional DMN layer of a prefix.

    The network below the last layer is linearised (ReLU dropped, as in the authors'
    linear layers) and its kernels composed: with cross-correlation ``y[i] = sum_a K[a]
    x[i + a]``, a layer ``K2`` on top of ``K1`` acts on the image through

    .. math::  K_\\mathrm{eff}[s a' + a, c, o] = \\sum_f K_2[a', f, o]\\, K_1[a, c, f],

    where ``s`` is the stride between them: ``2`` per 2x2 max-pool treated as a
    subsampling (``pooling="stride"``), or ``1`` (``pooling="ignore"``: the authors'
    ``image_filter``, which notes that it does not account for pooling).

    Args:
      params: the built prefix's parameters (``build_dmn``), ``{"w": [k, k, C, F]}`` or
        ``None`` per layer.
      layers: the prefix's layers (``d`` and ``m`` only; ``dd`` cannot be back-projected).
      pooling: ``"stride"`` or ``"ignore"``.

    Returns:
      ``[K, K, C_image, F_last]`` float64 kernels (``K = k`` for one layer).
    """
    fn = "back_project"
    if pooling not in ("stride", "ignore"):
        raise ValueError(f"{fn}: pooling must be 'stride' or 'ignore'; got {pooling!r}.")
    layers = check_layers(layers, fn=fn, head=False)
    _check_params(params, layers, fn)
    eff = None
    stride = 1  # accumulated stride between the image and the current layer's input
    for lay, p in zip(layers, params, strict=True):
        if lay.kind == "pool":
            if pooling == "stride":
                stride *= 2
            continue
        if lay.kind != "dmn_conv":
            raise ValueError(f"{fn} handles conv DMN layers and pools; got {lay.kind!r}.")
        k2 = np.asarray(p["w"], np.float64)  # [k, k, F_prev, F]
        if eff is None:  # the first layer; after leading pools its taps are `stride` apart
            k = k2.shape[0]
            eff = np.zeros((stride * (k - 1) + 1, stride * (k2.shape[1] - 1) + 1) + k2.shape[2:])
            eff[::stride, ::stride] = k2
            continue
        kb = eff.shape[0]
        kk = stride * (k2.shape[0] - 1) + kb
        out = np.zeros((kk, kk, eff.shape[2], k2.shape[3]))
        for a in range(k2.shape[0]):
            for b in range(k2.shape[1]):
                out[stride * a : stride * a + kb, stride * b : stride * b + kb] += np.einsum(
                    "xycf,fo->xyco", eff, k2[a, b])
        eff = out
    if eff is None:
        raise ValueError(f"{fn}: the prefix has no convolutional DMN layer.")
    return eff


def plot_filters(kernel: ArrayLike, path: str | os.PathLike, *,
                 energies_: Sequence[float] | None = None, title: str = "") -> None:
    """Save a picture of filters ``[k, k, C, F]`` (one tile per filter; RGB when ``C == 3``,
    else the channel-summed map), titled with their energies when given.

    The file's extension picks the format.  Drawn on its own Agg canvas, without ``pyplot``:
    the caller's matplotlib backend (e.g. a notebook's inline one) and pyplot's figures are
    left alone."""
    w = np.asarray(kernel, np.float64)
    if w.ndim != 4:
        raise ValueError(f"plot_filters: kernel must be [k, k, C, F]; got shape {w.shape}.")
    f = w.shape[3]
    if energies_ is not None:
        energies_ = np.asarray(energies_, np.float64)
        if energies_.shape != (f,):
            raise ValueError(f"plot_filters: energies_ must hold one energy per filter, shape "
                             f"({f},) for a kernel of shape {w.shape}; got shape "
                             f"{energies_.shape} (filter_energies(info, j) gives them for "
                             "the j-th DMN layer).")
    cols = int(np.ceil(np.sqrt(f)))
    rows = int(np.ceil(f / cols))
    fig, axs = subplots(rows, cols, figsize=(1.3 * cols, 1.4 * rows + 0.4), squeeze=False)
    for i, ax in enumerate(axs.ravel()):
        ax.set_xticks([])
        ax.set_yticks([])
        if i >= f:
            ax.axis("off")
            continue
        t = w[..., i]
        if t.shape[2] == 3:
            lo, hi = t.min(), t.max()
            ax.imshow((t - lo) / max(hi - lo, 1e-12))
        else:
            ax.imshow(t.sum(2), cmap="RdBu_r")
        if energies_ is not None:
            ax.set_title(f"{energies_[i]:.3g}", fontsize=7)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def plot_energies(spectra: ArrayLike, path: str | os.PathLike, *, title: str = "") -> None:
    """The energy view of per-class spectra ``[C, d]`` (or ``[d]``): ``-log(lambda /
    sum lambda)`` against rank, one line per class (lower = more prevalent feature).

    Like :func:`plot_filters`, a file only; the caller's matplotlib state is left alone."""
    lam = np.atleast_2d(np.asarray(spectra, np.float64))
    e = energies(lam)
    fig, ax = subplots(figsize=(4.5, 3.4))
    for c, row in enumerate(e):
        ax.plot(np.arange(1, row.size + 1), row, ".-", lw=0.8, label=f"class {c}")
    ax.set_xlabel("rank")
    ax.set_ylabel("energy  -log(lambda / sum lambda)")
    if lam.shape[0] <= 10:
        ax.legend(fontsize=6)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def filter_energies(info: BuildInfo, layer: int = 0) -> np.ndarray:
    """The energy of each kept filter of a built DMN layer in its own class spectrum.

    .. math::  E_f = -\\log \\frac{\\lambda_f}{\\operatorname{tr} \\rho_{c_f}}
       = -\\log \\frac{\\lambda_f}{\\sum_b \\lambda_{c_f, b}}

    where ``c_f`` is the class the filter came from (``info.sources``) and ``lambda_f`` its
    eigenvalue in that class's spectrum (``info.spectra[layer][c_f, info.indices[layer][f]]``):
    the authors' energy ``-log(lambda / sum lambda)`` of each class spectrum (what
    :func:`plot_energies` draws), read at the kept filters.  Normalising the kept eigenvalues
    by their own sum across classes (``energies(info.eigvals[layer])``) is another number.

    Args:
      info: the ``BuildInfo`` of ``build_dmn`` (``Network.build``).
      layer: which DMN layer (0-based, counting DMN layers only, as ``info.widths``).

    Returns:
      ``[F]`` float64 energies, in the order of the layer's filters (``params[i]["w"][...,
      f]``); naive PCA (one spectrum) normalises by the trace of the class-blind ``rho``.

    References:
      SI Fig. 7 of Dehmamy et al., arXiv:1703.04757; the authors' ``viz_filters`` energies.
    """
    fn = "filter_energies"
    if not isinstance(info, BuildInfo):
        raise TypeError(f"{fn}: info must be the BuildInfo of build_dmn, got "
                        f"{type(info).__name__}.")
    if info.spectra is None or info.indices is None:
        raise ValueError(f"{fn}: info has no spectra/indices (a BuildInfo made by hand); "
                         "build_dmn records both.")
    layer = check_int(layer, "layer", fn=fn, min_value=0, max_value=len(info.widths) - 1)
    lam = np.atleast_2d(np.asarray(info.spectra[layer], np.float64))
    src = np.asarray(info.sources[layer], np.int64)
    idx = np.asarray(info.indices[layer], np.int64)
    return energies(lam)[src, idx]
