"""The main job: show the whole toolkit working in a few CPU minutes.

    python -m benchmarks.quickstart [--out results/quickstart] [--only core,gnrev,...]

Runs, in order, the shared-foundation demo (a small MLP on scikit-learn's ``digits``
trained through :func:`layerlab.loop.fit`) and one short section per paper package
(``benchmarks/_quickstart_<pkg>.py``, each exposing ``run(out_dir) -> dict``).  Every
section writes its JSON/PNG into ``results/quickstart/`` and returns a summary; the
summaries are collected in ``results/quickstart/summary.json`` and printed at the end.
"""
from __future__ import annotations

import argparse
import importlib
import time
import traceback

from benchmarks._common import results_dir, write_json

SECTIONS = ("core", "gnrev", "dgl", "dmn", "bottleneck")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=None, help="output directory (default results/quickstart)")
    p.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections to run")
    args = p.parse_args(argv)
    out = results_dir("quickstart", args.out)
    summaries, failed = {}, []
    for name in [s.strip() for s in args.only.split(",") if s.strip()]:
        if name not in SECTIONS:
            p.error(f"unknown section {name!r}; choose from {', '.join(SECTIONS)}")
        print(f"\n=== quickstart: {name} ===", flush=True)
        t0 = time.perf_counter()
        try:
            mod = importlib.import_module(f"benchmarks._quickstart_{name}")
            summary = mod.run(out)
        except Exception:  # keep going so one broken section does not hide the others
            traceback.print_exc()
            failed.append(name)
            summary = {"error": traceback.format_exc(limit=3)}
        summary = dict(summary or {})
        summary["wall_s"] = round(time.perf_counter() - t0, 2)
        summaries[name] = summary
    path = write_json(out / "summary.json", {"sections": summaries})
    print("\n=== quickstart summary ===")
    for name, s in summaries.items():
        status = "FAILED" if name in failed else "ok"
        keys = {k: v for k, v in s.items() if k != "error" and not isinstance(v, (dict, list))}
        print(f"{name:11s} {status:6s} {keys}")
    print(f"written: {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
