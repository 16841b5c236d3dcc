"""Image augmentation on flattened rows, in ``jnp`` (jit / vmap / inside a training step).

``random_resized_crop`` is torchvision's ``RandomResizedCrop`` (the "random crops and resizes"
App. L of Buffelli et al. 2024 uses on CIFAR-10; the authors' configs,
``mtkresearch/exact_GN_revNN`` ``research/RevMLP/config/train_cifar_*.yaml``, set
``scale=[0.08, 1.0]``, ``ratio=[0.75, 1.33]``, size 32x32): a box of random area and aspect
ratio is cut out of each image and resized back to the image's size by bilinear interpolation.

Samples are rows at the boundary: ``x`` is ``[n, H*W*C]`` in the row-major HWC order of
:func:`layerlab.data.flatten` (pixel-major, channel-fastest), ``image_shape=(H, W, C)``.
Bilinear interpolation has weights that sum to one, so the augmentation commutes with any
``a * x + b`` standardisation by scalars (or per channel): it can run on standardised rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

__all__ = ["crop_resize", "random_resized_crop", "sample_crop_boxes"]


def _check_rows(x, image_shape, fn: str) -> tuple[int, int, int]:
    if len(image_shape) != 3 or any(int(s) < 1 for s in image_shape):
        raise ValueError(f"{fn}: image_shape must be (H, W, C) of positive sizes, got "
                         f"{tuple(image_shape)!r}.")
    H, W, C = (int(s) for s in image_shape)
    if jnp.ndim(x) != 2 or jnp.shape(x)[1] != H * W * C:
        raise ValueError(f"{fn}: x must be [n, H*W*C] = [n, {H * W * C}] rows for "
                         f"image_shape={(H, W, C)}, got shape {jnp.shape(x)}.")
    return H, W, C


def _axis_weights(start, size, out: int, full: int):
    """Bilinear source indices and weights along one axis (torch ``align_corners=False``):
    output pixel ``o`` reads ``src = (o + 1/2) size/out - 1/2`` of the crop, clamped at 0,
    between crop pixels ``floor(src)`` and ``min(floor(src) + 1, size - 1)``."""
    o = jnp.arange(out, dtype=jnp.float32)
    src = jnp.maximum((o + 0.5) * (size / out) - 0.5, 0.0)
    i0 = jnp.floor(src).astype(jnp.int32)
    lam = src - i0
    i1 = jnp.minimum(i0 + 1, size.astype(jnp.int32) - 1)
    i0 = jnp.minimum(i0, size.astype(jnp.int32) - 1)
    return (jnp.clip(start + i0, 0, full - 1), jnp.clip(start + i1, 0, full - 1), lam)


def _one_crop_resize(img, box, H: int, W: int):
    top, left, h, w = box[0], box[1], box[2], box[3]
    hf, wf = h.astype(jnp.float32), w.astype(jnp.float32)
    r0, r1, ly = _axis_weights(top, hf, H, H)
    c0, c1, lx = _axis_weights(left, wf, W, W)
    rows = (img[r0] * (1.0 - ly)[:, None, None] + img[r1] * ly[:, None, None])  # [H, W, C]
    return rows[:, c0] * (1.0 - lx)[None, :, None] + rows[:, c1] * lx[None, :, None]


def crop_resize(x: ArrayLike, boxes: ArrayLike, *, image_shape: Sequence[int]) -> jax.Array:
    """Cut box ``(top, left, h, w)`` out of each image and resize it to ``(H, W)`` (bilinear).

    .. math:: y[o_r, o_c] = \\sum_{a,b \\in \\{0,1\\}} \\lambda_r^{(a)} \\lambda_c^{(b)}\\,
              x[top + r_a(o_r),\\ left + c_b(o_c)], \\qquad
              src = (o + \\tfrac12)\\,\\tfrac{h}{H} - \\tfrac12

    with the source position clamped to the box (torch's bilinear, ``align_corners=False``).
    Computed in floating point: integer (e.g. uint8) input gives float32 output, unrounded.

    Args:
      x: ``[n, H*W*C]`` rows (HWC order).
      boxes: ``[n, 4]`` integers ``(top, left, h, w)`` with ``0 <= top``, ``top + h <= H``,
        ``0 <= left``, ``left + w <= W``, ``h, w >= 1``.  Not checked (boxes are usually
        traced): indices outside the image are clipped to its border.
      image_shape: ``(H, W, C)``.

    Returns:
      ``[n, H*W*C]`` rows of ``x``'s dtype (float32 for integer ``x``).
    """
    H, W, C = _check_rows(x, image_shape, "crop_resize")
    x = jnp.asarray(x)
    boxes = jnp.asarray(boxes)
    if boxes.shape != (x.shape[0], 4):
        raise ValueError(f"crop_resize: boxes must be [n, 4] = [{x.shape[0]}, 4] "
                         f"(top, left, h, w), got shape {boxes.shape}.")
    imgs = x.reshape(x.shape[0], H, W, C)
    if not jnp.issubdtype(imgs.dtype, jnp.floating):
        imgs = imgs.astype(jnp.float32)
    out = jax.vmap(lambda im, b: _one_crop_resize(im, b.astype(jnp.int32), H, W))(imgs, boxes)
    dtype = x.dtype if jnp.issubdtype(x.dtype, jnp.floating) else jnp.float32
    return out.reshape(x.shape[0], -1).astype(dtype)


def sample_crop_boxes(key: jax.Array, n: int, *, height: int, width: int,
                      scale: tuple[float, float] = (0.08, 1.0),
                      ratio: tuple[float, float] = (3 / 4, 4 / 3),
                      attempts: int = 10) -> jax.Array:
    """``[n, 4]`` boxes ``(top, left, h, w)`` drawn as torchvision's
    ``RandomResizedCrop.get_params``.

    Per image, up to ``attempts`` candidates: area ``s H W`` with ``s ~ U(scale)``, aspect
    ``exp(U(log ratio))``, ``w = round(sqrt(area * aspect))``, ``h = round(sqrt(area /
    aspect))``; the first that fits (``1 <= h <= H``, ``1 <= w <= W``) is placed uniformly
    (``top ~ U{0..H-h}``, ``left ~ U{0..W-w}``).  When none fits: the central crop of the
    whole image with its aspect clamped to ``ratio``.
    """
    if not (0 < scale[0] <= scale[1]):
        raise ValueError(f"sample_crop_boxes: scale must be (lo, hi) with 0 < lo <= hi, got "
                         f"{scale!r}.")
    if not (0 < ratio[0] <= ratio[1]):
        raise ValueError(f"sample_crop_boxes: ratio must be (lo, hi) with 0 < lo <= hi, got "
                         f"{ratio!r}.")
    if attempts < 1:
        raise ValueError(f"sample_crop_boxes: attempts must be >= 1, got {attempts}.")
    area = float(height * width)
    ka, kr, kt, kl = jax.random.split(key, 4)
    s = jax.random.uniform(ka, (n, attempts), minval=scale[0], maxval=scale[1])
    logr = jax.random.uniform(kr, (n, attempts), minval=math.log(ratio[0]),
                              maxval=math.log(ratio[1]))
    ar = jnp.exp(logr)
    # round half to even, as Python's round() in torchvision
    w = jnp.round(jnp.sqrt(s * area * ar)).astype(jnp.int32)
    h = jnp.round(jnp.sqrt(s * area / ar)).astype(jnp.int32)
    ok = (w >= 1) & (w <= width) & (h >= 1) & (h <= height)
    first = jnp.argmax(ok, axis=1)
    any_ok = jnp.any(ok, axis=1)
    h1 = jnp.take_along_axis(h, first[:, None], 1)[:, 0]
    w1 = jnp.take_along_axis(w, first[:, None], 1)[:, 0]
    # torchvision: randint(0, H - h + 1), i.e. uniform on {0, ..., H - h}
    top = jnp.floor(jax.random.uniform(kt, (n,)) * (height - h1 + 1)).astype(jnp.int32)
    left = jnp.floor(jax.random.uniform(kl, (n,)) * (width - w1 + 1)).astype(jnp.int32)
    top = jnp.minimum(top, height - h1)
    left = jnp.minimum(left, width - w1)
    # fallback: central crop, aspect clamped to ratio
    in_ratio = width / height
    if in_ratio < ratio[0]:
        fw, fh = width, int(round(width / ratio[0]))
    elif in_ratio > ratio[1]:
        fh, fw = height, int(round(height * ratio[1]))
    else:
        fw, fh = width, height
    ft, fl = (height - fh) // 2, (width - fw) // 2
    fb = jnp.asarray([ft, fl, fh, fw], jnp.int32)
    boxes = jnp.stack([top, left, h1, w1], axis=1)
    return jnp.where(any_ok[:, None], boxes, fb[None, :])


def random_resized_crop(key: jax.Array, x: ArrayLike, *, image_shape: Sequence[int],
                        scale: tuple[float, float] = (0.08, 1.0),
                        ratio: tuple[float, float] = (3 / 4, 4 / 3),
                        attempts: int = 10) -> jax.Array:
    """torchvision's ``RandomResizedCrop(size=(H, W), scale, ratio)`` on rows, one box per row.

    Boxes from :func:`sample_crop_boxes`, cut and resized by :func:`crop_resize` (bilinear,
    torch's ``align_corners=False``; a box is never larger than the image, so the antialias
    option of torchvision does not enter).  Pure ``jnp``: call it inside a jitted step with
    the step's key.

    Args:
      key: ``jax.random.key``.
      x: ``[n, H*W*C]`` rows (HWC order, as :func:`layerlab.data.flatten` makes them).
      image_shape: ``(H, W, C)``.
      scale: range of the box's area as a fraction of ``H W``.
      ratio: range of the box's aspect ``w / h`` (sampled log-uniformly; torchvision's default
        ``(3/4, 4/3)``, the authors' CIFAR-10 configs ``(0.75, 1.33)``).
      attempts: candidates per image before the central-crop fallback (torchvision: 10).

    Returns:
      ``[n, H*W*C]`` augmented rows.

    References:
      App. L of Buffelli et al. 2024 ("random crops and resizes"); torchvision
      ``transforms.RandomResizedCrop``.
    """
    H, W, _ = _check_rows(x, image_shape, "random_resized_crop")
    boxes = sample_crop_boxes(key, jnp.shape(x)[0], height=H, width=W, scale=scale,
                              ratio=ratio, attempts=attempts)
    return crop_resize(x, boxes, image_shape=image_shape)
