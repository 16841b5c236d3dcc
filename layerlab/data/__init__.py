"""Datasets for layerlab: embedded, from original files, synthetic; and their transforms.

``load(name, split, ...)`` returns a :class:`Dataset` of host numpy arrays; see
``docs/data.md`` for the file layout under ``data_dir`` / ``$LAYERLAB_DATA``.

Importing this package is cheap (no JAX): the names below are loaded on first use, so
``python -m layerlab.data --help`` answers at once.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover - static view of the lazy names
    from layerlab.data._augment import crop_resize as crop_resize
    from layerlab.data._augment import random_resized_crop as random_resized_crop
    from layerlab.data._augment import sample_crop_boxes as sample_crop_boxes
    from layerlab.data._dataset import Dataset as Dataset
    from layerlab.data._dataset import DatasetNotFoundError as DatasetNotFoundError
    from layerlab.data._download import DownloadError as DownloadError
    from layerlab.data._download import download as download
    from layerlab.data._files import ENV_VAR as ENV_VAR
    from layerlab.data._files import clear_cache as clear_cache
    from layerlab.data._files import data_roots as data_roots
    from layerlab.data._files import read_idx as read_idx
    from layerlab.data._files import verify_file as verify_file
    from layerlab.data._loaders import DATASETS as DATASETS
    from layerlab.data._loaders import DGLSplits as DGLSplits
    from layerlab.data._loaders import dgl_protocol as dgl_protocol
    from layerlab.data._loaders import holdout_mask as holdout_mask
    from layerlab.data._loaders import load as load
    from layerlab.data._registry import DatasetCorruptError as DatasetCorruptError
    from layerlab.data._synthetic import latent as latent
    from layerlab.data._synthetic import teacher as teacher
    from layerlab.data._targets import as_labels as as_labels
    from layerlab.data._targets import as_targets as as_targets
    from layerlab.data._transforms import balanced_subset as balanced_subset
    from layerlab.data._transforms import extract_patches as extract_patches
    from layerlab.data._transforms import flatten as flatten
    from layerlab.data._transforms import l2_normalize as l2_normalize
    from layerlab.data._transforms import one_hot as one_hot
    from layerlab.data._transforms import per_class_counts as per_class_counts
    from layerlab.data._transforms import random_subset as random_subset
    from layerlab.data._transforms import scale as scale
    from layerlab.data._transforms import select_classes as select_classes
    from layerlab.data._transforms import standardize as standardize
    from layerlab.data._transforms import train_val_split as train_val_split

_LAZY = {
    "crop_resize": "layerlab.data._augment",
    "random_resized_crop": "layerlab.data._augment",
    "sample_crop_boxes": "layerlab.data._augment",
    "Dataset": "layerlab.data._dataset",
    "DatasetNotFoundError": "layerlab.data._dataset",
    "ENV_VAR": "layerlab.data._files",
    "clear_cache": "layerlab.data._files",
    "data_roots": "layerlab.data._files",
    "read_idx": "layerlab.data._files",
    "DATASETS": "layerlab.data._loaders",
    "DGLSplits": "layerlab.data._loaders",
    "dgl_protocol": "layerlab.data._loaders",
    "holdout_mask": "layerlab.data._loaders",
    "load": "layerlab.data._loaders",
    "latent": "layerlab.data._synthetic",
    "teacher": "layerlab.data._synthetic",
    "balanced_subset": "layerlab.data._transforms",
    "extract_patches": "layerlab.data._transforms",
    "flatten": "layerlab.data._transforms",
    "l2_normalize": "layerlab.data._transforms",
    "one_hot": "layerlab.data._transforms",
    "per_class_counts": "layerlab.data._transforms",
    "random_subset": "layerlab.data._transforms",
    "scale": "layerlab.data._transforms",
    "select_classes": "layerlab.data._transforms",
    "standardize": "layerlab.data._transforms",
    "train_val_split": "layerlab.data._transforms",
    "DatasetCorruptError": "layerlab.data._registry",
    "download": "layerlab.data._download",
    "DownloadError": "layerlab.data._download",
    "verify_file": "layerlab.data._files",
    "as_labels": "layerlab.data._targets",
    "as_targets": "layerlab.data._targets",
}

__all__ = [
    "as_labels",
    "as_targets",
    "DATASETS",
    "DGLSplits",
    "Dataset",
    "DatasetCorruptError",
    "DatasetNotFoundError",
    "DownloadError",
    "ENV_VAR",
    "balanced_subset",
    "clear_cache",
    "crop_resize",
    "data_roots",
    "dgl_protocol",
    "download",
    "extract_patches",
    "flatten",
    "holdout_mask",
    "l2_normalize",
    "latent",
    "load",
    "one_hot",
    "per_class_counts",
    "random_resized_crop",
    "random_subset",
    "read_idx",
    "sample_crop_boxes",
    "scale",
    "select_classes",
    "standardize",
    "teacher",
    "train_val_split",
    "verify_file",
]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'layerlab.data' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
