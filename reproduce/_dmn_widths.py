"""How many first-layer DMN filters the selection rules keep on MNIST 3x3 patches at Table 2's
Var 0.85 / 0.95 / 0.99 (the paper prints d4 / d6 / d16, at Input 0.5 / 0.3 / 0.3).

The widths table of docs/dmn.md ("Widths: MNIST 3x3 patches") from a script: for each rule set
(``authors``, ``paper``, ``authors`` with the paper text's ``threshold="crossing"``) and seed
(the key of the input noise and of the Input subsample), :func:`layerlab.dmn.experiments.widths_for`
on the training set (no cap), once with each row's printed Input fraction and once with a 5 %
subsample.  Builds the layers only (no training).

    python -m reproduce._dmn_widths                  # full training set, 2 seeds -> scratch/
    python -m reproduce._dmn_widths --out results/dmn/ablation/widths_mnist.json
    python -m reproduce._dmn_widths --n-train 6000   # a fixed 6000-image subset
"""
from __future__ import annotations

import argparse
import json
import pathlib
import time

REPO = pathlib.Path(__file__).resolve().parents[1]

VARS = (0.85, 0.95, 0.99)
PRINTED_INPUT = (0.5, 0.3, 0.3)   # Table 2's Input column for d4 / d6 / d16
PAPER_WIDTHS = (4, 6, 16)
RULES = ("authors", "paper", "authors_crossing")


def _config(rules: str):
    import dataclasses

    from layerlab.dmn import DMNConfig

    if rules == "authors":
        return DMNConfig.authors()
    if rules == "paper":
        return DMNConfig.paper()
    if rules == "authors_crossing":
        return dataclasses.replace(DMNConfig.authors(), threshold="crossing")
    raise ValueError(f"rules must be one of {RULES}, got {rules!r}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--n-train", type=int, default=0,
                   help="training images (0: all 60 000; otherwise a fixed subset, seed 0)")
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--rules", default=",".join(RULES), help=f"comma-separated, of {RULES}")
    p.add_argument("--small-fraction", type=float, default=0.05,
                   help="the second column's Input fraction (all three Var)")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--out", type=pathlib.Path, default=REPO / "scratch/dmn/widths.json")
    args = p.parse_args(argv)
    rules = [r.strip() for r in args.rules.split(",") if r.strip()]
    if bad := [r for r in rules if r not in RULES]:
        p.error(f"--rules: unknown {bad}; choose from {RULES}")
    if args.seeds < 1:
        p.error(f"--seeds: expected >= 1, got {args.seeds}")
    if not 0 < args.small_fraction <= 1:
        p.error(f"--small-fraction: expected a fraction in (0, 1], got {args.small_fraction}")

    import jax

    from layerlab.data import load
    from layerlab.dmn.experiments import widths_for
    from layerlab.record import machine_info

    t0 = time.perf_counter()
    tr = load("mnist", "train", n=args.n_train or None, seed=0, data_dir=args.data_dir)
    out = {}
    for r in rules:
        cfg = _config(r)
        res = {"printed_input": [], "small_fraction": [], "seconds": []}
        for s in range(args.seeds):
            t = time.perf_counter()
            key = jax.random.key(s)
            res["printed_input"].append([
                widths_for(tr.x, tr.y, 10, (v,), cfg, key=key, fraction=f)[0]
                for v, f in zip(VARS, PRINTED_INPUT)])
            res["small_fraction"].append(
                widths_for(tr.x, tr.y, 10, VARS, cfg, key=key, fraction=args.small_fraction))
            res["seconds"].append(time.perf_counter() - t)
            print(f"{r:17s} seed {s}: Input as printed {res['printed_input'][-1]}, "
                  f"Input {args.small_fraction:g} {res['small_fraction'][-1]} "
                  f"({res['seconds'][-1]:.0f} s)", flush=True)
        out[r] = res
    rec = {
        "_note": ("First-layer DMN widths (no cap) on MNIST 3x3 patches at Var 0.85 / 0.95 / "
                  "0.99, Cutoff 0.9; 'printed_input': Input 0.5 / 0.3 / 0.3 as Table 2 prints; "
                  f"'small_fraction': Input {args.small_fraction:g}; one list per seed (the key "
                  "of the input noise and of the Input subsample). Paper: d4 / d6 / d16. "
                  "reproduce/_dmn_widths.py; builds only, no training."),
        "config": {"n_train": len(tr.y), "seeds": args.seeds, "vars": VARS,
                   "printed_input": PRINTED_INPUT, "small_fraction": args.small_fraction,
                   "rules": rules},
        "paper": PAPER_WIDTHS, "widths": out,
        "wall_s": time.perf_counter() - t0, "machine": machine_info(),
        "command": "python -m reproduce._dmn_widths " + " ".join(
            argv if argv is not None else __import__("sys").argv[1:]),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rec, indent=1) + "\n")
    print(f"wrote {args.out} ({rec['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
