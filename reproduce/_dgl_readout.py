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

import jax
import numpy as np

from layerlab import nets, probes
from layerlab.dgl import experiments as ex

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
        dataset, L, width, paper = ex.ROWS[row]
        kind = "sgd" if dataset == "BMNIST2k" else "adam"
        for seed in range(args.seeds):
            tag = f"{row} seed {seed}"
            if tag in res:
                continue
            t0 = time.perf_counter()
            d = ex.prepare_row_data(dataset, cfg.n_train(dataset), seed)
            x, y, _ = d["train"]
            xv, yv, _ = d["val"]
            xt, _, lt = d["test"]
            # the same key chain as run_table1: fold_in(key(0), seed), then the first of 4 splits
            k_init, _, k_lego, _ = jax.random.split(jax.random.fold_in(jax.random.key(0), seed), 4)
            sizes = [x.shape[1]] + [width] * L + [d["num_classes"]]
            entry = {}
            for init in ("he", "torch"):
                p0 = nets.mlp_init(k_init, sizes, init=init)
                hid = jax.jit(lambda p, x: ex.hidden_representations(p, x)[-1])
                h, hv, ht = hid(p0, x), hid(p0, xv), hid(p0, xt)
                for readout in ("ridge", "iterative"):
                    c = ex.Table1Config.paper(readout=readout, init=init)
                    head, info = ex._readout(c, kind, h, y, hv, yv, p0[-1],
                                             jax.random.fold_in(k_lego, 11), False)
                    acc = 100.0 * float(probes.accuracy(ht @ head["w"] + head["b"], lt))
                    entry[f"{init}/{readout}"] = {"test": acc, **info}
                    print(f"{tag} {init:5s} {readout:9s} Random test {acc:.2f}", flush=True)
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
