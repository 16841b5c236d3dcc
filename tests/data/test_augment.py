"""Tests for layerlab.data._augment (RandomResizedCrop on rows)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from layerlab import data as D


def _torch_bilinear_numpy(img, top, left, h, w, H, W):
    """A per-pixel loop of torch's bilinear resize (align_corners=False) of a cut-out box."""
    crop = img[top:top + h, left:left + w]
    out = np.zeros((H, W, img.shape[2]), np.float64)
    for r in range(H):
        sr = max((r + 0.5) * h / H - 0.5, 0.0)
        r0 = int(math.floor(sr))
        r1 = r0 + 1 if r0 < h - 1 else r0
        a = sr - r0
        for c in range(W):
            sc = max((c + 0.5) * w / W - 0.5, 0.0)
            c0 = int(math.floor(sc))
            c1 = c0 + 1 if c0 < w - 1 else c0
            b = sc - c0
            out[r, c] = ((1 - a) * ((1 - b) * crop[r0, c0] + b * crop[r0, c1])
                         + a * ((1 - b) * crop[r1, c0] + b * crop[r1, c1]))
    return out


BOXES = np.array([[0, 0, 12, 10], [3, 2, 5, 7], [7, 0, 5, 10], [0, 0, 1, 1], [4, 6, 8, 4]])


def test_crop_resize_matches_a_pixel_loop_and_jax_image_resize():
    H, W, C = 12, 10, 3
    x = np.random.default_rng(0).normal(size=(len(BOXES), H * W * C)).astype(np.float32)
    y = np.asarray(D.crop_resize(jnp.asarray(x), BOXES, image_shape=(H, W, C)))
    assert y.shape == x.shape and y.dtype == np.float32
    np.testing.assert_array_equal(y[0], x[0])  # the whole image: unchanged
    for k, (t, lft, h, w) in enumerate(BOXES):
        img = x[k].reshape(H, W, C)
        ref = _torch_bilinear_numpy(img.astype(np.float64), t, lft, h, w, H, W)
        np.testing.assert_allclose(y[k].reshape(H, W, C), ref, atol=1e-5, rtol=1e-5)
        # a second route: JAX's own half-pixel linear resize of the cut-out box
        # (upsampling only, so no antialiasing; its edge renormalisation equals torch's clamp)
        ref2 = jax.image.resize(jnp.asarray(img[t:t + h, lft:lft + w]), (H, W, C), "linear",
                                antialias=False)
        np.testing.assert_allclose(y[k].reshape(H, W, C), np.asarray(ref2), atol=1e-5, rtol=1e-5)


def test_crop_resize_commutes_with_scalar_standardisation():
    H, W, C = 8, 8, 2
    x = np.random.default_rng(1).uniform(0, 255, size=(3, H * W * C)).astype(np.float32)
    b = np.array([[1, 2, 5, 4], [0, 0, 1, 1], [3, 3, 5, 5]])
    f = lambda z: np.asarray(D.crop_resize(jnp.asarray(z), b, image_shape=(H, W, C)))  # noqa: E731
    np.testing.assert_allclose(f((x - 120.0) / 60.0), (f(x) - 120.0) / 60.0, atol=1e-4)


def _torchvision_get_params_numpy(rng, H, W, scale, ratio, attempts=10):
    """torchvision.transforms.RandomResizedCrop.get_params, transcribed with numpy's RNG."""
    area = H * W
    for _ in range(attempts):
        target = area * rng.uniform(*scale)
        ar = math.exp(rng.uniform(math.log(ratio[0]), math.log(ratio[1])))
        w = int(round(math.sqrt(target * ar)))
        h = int(round(math.sqrt(target / ar)))
        if 0 < w <= W and 0 < h <= H:
            return rng.integers(0, H - h + 1), rng.integers(0, W - w + 1), h, w
    in_ratio = W / H
    if in_ratio < min(ratio):
        w, h = W, int(round(W / min(ratio)))
    elif in_ratio > max(ratio):
        h, w = H, int(round(H * max(ratio)))
    else:
        w, h = W, H
    return (H - h) // 2, (W - w) // 2, h, w


