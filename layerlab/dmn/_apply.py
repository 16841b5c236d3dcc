"""Applying fixed DMN layers: conv / dense DMN layers, pooling, standardisation, patches
(eqs. 15, 19-24 of Dehmamy, Rohani & Katsaggelos, arXiv:1703.04757)."""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

from layerlab._checks import check_finite, check_int, is_concrete, promote_float
from layerlab.dmn._spec import Layer, check_layers, format_spec

PADDINGS = ("SAME", "VALID")


def _check_padding(padding: Any, fn: str) -> str:
    """``"SAME"`` or ``"VALID"`` in any case (as ``conv3x3`` and ``extract_patches`` take
    it); returned upper-case."""
    if not isinstance(padding, str):
        raise TypeError(f"{fn}: padding must be 'SAME' or 'VALID' (any case), got "
                        f"{type(padding).__name__} {padding!r}.")
    if padding.upper() not in PADDINGS:
        raise ValueError(f"{fn}: padding must be 'SAME' or 'VALID' (any case), got "
                         f"{padding!r}.")
    return padding.upper()


def _check_images_finite(x: Any, fn: str) -> None:
    """Eager only: no NaN/inf in the input images (a NaN image would otherwise reach the
    classifier as features that pooling may have turned finite)."""
    check_finite(x, "x", fn=fn, hint="a NaN or inf pixel has no meaningful features; clean "
                 "or impute the images first.")


def _check_poolable(shape: Sequence[int], where: str) -> None:
    """A 2x2 max-pool of ``[..., H, W, C]`` maps needs ``H >= 2`` and ``W >= 2`` (a smaller
    map would pool to an empty one)."""
    h, w = shape[-3], shape[-2]
    if h < 2 or w < 2:
        raise ValueError(
            f"{where}: a 2x2 max-pool needs maps of at least 2x2, got {h}x{w} (input shape "
            f"{tuple(shape)}); the images are too small for this many pools (drop a pool or "
            "use larger images).")


def max_pool_2x2(x: jax.Array) -> jax.Array:
    """2x2 max-pooling with stride 2 (VALID) on ``[..., H, W, C]``; odd edges are dropped.

    Computed as the elementwise maximum of the window's four strided views, ``max(max(x00,
    x01), max(x10, x11))``: the same values as ``flax.linen.max_pool(x, (2, 2), strides=(2,
    2))``, but its gradient is a cheap elementwise mask where XLA's ``select_and_scatter``
    (the VJP of ``reduce_window``) is slow on CPU (13.0 vs 4.5 ms for the gradient of a batch
    of 128 32x32x10 maps, measured here once; the earlier reshape-and-``max`` form of this
    function took 5.8 ms and this one 2.3 ms in one later run).  Ties within a window share
    the gradient the way ``jnp.maximum`` splits it (two or four equal values: equally; three:
    1/4, 1/4, 1/2) instead of sending it to the first maximum; after a ReLU the gradient at 0
    is 0 either way.  Maps smaller than 2x2 raise ``ValueError`` (they would pool to an empty
    map).

    NaN propagates: a NaN in a window gives NaN for that window, eagerly and under ``jit``
    (the elementwise maximum propagates NaN; XLA's CPU max-*reduction*, which the earlier
    reshape form and ``reduce_window`` use, can drop it and return the window's largest
    finite value -- seen here for batches of 8, 40 and 128 maps).
    """
    if x.ndim < 3:
        raise ValueError(f"max_pool_2x2: x must be [..., H, W, C]; got shape {x.shape}.")
    _check_poolable(x.shape, "max_pool_2x2")
    *lead, h, w, c = x.shape
    h2, w2 = h // 2, w // 2
    x = x[..., : 2 * h2, : 2 * w2, :]
    return jnp.maximum(jnp.maximum(x[..., 0::2, 0::2, :], x[..., 0::2, 1::2, :]),
                       jnp.maximum(x[..., 1::2, 0::2, :], x[..., 1::2, 1::2, :]))


