"""Shared command line for every reproduction script (imports neither JAX nor numpy).

Every script::

    def build_parser() -> argparse.ArgumentParser:
        p = _cli.parser("dgl", "table1", __doc__)
        p.add_argument("--steps", type=int, default=None, help="... (default: config's)")
        return p

    def main(argv=None) -> int:
        args = build_parser().parse_args(argv)
        from layerlab.dgl import experiments as ex      # heavy imports only after parsing
        cfg = (ex.Table1Config.paper() if args.paper
               else ex.Table1Config.smoke() if args.smoke else ex.Table1Config())
        rec = ex.run_table1(cfg, key=...)
        _cli.finish(args, rec, figure=lambda path: ex.plot_table1(rec, path))
        return 0

Where a run writes: ``--out DIR`` when given (``--out DIR/NAME.json``: the record is
``NAME.json`` and its figure ``NAME.png`` in ``DIR``); otherwise ``results/<paper>/`` for
``--paper`` or ``--record`` runs (the committed records), and ``scratch/<paper>/`` (ignored by
git) for every other run, so default and smoke runs never modify tracked files.
"""
from __future__ import annotations

import argparse
import pathlib
import shlex
import sys
import time
from collections.abc import Callable
from typing import Any

REPO = pathlib.Path(__file__).resolve().parents[1]
_T0 = time.perf_counter()


