"""``load``: one entry point for embedded, file-based, tensorflow-datasets and synthetic data."""

from __future__ import annotations

import contextvars
import importlib.util
import inspect
import os
import pathlib
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import DTypeLike

from layerlab._checks import check_int
from layerlab.data import _files as F
from layerlab.data import _synthetic
from layerlab.data._dataset import Dataset, DatasetNotFoundError
from layerlab.data._transforms import (
    balanced_subset,
    check_classes,
    check_seed,
    random_subset,
    select_classes,
    train_val_split,
)

__all__ = ["load", "DATASETS", "dgl_protocol", "DGLSplits", "holdout_mask"]

_DIGIT_NAMES = tuple(str(i) for i in range(10))
_CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
_CIFAR100_URL = "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz"


# Whether files recognised by name are checked against their published checksums
# (``load(..., verify=...)``); format, shape and label checks always run.
_VERIFY: contextvars.ContextVar[bool] = contextvars.ContextVar("layerlab_data_verify",
                                                               default=True)


def _verify(path, dataset: str) -> None:
    if _VERIFY.get():
        F.verify_file(path, dataset)


class _Raw(NamedTuple):
    x: np.ndarray  # uint8 images or float features
    y: np.ndarray
    num_classes: int
    class_names: tuple[str, ...] | None = None
    x_div: float | None = None  # x / x_div maps to [0, 1]
    feature_names: tuple[str, ...] | None = None


def holdout_mask(n: int) -> np.ndarray:
    """``[n]`` bool: the deterministic test part of datasets without an official test split.

    Sample ``i`` (in file order) is a test sample iff ``i % 5 == 4``: a fixed 80/20 split
    that needs no random generator, and is stratified for files sorted by class (``wine``)
    or roughly interleaved (``digits``, the UCI CSVs).

    Args:
      n: number of samples, an integer ``>= 0``.
    """
    n = check_int(n, "n", fn="holdout_mask", min_value=0)
    return np.arange(n) % 5 == 4


def _holdout(split: str, *arrays):
    if split == "all":
        return arrays
    m = holdout_mask(len(arrays[0]))
    m = m if split == "test" else ~m
    return tuple(a[m] for a in arrays)


# --------------------------------------------------------------------------- embedded
def _digits(split, roots, data_dir):
    # scikit-learn's bundled copy (sklearn/datasets/data/digits.csv.gz, what load_digits reads:
    # 1797 rows of 64 pixels and the label), read without importing sklearn.datasets (1.6 s)
    import gzip

    spec = importlib.util.find_spec("sklearn")
    path = None
    if spec is not None and spec.submodule_search_locations:
        path = pathlib.Path(spec.submodule_search_locations[0], "datasets", "data",
                            "digits.csv.gz")
    if path is None or not path.is_file():  # another layout: the public loader
        from sklearn.datasets import load_digits

        d = load_digits()
        images, target = d.images, d.target
    else:
        with gzip.open(path, "rt") as f:
            data = np.loadtxt(f, delimiter=",")
        images, target = data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(int)
    x, y = _holdout(split, images.astype(np.float32)[..., None], target.astype(np.int32))
    return _Raw(x, y, 10, _DIGIT_NAMES, 16.0)


def _wine(split, roots, data_dir):
    from sklearn.datasets import load_wine

    d = load_wine()
    x, y = _holdout(split, d.data, d.target.astype(np.int32))  # (dtype: at the end, in load)
    return _Raw(x, y, 3, tuple(d.target_names), None, tuple(d.feature_names))


# ------------------------------------------------------------------------------ files
def _mnist(split, roots, data_dir):
    looked: list[str] = []
    pair = F.find_mnist(roots, "train" if split == "train" else "t10k", looked)
    if pair is None:
        raise F.not_found_error(
            "mnist",
            looked,
            [
                "<dir>/mnist/train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz,",
                "            t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz",
                "(or the same four files directly in <dir>, gzipped or not)",
            ],
            "the four original idx files from http://yann.lecun.com/exdb/mnist/ (mirror: "
            "https://ossci-datasets.s3.amazonaws.com/mnist/).",
            data_dir,
        )
    for p in pair:
        _verify(p, "mnist")
    x, y = F.read_idx(pair[0]), F.read_idx(pair[1])
    if x.ndim != 3 or x.shape[1:] != (28, 28) or x.dtype != np.uint8:
        raise F.corrupt_error(pair[0], f"expected uint8 images [n, 28, 28], got "
                                       f"{x.dtype}{list(x.shape)}", "mnist")
    if y.ndim != 1 or len(x) != len(y) or not np.issubdtype(y.dtype, np.integer):
        raise F.corrupt_error(pair[1], f"expected {len(x)} integer labels [n] (idx type 0x08, "
                                       f"unsigned bytes) to match {pair[0].name}, got "
                                       f"{y.dtype}{list(y.shape)}", "mnist")
    F.check_labels(y, 10, pair[1], "mnist")
    F.check_class_counts(y, ("mnist", split), pair[1])
    return _Raw(x[..., None], y.astype(np.int32), 10, _DIGIT_NAMES, 255.0)


