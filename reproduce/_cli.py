"""Shared command line for every reproduction script (imports neither JAX nor numpy).

Every script::

    def build_parser() -> argparse.ArgumentParser:
        p = _cli.parser("dgl", "table1", __doc__)
        p.add_argument("--steps", type=_cli.positive_int, default=None,
                       help="... (default: config's)")
        return p

    def main(argv=None) -> int:
        args = build_parser().parse_args(argv)
        from layerlab.dgl import experiments as ex      # heavy imports only after parsing
        cfg = (ex.Table1Config.paper() if args.paper
               else ex.Table1Config.smoke() if args.smoke else ex.Table1Config())
        rec = ex.run_table1(cfg, key=...)
        _cli.finish(args, rec, figure=lambda path: ex.plot_table1(rec, path))
        return 0

    if __name__ == "__main__":
        _cli.run(main)

Where a run writes: ``--out DIR`` when given (``--out DIR/NAME.json``: the record is
``NAME.json`` and its figure ``NAME.png`` in ``DIR``); otherwise ``results/<paper>/`` for
``--paper`` or ``--record`` runs (the committed records), and ``scratch/<paper>/`` (ignored by
git) for every other run, so default and smoke runs never modify tracked files.  ``--record``
refuses ``--smoke``, and a record that is not paper-scale never replaces a paper-scale one in
``results/`` (``--record``: refused when parsing; a ``--paper`` run whose record comes out
reduced, e.g. with fewer ``--seeds``, is written to ``scratch/<paper>/`` instead, exit status 1),
nor a committed reduced record it would lose numbers of (a row that ran there and not in this
run, or with fewer seeds: also to ``scratch/<paper>/``, exit 1; remove the file first to replace
it on purpose).  These guards hold wherever the path points into ``results/``, an ``--out``
there included (before 2026-11-30 an ``--out results/...`` skipped them).

Bad flags are refused when parsing (usage, the flag, what was expected, what came; exit status
2), before JAX is imported: the argument types below (``positive_int``, ``int_list``,
``name_list``, ``folder``, ...) and checks a parser runs on the parsed flags
(``Parser.add_check``: flags that conflict, files that are in the way).  A run in which no row
ran (a dataset the user supplies is absent) prints the loader's whole message and exits with
status 1; a missing dataset that stops a run ends it with the loader's message and status 1
(``run``), not a traceback.
"""
from __future__ import annotations

import argparse
import json
import math
import pathlib
import shlex
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

REPO = pathlib.Path(__file__).resolve().parents[1]
_T0 = time.perf_counter()


