"""``download(name)``: fetch a dataset's official files, verified, atomically, resumably.

Each file of :data:`layerlab.data._registry.FILES` marked ``download`` is fetched from its
official URL (mirrors tried in order; ``base_url`` or ``$LAYERLAB_DATA_URL`` replaces the
directory part of every URL) into ``<data_dir>/<spec.path>.part``; an existing ``.part``
is resumed with an HTTP ``Range`` request (a server that ignores it restarts the file).
The finished file is checked (size, md5, sha256 where published; format for the UCI
superconductivity zip, which has no published checksum) and only then moved into place
with ``os.replace``, so a file under its final name is always complete and verified.

Only the standard library is used for HTTP (``urllib``); ``tqdm`` draws the progress bar.
"""

from __future__ import annotations

import io
import os
import pathlib
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Sequence

from layerlab.data._registry import (
    BASE_URL_ENV,
    DOWNLOADABLE,
    FILES,
    FileSpec,
)

__all__ = ["download", "default_data_dir", "DownloadError"]

_CHUNK = 1 << 16
_TIMEOUT = 60.0
_USER_AGENT = "layerlab-data-download/1 (+python urllib)"
SUPERCONDUCT_ROWS = 21263  # rows of the UCI train.csv (the format check of its zip)


class DownloadError(OSError):
    """A file could not be fetched from any of its URLs (the message lists each attempt)."""


def default_data_dir() -> pathlib.Path:
    """Where ``download`` writes without ``data_dir``: the first ``$LAYERLAB_DATA`` entry,
    else ``./data`` (both are searched by ``layerlab.data.load``)."""
    env = [p for p in os.environ.get("LAYERLAB_DATA", "").split(os.pathsep) if p]
    return pathlib.Path(env[0]).expanduser() if env else pathlib.Path.cwd() / "data"


def _urls(spec: FileSpec, base_url: str | None) -> list[str]:
    base = base_url or os.environ.get(BASE_URL_ENV)
    if base:
        return [base.rstrip("/") + "/" + spec.urls[0].rsplit("/", 1)[-1]]
    return list(spec.urls)


def _fetch(url: str, part: pathlib.Path, spec: FileSpec, progress: bool) -> None:
    """Download ``url`` into ``part``, resuming from its current size when possible."""
    have = part.stat().st_size if part.exists() else 0
    if spec.size is not None and have > spec.size:
        part.unlink()
        have = 0
    headers = {"User-Agent": _USER_AGENT}
    if have:
        headers["Range"] = f"bytes={have}-"
    req = urllib.request.Request(url, headers=headers)
    try:
        resp = urllib.request.urlopen(req, timeout=_TIMEOUT)  # noqa: S310 - fixed https URLs
    except urllib.error.HTTPError as e:
        if e.code == 416 and spec.size is not None and have == spec.size:
            return  # already complete
        raise
    with resp:
        status = getattr(resp, "status", 200)
        if have and status != 206:  # server ignored the Range header: start over
            have = 0
        length = resp.headers.get("Content-Length")
        total = (have + int(length)) if length is not None else spec.size
        from tqdm.auto import tqdm

        # disable= only to turn the bar off: an explicit value overrides tqdm's TQDM_DISABLE=1
        bar = tqdm(total=total, initial=have, unit="B", unit_scale=True, unit_divisor=1024,
                   desc=spec.name, leave=True, **({} if progress else {"disable": True}))
        with bar, open(part, "ab" if have else "wb") as f:
            while block := resp.read(_CHUNK):
                f.write(block)
                bar.update(len(block))