@pytest.mark.parametrize("H,W,scale", [(32, 32, (0.08, 1.0)), (16, 24, (0.3, 1.0))])
def test_sample_crop_boxes_follow_torchvisions_distribution(H, W, scale):
    n = 20000
    ratio = (3 / 4, 4 / 3)
    b = np.asarray(D.sample_crop_boxes(jax.random.key(3), n, height=H, width=W, scale=scale,
                                       ratio=ratio))
    top, left, h, w = b.T
    assert (h >= 1).all() and (w >= 1).all()
    assert (top >= 0).all() and (left >= 0).all()
    assert (top + h <= H).all() and (left + w <= W).all()
    rng = np.random.default_rng(7)
    ref = np.array([_torchvision_get_params_numpy(rng, H, W, scale, ratio) for _ in range(n)])
    for name, ours, theirs in [
            ("area fraction", h * w / (H * W), ref[:, 2] * ref[:, 3] / (H * W)),
            ("log aspect", np.log(w / h), np.log(ref[:, 3] / ref[:, 2])),
            ("relative top", top / np.maximum(H - h, 1), ref[:, 0] / np.maximum(H - ref[:, 2], 1)),
            ("relative left", left / np.maximum(W - w, 1),
             ref[:, 1] / np.maximum(W - ref[:, 3], 1))]:
        se = math.sqrt(ours.var() / n + theirs.var() / n)
        assert abs(ours.mean() - theirs.mean()) < 5 * se, (name, ours.mean(), theirs.mean())


def test_sample_crop_boxes_falls_back_to_the_clamped_central_crop():
    # a 4x32 image: no box of area >= 0.9 * 128 with aspect in [1, 1] fits -> central 4x4
    b = np.asarray(D.sample_crop_boxes(jax.random.key(0), 5, height=4, width=32,
                                       scale=(0.9, 1.0), ratio=(1.0, 1.0)))
    np.testing.assert_array_equal(b, np.tile([0, 14, 4, 4], (5, 1)))


def test_random_resized_crop_jits_and_rejects_bad_input():
    H, W, C = 6, 6, 1
    x = jnp.arange(2 * H * W * C, dtype=jnp.float32).reshape(2, -1)
    f = jax.jit(lambda k, z: D.random_resized_crop(k, z, image_shape=(H, W, C)))
    y1, y2 = f(jax.random.key(0), x), f(jax.random.key(0), x)
    np.testing.assert_array_equal(y1, y2)  # a function of the key
    assert not np.array_equal(np.asarray(f(jax.random.key(1), x)), np.asarray(y1))
    # values stay within each image's range (convex combinations of its pixels)
    assert (np.asarray(y1).min(1) >= np.asarray(x).min(1)).all()
    assert (np.asarray(y1).max(1) <= np.asarray(x).max(1)).all()
    with pytest.raises(ValueError, match=r"x must be \[n, H\*W\*C\] = \[n, 36\]"):
        D.random_resized_crop(jax.random.key(0), x[:, :30], image_shape=(H, W, C))
    with pytest.raises(ValueError, match="image_shape must be"):
        D.random_resized_crop(jax.random.key(0), x, image_shape=(H, W))
    with pytest.raises(ValueError, match="scale must be"):
        D.random_resized_crop(jax.random.key(0), x, image_shape=(H, W, C), scale=(0.5, 0.1))
    # integer images: float32 out, the same numbers as from float input
    xi = (jnp.arange(2 * H * W * C) % 7).astype(jnp.uint8).reshape(2, -1)
    box = np.array([[1, 1, 4, 3], [0, 2, 5, 2]])
    yi = D.crop_resize(xi, box, image_shape=(H, W, C))
    assert yi.dtype == jnp.float32
    np.testing.assert_allclose(yi, D.crop_resize(xi.astype(jnp.float32), box,
                                                 image_shape=(H, W, C)), rtol=1e-6)
    with pytest.raises(ValueError, match=r"boxes must be \[n, 4\]"):
        D.crop_resize(x, np.zeros((3, 4), int), image_shape=(H, W, C))