class _Fmt(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows every flag's default, unless its help text already says what the default is."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "default" in text.lower() or action.default in (None, False, argparse.SUPPRESS):
            return text
        return super()._get_help_string(action)


def record_epilog(paper: str, artifact: str) -> str | None:
    """What the committed record of this script cost (for --help: how long a run takes), read
    from ``results/<paper>/<artifact>.json`` without importing JAX; ``None`` without one."""
    import json

    path = REPO / "results" / paper / f"{artifact}.json"
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    wall = rec.get("wall_s")
    if not isinstance(wall, (int, float)):
        return None
    dev = (rec.get("machine") or {}).get("device_kind") or "an unnamed machine"
    took = f"{wall / 60:.1f} min" if wall >= 120 else f"{wall:.0f} s"
    import textwrap

    return textwrap.fill(
        f"The committed record {path.relative_to(REPO)} (scale {rec.get('scale')!r}) took "
        f"{took} on {dev}; per-row machines and every record's time: reproduce/README.md. "
        "Without --paper/--record a run writes to scratch/ and changes no tracked file.", 88)


def parser(paper: str, artifact: str, doc: str | None) -> argparse.ArgumentParser:
    """An ``ArgumentParser`` with the flags every reproduction shares; defaults shown in --help."""
    p = argparse.ArgumentParser(prog=f"python -m reproduce.{paper}_{artifact}",
                                description=doc, formatter_class=_Fmt,
                                epilog=record_epilog(paper, artifact))
    p.set_defaults(_paper_name=paper, _artifact=artifact)
    scale = p.add_mutually_exclusive_group()
    scale.add_argument("--paper", action="store_true",
                       help="run at the paper's scale and settings and write the committed "
                       f"record results/{paper}/{artifact}.json")
    scale.add_argument("--smoke", action="store_true",
                       help="a seconds-long configuration that exercises every code path "
                       "(what the test suite runs)")
    p.add_argument("--record", action="store_true",
                   help=f"write to results/{paper}/ even without --paper (a reduced-scale "
                   "record, marked scale='reduced')")
    p.add_argument("--out", type=_out_path, default=None,
                   help=f"write the record and figure to this folder instead (default: "
                   f"results/{paper}/ with --paper/--record, else scratch/{paper}/); a path "
                   f"ending in .json names the record itself (the figure goes beside it, "
                   f".png)")
    p.add_argument("--seeds", type=int, default=None,
                   help="number of seeds (default: the configuration's)")
    p.add_argument("--data-dir", default=None,
                   help="dataset root (default: $LAYERLAB_DATA, ./data, ../shared/data)")
    p.add_argument("--checkpoint-dir", type=pathlib.Path, default=None,
                   help="resumable checkpoints of long runs here (default: "
                   f"checkpoints/{paper}_{artifact} for --paper runs, none otherwise)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    return p


def _out_path(value: str) -> pathlib.Path:
    path = pathlib.Path(value)
    if path.suffix == ".json" and path.is_dir():  # checked now, not after an hours-long run
        raise argparse.ArgumentTypeError(
            f"{value} is a folder; --out takes a folder or the record's file name (*.json), "
            "and a file cannot be written over a folder")
    return path


def out_stem(args: argparse.Namespace) -> str:
    """The record's file name without ``.json``: the ``--out`` name, else the artifact."""
    if args.out is not None and pathlib.Path(args.out).suffix == ".json":
        return pathlib.Path(args.out).stem
    return args._artifact


def out_dir(args: argparse.Namespace) -> pathlib.Path:
    """The folder this run writes to (see the module docstring)."""
    if args.out is not None:
        out = pathlib.Path(args.out)
        return out.parent if out.suffix == ".json" else out
    sub = "results" if (args.paper or args.record) else "scratch"
    return REPO / sub / args._paper_name


def checkpoint_dir(args: argparse.Namespace) -> pathlib.Path | None:
    """``--checkpoint-dir``, or ``checkpoints/<paper>_<artifact>`` for --paper runs."""
    if args.checkpoint_dir is not None:
        return args.checkpoint_dir
    if args.paper:
        return REPO / "checkpoints" / f"{args._paper_name}_{args._artifact}"
    return None


def command(argv: list[str] | None = None) -> str:
    """The command line that reproduces this run."""
    argv = sys.argv[1:] if argv is None else argv
    mod = pathlib.Path(sys.argv[0]).stem if sys.argv and sys.argv[0] else "?"
    if mod in ("", "-c", "__main__", "?"):
        mod = "?"
    return shlex.join(["python", "-m", f"reproduce.{mod}", *argv])


def finish(args: argparse.Namespace, record: Any, *,
           figure: Callable[[pathlib.Path], Any] | None = None,
           argv: list[str] | None = None, t0: float | None = None,
           variant: str = "") -> pathlib.Path:
    """Stamp ``record`` (command, wall time), write it and its PNG, print a summary table.

    ``figure(path)`` is called with ``<out>/<stem>.png``.  The file is named by ``--out`` when
    that names a ``.json`` file, else ``<artifact><variant>`` (``variant``: e.g. ``"_naive"``
    for a run under a protocol other than the main record's, so that ``--paper``/``--record``
    never writes it over that record).  Returns the JSON path.
    """
    from layerlab.record import write_record

    if not record.command:
        flags = sys.argv[1:] if argv is None else list(argv)
        record.command = shlex.join(["python", "-m",
                                     f"reproduce.{args._paper_name}_{args._artifact}", *flags])
    runs = record.extra.get("runs") if isinstance(record.extra, dict) else None
    if runs and not runs[-1].get("command"):  # a merged record: its last run is this one
        runs[-1]["command"] = record.command
    if record.wall_s is None:
        record.wall_s = time.perf_counter() - (_T0 if t0 is None else t0)
    d = out_dir(args)
    named = args.out is not None and pathlib.Path(args.out).suffix == ".json"
    stem = out_stem(args) if named else record.artifact + variant
    if record.rows and all(r.ours is None for r in record.rows):
        # nothing ran (e.g. a data set the user supplies is absent): say why on the console,
        # and never write such a record over the committed one by default
        why = next((r.note for r in record.rows if r.note), "") or "no row produced a number"
        lines = why.removeprefix("not run: ").splitlines()
        print(f"{args._paper_name} {args._artifact}: no row ran -- " + "\n  ".join(
            [lines[0], *(ln for ln in lines[1:] if ln.startswith("Fetch"))]), file=sys.stderr)
        if args.out is None and (args.paper or args.record):
            print(f"not written: {d / (stem + '.json')} is kept as it is (a record in which no "
                  "row ran would replace it); get the data first, or pass --out FILE.json to "
                  "write such a record elsewhere.", file=sys.stderr)
            raise SystemExit(1)
    path = write_record(record, d, stem=stem)
    if figure is not None:
        figure(d / f"{stem}.png")
    print(summary(record))
    print(f"wrote {path}" + (f" and {d / (stem + '.png')}" if figure else ""))
    return path


def summary(record: Any) -> str:
    """An aligned text table of a record's rows and claims (rounded numbers)."""
    def f(v: Any) -> str:
        if v is None:
            return "-"
        if isinstance(v, bool):
            return "yes" if v else "NO"
        if isinstance(v, float):
            return f"{v:.4g}"
        return str(v)

    lines = [f"{record.paper} {record.artifact}: {record.title} [{record.scale}]"]
    if record.rows:
        w = max(len(r.name) for r in record.rows)
        lines.append(f"  {'row':<{w}}  {'ours':>9} {'± ':>7} {'paper':>9} {'tol':>6}  holds")
        for r in record.rows:
            lines.append(f"  {r.name:<{w}}  {f(r.ours):>9} {f(r.spread):>7} {f(r.paper):>9} "
                         f"{f(r.tol):>6}  {f(r.holds)}")
    for c in record.claims:
        lines.append(f"  claim: {c.claim} -> {f(c.holds)}  ({c.evidence})")
    if record.wall_s is not None:
        lines.append(f"  wall time {record.wall_s:.1f} s")
    return "\n".join(lines)
