"""Datasets for layerlab: embedded, from original files, synthetic; and their transforms.

``load(name, split, ...)`` returns a :class:`Dataset` of host numpy arrays; see
``docs/data.md`` for the file layout under ``data_dir`` / ``$LAYERLAB_DATA``.
"""

from layerlab.data._dataset import Dataset as Dataset
from layerlab.data._dataset import DatasetNotFoundError as DatasetNotFoundError
from layerlab.data._files import ENV_VAR as ENV_VAR
from layerlab.data._files import clear_cache as clear_cache
from layerlab.data._files import data_roots as data_roots
from layerlab.data._files import read_idx as read_idx
from layerlab.data._loaders import DATASETS as DATASETS
from layerlab.data._loaders import DGLSplits as DGLSplits
from layerlab.data._loaders import dgl_protocol as dgl_protocol
from layerlab.data._loaders import holdout_mask as holdout_mask
from layerlab.data._loaders import load as load
from layerlab.data._synthetic import latent as latent
from layerlab.data._synthetic import teacher as teacher
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

__all__ = [
    "DATASETS",
    "DGLSplits",
    "Dataset",
    "DatasetNotFoundError",
    "ENV_VAR",
    "balanced_subset",
    "clear_cache",
    "data_roots",
    "dgl_protocol",
    "extract_patches",
    "flatten",
    "holdout_mask",
    "l2_normalize",
    "latent",
    "load",
    "one_hot",
    "per_class_counts",
    "random_subset",
    "read_idx",
    "scale",
    "select_classes",
    "standardize",
    "teacher",
    "train_val_split",
]