def _check_npz_labels(npz, y, n, num, key, dataset):
    if y.ndim != 1 or len(y) != n or not np.issubdtype(y.dtype, np.integer):
        raise F.corrupt_error(npz, f"{key} should be {n} integer labels [n], got "
                                   f"{y.dtype}{list(y.shape)}", dataset)
    F.check_labels(y, num, npz, dataset, what=key)


def _npz_images(npz, split, dataset):
    x = F.read_npz_key(npz, f"x_{split}")
    if x.ndim != 4 or x.shape[1:] != (32, 32, 3) or x.dtype != np.uint8:
        raise F.corrupt_error(npz, f"x_{split} should be uint8 [n, 32, 32, 3] (HWC), got "
                                   f"{x.dtype}{list(x.shape)}", dataset)
    return x


def _npz_names(npz, key, num, dataset):
    if key not in F.npz_keys(npz):
        return None
    return F.check_names(F.decode_names(F.read_npz_key(npz, key)), num, npz, dataset, key)


def _pickle_batches(kind, path, folder, files, label_key, num, dataset):
    """Images and labels of the CIFAR pickles ``files`` (loose in the folder ``path``, or
    members of the tarball ``path``), each batch checked on its own (errors name its file)."""
    xs, ys = [], []
    for f in files:
        if kind == "dir":
            _verify(path / f, dataset)
            b = F.read_cifar_pickle(path / f)
            x, y = F.cifar_batch(b, label_key, num, path / f, dataset)
        else:
            b = F.read_cifar_pickle(path, f"{folder}/{f}")
            x, y = F.cifar_batch(b, label_key, num, path, dataset, f"{folder}/{f}")
        xs.append(x)
        ys.append(y)
    return np.concatenate(xs), np.concatenate(ys).astype(np.int32)


def _check_pickle_counts(y, official, kind, path, folder, files, label_key):
    """:func:`F.check_class_counts` of the labels of one split's pickles, naming the file
    (or the tarball and its members)."""
    if kind == "dir":
        where = path / files[0] if len(files) == 1 else path
        what = (f"{label_key!r}" if len(files) == 1 else
                f"the {label_key!r} of {', '.join(files)}")
    else:
        members = files[0] if len(files) == 1 else f"{{{','.join(files)}}}"
        where, what = path, f"member {folder}/{members}: {label_key!r}"
    F.check_class_counts(y, official, where, what)


def _pickle_names(kind, path, folder, meta, key, num, dataset):
    """Class names from the meta pickle, ``None`` when it is absent or unreadable; a list of
    the wrong length is an error naming the file."""
    try:
        if kind == "dir":
            where, member = path / meta, None
            d = F.read_cifar_pickle(where)
        else:
            where, member = path, f"{folder}/{meta}"
            d = F.read_cifar_pickle(path, member)
        names = F.decode_names(d[key])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return F.check_names(names, num, where, dataset,
                         F._member_prefix(member) + repr(key))


