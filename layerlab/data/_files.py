"""Readers for the datasets' original file formats, the search path and the not-found error.

Formats:

* idx (MNIST): big-endian header ``0 0 <dtype> <ndim>``, ``ndim`` uint32 sizes, raw data;
  gzip-compressed (``.gz``) or not.
* CIFAR python pickles: dicts with ``b"data"`` (uint8 ``[n, 3072]``, each row the 1024 red,
  then green, then blue values of a 32x32 image) and ``b"labels"`` (CIFAR-10) or
  ``b"fine_labels"``/``b"coarse_labels"`` (CIFAR-100), loose or inside the official tarball.
  They are read with a restricted unpickler that only rebuilds numpy arrays and plain
  Python containers, so a tampered file cannot run code.
* ``.npz`` (``np.load`` without pickle): ``x_train, y_train, x_test, y_test[, label_names]``.
* UCI CSVs (wine quality: ``;``-separated; superconductivity: ``,``-separated), one header line.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import io
import json
import os
import pathlib
import pickle
import struct
import tarfile
import zipfile
from collections.abc import Iterable, Sequence
from zlib import error as zlib_error

import numpy as np

from layerlab.data._dataset import DatasetNotFoundError
from layerlab.data._registry import (
    CLASS_COUNTS,
    FILES,
    DatasetCorruptError,
    FileSpec,
    dataset_of,
    refetch_hint,
    spec_for,
)

ENV_VAR = "LAYERLAB_DATA"

__all__ = [
    "ENV_VAR",
    "data_roots",
    "read_idx",
    "read_cifar_pickle",
    "read_csv",
    "clear_cache",
    "not_found_error",
    "verify_file",
    "corrupt_error",
    "CACHE_ENV",
]


# ``<repo>/../shared/data``: the project's verified copies next to a source checkout
SIBLING_DATA = pathlib.Path(__file__).resolve().parents[3] / "shared" / "data"


def data_roots(data_dir: str | os.PathLike | None = None) -> list[pathlib.Path]:
    """Directories searched for dataset files, in order.

    ``data_dir`` when given (only it); otherwise every entry of ``$LAYERLAB_DATA``
    (``os.pathsep``-separated), then ``./data``, then ``shared/data`` next to the
    repository checkout (``<repo>/../shared/data``) when that exists.
    """
    if data_dir is not None:
        return [pathlib.Path(data_dir).expanduser()]
    roots = [
        pathlib.Path(p).expanduser() for p in os.environ.get(ENV_VAR, "").split(os.pathsep) if p
    ]
    roots.append(pathlib.Path.cwd() / "data")
    if SIBLING_DATA.is_dir() and SIBLING_DATA not in roots:
        roots.append(SIBLING_DATA)
    return roots


def first_existing(candidates: Iterable[pathlib.Path], looked: list[str]) -> pathlib.Path | None:
    """The first path that exists; every path tried is appended to ``looked``."""
    for c in candidates:
        looked.append(str(c))
        if c.exists():
            return c
    return None


# ----------------------------------------------------------------------------- lookup
# Where ``load`` finds each dataset's files, and so what ``python -m layerlab.data verify``
# checks: one finder per dataset, returning what it found (or ``None``) and appending
# every place it tried to ``looked``.
CIFAR10_BATCHES = {"train": tuple(f"data_batch_{i}" for i in range(1, 6)),
                   "test": ("test_batch",)}


def find_mnist(roots: Sequence[pathlib.Path], prefix: str,
               looked: list[str]) -> tuple[pathlib.Path, pathlib.Path] | None:
    """``(images, labels)`` idx files of ``prefix`` (``"train"`` or ``"t10k"``): in
    ``<root>/mnist``, ``<root>/MNIST/raw`` (torchvision) or ``<root>``, gzipped or not."""
    for root in roots:
        for d in (root / "mnist", root / "MNIST" / "raw", root):
            pair = []
            for kind in ("images-idx3", "labels-idx1"):
                cands = [
                    d / f"{prefix}-{kind}-ubyte.gz",
                    d / f"{prefix}-{kind}-ubyte",
                    d / f"{prefix}-{kind.replace('-', '.')}-ubyte",
                ]
                pair.append(next((c for c in cands if c.is_file()), None))
            looked.append(f"{d}/{prefix}-{{images-idx3,labels-idx1}}-ubyte[.gz]")
            if all(pair):
                return pair[0], pair[1]
    return None


def find_cifar(roots: Sequence[pathlib.Path], short: str, folder: str, tarball: str,
               files: Sequence[str], looked: list[str]) -> tuple[str, pathlib.Path] | None:
    """The first of ``<base>/<short>.npz`` (``("npz", file)``), the extracted pickles
    ``<base>/<folder>/<files>`` (``("dir", folder)``) and the tarball (``("tar", file)``),
    for ``<base>`` in ``<root>/<short>``, ``<root>``."""
    for root in roots:
        for base in (root / short, root):
            npz, d, tar = base / f"{short}.npz", base / folder, base / tarball
            looked += [str(npz), f"{d}/{{{','.join(files)}}}", str(tar)]
            if npz.is_file():
                return "npz", npz
            if all((d / f).is_file() for f in files):
                return "dir", d
            if tar.is_file():
                return "tar", tar
    return None


def find_winequality(roots: Sequence[pathlib.Path], color: str,
                     looked: list[str]) -> pathlib.Path | None:
    """``winequality-<color>.csv`` in ``<root>/wine_quality``, ``winequality``,
    ``wine+quality`` or ``<root>``."""
    fname = f"winequality-{color}.csv"
    return first_existing((d / fname for root in roots for d in (
        root / "wine_quality", root / "winequality", root / "wine+quality", root)), looked)


def find_superconductivity(roots: Sequence[pathlib.Path], looked: list[str]
                           ) -> tuple[pathlib.Path, str | None] | None:
    """``(file, zip member or None)``: a loose ``train.csv`` in
    ``<root>/superconductivity`` or ``<root>/superconduct``, else ``superconduct.zip`` there
    or in ``<root>``."""
    for root in roots:
        subdirs = (root / "superconductivity", root / "superconduct")
        cands = [(d / "train.csv", None) for d in subdirs]
        cands += [(d / "superconduct.zip", "train.csv") for d in (*subdirs, root)]
        for path, member in cands:
            looked.append(str(path) + (f" (member {member})" if member else ""))
            if path.is_file():
                return path, member
    return None


def dataset_files(name: str, split: str, roots: Sequence[pathlib.Path], **opts
                  ) -> tuple[list[pathlib.Path] | None, list[str]]:
    """The files ``load(name, split, **opts)`` reads from ``roots`` (``None`` when they are
    missing) and every place looked.  ``opts``: ``variant`` for winequality
    (``"red"``/``"white"``/``"both"``)."""
    looked: list[str] = []
    if name == "mnist":
        pair = find_mnist(roots, "train" if split == "train" else "t10k", looked)
        return (None if pair is None else list(pair)), looked
    if name in ("cifar10", "cifar100"):
        if name == "cifar10":
            folder, tarball, files = ("cifar-10-batches-py", "cifar-10-python.tar.gz",
                                      CIFAR10_BATCHES[split])
        else:
            folder, tarball, files = "cifar-100-python", "cifar-100-python.tar.gz", (split,)
        found = find_cifar(roots, name, folder, tarball, files, looked)
        if found is None:
            return None, looked
        kind, path = found
        return ([path / f for f in files] if kind == "dir" else [path]), looked
    if name == "winequality":
        colors = ("red", "white") if opts.get("variant", "both") == "both" else (
            opts["variant"],)
        paths = [find_winequality(roots, c, looked) for c in colors]
        return (None if None in paths else paths), looked
    if name == "superconductivity":
        found = find_superconductivity(roots, looked)
        return (None if found is None else [found[0]]), looked
    raise ValueError(f"dataset_files: {name!r} is not read from files.")


def not_found_error(
    name: str, looked: Sequence[str], expected: Sequence[str], how: str, data_dir=None
) -> DatasetNotFoundError:
    """Build the error raised when a dataset's files are missing (see module docstring)."""
    # name the checkout's sibling folder as resolved, and say so when it was not searched
    sibling = (f"<repo>/../shared/data = {SIBLING_DATA}" if SIBLING_DATA.is_dir()
               else f"not <repo>/../shared/data = {SIBLING_DATA}, which does not exist")
    where = (
        f"data_dir={str(data_dir)!r}"
        if data_dir is not None
        else (f"${ENV_VAR}={os.environ[ENV_VAR]!r}, " if os.environ.get(ENV_VAR)
              else f"${ENV_VAR} (unset), ") + f"./data; {sibling}"
    )
    from layerlab.data._registry import DOWNLOADABLE

    fetch = ([f"Fetch and verify it with: python -m layerlab.data download {name} "
              "[--data-dir <dir>]"] if name in DOWNLOADABLE else [])
    lines = [
        f"Dataset {name!r} not found (searched {where}).",
        *fetch,
        "Looked for:",
        *[f"  {p}" for p in looked],
        "Expected, under a data directory <dir>:",
        *[f"  {e}" for e in expected],
        f"How to get it by hand: {how}",
        f"Then pass data_dir='<dir>' to layerlab.data.load, or set {ENV_VAR}=<dir> "
        "(several directories separated by os.pathsep are searched in order).",
    ]
    return DatasetNotFoundError("\n".join(lines))


