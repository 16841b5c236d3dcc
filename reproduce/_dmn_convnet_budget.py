"""Do the paper's CIFAR-10 ConvNet numbers look like ours trained on fewer images?

Our ConvNets (Tables 2 and 4, full CIFAR-10, 50 epochs of Adam 1e-3, batch 128) score 11-17
points above the paper's, in test and in training accuracy, and the paper's own ConvNets keep
7-11-point train/test gaps (e.g. ``c27``: 62.69 / 51.94), so they are not simply stopped early.
The default reduced Table 2 / 4 runs (6000 training images, 10 epochs) landed several of them
within tolerance.  This script trains each ConvNet row on a label-balanced subset of
``--n-train`` images for ``--epochs`` epochs, recording every epoch's test accuracy (full
10 000-image test set), training accuracy of the epoch's state on the subset, and Keras'
running training accuracy (mean of the per-batch accuracies during the epoch: what Keras
prints as ``acc``), and reports for each row the epochs at which ours matches the paper's
pair within the records' tolerance (2 points on CIFAR-10).

    python -m reproduce._dmn_convnet_budget --out results/dmn/ablation   # ~30 min here

Writes ``<out>/convnet_budget.json`` and ``<out>/convnet_budget.png``; each row's run is kept
in ``--checkpoint-dir`` (resumable, per epoch).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

# (row label, spec, paper test %, paper training % or None), as printed: Table 2's "ConvNet
# Acc." of each CIFAR-10 row, Table 4's ConvNet rows (training / validation)
ROWS = (
    ("Table 2 c10", "c10,m,de10", 48.61, None),
    ("Table 2 c10, c11", "c10,m,c11,m,de10", 46.88, None),
    ("Table 2 c22", "c22,m,de10", 49.94, None),
    ("Table 2 c22, c41", "c22,m,c41,m,de10", 51.96, None),
    ("Table 2 c22, c87", "c22,m,c87,m,de10", 52.66, None),
    ("Table 4 c27", "c27,m,de10", 51.94, 62.69),
    ("Table 4 c10, c80", "c10,m,c80,m,de10", 50.10, 58.48),
    ("Table 4 c32, c32", "c32,m,c32,m,de10", 51.84, 58.64),
    ("Table 2 c22, c305", "c22,m,c305,m,de10", 52.13, None),
)
TOL = 2.0


def matches(curve_val, curve_train, paper_val, paper_train, tol=TOL):
    """Epochs (1-based) whose test (and, when the paper prints one, training) accuracy is
    within ``tol`` points of the paper's."""
    out = []
    for e, v in enumerate(curve_val, 1):
        if abs(v - paper_val) > tol:
            continue
        if paper_train is not None and abs(curve_train[e - 1] - paper_train) > tol:
            continue
        out.append(e)
    return out


def summarise(label, spec, paper_val, paper_train, r) -> dict:
    val = [100 * float(a) for _, _, a in r["curve"]]
    ev = [100 * float(a) for _, a in r["train_curve"]]
    run = [100 * float(a) for _, a in r["running_train_acc"]]
    return {
        "spec": spec, "paper_val": paper_val, "paper_train": paper_train,
        "val_curve": [round(a, 3) for a in val],
        "train_curve": [round(a, 3) for a in ev],
        "running_train_curve": [round(a, 3) for a in run],
        "final": {"val": round(val[-1], 2), "train": round(ev[-1], 2)},
        "best_val": {"epoch": int(max(range(len(val)), key=val.__getitem__)) + 1,
                     "val": round(max(val), 2)},
        "epochs_matching_paper_eval_train": matches(val, ev, paper_val, paper_train),
        "epochs_matching_paper_running_train": matches(val, run, paper_val, paper_train)
        if len(run) == len(val) else None,
        "final_matches_paper": bool(matches(val[-1:], ev[-1:], paper_val, paper_train)),
        "train_s": r["train_s"], "label": label,
    }