def _cifar10(split, roots, data_dir):
    looked: list[str] = []
    folder = "cifar-10-batches-py"
    files = F.CIFAR10_BATCHES[split]
    found = F.find_cifar(roots, "cifar10", folder, "cifar-10-python.tar.gz", files, looked)
    if found is None:
        raise F.not_found_error(
            "cifar10",
            looked,
            [
                "<dir>/cifar10/cifar10.npz  (x_train [50000,32,32,3] uint8 HWC, y_train, x_test, "
                "y_test[, label_names]), or",
                "<dir>/[cifar10/]cifar-10-batches-py/{data_batch_1..5, test_batch, batches.meta} "
                "(official python pickles), or",
                "<dir>/[cifar10/]cifar-10-python.tar.gz (the official tarball, not extracted)",
            ],
            f"the python version from {_CIFAR10_URL} "
            "(https://www.cs.toronto.edu/~kriz/cifar.html).",
            data_dir,
        )
    kind, path = found
    if kind == "npz":
        keys = F.npz_keys(path)
        c100 = [k for k in keys if k.endswith(("_coarse", "fine_label_names",
                                               "coarse_label_names"))]
        if c100:  # (its fine labels would fail the label range, with a less useful message)
            raise F.corrupt_error(path, f"it has CIFAR-100's arrays {c100} (keys: {keys}): a "
                                        "cifar100.npz saved under cifar10's name?", "cifar10")
        x = _npz_images(path, split, "cifar10")
        y = F.read_npz_key(path, f"y_{split}")
        _check_npz_labels(path, y, len(x), 10, f"y_{split}", "cifar10")
        F.check_class_counts(y, ("cifar10", split), path, f"y_{split}")
        names = _npz_names(path, "label_names", 10, "cifar10")
        return _Raw(x, y.astype(np.int32), 10, names, 255.0)
    if kind == "tar":
        _verify(path, "cifar10")
    x, y = _pickle_batches(kind, path, folder, files, "labels", 10, "cifar10")
    _check_pickle_counts(y, ("cifar10", split), kind, path, folder, files, "labels")
    names = _pickle_names(kind, path, folder, "batches.meta", "label_names", 10, "cifar10")
    return _Raw(x, y, 10, names, 255.0)


def _cifar100(split, roots, data_dir, label_mode="fine"):
    if label_mode not in ("fine", "coarse"):
        raise ValueError(f"cifar100: label_mode must be 'fine' or 'coarse', got {label_mode!r}.")
    looked: list[str] = []
    folder = "cifar-100-python"
    num = 100 if label_mode == "fine" else 20
    found = F.find_cifar(roots, "cifar100", folder, "cifar-100-python.tar.gz", (split,), looked)
    if found is None:
        raise F.not_found_error(
            "cifar100",
            looked,
            [
                "<dir>/[cifar100/]cifar-100-python/{train, test, meta} (official python "
                "pickles), or",
                "<dir>/[cifar100/]cifar-100-python.tar.gz (the official tarball), or",
                "<dir>/cifar100/cifar100.npz (x_train, y_train, x_test, y_test with fine labels"
                "[, y_train_coarse, y_test_coarse, fine_label_names, coarse_label_names])",
            ],
            f"the python version from {_CIFAR100_URL} "
            "(https://www.cs.toronto.edu/~kriz/cifar.html).",
            data_dir,
        )
    kind, path = found
    nkey = f"{label_mode}_label_names"
    if kind == "npz":
        keys = F.npz_keys(path)
        n10 = np.size(F.read_npz_key(path, "label_names")) if "label_names" in keys else 100
        if n10 != 100:  # (CIFAR-100's names are fine_label_names / coarse_label_names)
            raise F.corrupt_error(path, f"it has CIFAR-10's 'label_names' ({n10} names; keys: "
                                        f"{keys}): a cifar10.npz saved under cifar100's "
                                        "name?", "cifar100")
        ykey = f"y_{split}" if label_mode == "fine" else f"y_{split}_coarse"
        if ykey not in keys:
            raise F.corrupt_error(path, f"it has no array {ykey!r} (it has {keys}), needed "
                                        f"for label_mode={label_mode!r}", "cifar100")
        x = _npz_images(path, split, "cifar100")
        y = F.read_npz_key(path, ykey)
        _check_npz_labels(path, y, len(x), num, ykey, "cifar100")
        F.check_class_counts(y, ("cifar100", split, label_mode), path, ykey)
        names = _npz_names(path, nkey, num, "cifar100")
        return _Raw(x, y.astype(np.int32), num, names, 255.0)
    if kind == "tar":
        _verify(path, "cifar100")
    x, y = _pickle_batches(kind, path, folder, (split,), f"{label_mode}_labels", num,
                           "cifar100")
    _check_pickle_counts(y, ("cifar100", split, label_mode), kind, path, folder, (split,),
                         f"{label_mode}_labels")
    names = _pickle_names(kind, path, folder, "meta", nkey, num, "cifar100")
    return _Raw(x, y, num, names, 255.0)


