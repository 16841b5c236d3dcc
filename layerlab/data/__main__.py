"""``python -m layerlab.data download NAME [--data-dir DIR]``: fetch and verify a dataset.

Also ``python -m layerlab.data verify NAME [--data-dir DIR]`` (check the files already
present) and ``python -m layerlab.data list`` (the downloadable files and their sources).
Flags are parsed before anything heavy is imported, so ``--help`` answers at once.
"""

from __future__ import annotations

import argparse
import sys

from layerlab.data._registry import BASE_URL_ENV, DOWNLOADABLE, FILES


def build_parser() -> argparse.ArgumentParser:
    fmt = argparse.HelpFormatter  # defaults are stated in the help texts
    p = argparse.ArgumentParser(
        prog="python -m layerlab.data", formatter_class=fmt,
        description="Download and verify the datasets layerlab.data.load reads from files.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    d = sub.add_parser("download", formatter_class=fmt,
                       help="fetch a dataset's official files and verify their checksums",
                       description="Fetch a dataset's official files (resuming a partial "
                       "download), verify size and published checksums, and move each into "
                       "place atomically.")
    d.add_argument("name", choices=DOWNLOADABLE, help="dataset to download")
    d.add_argument("--data-dir", default=None,
                   help="data directory (default: first $LAYERLAB_DATA entry, else ./data)")
    d.add_argument("--base-url", default=None,
                   help=f"fetch every file from BASE_URL/<file name> instead of the official "
                   f"URLs (a mirror; default ${BASE_URL_ENV} if set)")
    d.add_argument("--force", action="store_true",
                   help="download again even if a verified copy is present")
    d.add_argument("--no-progress", action="store_true", help="no progress bar")
    v = sub.add_parser("verify", formatter_class=fmt,
                       help="check the files of a dataset already on disk",
                       description="Find a dataset's files exactly as layerlab.data.load "
                       "does (every layout it accepts), check size and published checksums "
                       "where there are any, then read every split as load does (format, "
                       "shapes, labels, values).")
    v.add_argument("name", choices=DOWNLOADABLE, help="dataset to verify")
    v.add_argument("--data-dir", default=None,
                   help="data directory (default: load's search path: every $LAYERLAB_DATA "
                   "entry, then ./data, then <repo>/../shared/data)")
    sub.add_parser("list", formatter_class=fmt, help="list the downloadable files",
                   description="List every downloadable file: URL, size, checksums, source.")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "list":
        for s in FILES:
            if s.download:
                print(f"{s.dataset:18s} {s.path}\n{'':18s}   url:    {s.urls[0]}\n"
                      f"{'':18s}   size:   {s.size or 'unknown'}  md5: {s.md5 or '-'}  "
                      f"sha256: {s.sha256 or '-'}\n{'':18s}   source: {s.source}")
        return 0
    from layerlab.data import _download

    if args.command == "download":
        try:
            paths = _download.download(args.name, args.data_dir, base_url=args.base_url,
                                       progress=not args.no_progress, force=args.force)
        except _download.DownloadError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        root = paths[0].parents[1] if paths else None  # every download path is <dir>/<ds>/<f>
        print(f"done: {len(paths)} file(s) of {args.name!r} verified under {root}.")
        return 0
    return _verify(args.name, args.data_dir)


# what `verify` reads of each dataset: (what, load split, load options)
_VERIFY_PARTS = {
    "mnist": [("train", "train", {}), ("test", "test", {})],
    "cifar10": [("train", "train", {}), ("test", "test", {})],
    "cifar100": [("train", "train", {}), ("test", "test", {})],
    "winequality": [("red", "all", {"variant": "red"}), ("white", "all", {"variant": "white"})],
    "superconductivity": [("all", "all", {})],
}


def _verify(name: str, data_dir) -> int:
    """Check the files ``load`` would read (found by the same lookup, ``_files.dataset_files``):
    published checksums (re-hashed, cache ignored) or the superconductivity zip's format check,
    then each split read by ``load``'s own reader with verification on."""
    from layerlab.data import _download, _files, _loaders
    from layerlab.data._registry import DatasetCorruptError, spec_for

    roots = _files.data_roots(data_dir)
    bad, seen = 0, set()
    for what, split, opts in _VERIFY_PARTS[name]:
        paths, looked = _files.dataset_files(name, split, roots, **opts)
        if paths is None:
            print(f"missing  {name} {what}: looked for\n" +
                  "\n".join(f"           {p}" for p in looked))
            bad += 1
            continue
        ok = True
        for path in paths:
            spec = spec_for(path, name)
            if path in seen:
                continue
            seen.add(path)
            if spec is None or (spec.md5 is None and spec.sha256 is None
                                and spec.dataset != "superconductivity"):
                print(f"{'found':8s} {path} (no published checksum: checked by reading it)")
                continue
            problem = _download._check(path, spec)
            print(f"{'ok' if problem is None else 'BAD':8s} {path}"
                  + ("" if problem is None else f": {problem}"))
            if problem is None:
                _files.verify_file(path, spec.dataset)
            else:
                ok = False
                bad += 1
        if not ok:
            continue
        try:
            ds, _ = _loaders._load_raw(name, split, data_dir, "files", dict(opts), True)
        except DatasetCorruptError as e:
            print(f"BAD      {name} {what}: {e}")
            bad += 1
        else:
            print(f"ok       {name} {what}: {len(ds)} samples read as load reads them")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
