"""The data protocol of Ben-David & Ringel (2019), Sec. VI: balanced train, disjoint
balanced validation of the same size, the standard test set.

Built on the public ``layerlab.data`` API (``load``, ``train_val_split``); the older
``layerlab.data.dgl_protocol`` is the same protocol and stays for compatibility.
"""
from __future__ import annotations

import os
from typing import NamedTuple

import numpy as np
from jax.typing import DTypeLike

from layerlab import data
from layerlab._checks import check_int

__all__ = ["DGL_DATASETS", "DGLSplits", "dgl_protocol", "protocol"]

# name -> (base dataset, classes kept, paper's training-set size, zero-mean targets)
DGL_DATASETS = {
    "MNIST10k": ("mnist", None, 10_000, True),
    "CIFAR10_10k": ("cifar10", None, 10_000, False),
    "BMNIST2k": ("mnist", (1, 7), 2_000, True),
}


class DGLSplits(NamedTuple):
    """Train / validation / test :class:`layerlab.data.Dataset` of the DGL protocol."""

    train: data.Dataset
    val: data.Dataset
    test: data.Dataset


def _canonical(name: str) -> str:
    for k in DGL_DATASETS:
        if k.lower() == str(name).lower():
            return k
    raise ValueError(
        f"dgl_protocol: name must be one of {sorted(DGL_DATASETS)} (case-insensitive); "
        f"got {name!r}."
    )


def dgl_protocol(
    name: str,
    *,
    n_train: int | None = None,
    n_val: int | None = None,
    seed: int = 0,
    data_dir: str | os.PathLike | None = None,
    dtype: DTypeLike = np.float32,
) -> DGLSplits:
    """Train / validation / test splits of Table I of Ben-David & Ringel (2019), Sec. VI.

    * ``"MNIST10k"``: 10,000 label-balanced samples drawn from MNIST's training set;
    * ``"CIFAR10_10k"``: the same for CIFAR-10;
    * ``"BMNIST2k"``: digits 1 (label 0) and 7 (label 1), 2,000 balanced samples;

    each with a label-balanced validation set of the same size drawn from the *rest* of the
    training set (disjoint from the training samples), and the standard test set (for
    BMNIST2k its 1s and 7s), which is not balanced.  Images are ``[N, H, W, C]`` in
    ``[0, 1]`` (flatten with ``layerlab.data.flatten``).  The paper's targets are zero-mean
    one-hot except on CIFAR-10 (``DGL_DATASETS[name][3]``).

    Args:
      name: ``"MNIST10k"``, ``"CIFAR10_10k"`` or ``"BMNIST2k"`` (case-insensitive).
      n_train: training-set size (default: the paper's, 10k / 10k / 2k); must be a
        multiple of the number of classes so the set is exactly balanced.
      n_val: validation-set size (default ``n_train``).
      seed: seed of the random selection.
      data_dir: dataset root (see ``layerlab.data.load``).
      dtype: float dtype of the images.

    Returns:
      :class:`DGLSplits` ``(train, val, test)``.
    """
    key = _canonical(name)
    base, classes, n_paper, _ = DGL_DATASETS[key]
    n_train = check_int(n_train, "n_train", fn="dgl_protocol", allow_none=True)
    n_val = check_int(n_val, "n_val", fn="dgl_protocol", allow_none=True)
    n_train = n_paper if n_train is None else n_train  # not int(): 100.9 truncated silently
    n_val = n_train if n_val is None else n_val
    C = 10 if classes is None else len(classes)
    for arg, v in (("n_train", n_train), ("n_val", n_val)):
        if v < C or v % C:
            raise ValueError(
                f"dgl_protocol({key!r}): {arg} must be a positive multiple of the {C} classes "
                f"(the sets are exactly balanced); got {v}."
            )
    full = data.load(base, "train", classes=classes, data_dir=data_dir, dtype=dtype)
    test = data.load(base, "test", classes=classes, data_dir=data_dir, dtype=dtype)
    tr, va = data.train_val_split(full, n_train, n_val, balanced=True, seed=seed)
    return DGLSplits(tr, va, test)


protocol = dgl_protocol
