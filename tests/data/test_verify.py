"""Verification on load: checksums (cached), label ranges, damaged files -> clear errors."""

import dataclasses
import gzip
import hashlib
import pickle
import shutil
import struct
import zipfile

import numpy as np
import pytest

from layerlab import data as D
from layerlab.data import _files, _registry

REFETCH = "python -m layerlab.data download"


def _idx(arr):
    return bytes([0, 0, 8, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape) + arr.tobytes()


@pytest.fixture
def mnist_dir(tmp_path, monkeypatch):
    """Small MNIST files in the official format, registered as 'official' (their digests)."""
    rng = np.random.default_rng(0)
    d = tmp_path / "data" / "mnist"
    d.mkdir(parents=True)
    bodies = {}
    for prefix, n in (("train", 6), ("t10k", 3)):
        x = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        y = rng.integers(0, 10, n, dtype=np.uint8)
        for kind, arr in (("images-idx3", x), ("labels-idx1", y)):
            name = f"{prefix}-{kind}-ubyte.gz"
            bodies[name] = gzip.compress(_idx(arr), mtime=0)
            (d / name).write_bytes(bodies[name])
    specs = []
    for s in _registry.FILES:
        if s.name in bodies:
            b = bodies[s.name]
            s = dataclasses.replace(s, size=len(b), md5=hashlib.md5(b).hexdigest(),
                                    sha256=hashlib.sha256(b).hexdigest(),
                                    raw_md5=hashlib.md5(gzip.decompress(b)).hexdigest())
        specs.append(s)
    monkeypatch.setattr(_registry, "FILES", tuple(specs))
    monkeypatch.setenv("LAYERLAB_CACHE", str(tmp_path / "cache"))
    _files._VERIFIED.clear()
    _files.clear_cache()
    return d


def _assert_names(err, path, *words):
    msg = str(err.value)
    assert str(path) in msg, msg
    assert f"{REFETCH} mnist --data-dir {path.parents[1]}" in msg, msg
    for w in words:
        assert w in msg, msg


def _damage(path, fn):
    path.write_bytes(fn(path.read_bytes()))


def test_good_files_load_and_verdict_is_cached(mnist_dir, monkeypatch):
    assert len(D.load("mnist", data_dir=mnist_dir.parent)) == 6
    assert len(D.load("mnist", "test", data_dir=mnist_dir.parent)) == 3
    assert (mnist_dir.parents[1] / "cache" / "verified.json").is_file()
    _files._VERIFIED.clear()  # a new process: the JSON cache still vouches for the files
    _files.clear_cache()
    monkeypatch.setattr(_files, "file_digests", lambda *a, **k: pytest.fail("re-hashed"))
    assert len(D.load("mnist", "test", data_dir=mnist_dir.parent)) == 3
    # a changed file (new size/mtime) is checked again
    p = mnist_dir / "t10k-labels-idx1-ubyte.gz"
    p.write_bytes(p.read_bytes() + b"\0")
    with pytest.raises(pytest.fail.Exception, match="re-hashed"):
        D.load("mnist", "test", data_dir=mnist_dir.parent)


def test_recompressed_copy_with_official_content_passes(mnist_dir):
    p = mnist_dir / "t10k-labels-idx1-ubyte.gz"
    _damage(p, lambda b: gzip.compress(gzip.decompress(b), compresslevel=1, mtime=123))
    assert len(D.load("mnist", "test", data_dir=mnist_dir.parent)) == 3


@pytest.mark.parametrize("verify", [True, False])
def test_truncated_gz(mnist_dir, verify):
    p = mnist_dir / "train-images-idx3-ubyte.gz"
    _damage(p, lambda b: b[: len(b) // 2])
    with pytest.raises(D.DatasetCorruptError) as e:
        D.load("mnist", data_dir=mnist_dir.parent, verify=verify)
    _assert_names(e, p, "truncated" if verify else "EOFError")


@pytest.mark.parametrize("verify", [True, False])
def test_flipped_byte(mnist_dir, verify):
    p = mnist_dir / "train-images-idx3-ubyte.gz"
    _damage(p, lambda b: b[:200] + bytes([b[200] ^ 0xFF]) + b[201:])
    with pytest.raises(D.DatasetCorruptError) as e:
        D.load("mnist", data_dir=mnist_dir.parent, verify=verify)
    # without checksums the gzip CRC (or the deflate stream) catches it
    _assert_names(e, p, "checksum mismatch" if verify else "not a readable idx")


def test_inverted_image_bytes_in_valid_gzip_idx(mnist_dir):
    p = mnist_dir / "train-images-idx3-ubyte.gz"
    raw = gzip.decompress(p.read_bytes())
    inv = raw[:16] + bytes(255 - c for c in raw[16:])
    p.write_bytes(gzip.compress(inv, mtime=0))
    with pytest.raises(D.DatasetCorruptError) as e:
        D.load("mnist", data_dir=mnist_dir.parent)
    _assert_names(e, p, "checksum mismatch", "expected md5")


@pytest.mark.parametrize("bad", [200, 11])
def test_out_of_range_label_bytes(mnist_dir, bad):
    p = mnist_dir / "t10k-labels-idx1-ubyte.gz"
    raw = bytearray(gzip.decompress(p.read_bytes()))
    raw[9] = bad
    p.write_bytes(gzip.compress(bytes(raw), mtime=0))
    with pytest.raises(D.DatasetCorruptError) as e:
        D.load("mnist", "test", data_dir=mnist_dir.parent)
    _assert_names(e, p, "checksum mismatch")
    # without the checksum (e.g. an unofficial copy) the label range still catches it
    with pytest.raises(D.DatasetCorruptError) as e:
        D.load("mnist", "test", data_dir=mnist_dir.parent, verify=False)
    _assert_names(e, p, "labels must lie in [0, 10)", f"max {bad}")


def _npz(path, **over):
    rng = np.random.default_rng(1)
    arrs = dict(x_train=rng.integers(0, 256, (4, 32, 32, 3), dtype=np.uint8),
                y_train=np.array([0, 1, 2, 9]),
                x_test=rng.integers(0, 256, (2, 32, 32, 3), dtype=np.uint8),
                y_test=np.array([3, 4]))
    arrs.update(over)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **arrs)


def _assert_npz_error(e, path, *words):
    msg = str(e.value)
    assert str(path) in msg and f"{REFETCH} cifar10 --data-dir {path.parents[1]}" in msg, msg
    for w in words:
        assert w in msg, msg


def test_cifar10_npz_label_42(tmp_path):
    p = tmp_path / "cifar10" / "cifar10.npz"
    _npz(p, y_test=np.array([3, 42]))
    assert len(D.load("cifar10", data_dir=tmp_path)) == 4  # the train split is fine
    with pytest.raises(D.DatasetCorruptError) as e:
        D.load("cifar10", "test", data_dir=tmp_path)
    _assert_npz_error(e, p, "y_test must lie in [0, 10)", "max 42")


@pytest.mark.parametrize("damage,words", [
    (lambda b: b[: len(b) // 2], ["not a readable .npz"]),
    (lambda b: np.random.default_rng(0).bytes(len(b)), ["not a readable .npz",
                                                        "neither a zip archive"]),
])
def test_cifar10_npz_truncated_or_random(tmp_path, damage, words):
    p = tmp_path / "cifar10" / "cifar10.npz"
    _npz(p)
    _damage(p, damage)
    _files.clear_cache()
    with pytest.raises(D.DatasetCorruptError) as e:
        D.load("cifar10", "test", data_dir=tmp_path)
    _assert_npz_error(e, p, *words)
    assert "allow_pickle" not in str(e.value)


@pytest.mark.datasets("mnist", "winequality")
def test_shared_copies_match_the_registry(shared_data, tmp_path, monkeypatch):
    """The registry's published checksums equal those of the byte-exact shared copies,
    and a one-byte change of a real file is caught with the real checksums."""
    monkeypatch.setenv("LAYERLAB_CACHE", str(tmp_path / "cache"))
    checked = 0
    for s in _registry.FILES:
        p = shared_data / s.path
        if s.download and p.is_file() and s.md5:
            assert _files.check_digest(p, s) is None, s.path
            checked += 1
    assert checked >= 6  # 4 MNIST + 2 wine
    src = shared_data / "mnist" / "t10k-labels-idx1-ubyte.gz"
    if src.is_file():
        dst = tmp_path / "d" / "mnist" / src.name
        dst.parent.mkdir(parents=True)
        shutil.copy(src, dst)
        _damage(dst, lambda b: b[:-1] + bytes([b[-1] ^ 1]))
        with pytest.raises(D.DatasetCorruptError, match="ec29112dd5afa0611ce80d1b7f02629c"):
            D.verify_file(dst)


def _verify_cli(capsys, *args):
    from layerlab.data import __main__ as cli

    rc = cli.main(["verify", *args])
    return rc, capsys.readouterr().out


def test_verify_finds_files_where_load_finds_them(tmp_path, monkeypatch, capsys):
    """`verify` only looked for the download layout under one directory: a loose
    superconductivity train.csv, <dir>/superconduct.zip and an extracted cifar-100-python/
    folder (all read by load) were reported missing (exit 1)."""
    from layerlab.data import _download

    monkeypatch.setenv("LAYERLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(_download, "SUPERCONDUCT_ROWS", 4)
    header = ",".join([f"f{i}" for i in range(81)] + ["critical_temp"])
    text = header + "\n" + ("1.5," * 81 + "29\n") * 4
    loose = tmp_path / "loose"
    (loose / "superconductivity").mkdir(parents=True)
    (loose / "superconductivity" / "train.csv").write_text(text)
    rc, out = _verify_cli(capsys, "superconductivity", "--data-dir", str(loose))
    assert rc == 0, out
    assert "superconductivity all: 4 samples read" in out
    zipped = tmp_path / "zipped"
    zipped.mkdir()
    with zipfile.ZipFile(zipped / "superconduct.zip", "w") as z:
        z.writestr("train.csv", text)
    rc, out = _verify_cli(capsys, "superconductivity", "--data-dir", str(zipped))
    assert rc == 0 and f"ok       {zipped / 'superconduct.zip'}" in out, out
    # extracted CIFAR-100 pickles (their md5s unpinned: these are not the official files)
    monkeypatch.setattr(_registry, "FILES", tuple(
        dataclasses.replace(s, md5=None) if s.path.startswith("cifar100/cifar-100-python/")
        else s for s in _registry.FILES))
    c = tmp_path / "c100" / "cifar100" / "cifar-100-python"
    c.mkdir(parents=True)
    for split, n in (("train", 5), ("test", 3)):
        (c / split).write_bytes(pickle.dumps({b"data": np.zeros((n, 3072), np.uint8),
                                             b"fine_labels": [7] * n}))
    rc, out = _verify_cli(capsys, "cifar100", "--data-dir", str(tmp_path / "c100"))
    assert rc == 0, out
    assert "cifar100 train: 5 samples read" in out and "cifar100 test: 3 samples read" in out
    # a damaged file is still caught, by load's own checks, naming it
    (c / "test").write_bytes(pickle.dumps({b"data": np.zeros((3, 3072), np.uint8),
                                          b"fine_labels": [7.5] * 3}))
    rc, out = _verify_cli(capsys, "cifar100", "--data-dir", str(tmp_path / "c100"))
    assert rc == 1 and f"Dataset file {c / 'test'} is damaged" in out, out


def test_verify_searches_load_s_path(tmp_path, monkeypatch, capsys):
    """Without --data-dir, `verify` looked only in the first $LAYERLAB_DATA entry (else
    ./data); load searches every entry, ./data and <repo>/../shared/data."""
    monkeypatch.setenv("LAYERLAB_CACHE", str(tmp_path / "cache"))
    wq = tmp_path / "second" / "wine_quality"
    wq.mkdir(parents=True)
    header = ";".join(f'"c{i}"' for i in range(11)) + ';"quality"\n'
    for color in ("red", "white"):
        (wq / f"winequality-{color}.csv").write_text(header + "1;" * 11 + "5\n")
    specs = tuple(dataclasses.replace(s, md5=None, sha256=None, size=None)
                  if s.dataset == "winequality" else s for s in _registry.FILES)
    monkeypatch.setattr(_registry, "FILES", specs)
    monkeypatch.setenv("LAYERLAB_DATA", f"{tmp_path / 'first'}:{tmp_path / 'second'}")
    monkeypatch.chdir(tmp_path)
    # the checkout's sibling ../shared/data holds the real wine files: out of this search
    monkeypatch.setattr(_files, "SIBLING_DATA", tmp_path / "no_shared_data")
    rc, out = _verify_cli(capsys, "winequality")
    assert rc == 0, out
    assert "winequality red: 1 samples read" in out and "winequality white: 1" in out
    monkeypatch.setenv("LAYERLAB_DATA", str(tmp_path / "first"))
    rc, out = _verify_cli(capsys, "winequality")
    assert rc == 1 and "missing  winequality red: looked for" in out
    assert str(tmp_path / "first" / "wine_quality" / "winequality-red.csv") in out