def _check_rows(path, member, n, expected, dataset):
    """The row count of a whole file (before the holdout split), as the download checks it:
    the stand-in for a checksum where none is published (so ``verify=False`` skips it)."""
    if n != expected:
        raise F.corrupt_error(path, F._member_prefix(member) +
                              f"it has {n} data rows, the official file has {expected} (no "
                              "checksum is published, the row count is checked instead; "
                              "verify=False skips it)", dataset)


def _winequality(split, roots, data_dir, variant="both", color_feature=False):
    variants = {"red": ("red",), "white": ("white",), "both": ("red", "white")}
    if variant not in variants:
        raise ValueError(f"winequality: variant must be 'red', 'white' or 'both', got {variant!r}.")
    xs, ys, looked, names, read = [], [], [], None, {}
    for color in variants[variant]:
        path = F.find_winequality(roots, color, looked)
        if path is None:
            raise F.not_found_error(
                "winequality",
                looked,
                [
                    "<dir>/wine_quality/winequality-red.csv and winequality-white.csv "
                    "(UCI, ';'-separated, one header line; also accepted in "
                    "<dir>/winequality/ or <dir>/)",
                ],
                "the UCI Wine Quality dataset, https://archive.ics.uci.edu/dataset/186/wine+quality.",
                data_dir,
            )
        _verify(path, "winequality")
        cols, v = F.read_csv(path, ";")
        if v.shape[1] != 12 or cols[-1] != "quality":
            raise F.corrupt_error(path, f"expected 11 features and a final 'quality' column "
                                        f"(UCI winequality-{color}.csv, ';'-separated), got "
                                        f"{len(cols)} columns ending {cols[-1:]}", "winequality")
        if read and np.array_equal(v, read["red"][1]):  # (the red file is always read first)
            raise F.corrupt_error(path, f"it holds the same {len(v)} rows as "
                                        f"{read['red'][0]}: one file saved under both names "
                                        "(red has 1599 wines, white 4898)", "winequality")
        read[color] = (path, v)
        x, y = _holdout(split, v[:, :-1], v[:, -1])
        if color_feature:
            x = np.concatenate([x, np.full((len(x), 1), float(color == "red"))], axis=1)
        xs.append(x)
        ys.append(y)
        names = cols[:-1] + (("is_red",) if color_feature else ())
    # float64 as read: load's dtype is applied once, at the end (float32 here rounded
    # dtype=float64 requests)
    return _Raw(np.concatenate(xs), np.concatenate(ys), 0, None, None, names)


def _superconductivity(split, roots, data_dir):
    looked: list[str] = []
    found = F.find_superconductivity(roots, looked)
    if found is None:
        raise F.not_found_error(
            "superconductivity",
            looked,
            [
                "<dir>/superconductivity/train.csv (UCI, 21263 rows: 81 features + "
                "critical_temp), or",
                "<dir>/[superconductivity/]superconduct.zip (the UCI download, not extracted)",
            ],
            "https://archive.ics.uci.edu/dataset/464/superconductivty+data (UCI's spelling).",
            data_dir,
        )
    path, member = found
    _verify(path, "superconductivity")
    cols, v = F.read_csv(path, ",", member)
    if v.shape[1] != 82 or cols[-1] != "critical_temp":
        raise F.corrupt_error(
            path, f"expected 81 features and a final 'critical_temp' column "
            f"(UCI superconductivity train.csv), got {len(cols)} columns "
            f"ending {cols[-1:]}" + (f" in member {member}" if member else ""),
            "superconductivity")
    if _VERIFY.get():  # no checksum is published: the row count stands in for it
        from layerlab.data import _download

        _check_rows(path, member, len(v), _download.SUPERCONDUCT_ROWS, "superconductivity")
    x, y = _holdout(split, v[:, :-1], v[:, -1])
    return _Raw(x, y, 0, None, None, cols[:-1])