def conv3x3(x: jax.Array, kernel: jax.Array, padding: str = "SAME", *,
            im2col: bool | None = None) -> jax.Array:
    """Stride-1 2-D cross-correlation ``NHWC x HWIO -> NHWC`` (``lax.conv_general_dilated``).

    .. math::  y[n, i, j, o] = \\sum_{a,b,c} x_p[n, i + a, j + b, c]\\, K[a, b, c, o]

    with ``x_p`` zero-padded by ``k // 2`` for ``"SAME"`` (odd ``k``) and unpadded for
    ``"VALID"``.  On CPU (``im2col=None``: decided by the default backend) it is computed as
    the ``k*k`` shifted slices concatenated along channels (``[N, H', W', k*k*C]``, ordered
    ``(a, b, c)`` like ``K.reshape(-1, O)``) times ``K.reshape(k*k*C, O)``: one matrix product
    whose weight gradient is one more.  XLA's CPU convolution and its filter gradient run
    at a few GFLOP/s for the narrow channel counts of the paper's ConvNets: a CIFAR-10 step of
    ``c10,m,de10`` (batch 128, value + gradient) takes 64.6 ms with ``lax.conv`` +
    ``reduce_window`` pooling and 16.2 ms this way (with :func:`max_pool_2x2`), ``c22,m,c305``
    471 -> 228 ms (``benchmarks/dmn_fit.py --only conv-step``, quiet 2-core CPU).
    On accelerators ``lax.conv_general_dilated`` (cuDNN) is used.

    Args:
      x: ``[N, H, W, C]``.  kernel: ``[k, k, C, O]`` (odd ``k``).
      padding: ``"SAME"`` or ``"VALID"``.
      im2col: force (True) or forbid (False) the patch route; None: on CPU only.

    Returns:
      ``[N, H, W, O]`` (SAME) or ``[N, H-k+1, W-k+1, O]`` (VALID).
    """
    kh, kw, ci, co = kernel.shape
    padding = padding.upper()
    if padding not in ("SAME", "VALID") or kh % 2 == 0 or kw % 2 == 0:
        raise ValueError(f"conv3x3: padding must be 'SAME' or 'VALID' with an odd kernel; "
                         f"got padding={padding!r}, kernel {kernel.shape}.")
    if x.ndim != 4 or x.shape[-1] != ci:
        raise ValueError(f"conv3x3: x must be [N, H, W, C={ci}]; got {x.shape}.")
    if im2col is None:
        im2col = jax.default_backend() == "cpu"
    if not im2col:
        return jax.lax.conv_general_dilated(x, kernel, (1, 1), padding,
                                            dimension_numbers=("NHWC", "HWIO", "NHWC"))
    if padding == "SAME":
        x = jnp.pad(x, ((0, 0), (kh // 2, kh // 2), (kw // 2, kw // 2), (0, 0)))
    ho, wo = x.shape[1] - kh + 1, x.shape[2] - kw + 1
    p = jnp.concatenate([x[:, a : a + ho, b : b + wo, :] for a in range(kh) for b in range(kw)],
                        axis=-1)
    return p @ kernel.reshape(kh * kw * ci, co)


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

    Raises:
      ValueError: ``x`` holds NaN or inf (eager calls only; under ``jit`` such a pixel gives
        NaN outputs), a bad ``padding`` or shapes.

    References:
      Sec. "Convolutional DMN" of Dehmamy et al., arXiv:1703.04757.
    """
    fn = "dmn_conv_apply"
    padding = _check_padding(padding, fn)
    _check_images_finite(x, fn)
    return _conv_apply(kernel, x, padding, activation)


def _conv_apply(kernel, x, padding, activation):
    """``dmn_conv_apply`` without the argument checks (``padding`` upper-case)."""
    if jnp.ndim(kernel) != 4:
        raise ValueError(f"dmn_conv_apply: kernel must be [k, k, C, F] (HWIO), got shape "
                         f"{tuple(jnp.shape(kernel))}.")
    single = x.ndim == 3
    xb = x[None] if single else x
    if xb.ndim != 4 or xb.shape[-1] != kernel.shape[2]:
        raise ValueError(
            f"x must be [N, H, W, C={kernel.shape[2]}] for a kernel of shape {kernel.shape}; "
            f"got {x.shape}."
        )
    if not jnp.issubdtype(xb.dtype, jnp.floating):  # uint8 images: filters must stay real
        xb = promote_float(xb, kernel)[0]
    y = jax.lax.conv_general_dilated(
        xb, kernel.astype(xb.dtype), (1, 1), padding,
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
    )
    y = _activate(y, activation)
    return y[0] if single else y


def dmn_dense_apply(w: jax.Array, x: jax.Array, *, activation: str = "relu") -> jax.Array:
    """Dense DMN layer ``sigma(flatten(x) @ W)``: ``W [D, F]``, ``x [N, ...]`` -> ``[N, F]``.

    ``x`` is a batch: its leading axis is the sample axis and each sample flattens to ``D``
    features (for one sample pass ``x[None]``).  NaN or inf in ``x`` raises ``ValueError``
    (eager calls only; under ``jit`` it gives NaN outputs)."""
    _check_images_finite(x, "dmn_dense_apply")
    return _dense_apply(w, x, activation)


def _dense_apply(w, x, activation):
    """``dmn_dense_apply`` without the finiteness check."""
    if jnp.ndim(w) != 2:
        raise ValueError(f"dmn_dense_apply: w must be a [D, F] kernel, got shape "
                         f"{jnp.shape(w)}.")
    d = w.shape[0]
    if x.ndim < 2 or math.prod(x.shape[1:]) != d:
        per = math.prod(x.shape[1:]) if x.ndim >= 2 else "no"
        raise ValueError(
            f"dmn_dense_apply: x must be a batch [N, ...] whose samples flatten to D = {d} "
            f"features (w has shape {tuple(w.shape)}), got x of shape {tuple(x.shape)} "
            f"({per} features per sample). For one sample pass x[None] (under jax.vmap: vmap "
            "a function of x[None] and take [0]).")
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = promote_float(x, w)[0]
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

    Raises:
      ValueError: ``x`` holds NaN or inf (eager calls: the argument is named; under ``jit``
        the check cannot run and every sample with a non-finite pixel gets all-NaN features,
        also where a NaN would not reach every output), ``params`` do not match
        ``layers`` (one entry per layer), a bad ``padding`` or layer list.
    """
    fn = "dmn_apply"
    layers = check_layers(layers, fn=fn, head=False)
    _check_params(params, layers, fn)
    padding = _check_padding(padding, fn)
    _check_images_finite(x, fn)
    if any(lay.kind == "dmn_conv" for lay in layers) and jnp.ndim(x) != 4:
        raise ValueError(
            f"dmn_apply: x must be a batch of images [N, H, W, C]; got shape {jnp.shape(x)}. "
            "For one image pass x[None] (under jax.vmap over images: vmap a function of "
            "x[None] and take [0]; the per-sample standardisation needs the batch axis).")
    # traced (the eager check above cannot run): a sample with a non-finite pixel is set to
    # NaN at the end (a NaN pixel only reaches the outputs it touches; max_pool_2x2 keeps it
    # within its window)
    bad = _non_finite_rows(x)
    last = max((i for i, lay in enumerate(layers) if lay.kind != "pool"), default=-1)
    for i, (lay, p) in enumerate(zip(layers, params, strict=True)):
        if lay.kind == "dmn_conv":
            x = _conv_apply(p["w"], x, padding, activation)
        elif lay.kind == "dmn_dense":
            x = _dense_apply(p["w"], x, activation)
        elif lay.kind == "pool":
            if x.ndim >= 3:
                _check_poolable(x.shape, f"dmn_apply: layer {i} ({format_spec([lay])})")
            x = max_pool_2x2(x)
        else:
            raise ValueError(f"{fn}: layer {i} ({format_spec([lay])}) of "
                             f"{format_spec(layers)!r} is not a closed-form layer (d, dd, m).")
        if i == last:
            x = standardize_features(x, standardize)
    return _nan_rows(x, bad)


def _non_finite_rows(x: Any) -> jax.Array | None:
    """Traced float ``x [N, ...]``: ``[N]`` True where a sample has a NaN/inf entry; None when
    ``x`` is concrete (checked eagerly instead) or not float."""
    if is_concrete(x) or jnp.ndim(x) < 1 or not jnp.issubdtype(jnp.result_type(x), jnp.inexact):
        return None
    x = jnp.asarray(x)
    return ~jnp.isfinite(x.reshape(x.shape[0], -1)).all(axis=1)


def _nan_rows(y: jax.Array, bad: jax.Array | None) -> jax.Array:
    """``y`` with the samples flagged by ``_non_finite_rows`` set to NaN (unchanged if None)."""
    if bad is None:
        return y
    return jnp.where(bad.reshape((-1,) + (1,) * (y.ndim - 1)), jnp.nan, y)


def _check_params(params: Any, layers: Sequence[Layer], fn: str) -> None:
    """One parameter entry per layer: ``{"w": kernel}`` (rank 4 for ``d``, rank 2 for
    ``dd``) for DMN layers, ``None`` (or ``{}``) for pools."""
    spec = format_spec(layers)
    if isinstance(params, (str, bytes, dict)) or not isinstance(params, Sequence):
        raise TypeError(f"{fn}: params must be a list with one entry per layer of {spec!r} "
                        f"(as build_dmn returns), got {type(params).__name__}.")
    if len(params) != len(layers):
        raise ValueError(
            f"{fn}: params has {len(params)} entries but layers {spec!r} has {len(layers)}: "
            "one per layer ({'w': kernel} for d/dd, None for m), as build_dmn returns them "
            "for the same prefix.")
    for i, (lay, p) in enumerate(zip(layers, params)):
        where = f"{fn}: params[{i}] (layer {i}, {format_spec([lay])})"
        if lay.kind == "pool":
            if not (p is None or isinstance(p, dict) and not p):
                raise ValueError(f"{where} must be None (a pool has no parameters), got "
                                 f"{type(p).__name__}; are params and layers aligned?")
        elif lay.kind in ("dmn_conv", "dmn_dense"):
            want = 4 if lay.kind == "dmn_conv" else 2
            if not isinstance(p, dict) or "w" not in p:
                raise ValueError(f"{where} must be {{'w': kernel}}, got "
                                 f"{'None' if p is None else type(p).__name__}; are params "
                                 "and layers aligned?")
            if jnp.ndim(p["w"]) != want:
                raise ValueError(f"{where}: w must have rank {want} "
                                 f"({'[k, k, C, F]' if want == 4 else '[D, F]'}), got shape "
                                 f"{tuple(jnp.shape(p['w']))}.")


def grid_patches(x: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
    """Non-overlapping ``k x k`` blocks at the grid offsets ``(a, b) in {0..k-2}^2`` (the
    authors' ``get_rho_fast``/``sub_rho``), flattened like ``extract_patches``.

    Args:
      x: ``[N, H, W, C]`` images.
      k: block size (``k >= 2``; ``k = 1`` uses the single offset 0).

    Returns:
      ``(patches [N, P, k*k*C], weights [P])``, the patches in the dtype of ``x``, the weights
      in float (that of ``x`` if float, else float32): the weights make every offset count
      equally and sum to ``P`` (so a weighted sum over an image's patches, divided by ``P``, is the
      authors' per-image density matrix ``mean_offsets mean_blocks p p^T``).
    """
    if x.ndim != 4:
        raise ValueError(f"x must be [N, H, W, C]; got shape {x.shape}.")
    check_int(k, "k", fn="grid_patches", min_value=1)
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
    # the weights are fractions: float even for integer images (uint8 truncated them to 0/1)
    wdt = x.dtype if jnp.issubdtype(x.dtype, jnp.floating) else jnp.float32
    w = jnp.concatenate([jnp.full((c,), p / (len(counts) * c), wdt) for c in counts])
    return jnp.concatenate(blocks, axis=1), w


# ------------------------------------------------------------------------------ build
