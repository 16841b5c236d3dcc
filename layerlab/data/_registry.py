"""The official dataset files: where they come from, what they hash to, where they go.

Every file :mod:`layerlab.data` reads from disk under its standard name is listed here
with its published checksum, so that ``load`` can verify it (once; the verdict is cached,
see :func:`layerlab.data._files.verify_file`) and ``python -m layerlab.data download``
can fetch it.

Sources of the checksums (``source`` of each :class:`FileSpec`):

* MNIST: md5 of the four ``.gz`` files (and of their decompressed idx streams) as
  published with the LeCun/Cortes files and used by torchvision's loader; sizes from the
  files themselves (``/work/shared/data/README.md`` holds byte-exact copies).
* CIFAR-10/100: md5 of the tarballs as published on https://www.cs.toronto.edu/~kriz/cifar.html;
  sha256 and byte size as pinned by keras' ``cifar10``/``cifar100`` loaders; md5 of the
  extracted pickles as pinned by torchvision (CIFAR-10 batches, CIFAR-100 train/test/meta).
* Wine Quality (UCI): md5 and size of the two CSVs as UCI serves them (UCI publishes no
  checksum; these md5s are the ones hard-coded by independent public loaders and match
  the byte-exact copies in ``shared/data``); sha256 computed on those copies.
* Superconductivity (UCI): **no checksum is published anywhere we could find**, and no
  copy was available to pin one.  The download is verified by format only: a zip archive
  with ``train.csv`` of 21263 rows x 82 numeric columns ending in ``critical_temp``.
"""

from __future__ import annotations

import dataclasses
import os

__all__ = [
    "FileSpec",
    "FILES",
    "CLASS_COUNTS",
    "DOWNLOADABLE",
    "DatasetCorruptError",
    "BASE_URL_ENV",
    "spec_for",
    "dataset_of",
    "refetch_hint",
]

#: Environment variable overriding the download base URL (every file is then fetched from
#: ``$LAYERLAB_DATA_URL/<file name>``; used by the tests with a local HTTP server).
BASE_URL_ENV = "LAYERLAB_DATA_URL"


class DatasetCorruptError(ValueError):
    """A dataset file exists but is damaged or not the expected file.

    The message names the file, what is wrong with it (checksum, size, format, labels) and
    the command that fetches a fresh copy.
    """


@dataclasses.dataclass(frozen=True)
class FileSpec:
    """One official dataset file.

    Attributes:
      dataset: the ``layerlab.data.load`` name it belongs to.
      path: where ``download`` puts it, relative to the data directory (``load`` finds it
        there); its base name is what ``load`` recognises for verification.
      urls: official URLs, tried in order (mirrors after the primary).
      size: byte size, or ``None`` when unknown.
      md5, sha256: hex digests, or ``None`` when none is published.
      raw_md5: md5 of the decompressed stream of a ``.gz`` file (a re-compressed copy with
        the right content is accepted).
      download: fetched by ``download`` (``False``: only recognised when found, e.g. the
        extracted CIFAR pickles).
      source: where the checksum comes from.
    """

    dataset: str
    path: str
    urls: tuple[str, ...] = ()
    size: int | None = None
    md5: str | None = None
    sha256: str | None = None
    raw_md5: str | None = None
    download: bool = True
    source: str = ""

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