def _check_superconductivity(path: pathlib.Path) -> str | None:
    """Format check of the UCI superconductivity zip (no checksum is published)."""
    try:
        with zipfile.ZipFile(path) as z:
            if "train.csv" not in z.namelist():
                return f"the zip has no train.csv (members: {z.namelist()})"
            with z.open("train.csv") as f:
                text = io.TextIOWrapper(f, encoding="utf-8")
                header = text.readline().strip().split(",")
                rows = sum(1 for line in text if line.strip())
    except (zipfile.BadZipFile, OSError, UnicodeDecodeError, EOFError) as e:
        return f"not a readable zip archive ({type(e).__name__}: {e})"
    if len(header) != 82 or header[-1].strip('"') != "critical_temp":
        return f"train.csv header has {len(header)} columns ending {header[-1:]}, expected 82 " \
               "ending 'critical_temp'"
    if rows != SUPERCONDUCT_ROWS:
        return f"train.csv has {rows} data rows, expected {SUPERCONDUCT_ROWS}"
    return None


def _check(path: pathlib.Path, spec: FileSpec) -> str | None:
    from layerlab.data import _files

    if spec.dataset == "superconductivity":
        return _check_superconductivity(path)
    return _files.check_digest(path, spec)


def _download_file(spec: FileSpec, root: pathlib.Path, *, base_url, progress, force,
                   log) -> pathlib.Path:
    from layerlab.data import _files

    target = root / spec.path
    if target.exists() and not force:
        problem = _check(target, spec)
        if problem is None:
            log(f"{target}: present and verified")
            return target
        log(f"{target}: present but {problem}; downloading a fresh copy")
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(target.name + ".part")
    errors = []
    for url in _urls(spec, base_url):
        try:
            _fetch(url, part, spec, progress)
        except (urllib.error.URLError, OSError, ValueError) as e:
            errors.append(f"  {url}: {type(e).__name__}: {e}")
            continue
        problem = _check(part, spec)
        if problem is None:
            os.replace(part, target)
            _files.verify_file(target, spec.dataset)  # records the verdict in the cache
            log(f"{target}: downloaded and verified")
            return target
        part.unlink(missing_ok=True)  # a bad download must not be resumed
        errors.append(f"  {url}: downloaded file rejected: {problem}")
    raise DownloadError(
        f"Could not download {spec.name} (dataset {spec.dataset!r}) into {target}:\n"
        + "\n".join(errors)
        + ("\nA partial download is kept as " + str(part) + " and resumed next time."
           if part.exists() else "")
    )


def download(name: str, data_dir: os.PathLike | str | None = None, *,
             base_url: str | None = None, progress: bool = True, force: bool = False,
             log: Callable[[str], object] = print) -> list[pathlib.Path]:
    """Download and verify the official files of a dataset.

    Args:
      name: one of ``mnist``, ``cifar10``, ``cifar100``, ``winequality``,
        ``superconductivity``.
      data_dir: data directory (default: :func:`default_data_dir`); files go where
        ``layerlab.data.load(name, data_dir=data_dir)`` finds them (``<dir>/mnist/...``,
        ``<dir>/cifar10/cifar-10-python.tar.gz``, ``<dir>/wine_quality/...``, ...).
      base_url: fetch every file from ``<base_url>/<file name>`` instead of the official
        URLs (a mirror; the tests use a local server). Default ``$LAYERLAB_DATA_URL``.
      progress: show a tqdm progress bar per file.
      force: download again even when a verified copy is present.
      log: called with one line per file (``print`` by default).

    Returns:
      the paths of the verified files.

    Raises:
      ValueError: unknown dataset name.
      DownloadError: a file could not be fetched or failed verification at every URL.
    """
    key = name.lower().replace("-", "").replace("_", "")
    key = {"winequality": "winequality", "superconduct": "superconductivity"}.get(key, key)
    if key not in DOWNLOADABLE:
        raise ValueError(f"download: unknown dataset {name!r}; downloadable: "
                         f"{', '.join(DOWNLOADABLE)}.")
    root = pathlib.Path(data_dir).expanduser() if data_dir is not None else default_data_dir()
    specs: Sequence[FileSpec] = [s for s in FILES if s.dataset == key and s.download]
    return [_download_file(s, root, base_url=base_url, progress=progress, force=force, log=log)
            for s in specs]