# ------------------------------------------------------------------------------ tfds
def _tfds(name, tfds_name, split, data_dir, opts):
    """Read ``tfds_name`` prepared locally (ArrayRecord, no downloads) via ``tfds.data_source``."""
    if importlib.util.find_spec("tensorflow_datasets") is None:
        raise DatasetNotFoundError(
            f"Dataset {name!r}: source='tfds' needs tensorflow-datasets "
            "(pip install 'layerlab[tfds]'), which is not installed."
        )
    import tensorflow_datasets as tfds

    tdir = opts.get("tfds_data_dir") or data_dir or os.environ.get("TFDS_DATA_DIR")
    try:
        src = tfds.data_source(tfds_name, split=split, data_dir=tdir, download=False, try_gcs=False)
        examples = [src[i] for i in range(len(src))]
        x = np.stack([np.asarray(e["image"]) for e in examples])
        y = np.asarray([int(e["label"]) for e in examples], dtype=np.int32)
    except Exception as e:  # noqa: BLE001 - tfds raises many kinds; all mean "not available"
        raise DatasetNotFoundError(
            f"Dataset {name!r}: tensorflow-datasets could not read {tfds_name!r} split {split!r} "
            f"from data_dir={tdir!r} (downloads are off): {type(e).__name__}: {e}\n"
            "Prepare it once in ArrayRecord format (e.g. `tfds build "
            f"{tfds_name} --file_format=array_record`) or use the original files "
            "(source='files', see docs/data.md)."
        ) from e
    names = None
    try:
        names = tuple(src.dataset_info.features["label"].names)
    except Exception:  # noqa: BLE001 - names are optional metadata
        pass
    if x.ndim == 3:
        x = x[..., None]
    num = int(len(names)) if names else int(y.max()) + 1
    return _Raw(x, y, num, names, 255.0 if x.dtype == np.uint8 else None)


# -------------------------------------------------------------------------- registry
class _Spec(NamedTuple):
    fn: Callable | None
    splits: tuple[str, ...]
    kind: str  # "embedded" | "files" | "synthetic"
    tfds_name: str | None = None


_REGISTRY: dict[str, _Spec] = {
    "digits": _Spec(_digits, ("train", "test", "all"), "embedded"),
    "wine": _Spec(_wine, ("train", "test", "all"), "embedded"),
    "mnist": _Spec(_mnist, ("train", "test"), "files", "mnist"),
    "cifar10": _Spec(_cifar10, ("train", "test"), "files", "cifar10"),
    "cifar100": _Spec(_cifar100, ("train", "test"), "files", "cifar100"),
    "winequality": _Spec(_winequality, ("train", "test", "all"), "files"),
    "superconductivity": _Spec(_superconductivity, ("train", "test", "all"), "files"),
    "teacher": _Spec(None, ("train", "val", "test"), "synthetic"),
    "latent": _Spec(None, ("train", "val", "test"), "synthetic"),
}
_ALIASES = {
    "cifar-10": "cifar10",
    "cifar-100": "cifar100",
    "wine_quality": "winequality",
    "wine-quality": "winequality",
    "superconduct": "superconductivity",
}
DATASETS: tuple[str, ...] = tuple(_REGISTRY)
_SPLIT_IDS = {"train": 1, "val": 2, "test": 3}


def _canonical(name: str) -> str:
    if not isinstance(name, str):
        raise TypeError(f"load: name must be a dataset name (a string), one of "
                        f"{', '.join(DATASETS)}; got {name!r}.")
    key = _ALIASES.get(name.lower(), name.lower())
    if key not in _REGISTRY:
        raise ValueError(f"Unknown dataset {name!r}; known: {', '.join(DATASETS)}.")
    return key


def _check_opts(fn, name, opts):
    allowed = [
        p for p in inspect.signature(fn).parameters if p not in ("split", "roots", "data_dir")
    ]
    bad = sorted(set(opts) - set(allowed))
    if bad:
        raise TypeError(f"load({name!r}): unknown option(s) {bad}; accepted: {allowed or 'none'}.")


def _load_raw(name, split, data_dir, source, opts, verify=True) -> tuple[Dataset, float | None]:
    token = _VERIFY.set(bool(verify))
    try:
        return _load_raw_inner(name, split, data_dir, source, opts)
    finally:
        _VERIFY.reset(token)