_MNIST_MIRRORS = (
    "https://ossci-datasets.s3.amazonaws.com/mnist/",  # torchvision's mirror of the originals
    "https://storage.googleapis.com/cvdf-datasets/mnist/",  # TensorFlow's mirror
    "http://yann.lecun.com/exdb/mnist/",  # the original site (often refuses downloads)
)
_MNIST = [
    # name, size, md5(.gz), sha256(.gz), md5(decompressed)
    ("train-images-idx3-ubyte", 9912422, "f68b3c2dcbeaaa9fbdd348bbdeb94873",
     "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
     "6bbc9ace898e44ae57da46a324031adb"),
    ("train-labels-idx1-ubyte", 28881, "d53e105ee54ea40749a09fcbcd1e9432",
     "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
     "a25bea736e30d166cdddb491f175f624"),
    ("t10k-images-idx3-ubyte", 1648877, "9fb629c4189551a2d022fa330f9573f3",
     "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
     "2646ac647ad5339dbf082846283269ea"),
    ("t10k-labels-idx1-ubyte", 4542, "ec29112dd5afa0611ce80d1b7f02629c",
     "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
     "27ae3e4e09519cfbb04c329615203637"),
]
_KRIZ = "https://www.cs.toronto.edu/~kriz/"
_UCI_WINE = "https://archive.ics.uci.edu/ml/machine-learning-databases/wine-quality/"
_UCI_SUPER = (
    "https://archive.ics.uci.edu/ml/machine-learning-databases/00464/superconduct.zip",
    "https://archive.ics.uci.edu/static/public/464/superconductivty+data.zip",
)

_CIFAR10_BATCHES = {
    "data_batch_1": "c99cafc152244af753f735de768cd75f",
    "data_batch_2": "d4bba439e000b95fd0a9bffe97cbabec",
    "data_batch_3": "54ebc095f3ab1f0389bbae665268c751",
    "data_batch_4": "634d18415352ddfa80567beed471001a",
    "data_batch_5": "482c414d41f54cd18b22e5b47cb7c3cb",
    "test_batch": "40351d587109b95175f43aff81a1287e",
    "batches.meta": "5ff9c542aee3614f3951f8cda6e48888",
}
_CIFAR100_FILES = {
    "train": "16019d7e3df5f24257cddd939b257f8d",
    "test": "f0ef6b0ae62326f3e7ffdfab6717acfc",
    "meta": "7973b15100ade9c7d40fb424638fde48",
}


def _build() -> tuple[FileSpec, ...]:
    out: list[FileSpec] = []
    for name, size, md5, sha, raw in _MNIST:
        out.append(FileSpec("mnist", f"mnist/{name}.gz",
                            tuple(m + name + ".gz" for m in _MNIST_MIRRORS), size, md5, sha,
                            raw, source="LeCun/Cortes md5 (as pinned by torchvision)"))
        # the decompressed originals, under both names the loader accepts
        for alias in (name, name.replace("-idx", ".idx")):
            out.append(FileSpec("mnist", f"mnist/{alias}", (), size=None, md5=raw,
                                download=False, source="md5 of the decompressed original"))
    out.append(FileSpec("cifar10", "cifar10/cifar-10-python.tar.gz",
                        (_KRIZ + "cifar-10-python.tar.gz",), 170498071,
                        "c58f30108f718f92721af3b95e74349a",
                        "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce",
                        source="md5 from cifar.html; sha256/size as pinned by keras"))
    for name, md5 in _CIFAR10_BATCHES.items():
        out.append(FileSpec("cifar10", f"cifar10/cifar-10-batches-py/{name}", (), None, md5,
                            download=False, source="torchvision's md5 of the extracted batch"))
    out.append(FileSpec("cifar100", "cifar100/cifar-100-python.tar.gz",
                        (_KRIZ + "cifar-100-python.tar.gz",), 169001437,
                        "eb9058c3a382ffc7106e4002c42a8d85",
                        "85cd44d02ba6437773c5bbd22e183051d648de2e7d6b014e1ef29b855ba677a7",
                        source="md5 from cifar.html; sha256/size as pinned by keras"))
    for name, md5 in _CIFAR100_FILES.items():
        out.append(FileSpec("cifar100", f"cifar100/cifar-100-python/{name}", (), None, md5,
                            download=False, source="torchvision's md5 of the extracted file"))
    out.append(FileSpec("winequality", "wine_quality/winequality-red.csv",
                        (_UCI_WINE + "winequality-red.csv",), 84199,
                        "2daeecee174368f8a33b82c8cccae3a5",
                        "4a402cf041b025d4566d954c3b9ba8635a3a8a01e039005d97d6a710278cf05e",
                        source="UCI file; md5 as hard-coded by public loaders"))
    out.append(FileSpec("winequality", "wine_quality/winequality-white.csv",
                        (_UCI_WINE + "winequality-white.csv",), 264426,
                        "5d9ff0f7f716dace19e3ab4578775fd7",
                        "76c3f809815c17c07212622f776311faeb31e87610d52c26d87d6e361b169836",
                        source="UCI file; md5 as hard-coded by public loaders"))
    out.append(FileSpec("superconductivity", "superconductivity/superconduct.zip", _UCI_SUPER,
                        source="no published checksum: verified by format only"))
    return tuple(out)


