"""Transforms: flatten, scaling, one-hot targets, balanced subsets/splits, patches.

Array transforms accept numpy or jax arrays and return the same kind (numpy in, numpy
out; jax in, jax out -- those are pure ``jnp`` code and can be jitted by the caller).
Dataset transforms (subsets and splits) work on the host on :class:`Dataset` objects.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike

from layerlab._checks import check_int, is_concrete
from layerlab.data._dataset import Dataset

__all__ = [
    "flatten",
    "standardize",
    "scale",
    "l2_normalize",
    "one_hot",
    "random_subset",
    "balanced_subset",
    "train_val_split",
    "select_classes",
    "extract_patches",
    "per_class_counts",
]


def _xp(*arrays):
    return jnp if any(isinstance(a, jax.Array) for a in arrays) else np


def _as_float(x, xp):
    """``x`` in the dtype of a float transform's output: numpy arrays in
    ``np.result_type(x.dtype, float32)`` (uint8 -> float32, int64 -> float64, float64 stays);
    jax arrays keep a float dtype (bfloat16 stays) and integers go to ``result_type(x,
    float32)``.  Computing in it keeps integer inputs from wrapping around (``x * x`` in
    uint8) and from being truncated on return."""
    if xp is np:
        x = np.asarray(x)
        return x.astype(np.result_type(x.dtype, np.float32), copy=False)
    if jnp.issubdtype(x.dtype, jnp.inexact):
        return x
    return x.astype(jnp.result_type(x.dtype, jnp.float32))


def _check_batch(x, fn: str, min_ndim: int = 2):
    if x is None or isinstance(x, (str, bytes, dict)):
        raise TypeError(f"{fn}: x must be an array with a leading sample axis, got "
                        f"{type(x).__name__}.")
    if np.ndim(x) < min_ndim:
        raise ValueError(
            f"{fn} expects a batch with a leading sample axis and at least {min_ndim} dims, "
            f"got shape {np.shape(x)}."
        )


# ----------------------------------------------------------------------------- arrays
def flatten(x: np.ndarray | jax.Array) -> np.ndarray | jax.Array:
    """Flatten every sample: ``[N, d1, d2, ...] -> [N, d1*d2*...]`` (row-major, so HWC images
    become pixel-major, channel-fastest vectors).

    Args:
      x: ``[N, ...]`` array.

    Returns:
      ``[N, prod(x.shape[1:])]``.
    """
    _check_batch(x, "flatten", 1)
    return x.reshape(x.shape[0], -1)


def standardize(
    x: np.ndarray | jax.Array, mean: ArrayLike | None = None, std: ArrayLike | None = None, *,
    eps: float = 1e-8,
) -> tuple[np.ndarray | jax.Array, np.ndarray | jax.Array, np.ndarray | jax.Array]:
    r"""Per-feature standardisation :math:`(x - \mu) / \sigma` over the sample axis.

    .. math:: \mu = \tfrac1N \sum_n x_n, \qquad
              \sigma = \sqrt{\tfrac1N \sum_n (x_n - \mu)^2}
              \ (\text{set to } 1 \text{ where } \sigma<\epsilon)

    Compute the statistics on the training set and reuse them on the test set::

        x_tr, mu, sd = standardize(train.x)
        x_te, _, _ = standardize(test.x, mu, sd)

    Args:
      x: ``[N, ...]`` inputs; every entry of ``x.shape[1:]`` is one feature.
      mean, std: ``x.shape[1:]`` statistics to reuse; both or neither.
      eps: features with ``std < eps`` (constant features such as MNIST's border pixels)
        are only centred (their std is taken as 1), never divided by ~0.

    Returns:
      ``(x_standardized [N, ...], mean [...], std [...])``; for numpy ``x`` the result has
      dtype ``np.result_type(x.dtype, np.float32)`` (integer inputs give floats).
    """
    _check_batch(x, "standardize", 1)
    xp = _xp(x, mean, std)
    if (mean is None) != (std is None):
        raise ValueError("standardize: pass both `mean` and `std` (to reuse them) or neither.")
    out_dtype = _as_float(x[:0], _xp(x)).dtype
    x = _as_float(x, xp)
    if mean is None:
        mean = x.mean(axis=0)
        std = x.std(axis=0)
        std = xp.where(std < eps, xp.ones_like(std), std)
    if np.shape(mean) != tuple(x.shape[1:]) or np.shape(std) != tuple(x.shape[1:]):
        raise ValueError(
            f"standardize: mean/std shapes {np.shape(mean)}/{np.shape(std)} do not match the "
            f"feature shape {tuple(x.shape[1:])}."
        )
    xs = (x - mean[None]) / std[None]
    return xs.astype(out_dtype) if xp is np else xs, mean, std


def scale(
    x: np.ndarray | jax.Array, *, low: float = 0.0, high: float = 1.0,
    x_min: ArrayLike | None = None, x_max: ArrayLike | None = None,
) -> tuple[np.ndarray | jax.Array, np.ndarray | jax.Array, np.ndarray | jax.Array]:
    r"""Per-feature min-max scaling to ``[low, high]``.

    .. math:: x' = \text{low} + (\text{high}-\text{low})\,\frac{x - x_{\min}}{x_{\max}-x_{\min}}

    Constant features (``x_max == x_min``) map to ``low``.

    Args:
      x: ``[N, ...]`` inputs.
      low, high: target range.
      x_min, x_max: ``x.shape[1:]`` statistics to reuse (e.g. the training set's); both or
        neither.

    Returns:
      ``(x_scaled [N, ...], x_min [...], x_max [...])``; for numpy ``x`` the result has dtype
      ``np.result_type(x.dtype, np.float32)`` (integer inputs give floats).
    """
    _check_batch(x, "scale", 1)
    xp = _xp(x, x_min, x_max)
    if (x_min is None) != (x_max is None):
        raise ValueError("scale: pass both `x_min` and `x_max` (to reuse them) or neither.")
    out_dtype = _as_float(x[:0], _xp(x)).dtype
    x = _as_float(x, xp)
    if x_min is None:
        x_min, x_max = x.min(axis=0), x.max(axis=0)
    lo, hi = _as_float(xp.asarray(x_min), xp), _as_float(xp.asarray(x_max), xp)
    rng = hi - lo  # (in floats: integer statistics reused on other data must not wrap)
    rng = xp.where(rng == 0, xp.ones_like(rng), rng)
    xs = low + (high - low) * (x - lo[None]) / rng[None]
    return xs.astype(out_dtype) if xp is np else xs, x_min, x_max


def l2_normalize(x: np.ndarray | jax.Array, *, radius: float = 1.0,
                 eps: float = 1e-12) -> np.ndarray | jax.Array:
    r"""Project every sample onto a sphere: :math:`x_n \mapsto r\,x_n/\|x_n\|`, ``r = radius``.

    (Kernel papers often put inputs on the sphere; ``radius=sqrt(d)`` keeps unit variance
    per coordinate.)  Zero samples stay zero.

    Args:
      x: ``[N, ...]``; the norm is over all of ``x.shape[1:]``.

    Returns:
      ``[N, ...]``; numpy ``x`` gives dtype ``np.result_type(x.dtype, np.float32)``, jax
      integer ``x`` a float dtype.
    """
    _check_batch(x, "l2_normalize", 1)
    xp = _xp(x)
    x = _as_float(x, xp)  # (uint8 x * x wraps around)
    axes = tuple(range(1, x.ndim))
    norm = xp.sqrt((x * x).sum(axis=axes, keepdims=True))
    out = radius * x / xp.maximum(norm, eps)
    return out.astype(x.dtype) if xp is np else out


def one_hot(y: ArrayLike, num_classes: int, *, zero_mean: bool = False,
            dtype: DTypeLike = np.float32) -> np.ndarray | jax.Array:
    r"""One-hot targets, optionally zero-mean.

    .. math:: T_{nc} = [y_n = c] - \tfrac{1}{C}\,[\text{zero\_mean}]

    The zero-mean variant (rows sum to 0) is the DGL paper's target encoding for MNIST.

    Args:
      y: ``[N]`` integer labels in ``[0, num_classes)``.
      num_classes: ``C``.
      zero_mean: subtract ``1/C`` from every entry.
      dtype: output dtype.

    Returns:
      ``[N, C]``.
    """
    if y is None or isinstance(y, (str, bytes)):
        raise TypeError(f"one_hot: y must be an array of integer labels, got {y!r:.40}.")
    if np.ndim(y) != 1:
        raise ValueError(f"one_hot expects labels of shape [N], got {np.shape(y)}.")
    num_classes = check_int(num_classes, "num_classes", fn="one_hot", min_value=1)
    xp = _xp(y)
    y = np.asarray(y) if xp is np else y
    if not xp.issubdtype(y.dtype, xp.integer):
        raise TypeError(f"one_hot expects integer labels, got dtype {y.dtype}.")
    if is_concrete(y) and y.size:  # numpy and eager jax arrays alike (skipped under jit)
        lo, hi = int(y.min()), int(y.max())
        if lo < 0 or hi >= num_classes:
            raise ValueError(
                f"one_hot: labels must lie in [0, {num_classes}), got range "
                f"[{lo}, {hi}]; pass the right num_classes or relabel "
                "(select_classes(..., relabel=True))."
            )
    t = (y[:, None] == xp.arange(num_classes)[None, :]).astype(dtype)
    if zero_mean:
        t = t - xp.asarray(1.0 / num_classes, dtype=dtype)
    return t


# --------------------------------------------------------------------------- datasets
def per_class_counts(n: int, num_classes: int) -> np.ndarray:
    """How :func:`balanced_subset` divides ``n`` samples over classes: ``n // C`` each, and
    one more for each of the first ``n % C`` classes.

    Returns:
      ``[C]`` int counts summing to ``n``.
    """
    n = check_int(n, "n", fn="per_class_counts", min_value=0)
    num_classes = check_int(num_classes, "num_classes", fn="per_class_counts", min_value=1)
    counts = np.full(num_classes, n // num_classes, dtype=np.int64)
    counts[: n % num_classes] += 1
    return counts


def check_seed(seed, fn: str):
    """The seed of a random subset or split, checked: an integer ``>= 0`` (numpy's
    ``default_rng``), a jax key (typed, or a raw ``uint32[2]``) or an array of non-negative
    integers (``default_rng`` entropy); returned as given (an integer as ``int``).  A float
    array is refused (its values would be truncated to integers)."""
    if isinstance(seed, jax.Array) and jnp.issubdtype(seed.dtype, jax.dtypes.prng_key):
        return seed
    if isinstance(seed, (jax.Array, np.ndarray)) and np.ndim(seed) > 0:
        if not jnp.issubdtype(seed.dtype, jnp.integer):
            raise TypeError(
                f"{fn}: seed must be an integer, a jax key (jax.random.key) or an array of "
                f"non-negative integers; got an array of dtype {seed.dtype} and shape "
                f"{tuple(seed.shape)} (its values would be truncated).")
        if is_concrete(seed) and seed.size and int(np.min(np.asarray(seed))) < 0:
            raise ValueError(f"{fn}: seed must hold non-negative integers, got values down to "
                             f"{int(np.min(np.asarray(seed)))}.")
        return seed
    return check_int(seed, "seed", fn=fn, min_value=0)


def _rng(seed, fn: str = "random_subset") -> np.random.Generator:
    seed = check_seed(seed, fn)
    if isinstance(seed, jax.Array):
        # a typed or raw jax key: derive a host seed from it deterministically
        data = (
            jax.random.key_data(seed) if jnp.issubdtype(seed.dtype, jax.dtypes.prng_key) else seed
        )
        return np.random.default_rng(np.asarray(data, dtype=np.uint32).ravel().tolist())
    return np.random.default_rng(seed)


def _class_perms(ds: Dataset, rng: np.random.Generator) -> list[np.ndarray]:
    if not ds.is_classification:
        raise ValueError(
            f"Dataset {ds.name!r} is a regression dataset (num_classes=0): a label-balanced "
            "subset is not defined; use random_subset / balanced=False."
        )
    y = np.asarray(ds.y)
    return [rng.permutation(np.flatnonzero(y == c)) for c in range(ds.num_classes)]


def _need(ds: Dataset, perms, counts, what: str):
    for c, (p, k) in enumerate(zip(perms, counts)):
        if len(p) < k:
            name = ds.class_names[c] if ds.class_names else c
            raise ValueError(
                f"{what}: class {name!r} of {ds.name!r}/{ds.split} has only {len(p)} samples, "
                f"{k} are needed. Ask for fewer samples or use balanced=False."
            )


def random_subset(ds: Dataset, n: int, seed: int | jax.Array = 0) -> Dataset:
    """``n`` samples drawn without replacement (uniformly, not label-balanced), kept in their
    original order.

    Args:
      ds: dataset of ``N >= n`` samples.
      n: subset size.
      seed: int seed (numpy ``default_rng``) or a jax key.
    """
    n = check_int(n, "n", fn="random_subset", min_value=0)
    if not 0 <= n <= len(ds):
        raise ValueError(f"random_subset: n={n} but {ds.name!r}/{ds.split} has {len(ds)} samples.")
    idx = np.sort(_rng(seed, "random_subset").permutation(len(ds))[:n])
    return ds.subset(idx)


def balanced_subset(ds: Dataset, n: int, seed: int | jax.Array = 0) -> Dataset:
    """A label-balanced subset of ``n`` samples (see :func:`per_class_counts` for ``n % C``),
    drawn without replacement per class and kept in the original order.

    Args:
      ds: classification dataset.
      n: total subset size.
      seed: int seed (numpy ``default_rng``) or a jax key.
    """
    n = check_int(n, "n", fn="balanced_subset", min_value=0)
    if 0 < n < ds.num_classes:
        raise ValueError(
            f"balanced_subset: n = {n} is below the {ds.num_classes} classes, so no subset of "
            "it is label-balanced; ask for at least one sample per class, or pass "
            "balanced=False for a uniform random subset.")
    rng = _rng(seed, "balanced_subset")
    perms = _class_perms(ds, rng)
    counts = per_class_counts(n, ds.num_classes)
    _need(ds, perms, counts, "balanced_subset")
    idx = np.sort(np.concatenate([p[:k] for p, k in zip(perms, counts)]))
    return ds.subset(idx)


def train_val_split(
    ds: Dataset, n_train: int, n_val: int, *, balanced: bool = True, seed: int | jax.Array = 0
) -> tuple[Dataset, Dataset]:
    """Two disjoint subsets: ``n_train`` training and ``n_val`` validation samples.

    With ``balanced=True`` both are label-balanced (per class: a random permutation of that
    class's samples, the first ``n_train/C`` go to train, the next ``n_val/C`` to val).
    This is the DGL paper's protocol (MNIST10k: 10,000 balanced training samples from the
    official training set and a disjoint, equally sized, balanced validation set; the
    official test set stays the test set) -- see :func:`layerlab.data.dgl_protocol`.

    Args:
      ds: the dataset to split (usually the official training split).
      n_train, n_val: sizes.
      balanced: label-balanced (classification only) or uniform random.
      seed: int seed or jax key.

    Returns:
      ``(train, val)`` datasets, splits named ``"train"`` and ``"val"``, each in original order.

    Raises:
      ValueError: with ``balanced=True``, a size between 1 and ``C - 1`` (no balanced subset;
        as :func:`balanced_subset`), or a class with fewer than ``n_train/C + n_val/C``
        samples.
    """
    n_train = check_int(n_train, "n_train", fn="train_val_split", min_value=0)
    n_val = check_int(n_val, "n_val", fn="train_val_split", min_value=0)
    rng = _rng(seed, "train_val_split")
    if balanced:
        perms = _class_perms(ds, rng)
        for name, k in (("n_train", n_train), ("n_val", n_val)):
            if 0 < k < ds.num_classes:
                raise ValueError(
                    f"train_val_split: {name} = {k} is below the {ds.num_classes} classes, so "
                    "no split of it is label-balanced; ask for at least one sample per class, "
                    "or pass balanced=False for uniform random splits.")
        ct, cv = per_class_counts(n_train, ds.num_classes), per_class_counts(n_val, ds.num_classes)
        _need(ds, perms, ct + cv, "train_val_split")
        tr = np.concatenate([p[:a] for p, a in zip(perms, ct)])
        va = np.concatenate([p[a : a + b] for p, a, b in zip(perms, ct, cv)])
    else:
        if n_train + n_val > len(ds):
            raise ValueError(
                f"train_val_split: {n_train}+{n_val} samples requested, {ds.name!r} has {len(ds)}."
            )
        p = rng.permutation(len(ds))
        tr, va = p[:n_train], p[n_train : n_train + n_val]
    return ds.subset(np.sort(tr), split="train"), ds.subset(np.sort(va), split="val")


def _is_integer(c) -> bool:
    """A Python/numpy integer or a 0-d integer array (not a bool, not ``1.7`` nor ``2.0``)."""
    if isinstance(c, (bool, np.bool_)):
        return False
    if isinstance(c, (int, np.integer)):
        return True
    dtype = getattr(c, "dtype", None)
    return dtype is not None and np.ndim(c) == 0 and np.issubdtype(dtype, np.integer)


def check_classes(classes, fn: str) -> list:
    """``classes`` as a list: a sequence of labels or class names.  A single label or name
    (``7``, or ``"17"``, which would be read character by character) is refused."""
    if isinstance(classes, (str, bytes)) or not isinstance(classes, Iterable) or getattr(
            classes, "ndim", 1) == 0:
        raise TypeError(
            f"{fn}: classes must be a sequence of class labels or names, e.g. (1, 7); got "
            f"{type(classes).__name__} {classes!r} (for a single class pass ({classes!r},)).")
    return list(classes)


def select_classes(ds: Dataset, classes: Sequence[Any], *, relabel: bool = True) -> Dataset:
    """Keep only the samples of ``classes`` (e.g. digits ``(1, 7)``).

    Args:
      ds: classification dataset.
      classes: class labels (integers; a float such as ``1.7`` is refused, not truncated)
        or class names (when ``ds.class_names`` is known).
      relabel: map ``classes[i] -> i`` (so ``(1, 7)`` becomes a binary 0/1 task, with
        ``num_classes = len(classes)``); otherwise keep the original labels.
    """
    if not ds.is_classification:
        raise ValueError(f"select_classes: {ds.name!r} is a regression dataset.")
    labels = []
    for c in check_classes(classes, "select_classes"):
        if isinstance(c, str):
            if not ds.class_names or c not in ds.class_names:
                raise ValueError(
                    f"select_classes: unknown class name {c!r} for {ds.name!r} "
                    f"(known: {ds.class_names})."
                )
            c = ds.class_names.index(c)
        elif not _is_integer(c):
            raise TypeError(
                f"select_classes: classes must hold integer labels or class names, got "
                f"{c!r} ({type(c).__name__}) in {classes!r}.")
        c = int(c)
        if not 0 <= c < ds.num_classes:
            raise ValueError(
                f"select_classes: class {c} out of range for {ds.name!r} "
                f"({ds.num_classes} classes)."
            )
        labels.append(c)
    if len(set(labels)) != len(labels) or not labels:
        raise ValueError(f"select_classes: classes must be distinct and non-empty, got {classes}.")
    y = np.asarray(ds.y)
    mask = np.isin(y, labels)
    out = ds.subset(mask)
    if not relabel:
        return out
    lut = np.full(ds.num_classes, -1, dtype=np.int32)
    lut[labels] = np.arange(len(labels), dtype=np.int32)
    names = tuple(ds.class_names[c] for c in labels) if ds.class_names else None
    return out.replace(y=lut[np.asarray(out.y)], num_classes=len(labels), class_names=names)


# ---------------------------------------------------------------------------- patches
def _same_pads(size: int, k: int, s: int) -> tuple[int, int]:
    out = -(-size // s)
    total = max((out - 1) * s + k - size, 0)
    return total // 2, total - total // 2


def extract_patches(x: np.ndarray | jax.Array, k: int | tuple[int, int], *,
                    stride: int | tuple[int, int] = 1,
                    padding: str = "VALID") -> np.ndarray | jax.Array:
    r"""All ``k x k`` patches of a batch of images, flattened spatial-major.

    .. math:: P[n, i, j, (a\,k_w + b)\,C + c] = \tilde x[n,\ i s_h + a,\ j s_w + b,\ c]

    where :math:`\tilde x` is ``x`` zero-padded as ``lax.conv`` pads it (``"SAME"``: output
    size ``ceil(H/s)``, padding split low = total//2, high = the rest).  The feature
    ordering is **spatial-major, channel-fastest** ``(a, b, c)``, i.e. the ordering of an
    ``HWIO`` convolution kernel flattened to ``[kh*kw*C, O]``: ``extract_patches(x, k) @
    w.reshape(-1, O)`` equals ``lax.conv_general_dilated(x, w, ..., ('NHWC','HWIO','NHWC'))``.
    (``jax.lax.conv_general_dilated_patches`` orders channel-major ``(c, a, b)`` instead.)

    Args:
      x: ``[N, H, W, C]`` images (numpy or jax).
      k: patch size, int or ``(kh, kw)``.
      stride: int or ``(sh, sw)``.
      padding: ``"VALID"`` or ``"SAME"``.

    Returns:
      ``[N, H', W', kh*kw*C]`` with ``H' = (H - kh)//sh + 1`` (VALID) or ``ceil(H/sh)`` (SAME).
    """
    if np.ndim(x) != 4:
        raise ValueError(f"extract_patches expects images [N, H, W, C], got shape {np.shape(x)}.")
    kh, kw = (k, k) if np.ndim(k) == 0 else tuple(k)
    sh, sw = (stride, stride) if np.ndim(stride) == 0 else tuple(stride)
    if min(kh, kw, sh, sw) < 1:
        raise ValueError(f"extract_patches: k and stride must be >= 1, got k={k}, stride={stride}.")
    padding = padding.upper()
    n, h, w, c = x.shape
    xp = _xp(x)
    if padding == "SAME":
        ph, pw = _same_pads(h, kh, sh), _same_pads(w, kw, sw)
        x = xp.pad(x, ((0, 0), ph, pw, (0, 0)))
        h, w = h + sum(ph), w + sum(pw)
    elif padding != "VALID":
        raise ValueError(f"extract_patches: padding must be 'VALID' or 'SAME', got {padding!r}.")
    if kh > h or kw > w:
        raise ValueError(f"extract_patches: {kh}x{kw} patches do not fit {h}x{w} images (VALID).")
    ho, wo = (h - kh) // sh + 1, (w - kw) // sw + 1
    cols = [
        x[:, a : a + (ho - 1) * sh + 1 : sh, b : b + (wo - 1) * sw + 1 : sw, :]
        for a in range(kh)
        for b in range(kw)
    ]
    return xp.stack(cols, axis=3).reshape(n, ho, wo, kh * kw * c)