def _load_raw_inner(name, split, data_dir, source, opts) -> tuple[Dataset, float | None]:
    spec = _REGISTRY[name]
    if source not in ("auto", "files", "tfds"):
        raise ValueError(f"source must be 'auto', 'files' or 'tfds', got {source!r}.")
    tfds_opts = {k: opts.pop(k) for k in ("tfds_data_dir",) if k in opts}
    if source == "tfds":
        if spec.tfds_name is None:
            raise ValueError(
                f"{name!r} has no tensorflow-datasets source "
                f"(only {[k for k, s in _REGISTRY.items() if s.tfds_name]})."
            )
        if opts:
            raise TypeError(
                f"load({name!r}, source='tfds'): options {sorted(opts)} are not supported."
            )
        raw = _tfds(name, spec.tfds_name, split, data_dir, tfds_opts)
    else:
        _check_opts(spec.fn, name, opts)
        try:
            raw = spec.fn(split, F.data_roots(data_dir), data_dir, **opts)
        except DatasetNotFoundError as err:
            if (
                source == "files"
                or spec.tfds_name is None
                or importlib.util.find_spec("tensorflow_datasets") is None
            ):
                raise
            try:
                raw = _tfds(name, spec.tfds_name, split, data_dir, tfds_opts)
            except DatasetNotFoundError as err2:
                raise DatasetNotFoundError(
                    f"{err}\n\nAlso tried tensorflow-datasets:\n{err2}"
                ) from err2
    ds = Dataset(raw.x, raw.y, raw.num_classes, name, split, raw.class_names, raw.feature_names)
    return ds, raw.x_div


def _own(a, dtype) -> np.ndarray:
    """``a`` in ``dtype``, never a read-only view of the cached file arrays."""
    out = np.asarray(a, dtype=dtype)
    return out if out.flags.writeable else out.copy()


def _finish(ds: Dataset, x_div, dtype) -> Dataset:
    x = _own(ds.x, dtype)
    if x_div is not None:
        x /= np.asarray(x_div, dtype)
    y = _own(ds.y, np.int32 if ds.is_classification else dtype)
    return ds.replace(x=x, y=y)


def _synthetic_key(seed) -> jax.Array:
    """The task key from ``load``'s ``seed``: an integer, a typed key (``jax.random.key``) or
    a raw ``uint32[2]`` key (``jax.random.PRNGKey``)."""
    if isinstance(seed, (jax.Array, np.ndarray)) and not (
            np.ndim(seed) == 0 and jnp.issubdtype(seed.dtype, jnp.integer)):
        if jnp.issubdtype(seed.dtype, jax.dtypes.prng_key):
            if seed.shape != ():
                raise ValueError(f"load: seed must be a single PRNG key, got a key array of "
                                 f"shape {seed.shape}.")
            return seed
        if seed.dtype == np.uint32 and seed.shape == (2,):
            return jax.random.wrap_key_data(jnp.asarray(seed))
        raise TypeError(f"load: seed must be an integer or a PRNG key (jax.random.key), got an "
                        f"array of dtype {seed.dtype} and shape {seed.shape}.")
    return jax.random.key(check_int(seed, "seed", fn="load"))


def _load_synthetic(name, split, n, seed, opts) -> Dataset:
    key = _synthetic_key(seed)
    sub = jax.random.fold_in(key, _SPLIT_IDS[split])
    n = 1000 if n is None else n
    fn = _synthetic.teacher if name == "teacher" else _synthetic.latent
    allowed = [
        p
        for p in inspect.signature(fn).parameters
        if p not in ("key", "n", "x_key", "z_key", "return_params", "return_latent", "split")
    ]
    bad = sorted(set(opts) - set(allowed))
    if bad:
        raise TypeError(f"load({name!r}): unknown option(s) {bad}; accepted: {allowed}.")
    if name == "teacher":
        return _synthetic.teacher(key, n, x_key=sub, split=split, **opts)
    return _synthetic.latent(key, n, z_key=sub, split=split, **opts)


