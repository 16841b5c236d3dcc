"""Loaders of the original file formats, on small files written here in those formats."""

import gzip
import importlib.machinery
import io
import os
import pickle
import struct
import sys
import tarfile
import types
import zipfile

import numpy as np
import pytest

from layerlab import data as D


def _idx(arr: np.ndarray) -> bytes:
    code = {np.uint8: 0x08}[arr.dtype.type]
    return bytes([0, 0, code, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape) + arr.tobytes()


def _write_mnist(d, n_train=12, n_test=5, gz=True, seed=0):
    rng = np.random.default_rng(seed)
    d.mkdir(parents=True, exist_ok=True)
    out = {}
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        x = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        y = rng.integers(0, 10, size=n, dtype=np.uint8)
        for kind, arr in (("images-idx3", x), ("labels-idx1", y)):
            name = f"{prefix}-{kind}-ubyte"
            if gz:
                (d / (name + ".gz")).write_bytes(gzip.compress(_idx(arr)))
            else:
                (d / name).write_bytes(_idx(arr))
        out[prefix] = (x, y)
    return out


@pytest.mark.parametrize("gz,sub", [(True, "mnist"), (False, "")])
def test_mnist_idx(tmp_path, gz, sub):
    raw = _write_mnist(tmp_path / sub if sub else tmp_path, gz=gz)
    tr = D.load("mnist", data_dir=tmp_path, verify=False)
    assert tr.x.shape == (12, 28, 28, 1) and tr.x.dtype == np.float32 and tr.y.dtype == np.int32
    np.testing.assert_array_equal(tr.x[..., 0], raw["train"][0] / np.float32(255))
    np.testing.assert_array_equal(tr.y, raw["train"][1])
    te = D.load("mnist", "test", data_dir=tmp_path, verify=False)
    np.testing.assert_array_equal(te.y, raw["t10k"][1])
    assert te.num_classes == 10 and te.class_names[7] == "7"


def test_idx_rejects_truncated_and_bad_magic(tmp_path):
    arr = np.arange(12, dtype=np.uint8).reshape(3, 4)
    good = _idx(arr)
    (tmp_path / "a").write_bytes(good)
    np.testing.assert_array_equal(D.read_idx(tmp_path / "a"), arr)
    (tmp_path / "b").write_bytes(good[:-2])
    with pytest.raises(ValueError, match="truncated"):
        D.read_idx(tmp_path / "b")
    (tmp_path / "c").write_bytes(b"\x01\x02" + good[2:])
    with pytest.raises(ValueError, match="magic"):
        D.read_idx(tmp_path / "c")


def _cifar_batch(rng, n, label_keys):
    x_hwc = rng.integers(0, 256, size=(n, 32, 32, 3), dtype=np.uint8)
    rows = x_hwc.transpose(0, 3, 1, 2).reshape(n, 3072)  # official CHW rows
    d = {b"data": rows, b"batch_label": b"testing batch"}
    labels = {}
    for key, hi in label_keys:
        labels[key] = rng.integers(0, hi, size=n).tolist()
        d[key.encode()] = labels[key]
    return d, x_hwc, labels


def _write_cifar10(root, tar=False, seed=0):
    rng = np.random.default_rng(seed)
    files, xs, ys = {}, {}, {}
    for name, n in [(f"data_batch_{i}", 3) for i in range(1, 6)] + [("test_batch", 4)]:
        d, x, lab = _cifar_batch(rng, n, [("labels", 10)])
        files[name] = pickle.dumps(d, protocol=2)
        xs[name], ys[name] = x, lab["labels"]
    names = [
        b"airplane",
        b"automobile",
        b"bird",
        b"cat",
        b"deer",
        b"dog",
        b"frog",
        b"horse",
        b"ship",
        b"truck",
    ]
    files["batches.meta"] = pickle.dumps({b"label_names": names, b"num_vis": 3072}, protocol=2)
    _write_files(root, "cifar-10-batches-py", "cifar-10-python.tar.gz", files, tar)
    return xs, ys


def _write_files(root, folder, tarname, files, tar):
    root.mkdir(parents=True, exist_ok=True)
    if tar:
        with tarfile.open(root / tarname, "w:gz") as t:
            for name, blob in files.items():
                info = tarfile.TarInfo(f"{folder}/{name}")
                info.size = len(blob)
                t.addfile(info, io.BytesIO(blob))
    else:
        (root / folder).mkdir()
        for name, blob in files.items():
            (root / folder / name).write_bytes(blob)


@pytest.mark.parametrize("tar", [False, True])
def test_cifar10_pickles_and_tarball(tmp_path, tar):
    xs, ys = _write_cifar10(tmp_path, tar=tar)
    tr = D.load("cifar10", data_dir=tmp_path, verify=False)
    assert tr.x.shape == (15, 32, 32, 3) and tr.num_classes == 10
    want_x = np.concatenate([xs[f"data_batch_{i}"] for i in range(1, 6)])
    np.testing.assert_array_equal(tr.x, want_x / np.float32(255))  # CHW rows -> HWC
    np.testing.assert_array_equal(tr.y, sum((ys[f"data_batch_{i}"] for i in range(1, 6)), []))
    assert tr.class_names[0] == "airplane" and tr.class_names[9] == "truck"
    te = D.load("cifar10", "test", data_dir=tmp_path, verify=False)
    np.testing.assert_array_equal(te.x, xs["test_batch"] / np.float32(255))
    np.testing.assert_array_equal(te.y, ys["test_batch"])


def test_cifar10_npz(tmp_path):
    rng = np.random.default_rng(3)
    arrs = dict(
        x_train=rng.integers(0, 256, (6, 32, 32, 3), dtype=np.uint8),
        y_train=np.arange(6) % 10,
        x_test=rng.integers(0, 256, (2, 32, 32, 3), dtype=np.uint8),
        y_test=np.array([3, 8]),
        label_names=np.array([f"a{i}" for i in range(10)]),
    )
    (tmp_path / "cifar10").mkdir()
    np.savez_compressed(tmp_path / "cifar10" / "cifar10.npz", **arrs)
    te = D.load("cifar10", "test", data_dir=tmp_path, verify=False)
    np.testing.assert_array_equal(te.x, arrs["x_test"] / np.float32(255))
    np.testing.assert_array_equal(te.y, [3, 8])
    assert te.class_names[3] == "a3"
    sub = D.load("cifar10", n=4, shuffle=False, data_dir=tmp_path, verify=False)
    np.testing.assert_array_equal(sub.y, [0, 1, 2, 3])


@pytest.mark.parametrize("tar", [False, True])
def test_cifar100_fine_and_coarse(tmp_path, tar):
    rng = np.random.default_rng(1)
    files, ref = {}, {}
    for split, n in (("train", 5), ("test", 3)):
        d, x, lab = _cifar_batch(rng, n, [("fine_labels", 100), ("coarse_labels", 20)])
        files[split] = pickle.dumps(d, protocol=2)
        ref[split] = (x, lab)
    meta = {
        b"fine_label_names": [f"fine{i}".encode() for i in range(100)],
        b"coarse_label_names": [f"coarse{i}".encode() for i in range(20)],
    }
    files["meta"] = pickle.dumps(meta, protocol=2)
    _write_files(tmp_path / "cifar100", "cifar-100-python", "cifar-100-python.tar.gz", files, tar)
    fine = D.load("cifar100", data_dir=tmp_path, verify=False)
    assert fine.num_classes == 100 and fine.class_names[42] == "fine42"
    np.testing.assert_array_equal(fine.x, ref["train"][0] / np.float32(255))
    np.testing.assert_array_equal(fine.y, ref["train"][1]["fine_labels"])
    coarse = D.load("cifar100", "test", data_dir=tmp_path, label_mode="coarse", verify=False)
    assert coarse.num_classes == 20 and coarse.class_names[3] == "coarse3"
    np.testing.assert_array_equal(coarse.y, ref["test"][1]["coarse_labels"])
    with pytest.raises(ValueError, match="label_mode"):
        D.load("cifar100", data_dir=tmp_path, label_mode="medium", verify=False)


def test_pickles_cannot_run_code(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    d = tmp_path / "cifar-10-batches-py"
    d.mkdir()
    for name in [f"data_batch_{i}" for i in range(1, 6)]:
        (d / name).write_bytes(pickle.dumps({b"data": Evil()}))
    with pytest.raises(ValueError, match="refusing to load builtins.print"):
        D.load("cifar10", data_dir=tmp_path, verify=False)


def _superconduct_csv(rng, n=10):
    header = ",".join([f"f{i}" for i in range(81)] + ["critical_temp"])
    vals = rng.normal(size=(n, 82)).round(4)
    return header + "\n" + "\n".join(",".join(map(str, r)) for r in vals) + "\n", vals


@pytest.mark.parametrize("as_zip", [False, True])
def test_superconductivity_csv_and_zip(tmp_path, as_zip):
    text, vals = _superconduct_csv(np.random.default_rng(2))
    d = tmp_path / "superconductivity"
    d.mkdir()
    if as_zip:
        with zipfile.ZipFile(tmp_path / "superconduct.zip", "w") as z:
            z.writestr("train.csv", text)
            z.writestr("unique_m.csv", "x\n1\n")
    else:
        (d / "train.csv").write_text(text)
    tr = D.load("superconductivity", data_dir=tmp_path, verify=False)
    te = D.load("superconductivity", "test", data_dir=tmp_path, verify=False)
    al = D.load("superconductivity", "all", data_dir=tmp_path, verify=False)
    test_rows = np.arange(10) % 5 == 4
    assert tr.num_classes == 0 and tr.x.shape == (8, 81) and te.x.shape == (2, 81)
    np.testing.assert_allclose(te.x, vals[test_rows, :81], rtol=1e-6)
    np.testing.assert_allclose(tr.y, vals[~test_rows, 81], rtol=1e-6)
    np.testing.assert_allclose(al.y, vals[:, 81], rtol=1e-6)
    assert tr.feature_names[80] == "f80"


def test_superconductivity_rejects_wrong_columns(tmp_path):
    (tmp_path / "superconductivity").mkdir()
    (tmp_path / "superconductivity" / "train.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="critical_temp"):
        D.load("superconductivity", data_dir=tmp_path, verify=False)


def test_winequality_small_files(tmp_path):
    d = tmp_path / "wine_quality"
    d.mkdir()
    header = ";".join(f'"c{i}"' for i in range(11)) + ';"quality"'
    rng = np.random.default_rng(0)
    ref = {}
    for color, n in (("red", 6), ("white", 10)):
        v = np.concatenate([rng.normal(size=(n, 11)).round(3), rng.integers(3, 9, (n, 1))], axis=1)
        (d / f"winequality-{color}.csv").write_text(
            header + "\n" + "\n".join(";".join(map(str, r)) for r in v)
        )
        ref[color] = v
    both = D.load("winequality", "all", data_dir=tmp_path, verify=False)
    np.testing.assert_allclose(both.y, np.concatenate([ref["red"][:, -1], ref["white"][:, -1]]))
    red = D.load("winequality", "test", variant="red", color_feature=True, data_dir=tmp_path,
                 verify=False)
    np.testing.assert_allclose(red.x[:, :11], ref["red"][[4], :11], rtol=1e-6)
    np.testing.assert_array_equal(red.x[:, 11], [1.0])
    assert red.feature_names[-1] == "is_red" and red.feature_names[0] == "c0"
    with pytest.raises(ValueError, match="variant"):
        D.load("winequality", variant="rose", data_dir=tmp_path, verify=False)


def test_missing_dataset_error_is_helpful(tmp_path):
    with pytest.raises(D.DatasetNotFoundError) as e:
        D.load("cifar100", data_dir=tmp_path, verify=False)
    msg = str(e.value)
    assert isinstance(e.value, FileNotFoundError)
    assert "'cifar100' not found" in msg
    assert str(tmp_path / "cifar-100-python") in msg  # where it looked
    assert "cifar-100-python/{train, test, meta}" in msg  # what it expects
    assert "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz" in msg  # how to get it
    assert "LAYERLAB_DATA" in msg
    assert "python -m layerlab.data download cifar100" in msg  # the built-in fetch
    for name, url in [
        ("mnist", "yann.lecun.com"),
        ("superconductivity", "archive.ics.uci.edu"),
        ("winequality", "archive.ics.uci.edu"),
    ]:
        with pytest.raises(D.DatasetNotFoundError, match=url):
            D.load(name, data_dir=tmp_path, verify=False)


def test_missing_dataset_error_names_the_sibling_folder_it_searched(tmp_path, monkeypatch):
    """Without data_dir the message said it searched '<repo>/../shared/data' whether or not
    that folder exists (absent: not searched), and never said where <repo> is."""
    from layerlab.data import _files

    monkeypatch.setenv(D.ENV_VAR, str(tmp_path / "env"))
    monkeypatch.chdir(tmp_path)
    for sibling, said in [(tmp_path / "absent", "which does not exist"), (tmp_path, "")]:
        monkeypatch.setattr(_files, "SIBLING_DATA", sibling)
        with pytest.raises(D.DatasetNotFoundError) as e:
            D.load("superconductivity", verify=False)
        first = str(e.value).splitlines()[0]
        assert f"<repo>/../shared/data = {sibling}" in first, first
        assert said in first and ("not <repo>" in first) == bool(said), first


def test_search_path_env_var(tmp_path, monkeypatch):
    raw = _write_mnist(tmp_path / "b" / "mnist", n_train=3, n_test=2)
    monkeypatch.setenv(D.ENV_VAR, os.pathsep.join([str(tmp_path / "a"), str(tmp_path / "b")]))
    assert D.data_roots()[:2] == [tmp_path / "a", tmp_path / "b"]
    np.testing.assert_array_equal(D.load("mnist", "test", verify=False).y, raw["t10k"][1])


def test_load_argument_errors():
    with pytest.raises(ValueError, match="Unknown dataset 'imagenet'"):
        D.load("imagenet")
    with pytest.raises(ValueError, match="splits"):
        D.load("digits", "validation")
    with pytest.raises(TypeError, match="unknown option"):
        D.load("digits", colour=True)
    with pytest.raises(ValueError, match="only"):
        D.load("digits", n=1400, balanced=True)  # 140 per class: some classes have fewer
    # n is an integer >= 0 (10.0 failed deep in a slice: 'slice indices must be integers')
    with pytest.raises(TypeError, match=r"^load: n must be an integer, got float 10\.0\.$"):
        D.load("digits", n=10.0)
    with pytest.raises(ValueError, match=r"^load: n must be >= 0, got -1\.$"):
        D.load("digits", n=-1, shuffle=False)


def test_balanced_without_n_is_the_largest_balanced_subset():
    full = D.load("digits")
    bal = D.load("digits", balanced=True)
    m = full.class_counts().min()
    np.testing.assert_array_equal(bal.class_counts(), [m] * 10)


def _fake_tfds(monkeypatch, examples=None, error=None):
    calls = {}
    mod = types.ModuleType("tensorflow_datasets")
    mod.__spec__ = importlib.machinery.ModuleSpec("tensorflow_datasets", None)

    class Source(list):
        pass

    def data_source(name, **kw):
        calls.update(kw, name=name)
        if error is not None:
            raise error
        return Source(examples)

    mod.data_source = data_source
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", mod)
    return calls


def test_tfds_source_with_a_fake_module(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    ex = [
        {"image": rng.integers(0, 256, (28, 28, 1), dtype=np.uint8), "label": i % 10}
        for i in range(4)
    ]
    calls = _fake_tfds(monkeypatch, ex)
    ds = D.load("mnist", "test", source="tfds", data_dir=tmp_path, verify=False)
    assert calls["download"] is False and calls["try_gcs"] is False
    assert calls["name"] == "mnist" and calls["split"] == "test" and calls["data_dir"] == tmp_path
    np.testing.assert_array_equal(ds.x, np.stack([e["image"] for e in ex]) / np.float32(255))
    np.testing.assert_array_equal(ds.y, [0, 1, 2, 3])
    # auto: files missing -> falls back to tfds
    ds2 = D.load("mnist", "test", data_dir=tmp_path, verify=False)
    np.testing.assert_array_equal(ds2.y, ds.y)


def test_tfds_failure_becomes_dataset_not_found(tmp_path, monkeypatch):
    _fake_tfds(monkeypatch, error=RuntimeError("no prepared dataset"))
    with pytest.raises(D.DatasetNotFoundError, match="no prepared dataset") as e:
        D.load("mnist", data_dir=tmp_path, verify=False)
    assert "yann.lecun.com" in str(e.value)  # the files error is kept too


def test_digits_equal_scikit_learns_load_digits():
    # the loader reads scikit-learn's bundled CSV without importing sklearn.datasets; the
    # images and labels must be load_digits()'s, in its order, split by the same holdout
    from sklearn.datasets import load_digits

    from layerlab.data._loaders import _holdout

    d = load_digits()
    for split in ("train", "test"):
        x, y = _holdout(split, d.images.astype(np.float32)[..., None], d.target.astype(np.int32))
        got = D.load("digits", split)
        np.testing.assert_array_equal(np.asarray(got.x), x / 16.0)
        np.testing.assert_array_equal(np.asarray(got.y), y)


def test_format_errors_of_csvs_and_npz_are_corrupt_file_errors(tmp_path):
    """A superconductivity/winequality CSV of the wrong columns, or a CIFAR-100 npz without the
    coarse labels, raised a bare ValueError without the re-fetch hint docs/data.md promises."""
    (tmp_path / "superconductivity").mkdir()
    sc = tmp_path / "superconductivity" / "train.csv"
    sc.write_text("a,b,critical_temp\n1,2,3\n")
    with pytest.raises(D.DatasetCorruptError) as e:
        D.load("superconductivity", data_dir=tmp_path, verify=False)
    assert str(e.value) == (
        f"Dataset file {sc} is damaged or not the expected file: expected 81 features and a "
        "final 'critical_temp' column (UCI superconductivity train.csv), got 3 columns ending "
        "('critical_temp',).\nTo fix: delete it and re-fetch the dataset: python -m "
        f"layerlab.data download superconductivity --data-dir {tmp_path}.")
    (tmp_path / "wine_quality").mkdir()
    wq = tmp_path / "wine_quality" / "winequality-red.csv"
    wq.write_text('"a";"b";"quality"\n1;2;5\n')
    with pytest.raises(D.DatasetCorruptError) as e:
        D.load("winequality", variant="red", data_dir=tmp_path, verify=False)
    assert str(e.value).startswith(
        f"Dataset file {wq} is damaged or not the expected file: expected 11 features and a "
        "final 'quality' column (UCI winequality-red.csv, ';'-separated), got 3 columns ending "
        "('quality',).\nTo fix: delete it and re-fetch the dataset: python -m layerlab.data "
        "download winequality")
    (tmp_path / "cifar100").mkdir()
    npz = tmp_path / "cifar100" / "cifar100.npz"
    x = np.zeros((2, 32, 32, 3), np.uint8)
    np.savez(npz, x_train=x, y_train=np.array([0, 99]), x_test=x, y_test=np.array([1, 2]))
    assert D.load("cifar100", data_dir=tmp_path, verify=False).num_classes == 100  # fine: ok
    with pytest.raises(D.DatasetCorruptError) as e:
        D.load("cifar100", label_mode="coarse", data_dir=tmp_path, verify=False)
    assert str(e.value) == (
        f"Dataset file {npz} is damaged or not the expected file: it has no array "
        "'y_train_coarse' (it has ['x_train', 'y_train', 'x_test', 'y_test']), needed for "
        "label_mode='coarse'.\nTo fix: delete it and re-fetch the dataset: python -m "
        f"layerlab.data download cifar100 --data-dir {tmp_path}.")


def test_idx_with_a_short_header_is_a_corrupt_error_naming_the_file(tmp_path):
    """A header declaring more dimensions than the file has bytes raised a bare struct.error."""
    p = tmp_path / "short.idx"
    p.write_bytes(b"\x00\x00\x08\x01\x00\x00")  # 1 dimension, 2 of its 4 size bytes
    with pytest.raises(D.DatasetCorruptError) as e:
        D.read_idx(p)
    assert str(p) in str(e.value) and "declares 1 dimensions" in str(e.value)
    d = tmp_path / "mnist"
    _write_mnist(d, n_train=3, n_test=2)
    lab = d / "train-labels-idx1-ubyte.gz"
    lab.write_bytes(gzip.compress(b"\x00\x00\x08\xff"))  # 255 dimensions
    with pytest.raises(D.DatasetCorruptError) as e:
        D.load("mnist", data_dir=tmp_path, verify=False)
    assert str(lab) in str(e.value) and "mnist --data-dir" in str(e.value)


def test_mnist_float_labels_are_refused_not_truncated(tmp_path):
    """An idx label file of type 0x0D (float32) was truncated to integers (3.5 -> 3)."""
    d = tmp_path / "mnist"
    _write_mnist(d, n_train=4, n_test=2)
    y = np.array([3.5, 1.0, 2.0, 0.0], ">f4")
    lab = d / "train-labels-idx1-ubyte.gz"
    lab.write_bytes(gzip.compress(bytes([0, 0, 0x0D, 1]) + struct.pack(">I", 4) + y.tobytes()))
    with pytest.raises(D.DatasetCorruptError) as e:
        D.load("mnist", data_dir=tmp_path, verify=False)
    assert str(lab) in str(e.value) and "integer labels" in str(e.value) and "float32" in str(
        e.value)


def _c100_files(n=3, **over):
    d = {b"data": np.zeros((n, 3072), np.uint8), b"fine_labels": [1] * n,
         b"coarse_labels": [0] * n}
    d.update(over)
    return {"train": pickle.dumps(d), "test": pickle.dumps(d)}


@pytest.mark.parametrize("labels", [[3.7, 1.0, 2.0], [3.0, 1.0, 2.0], ["3", "1", "2"],
                                    [True, False, True]])
@pytest.mark.parametrize("tar", [False, True])
def test_cifar_pickle_labels_must_be_integers(tmp_path, labels, tar):
    """Float or string labels in a CIFAR pickle were cast to int64 (3.7 -> 3, "3" -> 3)."""
    _write_files(tmp_path, "cifar-100-python", "cifar-100-python.tar.gz",
                 _c100_files(fine_labels=labels), tar)
    with pytest.raises(D.DatasetCorruptError, match="'fine_labels' should be integer labels"):
        D.load("cifar100", data_dir=tmp_path, verify=False)
    d10 = tmp_path / "c10"
    files = {f"data_batch_{i}": pickle.dumps({b"data": np.zeros((3, 3072), np.uint8),
                                               b"labels": [1, 2, 3]}) for i in range(1, 6)}
    files["test_batch"] = pickle.dumps({b"data": np.zeros((3, 3072), np.uint8),
                                        b"labels": labels})
    _write_files(d10, "cifar-10-batches-py", "cifar-10-python.tar.gz", files, tar)
    assert len(D.load("cifar10", data_dir=d10, verify=False)) == 15
    with pytest.raises(D.DatasetCorruptError, match="'labels' should be integer labels") as e:
        D.load("cifar10", "test", data_dir=d10, verify=False)
    where = d10 / "cifar-10-python.tar.gz" if tar else d10 / "cifar-10-batches-py" / "test_batch"
    assert str(where) in str(e.value)


@pytest.mark.parametrize("tar", [False, True])
def test_cifar10_batches_with_mismatched_label_counts(tmp_path, tar):
    """Batches of 3 images with 2 and 4 labels (5 x 3 in all) were concatenated and misaligned
    silently; CIFAR-100's mismatch was a generic Dataset error naming no file."""
    files = {}
    for i, k in enumerate([2, 4, 3, 3, 3], 1):
        files[f"data_batch_{i}"] = pickle.dumps({b"data": np.zeros((3, 3072), np.uint8),
                                                 b"labels": [i] * k})
    _write_files(tmp_path, "cifar-10-batches-py", "cifar-10-python.tar.gz", files, tar)
    with pytest.raises(D.DatasetCorruptError) as e:
        D.load("cifar10", data_dir=tmp_path, verify=False)
    msg = str(e.value)
    assert "'data' holds 3 images but 'labels' holds 2 labels" in msg, msg
    if tar:
        assert str(tmp_path / "cifar-10-python.tar.gz") in msg
        assert "member cifar-10-batches-py/data_batch_1" in msg
    else:
        assert str(tmp_path / "cifar-10-batches-py" / "data_batch_1") in msg
    _write_files(tmp_path / "c100", "cifar-100-python", "cifar-100-python.tar.gz",
                 _c100_files(fine_labels=[1, 2]), tar)
    with pytest.raises(D.DatasetCorruptError, match="'fine_labels' holds 2 labels") as e:
        D.load("cifar100", data_dir=tmp_path / "c100", verify=False)
    assert "cifar100 --data-dir" in str(e.value)


@pytest.mark.parametrize("tar", [False, True])
def test_cifar_pickle_format_errors_name_the_file_read(tmp_path, tar):
    """A pickle without fine_labels, or with data not [n, 3072], raised a plain ValueError
    (no re-fetch hint) naming <dir>/cifar-100-python/train even when it was read from the
    tarball."""
    c = tmp_path / "a"
    files = _c100_files()
    files["train"] = pickle.dumps({b"data": np.zeros((3, 3072), np.uint8), b"labels": [0] * 3})
    _write_files(c, "cifar-100-python", "cifar-100-python.tar.gz", files, tar)
    with pytest.raises(D.DatasetCorruptError, match="no 'fine_labels' entry") as e:
        D.load("cifar100", data_dir=c, verify=False)
    read = c / ("cifar-100-python.tar.gz" if tar else "cifar-100-python/train")
    assert f"Dataset file {read} is damaged" in str(e.value)
    assert ("member cifar-100-python/train" in str(e.value)) == tar
    c = tmp_path / "b"
    _write_files(c, "cifar-100-python", "cifar-100-python.tar.gz",
                 _c100_files(data=np.zeros((3, 3, 32, 32), np.uint8)), tar)
    with pytest.raises(D.DatasetCorruptError, match=r"should be uint8 of shape \[n, 3072\]") as e:
        D.load("cifar100", "test", data_dir=c, verify=False)
    read = c / ("cifar-100-python.tar.gz" if tar else "cifar-100-python/test")
    assert f"Dataset file {read} is damaged" in str(e.value)
    assert "python -m layerlab.data download cifar100" in str(e.value)


def test_class_name_count_must_match_the_classes(tmp_path):
    """An npz with 2 fine_label_names for 100 classes loaded, and classes=(0, 5) then failed
    with a raw IndexError; the same for a meta pickle."""
    (tmp_path / "cifar100").mkdir()
    npz = tmp_path / "cifar100" / "cifar100.npz"
    x = np.zeros((4, 32, 32, 3), np.uint8)
    np.savez(npz, x_train=x, y_train=np.array([0, 5, 0, 5]), x_test=x[:2],
             y_test=np.array([0, 5]), fine_label_names=np.array(["a", "b"]))
    for kw in ({}, {"classes": (0, 5)}):
        with pytest.raises(D.DatasetCorruptError) as e:
            D.load("cifar100", data_dir=tmp_path, verify=False, **kw)
        assert str(npz) in str(e.value)
        assert "fine_label_names holds 2 class names, expected 100" in str(e.value)
    files = _c100_files()
    files["meta"] = pickle.dumps({b"fine_label_names": [b"a"] * 10,
                                  b"coarse_label_names": [b"c"] * 20})
    _write_files(tmp_path / "p", "cifar-100-python", "cifar-100-python.tar.gz", files, False)
    with pytest.raises(D.DatasetCorruptError, match="holds 10 class names, expected 100") as e:
        D.load("cifar100", data_dir=tmp_path / "p", verify=False)
    assert str(tmp_path / "p" / "cifar-100-python" / "meta") in str(e.value)
    coarse = D.load("cifar100", data_dir=tmp_path / "p", verify=False, label_mode="coarse")
    assert coarse.class_names == ("c",) * 20


def _sc_text(n=10, seed=2):
    """A small superconductivity train.csv (82 columns ending critical_temp): text, values."""
    text, vals = _superconduct_csv(np.random.default_rng(seed), n)
    return text.split("\n"), vals


@pytest.mark.parametrize("bad", ["nan", "inf", "-inf"])
def test_non_finite_csv_values_are_corrupt_errors_naming_row_and_column(tmp_path, bad):
    """NaN/inf in a UCI CSV loaded silently (superconductivity has no checksum; winequality
    with verify=False): the error names the file, the row and the column."""
    lines, _ = _sc_text()
    cells = lines[3].split(",")
    cells[5] = bad
    lines[3] = ",".join(cells)
    (tmp_path / "superconductivity").mkdir()
    sc = tmp_path / "superconductivity" / "train.csv"
    sc.write_text("\n".join(lines))
    with pytest.raises(D.DatasetCorruptError) as e:
        D.load("superconductivity", data_dir=tmp_path, verify=False)
    msg = str(e.value)
    assert str(sc) in msg and "data row 3 (line 4 of the file), column 6 ('f5')" in msg, msg
    assert "python -m layerlab.data download superconductivity" in msg
    d = tmp_path / "wine_quality"
    d.mkdir()
    wq = d / "winequality-red.csv"
    wq.write_text(";".join(f'"c{i}"' for i in range(11)) + ';"quality"\n'
                  + "1;" * 11 + "5\n" + "2;" * 5 + bad + ";" + "2;" * 5 + "6\n")
    with pytest.raises(D.DatasetCorruptError) as e:
        D.load("winequality", variant="red", data_dir=tmp_path, verify=False)
    assert str(wq) in str(e.value) and "data row 2 (line 3 of the file), column 6 ('c5')" in str(
        e.value)


def test_csv_comment_lines_header_only_and_byte_order_mark(tmp_path):
    """A line starting with '#' was dropped silently (np.loadtxt's default comments); a
    header-only file gave "wrong delimiter?" and a numpy warning; a UTF-8 BOM stayed in the
    first column name."""
    (tmp_path / "superconductivity").mkdir()
    sc = tmp_path / "superconductivity" / "train.csv"
    lines, vals = _sc_text()
    lines[4] = "#" + lines[4]
    sc.write_text("\n".join(lines))
    with pytest.raises(D.DatasetCorruptError, match="not a numeric CSV") as e:
        D.load("superconductivity", "all", data_dir=tmp_path, verify=False)
    assert str(sc) in str(e.value) and "'#" in str(e.value)
    lines, vals = _sc_text()
    sc.write_text(lines[0] + "\n")
    D.clear_cache()
    with pytest.raises(D.DatasetCorruptError) as e:  # (warnings are errors here)
        D.load("superconductivity", "all", data_dir=tmp_path, verify=False)
    assert "it has a header line but no data rows" in str(e.value)
    assert "delimiter" not in str(e.value)
    sc.write_bytes(b"\xef\xbb\xbf" + "\n".join(lines).encode())
    al = D.load("superconductivity", "all", data_dir=tmp_path, verify=False)
    assert al.feature_names[0] == "f0"
    np.testing.assert_allclose(al.y, vals[:, 81], rtol=1e-6)


def test_float64_loads_keep_the_file_s_precision(tmp_path):
    """winequality / superconductivity (and the embedded wine) went through float32 before
    load's dtype: dtype=np.float64 returned float32-rounded values."""
    rng = np.random.default_rng(5)
    (tmp_path / "superconductivity").mkdir()
    header = ",".join([f"f{i}" for i in range(81)] + ["critical_temp"])
    v = rng.uniform(0, 100, (6, 82))
    lines = [header] + [",".join(repr(float(a)) for a in row) for row in v]
    (tmp_path / "superconductivity" / "train.csv").write_text("\n".join(lines) + "\n")
    al = D.load("superconductivity", "all", data_dir=tmp_path, verify=False, dtype=np.float64)
    assert al.x.dtype == np.float64 and al.y.dtype == np.float64
    np.testing.assert_array_equal(al.x, v[:, :81])
    np.testing.assert_array_equal(al.y, v[:, 81])
    al.x[0, 0] = -1.0  # writeable, and not the cached file array
    again = D.load("superconductivity", "all", data_dir=tmp_path, verify=False, dtype=np.float64)
    assert again.x[0, 0] == v[0, 0]
    d = tmp_path / "wine_quality"
    d.mkdir()
    w = rng.uniform(0, 10, (5, 12))
    (d / "winequality-red.csv").write_text(
        ";".join(f'"c{i}"' for i in range(11)) + ';"quality"\n'
        + "\n".join(";".join(repr(float(a)) for a in row) for row in w))
    red = D.load("winequality", "all", variant="red", data_dir=tmp_path, verify=False,
                 dtype=np.float64)
    np.testing.assert_array_equal(red.x, w[:, :11])
    np.testing.assert_array_equal(red.y, w[:, 11])
    f32 = D.load("winequality", "all", variant="red", data_dir=tmp_path, verify=False)
    assert f32.x.dtype == np.float32
    np.testing.assert_array_equal(f32.x, w[:, :11].astype(np.float32))
    from sklearn.datasets import load_wine

    np.testing.assert_array_equal(D.load("wine", "all", dtype=np.float64).x, load_wine().data)


@pytest.mark.parametrize("as_zip", [False, True])
def test_superconductivity_row_count_is_checked(tmp_path, monkeypatch, as_zip):
    """UCI's train.csv has 21263 rows (what the download checks; no checksum is published):
    load did not check it, so a short or cut file loaded silently.  verify=False skips it."""
    monkeypatch.setenv("LAYERLAB_CACHE", str(tmp_path / "cache"))
    text, _ = _superconduct_csv(np.random.default_rng(2))
    if as_zip:
        path = tmp_path / "superconduct.zip"
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("train.csv", text)
    else:
        (tmp_path / "superconductivity").mkdir()
        path = tmp_path / "superconductivity" / "train.csv"
        path.write_text(text)
    with pytest.raises(D.DatasetCorruptError) as e:
        D.load("superconductivity", "test", data_dir=tmp_path)
    msg = str(e.value)
    assert f"Dataset file {path} is damaged" in msg
    assert "it has 10 data rows, the official file has 21263" in msg
    assert ("member train.csv" in msg) == as_zip
    assert len(D.load("superconductivity", "all", data_dir=tmp_path, verify=False)) == 10


# ------------------------------------------------- the wrong dataset under the right name
# Files in the official formats holding another dataset: without a checksum (verify=False,
# rebuilt npz files) they loaded as the dataset their name says.


@pytest.mark.parametrize("tar", [False, True])
def test_cifar100_coarse_labels_under_fine_labels(tmp_path, tar):
    """Coarse labels (20 classes, 500 test images each) stored as 'fine_labels' lie in
    [0, 100) and loaded as fine labels; no subset of CIFAR-100's test split has more than
    100 images of a fine class."""
    n = 2040  # 102 per coarse class: a fifth of the test split's coarse labels
    coarse = (np.arange(n) % 20).tolist()
    d = {b"data": np.zeros((n, 3072), np.uint8), b"fine_labels": coarse,
         b"coarse_labels": coarse}
    files = {"train": _c100_files()["train"], "test": pickle.dumps(d)}
    _write_files(tmp_path, "cifar-100-python", "cifar-100-python.tar.gz", files, tar)
    with pytest.raises(D.DatasetCorruptError) as e:
        D.load("cifar100", "test", data_dir=tmp_path, verify=False)
    msg = str(e.value)
    read = tmp_path / ("cifar-100-python.tar.gz" if tar else "cifar-100-python/test")
    assert f"Dataset file {read} is damaged or not the expected file" in msg, msg
    assert ("'fine_labels' hold 102 samples of class 0, but the official CIFAR-100 test split "
            "(fine labels) has 100 of that class") in msg, msg
    assert "it holds 2040 samples of 20 of the 100 classes" in msg, msg
    assert ("member cifar-100-python/test: " in msg) == tar
    coarse_ds = D.load("cifar100", "test", data_dir=tmp_path, verify=False, label_mode="coarse")
    assert coarse_ds.num_classes == 20 and len(coarse_ds) == n  # (as coarse labels: fine)


def _refused(path, *args, **kw) -> str:
    """``D.load(*args, verify=False, **kw)``'s DatasetCorruptError message, checked to name
    ``path`` as the damaged file."""
    with pytest.raises(D.DatasetCorruptError) as e:
        D.load(*args, verify=False, **kw)
    msg = str(e.value)
    assert f"Dataset file {path} is damaged" in msg, msg
    return msg


def test_cifar10_arrays_in_cifar100_npz(tmp_path):
    """CIFAR-10's test split (1000 images per class, labels 0..9) saved as cifar100.npz:
    its labels lie in [0, 100), so it loaded as CIFAR-100 with 90 empty classes."""
    (tmp_path / "cifar100").mkdir()
    npz = tmp_path / "cifar100" / "cifar100.npz"
    x = np.zeros((10_000, 32, 32, 3), np.uint8)
    np.savez_compressed(npz, x_train=x[:3], y_train=np.array([0, 1, 2]), x_test=x,
                        y_test=np.arange(10_000) % 10)
    msg = _refused(npz, "cifar100", "test", data_dir=tmp_path)
    assert ("y_test hold 1000 samples of class 0, but the official CIFAR-100 test split (fine "
            "labels) has 100 of that class") in msg, msg
    assert "10000 samples of 10 of the 100 classes" in msg
    assert "python -m layerlab.data download cifar100" in msg
    # a subset of the real split (here 100 images of one class) still loads
    np.savez_compressed(npz, x_train=x[:3], y_train=np.array([0, 1, 2]), x_test=x[:100],
                        y_test=np.full(100, 7))
    assert len(D.load("cifar100", "test", data_dir=tmp_path, verify=False)) == 100


def test_cifar10_train_batch_saved_as_test_batch(tmp_path):
    """data_batch_1 (10000 images, up to 1032 of a class) under the name test_batch: CIFAR-10's
    test split has exactly 1000 per class."""
    counts = [1005, 974, 1032, 1016, 999, 937, 1030, 1001, 1025, 981]  # data_batch_1's
    d = {b"data": np.zeros((10_000, 3072), np.uint8),
         b"labels": np.repeat(np.arange(10), counts).tolist()}
    files = {f"data_batch_{i}": pickle.dumps({b"data": np.zeros((2, 3072), np.uint8),
                                               b"labels": [0, 1]}) for i in range(1, 6)}
    files["test_batch"] = pickle.dumps(d)
    _write_files(tmp_path, "cifar-10-batches-py", "cifar-10-python.tar.gz", files, False)
    msg = _refused(tmp_path / "cifar-10-batches-py" / "test_batch", "cifar10", "test",
                   data_dir=tmp_path)
    assert ("'labels' hold 1032 samples of class 2, but the official CIFAR-10 test split has "
            "1000 of that class") in msg, msg
    assert len(D.load("cifar10", data_dir=tmp_path, verify=False)) == 10  # train: fine


def test_fashion_mnist_balanced_test_labels_under_mnist_names(tmp_path):
    """Fashion-MNIST and KMNIST have MNIST's format, shapes and 10 classes, but 1000 test
    images of every class; MNIST's test split has 892 fives, so a full Fashion-MNIST test
    file is no MNIST (a small subset of it cannot be told apart: see load's docstring)."""
    d = tmp_path / "mnist"
    d.mkdir()
    x, y = np.zeros((10_000, 28, 28), np.uint8), (np.arange(10_000) % 10).astype(np.uint8)
    (d / "t10k-images-idx3-ubyte.gz").write_bytes(gzip.compress(_idx(x), compresslevel=1))
    (d / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(_idx(y)))
    msg = _refused(d / "t10k-labels-idx1-ubyte.gz", "mnist", "test", data_dir=tmp_path)
    assert ("labels hold 1000 samples of class 5, but the official MNIST test split has 892 "
            "of that class") in msg, msg
    assert "python -m layerlab.data download mnist" in msg


def test_cifar_pickles_of_the_other_cifar_are_named(tmp_path):
    """A CIFAR-10 batch saved as cifar-100-python/test (and a CIFAR-100 file as test_batch)
    failed with "no 'fine_labels' entry" and no word of the likely cause."""
    c10 = {b"data": np.zeros((4, 3072), np.uint8), b"labels": [0, 1, 2, 3]}
    files = {"train": pickle.dumps(c10), "test": pickle.dumps(c10)}
    _write_files(tmp_path / "a", "cifar-100-python", "cifar-100-python.tar.gz", files, False)
    with pytest.raises(D.DatasetCorruptError) as e:
        D.load("cifar100", "test", data_dir=tmp_path / "a", verify=False)
    assert str(tmp_path / "a" / "cifar-100-python" / "test") in str(e.value)
    assert ("no 'fine_labels' entry (keys: ['data', 'labels']); 'labels' is the label key of "
            "a CIFAR-10 batch, saved here under cifar100's name?") in str(e.value)
    c100 = pickle.loads(_c100_files()["test"])
    files = {f"data_batch_{i}": pickle.dumps(c100) for i in range(1, 6)}
    files["test_batch"] = pickle.dumps(c100)
    _write_files(tmp_path / "b", "cifar-10-batches-py", "cifar-10-python.tar.gz", files, True)
    with pytest.raises(D.DatasetCorruptError) as e:
        D.load("cifar10", "test", data_dir=tmp_path / "b", verify=False)
    assert str(tmp_path / "b" / "cifar-10-python.tar.gz") in str(e.value)
    assert ("'fine_labels' is the label key of a CIFAR-100 file, saved here under cifar10's "
            "name?") in str(e.value)


def test_cifar_npz_of_the_other_cifar(tmp_path):
    """A cifar10.npz (with its 10 label_names) saved as cifar100.npz loaded as CIFAR-100;
    a cifar100.npz saved as cifar10.npz failed on its fine labels' range only."""
    x = np.zeros((4, 32, 32, 3), np.uint8)
    y = np.array([0, 1, 2, 3])
    (tmp_path / "cifar100").mkdir()
    npz = tmp_path / "cifar100" / "cifar100.npz"
    np.savez(npz, x_train=x, y_train=y, x_test=x, y_test=y,
             label_names=np.array([f"c{i}" for i in range(10)]))
    with pytest.raises(D.DatasetCorruptError) as e:
        D.load("cifar100", data_dir=tmp_path, verify=False)
    assert f"Dataset file {npz} is damaged" in str(e.value)
    assert "it has CIFAR-10's 'label_names' (10 names; keys: [" in str(e.value)
    assert "a cifar10.npz saved under cifar100's name?" in str(e.value)
    (tmp_path / "cifar10").mkdir()
    npz = tmp_path / "cifar10" / "cifar10.npz"
    np.savez(npz, x_train=x, y_train=y, x_test=x, y_test=y, y_train_coarse=y, y_test_coarse=y,
             fine_label_names=np.array([f"f{i}" for i in range(100)]))
    with pytest.raises(D.DatasetCorruptError) as e:
        D.load("cifar10", data_dir=tmp_path, verify=False)
    assert f"Dataset file {npz} is damaged" in str(e.value)
    assert ("it has CIFAR-100's arrays ['y_train_coarse', 'y_test_coarse', "
            "'fine_label_names']") in str(e.value), str(e.value)


def test_one_wine_file_under_both_names(tmp_path):
    """winequality-red.csv copied to winequality-white.csv loaded as 'both' (red twice)."""
    d = tmp_path / "wine_quality"
    d.mkdir()
    text = (";".join(f'"c{i}"' for i in range(11)) + ';"quality"\n'
            + "\n".join(";".join(["1.5"] * 11 + [str(q)]) for q in (5, 6, 7)) + "\n")
    (d / "winequality-red.csv").write_text(text)
    (d / "winequality-white.csv").write_text(text)
    with pytest.raises(D.DatasetCorruptError) as e:
        D.load("winequality", "all", data_dir=tmp_path, verify=False)
    msg = str(e.value)
    assert f"Dataset file {d / 'winequality-white.csv'} is damaged" in msg
    assert f"it holds the same 3 rows as {d / 'winequality-red.csv'}" in msg
    assert len(D.load("winequality", "all", variant="white", data_dir=tmp_path,
                      verify=False)) == 3  # (one variant alone cannot be told)
