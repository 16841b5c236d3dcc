"""Why our Random column of Table I is above the paper's: the readout and the init.

The Random column is a linear classifier on the frozen layers of a randomly initialised net.
This ablation redraws the nets and splits of three Table I rows (3 seeds each, as in
``run_table1``) and reads them out four ways: {He init (ours), PyTorch's ``nn.Linear``
default} x {closed-form ridge chosen on validation MSE (ours), the classifier alone trained
under MSE with the row's optimizer and grid (the paper's text)}.  Result:
``results/dgl/ablation/random_readout.json``.

    python -m reproduce._dgl_readout [--rows cifar-5x2000,bmnist-2x20,bmnist-3x20] [--seeds 3]
"""
import argparse
import json
import pathlib
import time

import numpy as np

from layerlab.dgl import experiments as ex
from reproduce._dgl_random_spread import random_cell

REPO = pathlib.Path(__file__).resolve().parents[1]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", default="cifar-5x2000,bmnist-2x20,bmnist-3x20")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--out", default=str(REPO / "scratch/dgl/ablation/random_readout.json"))
    args = ap.parse_args(argv)
    cfg = ex.Table1Config.paper()
    out_path = pathlib.Path(args.out)
    res = json.loads(out_path.read_text()) if out_path.exists() else {}
    t_all = time.perf_counter()
    for row in ex.select_rows(args.rows):
        for seed in range(args.seeds):
            tag = f"{row} seed {seed}"
            if tag in res:
                continue
            t0 = time.perf_counter()
            variants = [f"{i}/{r}" for i in ("he", "torch") for r in ("ridge", "iterative")]
            entry = random_cell(row, seed, seed, variants, cfg, with_info=True)
            for v, e in entry.items():
                print(f"{tag} {v.split('/')[0]:5s} {v.split('/')[1]:9s} Random test "
                      f"{e['test']:.2f}", flush=True)
            entry["wall_s"] = time.perf_counter() - t0
            res[tag] = entry
            out_path.parent.mkdir(parents=True, exist_ok=True)
            out_path.write_text(json.dumps(res, indent=1))
    summary = {}
    for row in ex.select_rows(args.rows):
        paper = ex.ROWS[row][3][2]
        for variant in ("he/ridge", "he/iterative", "torch/ridge", "torch/iterative"):
            vals = [res[k][variant]["test"] for k in res if k.startswith(row + " ")]
            if vals:
                summary[f"{row} {variant}"] = {"mean": float(np.mean(vals)),
                                               "std": float(np.std(vals, ddof=1)) if len(vals) > 1
                                               else 0.0, "seeds": len(vals), "paper": paper}
    res["_summary"] = summary
    res["_note"] = ("Random column of Table I (linear classifier on a randomly initialised net's "
                    "frozen layers), 4 readout/init variants; he/ridge is the committed protocol. "
                    "Same splits and keys as run_table1; paper = Table I's Random.")
    out_path.write_text(json.dumps(res, indent=1))
    for k, v in summary.items():
        print(f"{k:40s} {v['mean']:.2f} +- {v['std']:.2f} (paper {v['paper']})")
    print(f"wall {time.perf_counter() - t_all:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