def load(
    name: str,
    split: str = "train",
    *,
    n: int | None = None,
    classes: Sequence[Any] | None = None,
    balanced: bool = False,
    shuffle: bool = True,
    seed: int | jax.Array = 0,
    data_dir: str | os.PathLike | None = None,
    source: str = "auto",
    dtype: DTypeLike = np.float32,
    verify: bool = True,
    **opts: Any,
) -> Dataset:
    """Load a dataset as host numpy arrays.

    Args:
      name: one of :data:`DATASETS` -- ``"digits"``, ``"wine"`` (embedded, scikit-learn);
        ``"mnist"``, ``"cifar10"``, ``"cifar100"``, ``"winequality"``,
        ``"superconductivity"`` (files); ``"teacher"``, ``"latent"`` (synthetic).
      split: ``"train"`` or ``"test"``; also ``"all"`` for datasets without an official
        test split (``digits``, ``wine``, ``winequality``, ``superconductivity``: their
        test split is every 5th sample, see :func:`holdout_mask`), and ``"val"`` for the
        synthetic tasks.
      n: number of samples (``None``: all). Drawn at random with ``seed`` (label-balanced
        if ``balanced``) and kept in file order; with ``shuffle=False`` (and not balanced)
        the first ``n``. For synthetic tasks: samples to generate (default 1000).
      classes: keep only these classes (labels or names), relabelled ``0..len-1`` in the
        given order (e.g. ``classes=(1, 7)`` for a binary digits task).
      balanced: draw the ``n`` samples label-balanced (:func:`balanced_subset`); with
        ``n=None``, the largest balanced subset (``C x`` the smallest class count).
      shuffle: with ``n`` and not ``balanced``: a random subset (True) or the first ``n``.
      seed: int or jax key (``jax.random.key``, or a raw ``jax.random.PRNGKey``) for the
        subset; for synthetic tasks, the task seed (the same seed gives the same
        teacher/generator on every split, different inputs per split; ``seed=k`` and
        ``seed=jax.random.key(k)`` give the same task).
      data_dir: directory with the dataset files; default ``$LAYERLAB_DATA`` then ``./data``
        (see docs/data.md for the layout).
      source: ``"auto"`` (files, then tensorflow-datasets if installed), ``"files"``, or
        ``"tfds"`` (only tensorflow-datasets; downloads off; ``tfds_data_dir=`` option).
      dtype: float dtype of ``x`` (and of regression targets).
      verify: check every standard file (recognised by name) against its published
        checksum on first use (the verdict is cached by path, size and mtime; see
        docs/data.md; superconductivity, which has no published checksum: its row count).
        ``False`` skips only those (e.g. for small files written in the official formats);
        format, shape, integer-label, label-range and finite-value checks always run, and
        so do these checks of the dataset's identity: no class may hold more samples than
        the official split has (MNIST's label histogram; CIFAR-10 1000 / CIFAR-100 100 test
        images per fine class; so a whole CIFAR-10 split, or coarse labels, under CIFAR-100's
        name fail, and any subset of the right split passes); the other CIFAR's label key or
        npz arrays; one wine CSV under both names.  What cannot be told from the content
        without the checksum: a Fashion-MNIST or KMNIST file (same format, shapes and 10
        classes) passes as MNIST unless it holds more of a class than MNIST's split (their
        full splits, 6000 / 1000 per class, do not pass; their subsets do), as does any
        10-class 32x32 set (e.g. SVHN) as CIFAR-10 within its counts; the red and white
        wine files swapped (same columns); any 81-feature CSV ending ``critical_temp``.
      **opts: dataset options: ``cifar100``: ``label_mode="fine"|"coarse"``;
        ``winequality``: ``variant="both"|"red"|"white"``, ``color_feature=False``;
        ``teacher``: ``widths, activation, noise, w_std, b_std`` (:func:`teacher`);
        ``latent``: ``k, d_in, d_out, hidden, activation, noise`` (:func:`latent`).

    Returns:
      :class:`Dataset`: images ``x [N, H, W, C]`` in ``[0, 1]`` (digits: pixel/16, others
      /255), tabular ``x [N, d]`` raw features (use :func:`standardize`), ``y [N]`` int32
      labels (classification) or float targets (regression, ``num_classes=0``).

    Raises:
      DatasetNotFoundError: the files are missing (the message lists where it looked,
        which files it expects and where to get them).
      DatasetCorruptError: a file is damaged or holds another dataset (checksum, size,
        format, label range or class counts; the message names the file, what was expected
        and what it holds, and the ``python -m layerlab.data download`` command).

    Examples:
      The embedded 8x8 digits need no files (every 5th image is the test split):

      >>> import numpy as np
      >>> from layerlab import data
      >>> ds = data.load("digits", "train")
      >>> ds.x.shape, ds.y.shape, ds.num_classes
      ((1438, 8, 8, 1), (1438,), 10)
      >>> float(ds.x.min()), float(ds.x.max())
      (0.0, 1.0)
      >>> b17 = data.load("digits", classes=(1, 7), n=20, balanced=True)   # relabelled 0, 1
      >>> np.bincount(b17.y).tolist()
      [10, 10]
    """
    key = _canonical(name)
    spec = _REGISTRY[key]
    n = check_int(n, "n", fn="load", min_value=1 if spec.kind == "synthetic" else 0,
                  allow_none=True)
    if split not in spec.splits:
        raise ValueError(f"{key!r} has splits {spec.splits}, got split={split!r}.")
    if not jnp.issubdtype(dtype, jnp.floating):  # (bfloat16 is no numpy float)
        raise ValueError(f"load: dtype must be a float dtype (of x and of regression targets); "
                         f"got {np.dtype(dtype)} (integer dtypes would truncate the values).")
    if spec.kind == "synthetic":
        if classes is not None or balanced:
            raise ValueError(f"{key!r} is a regression task: classes/balanced do not apply.")
        if source != "auto":
            raise ValueError(f"{key!r} is synthetic: source={source!r} does not apply.")
        # generated in float32 (JAX's default), returned in dtype (it was ignored)
        return _finish(_load_synthetic(key, split, n, seed, opts), None, dtype)
    seed = check_seed(seed, "load")
    if classes is not None:
        classes = check_classes(classes, "load")
    ds, x_div = _load_raw(key, split, data_dir, source, dict(opts), verify)
    if classes is not None:
        ds = select_classes(ds, classes)
    if n is not None:
        if balanced:
            ds = balanced_subset(ds, n, seed)
        elif not shuffle:
            ds = ds.take(n)
        elif n != len(ds):
            ds = random_subset(ds, n, seed)
    elif balanced:  # the largest label-balanced subset
        ds = balanced_subset(ds, ds.num_classes * int(ds.class_counts().min()), seed)
    return _finish(ds, x_div, dtype)


