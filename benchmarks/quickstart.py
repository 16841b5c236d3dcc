"""The main job: show the whole toolkit working in a few CPU minutes.

    python -m benchmarks.quickstart                    # writes scratch/quickstart/
    python -m benchmarks.quickstart --only core,gnrev  # some sections
    python -m benchmarks.quickstart --record           # refresh the committed results/quickstart/

Runs, in order, the shared-foundation demo (a small MLP on scikit-learn's ``digits``
trained through :func:`layerlab.loop.fit`), one short section per paper package
(``benchmarks/_quickstart_<pkg>.py``, each exposing ``run(out_dir, progress=True) -> dict``)
and, when present, the ``inspect`` section. Every long step shows a progress bar; every
section writes its JSON and a figure; at the end an aligned table lists each section's
headline numbers (rounded), what they mean and the seconds the section took, and
``summary.json`` collects everything. Default output: ``scratch/quickstart/`` (git-ignored),
so a run leaves ``git status`` clean; ``--record`` writes ``results/quickstart/``.
"""
from __future__ import annotations

import importlib
import importlib.util
import time
import traceback

from benchmarks._common import add_output_flags, arg_parser

PAPER_SECTIONS = ("core", "gnrev", "dgl", "dmn", "bottleneck")


def _sections() -> tuple[str, ...]:
    """The sections, plus ``inspect`` when ``benchmarks/_quickstart_inspect.py`` exists
    (looked up without importing it, so ``--help`` stays instant)."""
    try:
        has_inspect = importlib.util.find_spec("benchmarks._quickstart_inspect") is not None
    except (ImportError, ValueError):
        has_inspect = False
    return PAPER_SECTIONS + (("inspect",) if has_inspect else ())


def build_parser():
    ap = arg_parser(__doc__)
    sections = _sections()
    ap.add_argument("--only", default=",".join(sections),
                    help=f"comma-separated sections to run (of {', '.join(sections)})")
    ap.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_output_flags(ap, "quickstart")
    return ap


def _fmt(v) -> str:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, int) or float(v).is_integer() and abs(v) < 1e6:
        return f"{v:g}"
    return f"{v:.3g}" if abs(v) >= 1e-3 else f"{v:.1e}"


def _rows(summary: dict) -> list[list]:
    """``summary["rows"]`` (metric, value, meaning), else its scalar entries."""
    if summary.get("rows"):
        return [list(r) for r in summary["rows"]]
    return [[k, v, ""] for k, v in summary.items()
            if k not in ("wall_s", "figure") and isinstance(v, (int, float, str))
            and not isinstance(v, bool)][:4]


def table(summaries: dict, failed: list[str]) -> str:
    """The aligned summary table: section, metric, value, seconds, meaning."""
    lines = []
    for name, s in summaries.items():
        secs = f"{s.get('wall_s', 0):.0f} s"
        if name in failed:
            lines.append([name, "FAILED", "", secs, (s.get("error") or "").strip()
                          .splitlines()[-1][:70]])
            continue
        for i, (metric, value, meaning) in enumerate(_rows(s) or [["(no numbers)", "", ""]]):
            lines.append([name if i == 0 else "", str(metric), _fmt(value),
                          secs if i == 0 else "", meaning])
    head = ["section", "metric", "value", "time", "what it means"]
    widths = [max(len(r[i]) for r in [head, *lines]) for i in range(4)]
    fmt = "  ".join(f"{{:{'>' if i in (2, 3) else '<'}{w}}}" for i, w in enumerate(widths))
    out = [fmt.format(*head[:4]) + "  " + head[4]]
    out.append("-" * (sum(widths) + 8 + len(head[4])))
    out += [fmt.format(*r[:4]) + "  " + r[4] for r in lines]
    return "\n".join(out)


def main(argv=None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    sections = _sections()
    names = [s.strip() for s in args.only.split(",") if s.strip()]
    for name in names:
        if name not in sections:
            ap.error(f"unknown section {name!r}; choose from {', '.join(sections)}")
    from benchmarks._common import out_dir, write_json

    out = out_dir("quickstart", args.out, args.record)
    progress = not args.no_progress
    summaries, failed = {}, []
    t_all = time.perf_counter()
    for name in names:
        print(f"\n=== quickstart: {name} ===", flush=True)
        t0 = time.perf_counter()
        try:
            mod = importlib.import_module(f"benchmarks._quickstart_{name}")
            summary = mod.run(out, progress=progress)
        except Exception:  # keep going so one broken section does not hide the others
            traceback.print_exc()
            failed.append(name)
            summary = {"error": traceback.format_exc(limit=3)}
        summary = dict(summary or {})
        summary["wall_s"] = round(time.perf_counter() - t0, 1)
        summaries[name] = summary
    path = write_json(out / "summary.json", {"sections": summaries})
    print(f"\n=== quickstart summary ({time.perf_counter() - t_all:.0f} s) ===")
    print(table(summaries, failed))
    figures = [s["figure"] for s in summaries.values() if s.get("figure")]
    print(f"\nfigures: {', '.join(figures)}\nwritten: {path.parent}/")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