#: Every recognised file (see the module docstring for the sources).
FILES: tuple[FileSpec, ...] = _build()

#: Samples per class of each official split, ``(dataset, split[, label_mode]) -> counts``:
#: no class of a file read as that split (or of any subset of it) may hold more, which
#: tells e.g. CIFAR-10 or CIFAR-100's coarse labels under CIFAR-100's fine name apart
#: without a checksum (:func:`layerlab.data._files.check_class_counts`).  MNIST: the
#: histograms of the official label files (``shared/data/README.md``); CIFAR: 6000 images
#: per class of which 1000 test (CIFAR-10), 600 per fine class of which 100 test and so
#: 3000 per coarse class of which 500 test (CIFAR-100), as cifar.html states.
CLASS_COUNTS: dict[tuple[str, ...], tuple[int, ...]] = {
    ("mnist", "train"): (5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949),
    ("mnist", "test"): (980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009),
    ("cifar10", "train"): (5000,) * 10,
    ("cifar10", "test"): (1000,) * 10,
    ("cifar100", "train", "fine"): (500,) * 100,
    ("cifar100", "test", "fine"): (100,) * 100,
    ("cifar100", "train", "coarse"): (2500,) * 20,
    ("cifar100", "test", "coarse"): (500,) * 20,
}

#: Dataset names ``python -m layerlab.data download`` accepts.
DOWNLOADABLE: tuple[str, ...] = ("mnist", "cifar10", "cifar100", "winequality",
                                 "superconductivity")


def spec_for(path: os.PathLike | str, dataset: str | None = None) -> FileSpec | None:
    """The :class:`FileSpec` a file on disk is recognised as (by its last one or two path
    components, e.g. ``cifar-10-batches-py/test_batch``), or ``None``."""
    parts = os.fspath(path).replace(os.sep, "/").split("/")
    for spec in FILES:
        if dataset is not None and spec.dataset != dataset:
            continue
        sp = spec.path.split("/")[1:]  # drop the dataset folder
        if parts[-len(sp):] == sp:
            return spec
    return None


_OTHER_NAMES = {"cifar10.npz": "cifar10", "cifar100.npz": "cifar100",
                "superconduct.zip": "superconductivity"}


def dataset_of(path: os.PathLike | str) -> str | None:
    """The dataset a file belongs to, from its name or its folder (``None`` if unknown)."""
    spec = spec_for(path)
    if spec is not None:
        return spec.dataset
    parts = os.fspath(path).replace(os.sep, "/").split("/")
    if parts[-1] in _OTHER_NAMES:
        return _OTHER_NAMES[parts[-1]]
    folders = {s.path.split("/")[0]: s.dataset for s in FILES}
    for part in reversed(parts[:-1]):
        if part in folders:
            return folders[part]
    return None


def refetch_hint(dataset: str, data_dir: os.PathLike | str | None = None) -> str:
    """The command that downloads a fresh, verified copy of ``dataset``."""
    where = f" --data-dir {os.fspath(data_dir)}" if data_dir is not None else ""
    return (f"delete it and re-fetch the dataset: python -m layerlab.data download "
            f"{dataset}{where}")