class _Fmt(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows every flag's default, unless its help text already says what the default is."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        # by identity: a default of 0 (or 0.0) equals False and was hidden ("--seed SEED")
        if "default" in text.lower() or any(
                action.default is v for v in (None, False, argparse.SUPPRESS)):
            return text
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` that runs checks on the parsed flags before returning them.

    ``add_check(check)``: ``check(parser, args)`` runs after every parse and refuses with
    ``parser.error(...)`` (usage, the message, exit status 2): flags that conflict, a file in
    the way of a record.  The checks run before the script imports JAX or trains anything.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._checks: list[Callable[[Parser, argparse.Namespace], None]] = []

    def add_check(self, check: Callable[[Parser, argparse.Namespace], None]) -> None:
        self._checks.append(check)

    def parse_known_args(self, args: Sequence[str] | None = None,
                         namespace: argparse.Namespace | None = None):
        ns, rest = super().parse_known_args(args, namespace)
        for check in self._checks:
            check(self, ns)
        # folders are made only now, once every flag passed (a refused command makes none)
        for action in self._actions:
            value = getattr(ns, action.dest, None)
            if value is None or action.type not in (folder, _out_path):
                continue
            where = value.parent if action.type is _out_path and value.suffix == ".json" else value
            try:
                where.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                self.error(f"argument {action.option_strings[0]}: expected a folder that can be "
                           f"made, got {value}: {e.strerror or e}")
        return ns, rest


# ------------------------------------------------------------------ argument types
# Each raises argparse.ArgumentTypeError, which argparse reports as
# "argument --flag: <message>" with the usage line and exit status 2.

def _int(value: str, least: int) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an integer >= {least}, got {value!r}") from None
    if n < least:
        raise argparse.ArgumentTypeError(f"expected an integer >= {least}, got {n}")
    return n


def positive_int(value: str) -> int:
    """An integer >= 1 (``--seeds``, ``--epochs``, ``--steps``, widths, sizes)."""
    return _int(value, 1)


def nonneg_int(value: str) -> int:
    """An integer >= 0 (where 0 means something: "no cap", "all of it", a PRNG seed)."""
    return _int(value, 0)


def int_at_least(least: int) -> Callable[[str], int]:
    """An integer >= ``least`` (e.g. 2 for a sample covariance)."""
    def parse(value: str) -> int:
        return _int(value, least)
    parse.__name__ = f"int_at_least_{least}"
    return parse


def positive_float(value: str) -> float:
    """A finite number > 0 (learning rates, relative regularisers)."""
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {value!r}") from None
    if not (math.isfinite(x) and x > 0):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {value}")
    return x


def int_list(least: int = 1) -> Callable[[str], tuple[int, ...]]:
    """A comma-separated list of integers >= ``least`` (``"2,4,8"`` -> ``(2, 4, 8)``)."""
    def parse(value: str) -> tuple[int, ...]:
        items = [t.strip() for t in value.split(",") if t.strip()]
        want = f"expected a comma-separated list of integers >= {least} (e.g. 2,4,8)"
        if not items:
            raise argparse.ArgumentTypeError(f"{want}, got {value!r}")
        out = []
        for t in items:
            try:
                n = int(t)
            except ValueError:
                raise argparse.ArgumentTypeError(f"{want}, got {value!r} ({t!r} is not an "
                                                 "integer)") from None
            if n < least:
                raise argparse.ArgumentTypeError(f"{want}, got {value!r} ({n} < {least})")
            out.append(n)
        return tuple(out)
    parse.__name__ = "int_list"
    return parse


def float_list(positive: bool = True) -> Callable[[str], tuple[float, ...]]:
    """A comma-separated list of finite numbers > 0 (``positive``: learning rates) or >= 0
    (decays); repeats dropped (``"1e-4,1e-3"`` -> ``(1e-4, 1e-3)``)."""
    want = "> 0" if positive else ">= 0"

    def parse(value: str) -> tuple[float, ...]:
        out = []
        for t in (t.strip() for t in value.split(",") if t.strip()):
            try:
                x = float(t)
            except ValueError:
                x = math.nan
            if not math.isfinite(x) or x < 0 or (positive and x == 0):
                raise argparse.ArgumentTypeError(
                    f"expected a comma-separated list of numbers {want} (e.g. 1e-4,1e-3); got "
                    f"{value!r} ({t!r})")
            out.append(x)
        if not out:
            raise argparse.ArgumentTypeError(
                f"expected a comma-separated list of numbers {want}; got {value!r}")
        return tuple(dict.fromkeys(out))
    parse.__name__ = "float_list"
    return parse


def name_list(choices: Sequence[str]) -> Callable[[str], tuple[str, ...]]:
    """A comma-separated list of names from ``choices`` (case-insensitive, repeats dropped)."""
    def parse(value: str) -> tuple[str, ...]:
        items = [t.strip().lower() for t in value.split(",") if t.strip()]
        bad = [t for t in items if t not in choices]
        if not items or bad:
            raise argparse.ArgumentTypeError(
                f"expected a comma-separated list of {', '.join(choices)}; got {value!r}"
                + (f" ({', '.join(repr(b) for b in bad)} unknown)" if bad else ""))
        return tuple(dict.fromkeys(items))
    parse.__name__ = "name_list"
    return parse


def folder(value: str) -> pathlib.Path:
    """A folder the run can write to: an existing one, or one that can be made (with its
    parents; :class:`Parser` makes it once every flag has passed its checks).

    Refused when parsing, not after the run: a path that is a file, a path under a file, a
    folder that cannot be made or written (``--out``, ``--checkpoint-dir``, ``--cache-dir``).
    """
    path = pathlib.Path(value).expanduser()
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(
            f"expected a folder (an existing one or one that can be made), got {value}, "
            "which is a file")
    above = path
    while not above.exists() and above != above.parent:
        above = above.parent
    if above.exists() and not above.is_dir():
        raise argparse.ArgumentTypeError(
            f"expected a folder (an existing one or one that can be made), got {value}: "
            f"{above} is a file, so no folder can be made under it")
    # writable: the folder itself, or the nearest existing folder above it (where the
    # missing ones will be made); a temporary file, not os.access (which says yes to root)
    try:
        tempfile.TemporaryFile(dir=path if path.exists() else above).close()
    except OSError as e:
        raise argparse.ArgumentTypeError(
            f"expected a folder this run can write to, got {value}: {e.strerror or e}") from None
    return path


def _out_path(value: str) -> pathlib.Path:
    """``--out``: a folder (made after parsing if absent), or ``*.json``: the record's file (its
    folder made after parsing); refused when parsing if either cannot be written (not after the
    run); ``~`` expanded."""
    path = pathlib.Path(value).expanduser()
    if path.suffix == ".json":
        if path.is_dir():
            raise argparse.ArgumentTypeError(
                f"{value} is a folder; --out takes a folder or the record's file name (*.json), "
                "and a file cannot be written over a folder")
        folder(str(path.parent))
        if path.with_suffix(".png").is_dir():
            raise argparse.ArgumentTypeError(
                f"{path.with_suffix('.png')} is a folder; the figure cannot be written there")
        return path
    return folder(str(path))


# ------------------------------------------------------------------ the shared parser

def record_epilog(paper: str, artifact: str) -> str | None:
    """What the committed record of this script cost (for --help: how long a run takes), read
    from ``results/<paper>/<artifact>.json`` without importing JAX; ``None`` without one."""
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


SEEDS_HELP = "number of seeds (default: the configuration's)"


def parser(paper: str, artifact: str, doc: str | None, *,
           seeds: str | None = SEEDS_HELP, checkpoint: str | None = None,
           stem: Callable[[argparse.Namespace], str] | None = None) -> Parser:
    """A ``Parser`` with the flags every reproduction shares; defaults shown in --help.

    ``seeds``: the help of ``--seeds`` (a count, >= 1); for a script without a number of
    seeds, ``"none: <why>"``: ``--seeds`` is then refused with that reason and ``args.seeds``
    is ``None``.  ``checkpoint``: ``"none: <why>"`` for a script with nothing to checkpoint
    (``--checkpoint-dir`` refused with the reason).  ``stem``: the record's file name
    (without ``.json``) a run with these flags writes, when it is not always ``artifact``
    (e.g. ``fig2_cifar10``): ``--record`` checks that file.
    """
    p = Parser(prog=f"python -m reproduce.{paper}_{artifact}",
               description=doc, formatter_class=_Fmt,
               epilog=record_epilog(paper, artifact))
    p.set_defaults(_paper_name=paper, _artifact=artifact,
                   _stem=stem or (lambda args: artifact))
    scale = p.add_mutually_exclusive_group()
    scale.add_argument("--paper", action="store_true",
                       help="run at the paper's scale and settings and write the committed "
                       f"record results/{paper}/{artifact}.json (a run whose record comes out "
                       "reduced, e.g. with fewer --seeds, does not replace a paper-scale "
                       f"record: it goes to scratch/{paper}/)")
    scale.add_argument("--smoke", action="store_true",
                       help="a seconds-long configuration that exercises every code path "
                       "(what the test suite runs)")
    p.add_argument("--record", action="store_true",
                   help=f"write to results/{paper}/ even without --paper (usually a "
                   "reduced-scale record, scale='reduced'); not with --smoke, never over "
                   "a paper-scale record there (only --paper replaces one; --out writes "
                   "elsewhere), nor over a committed record it would lose rows or seeds of")
    p.add_argument("--out", type=_out_path, default=None,
                   help=f"write the record and figure to this folder instead (default: "
                   f"results/{paper}/ with --paper/--record, else scratch/{paper}/); a path "
                   f"ending in .json names the record itself (the figure goes beside it, "
                   f".png); refused when parsing if it cannot be written, made once every flag "
                   f"is accepted")
    if seeds is not None and seeds.startswith("none: "):
        _refused(p, "--seeds", "seeds", seeds.removeprefix("none: "))
    else:
        p.add_argument("--seeds", type=positive_int, default=None, help=seeds)
    p.add_argument("--data-dir", default=None,
                   help="dataset root (default: $LAYERLAB_DATA, ./data, ../shared/data)")
    if checkpoint is not None and checkpoint.startswith("none: "):
        _refused(p, "--checkpoint-dir", "checkpoint_dir", checkpoint.removeprefix("none: "))
    else:
        p.add_argument("--checkpoint-dir", type=folder, default=None,
                       help="resumable checkpoints of long runs here (default: "
                       f"checkpoints/{paper}_{artifact} for --paper runs, none otherwise)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_check(_check_record)
    return p


def _refused(p: Parser, flag: str, dest: str, why: str) -> None:
    """A shared flag this script does not take: hidden from --help, refused with ``why``."""
    given = f"_given_{dest}"
    p.add_argument(flag, dest=given, default=None, help=argparse.SUPPRESS)
    p.set_defaults(**{dest: None})

    def check(p: Parser, args: argparse.Namespace) -> None:
        if getattr(args, given) is not None:
            p.error(f"argument {flag}: this script does not take it ({why})")
    p.add_check(check)


def _merges(args: argparse.Namespace) -> bool:
    """A run that merges records (its scale is theirs, known only after the merge)."""
    return bool(getattr(args, "merge", None) or getattr(args, "merge_only", False))


def _paper_record(path: pathlib.Path) -> bool:
    """Whether ``path`` holds a record of scale ``'paper'``."""
    try:
        return json.loads(path.read_text()).get("scale") == "paper"
    except (OSError, ValueError, AttributeError):
        return False


def _weaker(record, path: pathlib.Path) -> str | None:
    """Why ``record`` would be a loss against the committed record at ``path``: a row that ran
    there and not here (or is missing), or ran with fewer seeds here; ``None`` when it is not
    (or ``path`` holds no readable record)."""
    try:
        old = json.loads(path.read_text())
        rows = {r["name"]: r for r in old.get("rows", []) if r.get("ours") is not None}
    except (OSError, ValueError, AttributeError, KeyError, TypeError):
        return None
    new = {r.name: r for r in record.rows}
    for name, r in rows.items():
        n = new.get(name)
        if n is None or n.ours is None:
            return f"its row {name!r} ran ({r.get('seeds')} seeds) and this run's did not"
        if isinstance(r.get("seeds"), int) and n.seeds < r["seeds"]:
            return f"its row {name!r} has {r['seeds']} seeds, this run's {n.seeds}"
    return None


def _in_results(path: pathlib.Path) -> bool:
    """Whether ``path`` lies in the repository's committed ``results/`` (however it was
    spelt: ``--out results/dgl``, a relative or symlinked path)."""
    try:
        path.resolve().relative_to((REPO / "results").resolve())
    except ValueError:
        return False
    return True


def _check_record(p: Parser, args: argparse.Namespace) -> None:
    """``--record``: not with ``--smoke``; never over a paper-scale record (without --paper)."""
    if not args.record:
        return
    if args.smoke:
        p.error("argument --record: not allowed with argument --smoke (a smoke run is a "
                "seconds-long toy configuration; its record goes to scratch/ or --out, never "
                "to results/)")
    if args.paper or args.out is not None or _merges(args):
        return  # --merge: the merged record's scale is checked when it is written (finish)
    target = REPO / "results" / args._paper_name / f"{args._stem(args)}.json"
    if _paper_record(target):
        p.error(f"argument --record: {target.relative_to(REPO)} is a paper-scale record, "
                "which --record does not replace (only --paper does; --out PATH writes this "
                "run elsewhere)")


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


def refuse_with(p: argparse.ArgumentParser, args: argparse.Namespace, why: str,
                flags: Sequence[str]) -> None:
    """``p.error`` naming the flags of ``flags`` (dests) that were given, if any: for flags
    that the given mode ignores (``--merge``: a merge trains nothing)."""
    # by identity: a flag given as 0 (--max-width 0) equals False
    given = [f"--{f.replace('_', '-')}" for f in flags
             if not any(getattr(args, f, None) is v for v in (None, False))]
    if given:
        p.error(f"{why}; got {', '.join(given)}")


def command(argv: list[str] | None = None) -> str:
    """The command line that reproduces this run."""
    argv = sys.argv[1:] if argv is None else argv
    mod = pathlib.Path(sys.argv[0]).stem if sys.argv and sys.argv[0] else "?"
    if mod in ("", "-c", "__main__", "?"):
        mod = "?"
    return shlex.join(["python", "-m", f"reproduce.{mod}", *argv])


class NothingRan(SystemExit):
    """Exit status 1 from :func:`finish`: no row of the record ran (e.g. a dataset the user
    supplies is absent); the reason was printed on stderr."""


def finish(args: argparse.Namespace, record: Any, *,
           figure: Callable[[pathlib.Path], Any] | None = None,
           argv: list[str] | None = None, t0: float | None = None,
           variant: str = "") -> pathlib.Path:
    """Stamp ``record`` (command, wall time), write it and its PNG, print a summary table.

    ``figure(path)`` is called with ``<out>/<stem>.png``.  The file is named by ``--out`` when
    that names a ``.json`` file, else ``<artifact><variant>`` (``variant``: e.g. ``"_naive"``
    for a run under a protocol other than the main record's, so that ``--paper``/``--record``
    never writes it over that record).  Returns the JSON path.

    Refusals (wherever the path points into ``results/``, by ``--paper``, ``--record`` or
    an ``--out`` there): a record in which no row ran is not written there (and every such
    run exits with status 1, :class:`NothingRan`, after printing the loader's whole message);
    a record that is not paper-scale is not written over a paper-scale one, nor over a
    committed record it would lose numbers of (a row that ran there and not here, or with
    fewer seeds: ``--paper --seeds 1`` over a 3-seed reduced record) -- it goes to
    ``scratch/<paper>/`` instead, exit status 1 (to replace such a record on purpose, remove
    it first).
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
    committed = _in_results(d / f"{stem}.json")  # writes to results/ (by any flag)
    name = f"{args._paper_name} {args._artifact}"
    nothing = (not record.rows and not record.claims) or (
        record.rows and all(r.ours is None for r in record.rows))
    if nothing:
        # nothing ran (e.g. a data set the user supplies is absent): say why on the console,
        # all of the loader's message (where it looked, what it expects, how to fetch it)
        why = (next((r.note for r in record.rows if r.note), "") or "no row produced a number"
               ) if record.rows else "the record has no rows and no claims"
        lines = why.removeprefix("not run: ").splitlines()
        print(f"{name}: no row ran -- " + "\n  ".join(lines), file=sys.stderr)
        if committed:
            print(f"not written: {d / (stem + '.json')} is kept as it is (a record in which no "
                  "row ran would replace it); get the data first, or pass --out FILE.json to "
                  "write such a record elsewhere.", file=sys.stderr)
            raise NothingRan(1)
    kept = why = None
    if committed and record.scale != "paper":
        target = d / f"{stem}.json"
        if _paper_record(target):
            why = f"it is a paper-scale record and this run's is {record.scale!r}"
        elif (loss := _weaker(record, target)) is not None:
            why = f"this run's {record.scale!r} record would lose numbers of it: {loss}"
        if why is not None:
            kept, d = target, REPO / "scratch" / args._paper_name
    path = write_record(record, d, stem=stem)
    if figure is not None:
        figure(d / f"{stem}.png")
    print(summary(record))
    print(f"wrote {path}" + (f" and {d / (stem + '.png')}" if figure else ""))
    if kept is not None:
        shown = kept.relative_to(REPO) if kept.is_relative_to(REPO) else kept
        print(f"not written over {shown}: {why}, so it is kept; this run's record went to "
              f"{path} (a paper-scale run replaces it; to replace it with this one, remove it "
              "first; --out PATH outside results/ writes elsewhere)", file=sys.stderr)
        raise SystemExit(1)
    if nothing:
        print(f"{name}: exit status 1: no row ran (the record marks every row not run)",
              file=sys.stderr)
        raise NothingRan(1)
    return path


def _data_missing(err: BaseException) -> bool:
    """Whether ``err`` is, or was raised from, ``layerlab.data.DatasetNotFoundError``."""
    dnf = getattr(sys.modules.get("layerlab.data"), "DatasetNotFoundError", None)
    seen = set()
    while dnf is not None and err is not None and id(err) not in seen:
        if isinstance(err, dnf):
            return True
        seen.add(id(err))
        err = err.__cause__
    return False


def run(main: Callable[[], int | None]) -> NoReturn:
    """``if __name__ == "__main__": _cli.run(main)``: exit with ``main()``'s status.

    A dataset that is not here (``layerlab.data.DatasetNotFoundError``, or an error raised
    from one) ends the run with its message, which says where the loader looked and how to
    get the files, and exit status 1: no traceback.  Tests call ``main`` itself, which lets
    the error through (they skip on it).
    """
    try:
        rc = main()
    except Exception as e:  # re-raised unless a dataset is missing
        if not _data_missing(e):
            raise
        mod = pathlib.Path(sys.argv[0]).stem if sys.argv and sys.argv[0] else ""
        print(f"{'reproduce.' + mod if mod else 'error'}: {e}", file=sys.stderr)
        raise SystemExit(1) from None
    raise SystemExit(rc)


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