def plot(rec, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = rec["rows"]
    ncol = max(1, (len(rows) + 1) // 2)
    fig, axes = plt.subplots(2, ncol, figsize=(2.6 * ncol + 0.6, 5.4), sharex=True,
                             sharey=True, squeeze=False)
    for ax, (label, r) in zip(axes.ravel(), rows.items()):
        ep = range(1, len(r["val_curve"]) + 1)
        ax.plot(ep, r["val_curve"], "C0", lw=1, label="test")
        ax.plot(ep, r["train_curve"], "C1", lw=1, label="train (epoch's state)")
        ax.plot(ep, r["running_train_curve"], "C1", lw=0.7, ls=":", label="train (Keras running)")
        ax.axhline(r["paper_val"], color="C0", ls="--", lw=0.8)
        if r["paper_train"] is not None:
            ax.axhline(r["paper_train"], color="C1", ls="--", lw=0.8)
        ax.set_title(label, fontsize=8)
    for ax in axes.ravel()[len(rows):]:
        ax.axis("off")
    axes[0, 0].legend(fontsize=6, title="dashed: paper", title_fontsize=6)
    for ax in axes[-1]:
        ax.set_xlabel("epoch")
    for ax in axes[:, 0]:
        ax.set_ylabel("accuracy %")
    fig.suptitle(f"CIFAR-10 ConvNets on {rec['n_train']} training images (seed {rec['seed']})",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=pathlib.Path, default=pathlib.Path("scratch/dmn_ablation"))
    p.add_argument("--n-train", type=int, default=6000, help="label-balanced training images")
    p.add_argument("--epochs", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rows", default="",
                   help="semicolon-separated specs to run, e.g. 'c10,m,de10;c27,m,de10' "
                   "(default: all)")
    p.add_argument("--checkpoint-dir", type=pathlib.Path,
                   default=pathlib.Path("checkpoints/dmn_convnet_budget"))
    args = p.parse_args(argv)
    import jax
    import numpy as np

    from layerlab.data import load
    from layerlab.dmn import DMNConfig
    from layerlab.dmn.experiments import train_and_evaluate

    wanted = {s for s in args.rows.split(";") if s} if args.rows else None
    t0 = time.perf_counter()
    tr = load("cifar10", "train", n=args.n_train, balanced=True, seed=args.seed)
    te = load("cifar10", "test")
    key = jax.random.fold_in(jax.random.key(0), args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = {}
    for label, spec, pv, pt in ROWS:
        if wanted is not None and spec not in wanted:
            continue
        ck = args.checkpoint_dir / f"{spec.replace(',', '_')}-n{args.n_train}-e{args.epochs}" \
            f"-s{args.seed}"
        done = ck / "result.json"
        if done.exists():
            r = json.loads(done.read_text())
        else:
            r = train_and_evaluate(spec, np.asarray(tr.x), tr.y, np.asarray(te.x), te.y, 10,
                                   key=key, config=DMNConfig.paper(), epochs=args.epochs,
                                   batch_size=128, eval_every_epoch=True, progress=False,
                                   train_eval_n=None, train_curve_n=args.n_train,
                                   checkpoint_dir=ck)
            ck.mkdir(parents=True, exist_ok=True)
            done.write_text(json.dumps(r))
        rows[label] = summarise(label, spec, pv, pt, r)
        s = rows[label]
        print(f"{label}: final {s['final']['val']:.2f} / {s['final']['train']:.2f} (paper "
              f"{pv} / {pt}); epochs matching: {s['epochs_matching_paper_eval_train']} "
              f"(running train: {s['epochs_matching_paper_running_train']}) "
              f"[{r['train_s']:.0f} s]", flush=True)
    rec = {"what": __doc__.split("\n")[0], "n_train": args.n_train, "n_test": 10000,
           "epochs": args.epochs, "seed": args.seed, "batch_size": 128,
           "optimizer": "adam(lr=1e-3)", "tol": TOL, "rows": rows,
           "wall_s": time.perf_counter() - t0, "device": str(jax.devices()[0]),
           "command": "python -m reproduce._dmn_convnet_budget "
           + " ".join(sys.argv[1:] if argv is None else argv)}
    (args.out / "convnet_budget.json").write_text(json.dumps(rec, indent=1))
    plot(rec, args.out / "convnet_budget.png")
    print(f"wrote {args.out / 'convnet_budget.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
