"""``python -m layerlab.data download`` end to end against a local HTTP server.

The server (``http.server`` on 127.0.0.1, in a thread) serves small files written here in
the official formats and honours ``Range``; the registry is pointed at their checksums,
so the download, resume, verification and the loaders' checksum check are exercised
exactly as with the official files (which cannot be fetched here: no internet)."""

import dataclasses
import gzip
import hashlib
import http.server
import io
import pickle
import struct
import subprocess
import sys
import tarfile
import threading
import zipfile

import numpy as np
import pytest

from layerlab import data as D
from layerlab.data import __main__ as cli
from layerlab.data import _download, _registry


def _idx(arr):
    return bytes([0, 0, 8, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape) + arr.tobytes()


def _tar(entries):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for name, payload in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            t.addfile(info, io.BytesIO(payload))
    return buf.getvalue()


def _official_like_files(rng):
    """{file name: bytes} in the official formats, and the arrays they hold."""
    files, truth = {}, {}
    for prefix, n in (("train", 7), ("t10k", 4)):
        x = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        y = rng.integers(0, 10, n, dtype=np.uint8)
        files[f"{prefix}-images-idx3-ubyte.gz"] = gzip.compress(_idx(x))
        files[f"{prefix}-labels-idx1-ubyte.gz"] = gzip.compress(_idx(y))
        truth[("mnist", prefix)] = (x, y)
    # CIFAR-10 tarball: 5 train batches + test batch + meta, CHW rows
    members = {}
    xs = []
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        x = rng.integers(0, 256, (2, 32, 32, 3), dtype=np.uint8)
        y = rng.integers(0, 10, 2).tolist()
        rows = x.transpose(0, 3, 1, 2).reshape(2, 3072)
        members[f"cifar-10-batches-py/{name}"] = pickle.dumps({b"data": rows, b"labels": y})
        xs.append((x, y))
    members["cifar-10-batches-py/batches.meta"] = pickle.dumps(
        {b"label_names": [f"c{i}".encode() for i in range(10)]})
    files["cifar-10-python.tar.gz"] = _tar(members)
    truth[("cifar10", "test")] = xs[-1]
    # CIFAR-100 tarball
    x = rng.integers(0, 256, (3, 32, 32, 3), dtype=np.uint8)
    fine = rng.integers(0, 100, 3).tolist()
    d = {b"data": x.transpose(0, 3, 1, 2).reshape(3, 3072), b"fine_labels": fine,
         b"coarse_labels": [f // 5 for f in fine]}
    files["cifar-100-python.tar.gz"] = _tar({"cifar-100-python/train": pickle.dumps(d),
                                             "cifar-100-python/test": pickle.dumps(d)})
    truth[("cifar100", "train")] = (x, fine)
    # UCI wine quality: ';'-separated, quoted header
    cols = ["fixed acidity"] * 11 + ["quality"]
    for color in ("red", "white"):
        v = np.round(rng.uniform(0, 10, (10, 12)), 2)
        v[:, -1] = rng.integers(3, 9, 10)
        text = ";".join(f'"{c}"' for c in cols) + "\n" + "\n".join(
            ";".join(f"{a:g}" for a in row) for row in v) + "\n"
        files[f"winequality-{color}.csv"] = text.encode()
        truth[("winequality", color)] = v
    # UCI superconductivity zip: train.csv (82 columns ending critical_temp) + unique_m.csv
    header = ",".join([f"f{i}" for i in range(81)] + ["critical_temp"])
    rows = ("1.5," * 81 + "29\n") * 6
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("train.csv", header + "\n" + rows)
        z.writestr("unique_m.csv", "H,material\n1,H\n")
    files["superconduct.zip"] = buf.getvalue()
    return files, truth


class _Server:
    """Serves ``files`` (mutable dict) with Range support; records (path, Range) per GET."""

    def __init__(self, files, honour_range=True):
        self.files, self.requests, self.honour_range = files, [], honour_range
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):  # noqa: N802 - http.server API
                name = self.path.rsplit("/", 1)[-1]
                rng_hdr = self.headers.get("Range")
                outer.requests.append((name, rng_hdr))
                body = outer.files.get(name)
                if body is None:
                    self.send_error(404)
                    return
                start = 0
                if rng_hdr and outer.honour_range:
                    start = int(rng_hdr.split("=")[1].split("-")[0])
                    if start >= len(body):
                        self.send_error(416)
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(len(body) - start))
                self.end_headers()
                self.wfile.write(body[start:])

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/files"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def served(monkeypatch, tmp_path):
    """A server with the small official-format files; the registry pinned to their digests."""
    files, truth = _official_like_files(np.random.default_rng(0))
    specs = []
    for s in _registry.FILES:
        body = files.get(s.name)
        if s.download and body is not None and s.dataset != "superconductivity":
            s = dataclasses.replace(s, size=len(body), md5=hashlib.md5(body).hexdigest(),
                                    sha256=hashlib.sha256(body).hexdigest(),
                                    raw_md5=None)
        elif not s.download:
            s = dataclasses.replace(s, md5=None, sha256=None)
        specs.append(s)
    monkeypatch.setattr(_registry, "FILES", tuple(specs))
    monkeypatch.setattr(_download, "FILES", tuple(specs))
    monkeypatch.setattr(_download, "SUPERCONDUCT_ROWS", 6)
    monkeypatch.setenv("LAYERLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(_registry.BASE_URL_ENV, raising=False)
    server = _Server(files)
    yield server, files, truth
    server.close()


def _dl(server, name, root, *extra):
    return cli.main(["download", name, "--data-dir", str(root), "--base-url", server.url,
                     "--no-progress", *extra])


def test_every_dataset_downloads_verifies_and_loads(served, tmp_path):
    server, files, truth = served
    root = tmp_path / "data"
    for name in _registry.DOWNLOADABLE:
        assert _dl(server, name, root) == 0, name
    assert not list(root.rglob("*.part"))
    x, y = truth[("mnist", "t10k")]
    te = D.load("mnist", "test", data_dir=root)  # checksums verified against the registry
    np.testing.assert_array_equal(te.y, y)
    np.testing.assert_array_equal(np.round(te.x[..., 0] * 255).astype(np.uint8), x)
    c10 = D.load("cifar10", "test", data_dir=root)
    np.testing.assert_array_equal(np.round(c10.x * 255).astype(np.uint8), truth[("cifar10",
                                                                                "test")][0])
    np.testing.assert_array_equal(c10.y, truth[("cifar10", "test")][1])
    c100 = D.load("cifar100", data_dir=root)
    np.testing.assert_array_equal(c100.y, truth[("cifar100", "train")][1])
    wine = D.load("winequality", "all", variant="red", data_dir=root)
    np.testing.assert_allclose(wine.y, truth[("winequality", "red")][:, -1])
    sc = D.load("superconductivity", "all", data_dir=root)
    assert sc.x.shape == (6, 81) and np.all(sc.y == 29)
    # a second run finds verified copies and requests nothing
    n = len(server.requests)
    assert _dl(server, "mnist", root) == 0
    assert len(server.requests) == n


def test_resume_with_range_and_restart_without(served, tmp_path):
    server, files, _ = served
    body = files["train-images-idx3-ubyte.gz"]
    part = tmp_path / "d" / "mnist" / "train-images-idx3-ubyte.gz.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(body[:100])
    assert _dl(server, "mnist", tmp_path / "d") == 0
    assert ("train-images-idx3-ubyte.gz", "bytes=100-") in server.requests
    assert (part.parent / "train-images-idx3-ubyte.gz").read_bytes() == body
    assert not part.exists()
    # a server that ignores Range: the file is fetched again from the start
    server.honour_range = False
    part2 = tmp_path / "e" / "mnist" / "t10k-labels-idx1-ubyte.gz.part"
    part2.parent.mkdir(parents=True)
    part2.write_bytes(b"garbage!")
    assert _dl(server, "mnist", tmp_path / "e") == 0
    want = files["t10k-labels-idx1-ubyte.gz"]
    assert (part2.parent / "t10k-labels-idx1-ubyte.gz").read_bytes() == want


def test_bad_download_is_rejected_and_nothing_is_left(served, tmp_path, capsys):
    server, files, _ = served
    good = files["winequality-white.csv"]
    files["winequality-white.csv"] = good[:-3] + b"999"  # same size, one value changed
    assert _dl(server, "winequality", tmp_path) == 1
    err = capsys.readouterr().err
    assert "winequality-white.csv" in err and "checksum mismatch" in err
    assert not (tmp_path / "wine_quality" / "winequality-white.csv").exists()
    assert not (tmp_path / "wine_quality" / "winequality-white.csv.part").exists()
    assert (tmp_path / "wine_quality" / "winequality-red.csv").exists()  # verified, kept
    files["superconduct.zip"] = b"PK\x03\x04 not really a zip"
    assert _dl(server, "superconductivity", tmp_path) == 1
    assert "not a readable zip" in capsys.readouterr().err
    # a damaged file already in place is replaced by a fresh verified copy
    files["winequality-white.csv"] = good
    (tmp_path / "wine_quality" / "winequality-white.csv").write_bytes(b"junk")
    assert _dl(server, "winequality", tmp_path) == 0
    assert (tmp_path / "wine_quality" / "winequality-white.csv").read_bytes() == good


def test_progress_bar_shows_and_leaves_tqdm_disable_to_the_environment(served, tmp_path, capsys,
                                                                       monkeypatch):
    """The download bar is on by default, and then gets no explicit ``disable=`` (which would
    override tqdm's own TQDM_DISABLE=1, read when tqdm is imported); ``--no-progress`` turns it
    off."""
    import tqdm.auto

    server, _, _ = served
    argv = ["download", "winequality", "--base-url", server.url]
    seen = []
    real = tqdm.auto.tqdm

    def spy(*a, **kw):
        seen.append(kw)
        return real(*a, **kw)

    monkeypatch.setattr(tqdm.auto, "tqdm", spy)
    assert cli.main([*argv, "--data-dir", str(tmp_path / "a")]) == 0
    assert "winequality-red.csv: 100%" in capsys.readouterr().err
    assert seen and all("disable" not in kw for kw in seen)
    seen.clear()
    assert cli.main([*argv, "--data-dir", str(tmp_path / "b"), "--no-progress"]) == 0
    assert "%|" not in capsys.readouterr().err
    assert seen and all(kw.get("disable") is True for kw in seen)


def test_unknown_name_and_unreachable_server(tmp_path, monkeypatch):
    with pytest.raises(SystemExit):
        cli.main(["download", "imagenet"])
    with pytest.raises(ValueError, match="downloadable"):
        D.download("imagenet", tmp_path)
    monkeypatch.setenv("LAYERLAB_CACHE", str(tmp_path / "cache"))
    rc = cli.main(["download", "winequality", "--data-dir", str(tmp_path),
                   "--base-url", "http://127.0.0.1:9/nothing", "--no-progress"])
    assert rc == 1


def test_help_is_fast_and_imports_no_jax():
    code = ("import sys, runpy; sys.argv=['x','--help']\n"
            "try:\n runpy.run_module('layerlab.data', run_name='__main__')\n"
            "except SystemExit: pass\n"
            "assert 'jax' not in sys.modules, 'jax imported'\n"
            "assert 'numpy' not in sys.modules, 'numpy imported'\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert "download" in out.stdout