# ----------------------------------------------------------------------- verification
#: Environment variable naming the directory of the verification cache (default
#: ``$XDG_CACHE_HOME/layerlab`` or ``~/.cache/layerlab``).
CACHE_ENV = "LAYERLAB_CACHE"
_VERIFIED: dict[str, str] = {}  # in-process memo: cache key -> md5


def _cache_file() -> pathlib.Path:
    base = os.environ.get(CACHE_ENV) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "layerlab")
    return pathlib.Path(base) / "verified.json"


def _cache_key(path: pathlib.Path) -> str:
    st = path.stat()
    return f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"


def _load_cache() -> dict:
    try:
        return json.loads(_cache_file().read_text())
    except (OSError, ValueError):
        return {}


def _store_cache(key: str, digest: str) -> None:
    """Remember a positive verdict; the cache is an optimisation, so a read-only or
    missing cache directory is not an error."""
    cache = _load_cache()
    cache[key] = digest
    f = _cache_file()
    try:
        f.parent.mkdir(parents=True, exist_ok=True)
        tmp = f.with_name(f"{f.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(cache, indent=0, sort_keys=True))
        os.replace(tmp, f)
    except OSError:
        pass


def _data_dir_of(path: pathlib.Path, spec: FileSpec | None) -> pathlib.Path:
    """The data directory a file was found under (for the re-fetch command)."""
    if spec is None:
        folders = {s.path.split("/")[0] for s in FILES}
        return path.parents[1] if path.parent.name in folders else path.parent
    n = len(spec.path.split("/"))
    tail = "/".join(path.parts[-n:])
    return path.parents[n - 1] if tail == spec.path else path.parents[n - 2]


def corrupt_error(path, problem: str, dataset: str | None = None) -> DatasetCorruptError:
    """The error for a damaged file: names it, says what is wrong and how to re-fetch it."""
    path = pathlib.Path(path)
    spec = spec_for(path, dataset)
    dataset = dataset or (spec.dataset if spec else dataset_of(path))
    lines = [f"Dataset file {path} is damaged or not the expected file: {problem}."]
    if dataset is not None:
        lines.append("To fix: " + refetch_hint(dataset, _data_dir_of(path, spec)) + ".")
    else:
        lines.append("To fix: replace it with the original file (see docs/data.md).")
    return DatasetCorruptError("\n".join(lines))


def file_digests(path, *, chunk: int = 1 << 20) -> tuple[str, str]:
    """``(md5, sha256)`` hex digests of a file, read in chunks."""
    md5, sha = hashlib.md5(usedforsecurity=False), hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            md5.update(block)
            sha.update(block)
    return md5.hexdigest(), sha.hexdigest()


def _gunzip_md5(path: pathlib.Path) -> str | None:
    md5 = hashlib.md5(usedforsecurity=False)
    try:
        with gzip.open(path, "rb") as f:
            while block := f.read(1 << 20):
                md5.update(block)
    except (OSError, EOFError, zlib_error):
        return None
    return md5.hexdigest()


def check_digest(path: pathlib.Path, spec: FileSpec) -> str | None:
    """``None`` when ``path`` matches ``spec`` (size, md5, sha256; a ``.gz`` whose
    decompressed content has the official md5 also passes), else what is wrong."""
    size = path.stat().st_size
    if spec.md5 is None and spec.sha256 is None:
        return None
    md5, sha = file_digests(path)
    if (spec.md5 in (None, md5)) and (spec.sha256 in (None, sha)) and (
            spec.size in (None, size)):
        return None
    if spec.raw_md5 is not None and _gunzip_md5(path) == spec.raw_md5:
        return None  # re-compressed copy of the original content
    if spec.size is not None and size != spec.size:
        what = "truncated" if size < spec.size else "too long"
        return (f"it has {size} bytes, the official file has {spec.size} ({what}; "
                f"md5 {md5}, expected {spec.md5})")
    want = f"md5 {spec.md5}" if spec.md5 and md5 != spec.md5 else f"sha256 {spec.sha256}"
    got = md5 if spec.md5 and md5 != spec.md5 else sha
    return f"checksum mismatch: expected {want}, got {got} ({spec.source})"


def verify_file(path: str | os.PathLike, dataset: str | None = None) -> FileSpec | None:
    """Check a dataset file against its published checksum, once.

    Files recognised by name (:data:`layerlab.data._registry.FILES`) are hashed on first
    use; a positive verdict is cached under the file's resolved path, size and mtime (in
    memory and in ``$LAYERLAB_CACHE/verified.json``), so later loads cost one ``stat``.
    Files not recognised (e.g. a rebuilt ``cifar10.npz``) pass here and are checked by
    format, shape and label range by the loaders.

    Returns:
      the matching :class:`FileSpec`, or ``None`` for an unrecognised file.

    Raises:
      DatasetCorruptError: the file does not match (message: file, problem, re-fetch command).
    """
    path = pathlib.Path(path)
    spec = spec_for(path, dataset)
    if spec is None or (spec.md5 is None and spec.sha256 is None):
        return spec
    key = _cache_key(path)
    want = spec.md5 or spec.sha256 or ""
    if _VERIFIED.get(key) == want:
        return spec
    if _load_cache().get(key) == want:
        _VERIFIED[key] = want
        return spec
    problem = check_digest(path, spec)
    if problem is not None:
        raise corrupt_error(path, problem, spec.dataset)
    _VERIFIED[key] = want
    _store_cache(key, want)
    return spec


def check_labels(y: np.ndarray, num_classes: int, path, dataset: str | None = None,
                 what: str = "labels") -> None:
    """Raise :class:`DatasetCorruptError` (naming ``path``) unless ``y`` holds integers in
    ``[0, num_classes)``."""
    y = np.asarray(y)
    if y.size == 0:
        return
    lo, hi = int(y.min()), int(y.max())
    if lo < 0 or hi >= num_classes:
        bad = y[(y < 0) | (y >= num_classes)]
        raise corrupt_error(
            path, f"{what} must lie in [0, {num_classes}) but {bad.size} of {y.size} do not "
            f"(min {lo}, max {hi}, e.g. {bad[:5].tolist()})", dataset)


def check_class_counts(y: np.ndarray, official: tuple[str, ...], path, what: str = "labels"
                       ) -> None:
    """Raise :class:`DatasetCorruptError` (naming ``path``) when a class of ``y`` holds more
    samples than the official split ``official`` (a key of
    :data:`~layerlab.data._registry.CLASS_COUNTS`, e.g. ``("cifar100", "test", "fine")``) has.

    The official file and every subset of it pass (``load``'s ``n``/``classes`` and files cut
    down on purpose); a file of another dataset with the same format fails when it holds more
    of one class, e.g. CIFAR-10's 1000 test images per class where CIFAR-100's 100 per fine
    class are expected, or coarse labels (500 per class) under ``fine_labels``.  ``y`` must
    already lie in ``[0, len(counts))`` (:func:`check_labels`)."""
    most = np.asarray(CLASS_COUNTS[official])
    counts = np.bincount(np.asarray(y).astype(np.intp, copy=False), minlength=len(most))
    over = np.flatnonzero(counts > most)
    if over.size:
        k = int(over[np.argmax(counts[over] - most[over])])
        name = {"mnist": "MNIST", "cifar10": "CIFAR-10", "cifar100": "CIFAR-100"}[official[0]]
        mode = f" ({official[2]} labels)" if len(official) > 2 else ""
        raise corrupt_error(
            path, f"{what} hold {counts[k]} samples of class {k}, but the official {name} "
            f"{official[1]} split{mode} has {most[k]} of that class, so this is neither that "
            f"split nor a subset of it (another dataset in the same format?); it holds "
            f"{len(y)} samples of {np.count_nonzero(counts)} of the {len(most)} classes",
            official[0])


# ------------------------------------------------------------------------------ cache
def _stamp(path: pathlib.Path) -> tuple[str, int, int]:
    st = path.stat()
    return str(path.resolve()), st.st_mtime_ns, st.st_size


def _readonly(*arrays):
    for a in arrays:
        if isinstance(a, np.ndarray):
            a.setflags(write=False)
    return arrays if len(arrays) > 1 else arrays[0]


def clear_cache() -> None:
    """Forget the raw arrays kept from recently read files (they are cached by path, mtime
    and size, so repeated ``load`` calls do not re-read or re-decompress big files)."""
    _read_idx.cache_clear()
    _read_npz_key.cache_clear()
    _read_member.cache_clear()
    _read_csv.cache_clear()


# -------------------------------------------------------------------------------- idx
_IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def parse_idx(buf: bytes, what: str = "idx data") -> np.ndarray:
    """Decode an idx byte string (header ``0 0 dtype ndim``, big-endian sizes, data)."""
    if len(buf) < 4 or buf[0] != 0 or buf[1] != 0 or buf[2] not in _IDX_DTYPES:
        raise ValueError(f"{what} is not an idx file (bad magic number {buf[:4]!r})")
    ndim = buf[3]
    if len(buf) < 4 + 4 * ndim:
        raise ValueError(
            f"{what}: the header declares {ndim} dimensions ({4 + 4 * ndim} header bytes) but "
            f"the file holds {len(buf)} bytes; it is truncated or not an idx file")
    shape = struct.unpack(f">{ndim}I", buf[4 : 4 + 4 * ndim])
    dtype = np.dtype(_IDX_DTYPES[buf[2]])
    count = int(np.prod(shape, dtype=np.int64))
    offset = 4 + 4 * ndim
    if len(buf) - offset != count * dtype.itemsize:
        raise ValueError(
            f"{what}: header says shape {shape} ({count * dtype.itemsize} bytes of data) but the "
            f"file holds {len(buf) - offset}; the file is truncated or corrupt"
        )
    return (
        np.frombuffer(buf, dtype, count=count, offset=offset)
        .reshape(shape)
        .astype(dtype.newbyteorder("="))
    )


@functools.lru_cache(maxsize=8)
def _read_idx(path: str, mtime: int, size: int) -> np.ndarray:
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            return _readonly(parse_idx(f.read(), path))
    except (EOFError, gzip.BadGzipFile, zlib_error, ValueError, struct.error) as e:
        raise corrupt_error(path, f"not a readable idx{' (gzip)' if opener is gzip.open else ''} "
                                  f"file: {type(e).__name__}: {str(e).rstrip('.')}") from e


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read an idx file (``.gz`` or raw) into a read-only numpy array."""
    return _read_idx(*_stamp(pathlib.Path(path)))


# -------------------------------------------------------------------------------- npz
@functools.lru_cache(maxsize=8)
def _read_npz_key(path: str, mtime: int, size: int, key: str) -> np.ndarray:
    try:  # the file is opened here: np.load leaks its own handle when the zip is unreadable
        with open(path, "rb") as f, np.load(f, allow_pickle=False) as d:
            if key not in d.files:
                raise corrupt_error(path, f"it has no array {key!r} (it has {d.files})")
            return _readonly(d[key])
    except DatasetCorruptError:
        raise
    except (OSError, EOFError, ValueError, zipfile.BadZipFile, zlib_error) as e:
        raise corrupt_error(path, _npz_problem(e)) from e


def _npz_problem(e: BaseException) -> str:
    msg = str(e)
    if "allow_pickle" in msg or "pickled" in msg:
        msg = "it is neither a zip archive of .npy arrays nor a .npy file"
    return f"not a readable .npz file ({type(e).__name__}: {msg})"


def read_npz_key(path, key: str) -> np.ndarray:
    """One array of an ``.npz`` file (only that member is decompressed), read-only, cached."""
    return _read_npz_key(*_stamp(pathlib.Path(path)), key)


def npz_keys(path) -> list[str]:
    try:
        with open(path, "rb") as f, np.load(f, allow_pickle=False) as d:
            return list(d.files)
    except (OSError, EOFError, ValueError, zipfile.BadZipFile, zlib_error) as e:
        raise corrupt_error(path, _npz_problem(e)) from e


# ---------------------------------------------------------------------------- pickles
_SAFE_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"): ("numpy._core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"): ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"): ("numpy._core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"): ("numpy._core.multiarray", "scalar"),
    ("numpy.core.numeric", "_frombuffer"): ("numpy._core.numeric", "_frombuffer"),
    ("numpy._core.numeric", "_frombuffer"): ("numpy._core.numeric", "_frombuffer"),
    ("numpy", "ndarray"): ("numpy", "ndarray"),
    ("numpy", "dtype"): ("numpy", "dtype"),
    ("_codecs", "encode"): ("_codecs", "encode"),
    ("builtins", "bytearray"): ("builtins", "bytearray"),
    ("__builtin__", "bytearray"): ("builtins", "bytearray"),
}


class _SafeUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        target = _SAFE_GLOBALS.get((module, name))
        if target is None:
            raise pickle.UnpicklingError(
                f"refusing to load {module}.{name} from a dataset pickle: CIFAR batches only "
                "hold numpy arrays, lists and strings."
            )
        return super().find_class(*target)


def _unpickle(data: bytes, what: str) -> dict:
    try:
        d = _SafeUnpickler(io.BytesIO(data), encoding="bytes").load()
    except Exception as e:  # noqa: BLE001 - re-raised with the file name
        raise ValueError(f"{what} is not a readable CIFAR python pickle: {e}") from e
    if not isinstance(d, dict):
        raise ValueError(f"{what}: expected a pickled dict, got {type(d).__name__}")
    return {(k.decode() if isinstance(k, bytes) else k): v for k, v in d.items()}


@functools.lru_cache(maxsize=16)
def _read_member(path: str, mtime: int, size: int, member: str | None) -> dict:
    if member is None:
        with open(path, "rb") as f:
            data = f.read()
        what = path
    else:
        try:
            with tarfile.open(path, "r:*") as tar:
                try:
                    f = tar.extractfile(member)
                except KeyError:
                    f = None
                if f is None:
                    raise corrupt_error(path, f"it has no member {member!r}; "
                                              "is it the official tarball?")
                data = f.read()
        except DatasetCorruptError:
            raise
        except (tarfile.TarError, EOFError, OSError, zlib_error) as e:
            raise corrupt_error(path, f"not a readable tar.gz archive: "
                                      f"{type(e).__name__}: {e}") from e
        what = f"{path}:{member}"
    try:
        d = _unpickle(data, what)
    except ValueError as e:
        raise corrupt_error(path, str(e)) from e
    for v in d.values():
        _readonly(v)
    return d


def read_cifar_pickle(path, member: str | None = None) -> dict:
    """A CIFAR python pickle (from a file, or the tarball member ``member``) as a dict with
    ``str`` keys (values as stored: numpy arrays, lists of ints, lists of bytes)."""
    return _read_member(*_stamp(pathlib.Path(path)), member)


def _member_prefix(member: str | None) -> str:
    return f"member {member}: " if member else ""


def cifar_images(d: dict, path, dataset: str, member: str | None = None) -> np.ndarray:
    """``b"data"`` rows ``[n, 3072]`` (channel-major CHW) -> ``[n, 32, 32, 3]`` uint8 HWC.

    Raises :class:`DatasetCorruptError` naming ``path`` (and the tarball ``member``)."""
    where = _member_prefix(member)
    if "data" not in d:
        raise corrupt_error(path, f"{where}no 'data' entry (keys: {sorted(d)})", dataset)
    data = np.asarray(d["data"])
    if data.ndim != 2 or data.shape[1] != 3072 or data.dtype != np.uint8:
        raise corrupt_error(path, f"{where}'data' should be uint8 of shape [n, 3072], got "
                                  f"{data.dtype}{list(data.shape)}", dataset)
    return data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)


def cifar_labels(d: dict, key: str, num_classes: int, path, dataset: str,
                 member: str | None = None) -> np.ndarray:
    """The labels ``d[key]`` as an integer ``[n]`` array in ``[0, num_classes)``.

    Labels must be stored as integers: floats (even integer-valued ones) and strings are
    refused, never truncated.  Raises :class:`DatasetCorruptError` naming ``path`` (and the
    tarball ``member``)."""
    where = _member_prefix(member)
    if key not in d:
        # the other CIFAR's label key: a CIFAR-10 batch saved under CIFAR-100's name or back
        other = {"cifar100": ("labels", "CIFAR-10 batch"),
                 "cifar10": ("fine_labels", "CIFAR-100 file")}.get(dataset)
        hint = (f"; {other[0]!r} is the label key of a {other[1]}, saved here under "
                f"{dataset}'s name?" if other and other[0] in d else "")
        raise corrupt_error(path, f"{where}no {key!r} entry (keys: {sorted(d)}){hint}",
                            dataset)
    try:
        y = np.asarray(d[key])
    except ValueError as e:  # a ragged list
        raise corrupt_error(path, f"{where}{key!r} is not a flat list of labels ({e})",
                            dataset) from e
    if y.ndim == 1 and y.size == 0:
        y = y.astype(np.int64)  # (an empty list reads as float64)
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
        raise corrupt_error(path, f"{where}{key!r} should be integer labels [n], got "
                                  f"{y.dtype}{list(y.shape)} (first values "
                                  f"{y.ravel()[:3].tolist()})", dataset)
    check_labels(y, num_classes, path, dataset, what=f"{where}{key}")
    return y


def cifar_batch(d: dict, key: str, num_classes: int, path, dataset: str,
                member: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(images [n, 32, 32, 3] uint8, labels [n])`` of one CIFAR pickle, checked: the format
    (:func:`cifar_images`, :func:`cifar_labels`) and as many labels as images."""
    x = cifar_images(d, path, dataset, member)
    y = cifar_labels(d, key, num_classes, path, dataset, member)
    if len(x) != len(y):
        raise corrupt_error(path, f"{_member_prefix(member)}'data' holds {len(x)} images but "
                                  f"{key!r} holds {len(y)} labels", dataset)
    return x, y


def check_names(names: tuple[str, ...] | None, num_classes: int, path, dataset: str,
                what: str) -> tuple[str, ...] | None:
    """``names`` unchanged when ``None`` or of length ``num_classes``, else
    :class:`DatasetCorruptError` naming ``path``."""
    if names is not None and len(names) != num_classes:
        raise corrupt_error(path, f"{what} holds {len(names)} class names, expected "
                                  f"{num_classes} (one per class)", dataset)
    return names


def decode_names(names) -> tuple[str, ...]:
    return tuple(n.decode() if isinstance(n, bytes) else str(n) for n in names)


# -------------------------------------------------------------------------------- csv
@functools.lru_cache(maxsize=8)
def _read_csv(path: str, mtime: int, size: int, delimiter: str, member: str | None):
    where = _member_prefix(member)
    try:
        if member is None:
            with open(path, encoding="utf-8-sig") as f:  # (-sig: drops a byte-order mark)
                text = f.read()
        else:
            with zipfile.ZipFile(path) as z:
                text = z.read(member).decode("utf-8-sig")
    except (UnicodeDecodeError, zipfile.BadZipFile, KeyError, EOFError, zlib_error) as e:
        raise corrupt_error(path, f"not a readable {'zip archive' if member else 'text CSV'}: "
                                  f"{type(e).__name__}: {e}") from e
    header, _, body = text.partition("\n")
    names = tuple(c.strip().strip('"') for c in header.strip().split(delimiter))
    if not body.strip():
        raise corrupt_error(path, where + ("it has a header line but no data rows"
                                           if header.strip() else "it is empty"))
    try:  # comments=None: a line starting with '#' is an error, not silently dropped
        values = np.loadtxt(io.StringIO(body), delimiter=delimiter, dtype=np.float64, ndmin=2,
                            comments=None)
    except ValueError as e:
        raise corrupt_error(path, f"{where}not a numeric CSV ({str(e).rstrip('.')}; numpy "
                                  "counts rows from 0 after the header line)") from e
    if values.shape[1] != len(names):
        raise corrupt_error(
            path, f"{where}header has {len(names)} columns but rows have {values.shape[1]}; "
            f"wrong delimiter ({delimiter!r} expected)?"
        )
    finite = np.isfinite(values)
    if not finite.all():
        r, c = np.argwhere(~finite)[0]
        lines = [i for i, line in enumerate(body.split("\n")) if line.rstrip("\r")]
        raise corrupt_error(
            path, f"{where}non-finite value {values[r, c]} in data row {r + 1} (line "
            f"{lines[r] + 2} of the file), column {c + 1} ({names[c]!r}); "
            f"{int(finite.size - finite.sum())} non-finite values in all")
    return names, _readonly(values)


def read_csv(path, delimiter: str, member: str | None = None) -> tuple[tuple[str, ...], np.ndarray]:
    """A numeric CSV with one header line (optionally a member of a ``.zip``):
    ``(column_names, values [rows, cols] float64)``."""
    return _read_csv(*_stamp(pathlib.Path(path)), delimiter, member)