class DGLSplits(NamedTuple):
    """Train / validation / test datasets of a DGL protocol (see :func:`dgl_protocol`)."""

    train: Dataset
    val: Dataset
    test: Dataset


_DGL = {
    "mnist10k": ("mnist", None, 10_000),
    "cifar10_10k": ("cifar10", None, 10_000),
    "bmnist2k": ("mnist", (1, 7), 2_000),
}


def dgl_protocol(
    name: str,
    *,
    n_train: int | None = None,
    n_val: int | None = None,
    seed: int | jax.Array = 0,
    data_dir: str | os.PathLike | None = None,
    dtype: DTypeLike = np.float32,
    verify: bool = True,
) -> DGLSplits:
    """The data protocol of Ben-David & Ringel (2019), Table I.

    * ``"MNIST10k"``: 10,000 label-balanced training samples from MNIST's training set;
    * ``"CIFAR10_10k"``: the same for CIFAR-10;
    * ``"BMNIST2k"``: binary MNIST, digits 1 (label 0) vs 7 (label 1), 2,000 balanced samples;

    each with a disjoint, label-balanced validation set of the same size drawn from the
    rest of the training set (:func:`train_val_split`) and the official test set (for
    BMNIST2k restricted to digits 1 and 7). Images stay ``[N, H, W, C]`` in ``[0, 1]``;
    flatten them with :func:`flatten`. The paper's targets are zero-mean one-hot
    (``one_hot(y, C, zero_mean=True)``) except on CIFAR-10.

    Args:
      name: ``"MNIST10k"``, ``"CIFAR10_10k"`` or ``"BMNIST2k"`` (case-insensitive).
      n_train, n_val: override the sizes (e.g. smaller for CPU runs); ``n_val`` defaults
        to ``n_train``.
      seed: seed of the split.
      data_dir, verify: see :func:`load`.

    Returns:
      :class:`DGLSplits` ``(train, val, test)``.
    """
    if not isinstance(name, str):
        raise TypeError(f"dgl_protocol: name must be a protocol name (a string): MNIST10k, "
                        f"CIFAR10_10k or BMNIST2k; got {name!r}.")
    try:
        base, classes, default_n = _DGL[name.lower()]
    except KeyError:
        raise ValueError(
            f"Unknown DGL protocol {name!r}; known: MNIST10k, CIFAR10_10k, BMNIST2k."
        ) from None
    n_train = check_int(n_train, "n_train", fn="dgl_protocol", min_value=1, allow_none=True)
    n_val = check_int(n_val, "n_val", fn="dgl_protocol", min_value=0, allow_none=True)
    seed = check_seed(seed, "dgl_protocol")
    n_train = default_n if n_train is None else n_train
    n_val = n_train if n_val is None else n_val
    full, x_div = _load_raw(base, "train", data_dir, "auto", {}, verify)
    test, _ = _load_raw(base, "test", data_dir, "auto", {}, verify)
    if classes is not None:
        full, test = select_classes(full, classes), select_classes(test, classes)
    tr, va = train_val_split(full, n_train, n_val, balanced=True, seed=seed)
    return DGLSplits(*(_finish(d, x_div, dtype) for d in (tr, va, test)))
