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
import dataclasses
import json
import pathlib
import sys
import textwrap
import time

REPO = pathlib.Path(__file__).resolve().parents[1]

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
# Table 4's DMN rows (training / validation as printed), run with --rows <spec>
DMN_ROWS = (
    ("Table 4 d10", "d10,m,de10", 60.41, 73.21),
    ("Table 4 d15, d108", "d15,m,d108,m,de10", 55.36, 66.11),
    ("Table 4 d20, d180, BN", "d20,m,d180,m,BN,de10", 63.66, 66.02),
    ("Table 4 d15, c80", "d15,m,c80,m,de10", 68.03, 79.21),  # DMN + trained conv
    ("Table 4 d27, c108, BN", "d27,m,c108,m,BN,de10", 71.19, 81.18),  # the paper's best row
    # not in the paper: the BN row's DMN layers without BN (Fig. 10's "BN after two DMN layers
    # helps" compares d15, d108 with d20, d180, BN: width and BN together)
    ("d20, d180 without BN (control)", "d20,m,d180,m,de10", None, None),
    # the BN row with Keras' BatchNormalization(axis=-1) on channels_first data (the authors'
    # notebook head's format): statistics per image column, not per channel
    ("Table 4 d20, d180, BN per column", "d20,m,d180,m,bnw,de10", 63.66, 66.02),
    # Table 4 prints its best row "d27, m, c108, m, BN", but Table 3 ("d9, m, BN, c81") and
    # Table 5 ("d27, m, BN, c108") put BN between the DMN layer and the trained conv, as the
    # authors' notebook head does (its commented-out BatchNormalization before Convolution2D):
    # the same row in that order, against Table 4's numbers
    ("Table 4 d27, BN, c108 (BN before the conv)", "d27,m,BN,c108,m,de10", 71.19, 81.18),
    # Table 4's d10 pair (60.41 / 73.21) has a 13-point train-test gap that a linear head on
    # our pooled 16x16x10 features does not reach (train <= ~70 %); the same layer without
    # the maxpool gives the head 4x the inputs (32x32x10): not the printed row, a test of
    # whether the paper's head saw more features than the pooled map
    ("Table 4 d10 without the maxpool (not the printed row)", "d10,de10", 60.41, 73.21),
)
TOL = 2.0
# Table 2's CIFAR-10 ConvNet rows and the DMN rows of the same widths (the headline claim)
TABLE2_PAIRS = (
    ("Table 2 c10", "d10"), ("Table 2 c10, c11", "d10, d11"), ("Table 2 c22", "d22"),
    ("Table 2 c22, c41", "d22, d41"), ("Table 2 c22, c87", "d22, d87"),
    ("Table 2 c22, c305", "d22, d305"),
)


def headline(rows: dict, table2: dict, convnet_setting: str = "") -> dict | None:
    """The paper's headline (DMN >= ConvNet of the same widths, Table 2, CIFAR-10) with the
    ConvNet column taken from this run (``rows``: this script's summaries) instead of the
    full-data ConvNets of ``table2`` (the committed record, whose DMN numbers are used: full
    training set, its preset and seeds).  ``convnet_setting`` names this run's training set
    and length in the claim: the two columns are *not* trained alike.

    Each Table 2 DMN row (both Input fractions of ``d22, d41``) is compared with the ConvNet's
    final epoch and its best epoch (mean curves over the seeds).  ``None`` when no Table 2
    ConvNet row was run.
    """
    pairs = []
    for label, dmn in TABLE2_PAIRS:
        if label not in rows:
            continue
        r = rows[label]
        for t2 in table2["rows"]:
            name = t2["name"]
            if (name.startswith(f"cifar10 {dmn} (") and "ConvNet" not in name
                    and t2.get("ours") is not None):
                pairs.append({"dmn_row": name, "dmn": round(float(t2["ours"]), 2),
                              "dmn_seeds": t2.get("seeds"), "paper_dmn": t2.get("paper"),
                              "paper_convnet": r["paper_val"], "convnet_row": label,
                              "convnet_final": r["final"]["val"],
                              "convnet_best": r["best_val"]["val"],
                              "dmn_ge_convnet_final": bool(t2["ours"] >= r["final"]["val"]),
                              "dmn_ge_convnet_best": bool(t2["ours"] >= r["best_val"]["val"])})
    if not pairs:
        return None
    return {"claim": "DMN >= ConvNet of the same widths on CIFAR-10 (Table 2), with unlike "
                     f"training: ConvNets from this run ({convnet_setting or 'see the record'}), "
                     "DMN rows from results/dmn/table2.json (full training set, "
                     f"{table2.get('config', {}).get('preset', 'its')} preset)",
            "convnet_setting": convnet_setting, "dmn_record": "results/dmn/table2.json",
            "pairs": pairs,
            "holds_final": f"{sum(p['dmn_ge_convnet_final'] for p in pairs)}/{len(pairs)}",
            "holds_best": f"{sum(p['dmn_ge_convnet_best'] for p in pairs)}/{len(pairs)}"}


def matches(curve_val, curve_train, paper_val, paper_train, tol=TOL):
    """Epochs (1-based) whose test (and, when the paper prints one, training) accuracy is
    within ``tol`` points of the paper's (:func:`layerlab.record.within_tol`)."""
    from layerlab.record import within_tol

    out = []
    if paper_val is None:  # a control row the paper does not print
        return out
    for e, v in enumerate(curve_val, 1):
        if not within_tol(v, paper_val, tol):  # NaN (an epoch without a score) never matches
            continue
        if paper_train is not None and not within_tol(curve_train[e - 1], paper_train, tol):
            continue
        out.append(e)
    return out


def _by_epoch(pairs, epochs):
    """``[(epoch, acc or None)]`` -> accuracies % for epochs 1..epochs (NaN where missing)."""
    d = {int(e): a for e, a in pairs}
    return [float("nan") if d.get(e) is None else 100 * float(d[e]) for e in range(1, epochs + 1)]


def summarise(label, spec, paper_val, paper_train, runs) -> dict:
    """Mean curves over the seeds' runs (by epoch; an epoch a resumed run lost is NaN), the
    epochs matching the paper, and each seed's best-validation epoch."""
    import numpy as np

    E = int(runs[0]["epochs"])
    vals = np.array([_by_epoch([(c[0], c[2]) for c in r["curve"]], E) for r in runs])
    evs = np.array([_by_epoch(r["train_curve"], E) for r in runs])
    rns = np.array([_by_epoch(r["running_train_acc"], E) for r in runs])
    val, ev, run = (list(np.nanmean(a, 0)) if np.isfinite(a).any() else list(a[0])
                    for a in (vals, evs, rns))
    per_seed = []
    for v, t, rt, r in zip(vals, evs, rns, runs):  # the authors' ModelCheckpoint kept the
        b = int(np.nanargmax(v))                   # best-validation epoch
        per_seed.append({"best_epoch": b + 1, "best_val": round(float(v[b]), 2),
                         "train_at_best": round(float(t[b]), 2),
                         "running_train_at_best": round(float(rt[b]), 2),
                         "final_val": round(float(v[-1]), 2),
                         "final_train": round(float(t[-1]), 2),
                         "max_train": round(float(np.nanmax(t)), 2),
                         "widths": r.get("widths")})
    return {
        "spec": spec, "paper_val": paper_val, "paper_train": paper_train,
        "val_curve": [round(a, 3) for a in val],
        "train_curve": [round(a, 3) for a in ev],
        "running_train_curve": [round(a, 3) for a in run],
        "final": {"val": round(val[-1], 2), "train": round(ev[-1], 2)},
        "best_val": {"epoch": int(np.nanargmax(val)) + 1, "val": round(float(np.nanmax(val)), 2)},
        "epochs_matching_paper_eval_train": matches(val, ev, paper_val, paper_train),
        "epochs_matching_paper_running_train": matches(val, run, paper_val, paper_train),
        "final_matches_paper": bool(matches(val[-1:], ev[-1:], paper_val, paper_train)),
        "train_s": float(np.sum([r["train_s"] for r in runs])), "label": label,
        "seeds": len(runs), "per_seed": per_seed,
    }


def plot(rec, path) -> None:
    from layerlab._plotting import subplots

    rows = rec["rows"]
    nrow = 1 if len(rows) == 1 else 2
    ncol = max(1, (len(rows) + 1) // 2)
    fig, axes = subplots(nrow, ncol, figsize=(2.6 * ncol + 0.6, 2.7 * nrow + 0.6),
                         sharex=True, sharey=True, squeeze=False)
    for ax, (label, r) in zip(axes.ravel(), rows.items()):
        ep = range(1, len(r["val_curve"]) + 1)
        ax.plot(ep, r["val_curve"], "C0", lw=1, label="test")
        ax.plot(ep, r["train_curve"], "C1", lw=1, label="train (epoch's state)")
        ax.plot(ep, r["running_train_curve"], "C1", lw=0.7, ls=":", label="train (Keras running)")
        if r["paper_val"] is not None:
            ax.axhline(r["paper_val"], color="C0", ls="--", lw=0.8)
        if r["paper_train"] is not None:
            ax.axhline(r["paper_train"], color="C1", ls="--", lw=0.8)
        ax.set_title(label, fontsize=8)
    for ax in axes.ravel()[len(rows):]:
        ax.axis("off")
    axes[0, 0].legend(fontsize=6, title="dashed: paper", title_fontsize=6)
    for ax in axes.ravel()[max(0, len(rows) - ncol):len(rows)]:  # each column's lowest panel
        ax.set_xlabel("epoch")
        ax.xaxis.set_tick_params(labelbottom=True)
    for ax in axes[:, 0]:
        ax.set_ylabel("accuracy %")
    per = ", each seed its own subset" if rec.get("subset", "").startswith("each") else ""
    scale = f", images ×{rec['input_scale']:g}" if rec.get("input_scale", 1.0) != 1.0 else ""
    title = (f"CIFAR-10 on {rec['n_train']} training images, {rec['seeds']} seed(s) from "
             f"{rec['seed']}{per}{scale} (mean curves)")
    # wrapped to the figure's width (two panels fit ~60 characters at this size)
    fig.suptitle("\n".join(textwrap.wrap(title, 30 * ncol + 10)), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=pathlib.Path, default=REPO / "scratch/dmn_ablation")
    p.add_argument("--n-train", type=int, default=6000,
                   help="label-balanced training images (0: all 50 000)")
    p.add_argument("--epochs", type=int, default=50)
    p.add_argument("--seed", type=int, default=0, help="first seed")
    p.add_argument("--seeds", type=int, default=1, help="number of seeds")
    p.add_argument("--subset-per-seed", action="store_true",
                   help="each seed draws its own --n-train subset (with the seed itself); by "
                   "default every seed trains on the subset drawn with the first seed")
    p.add_argument("--preset", choices=("authors", "paper"), default="paper",
                   help="DMN layer rules (DMN rows only)")
    p.add_argument("--pca", choices=("class", "naive"), default="class",
                   help="class-based or naive PCA (DMN rows only)")
    p.add_argument("--standardize", default=None,
                   choices=("none", "sample", "sample_channel", "notebook"),
                   help="per-sample standardisation after the last DMN layer (DMN rows only; "
                   "default: the preset's -- paper: none, authors: notebook; dmn2.py's is "
                   "sample_channel)")
    p.add_argument("--input-scale", type=float, default=1.0,
                   help="multiply every image (train and test, pixels in [0, 1]) by this, e.g. "
                   "255 for the raw pixel scale the authors' notebook builds its DMN on; the "
                   "preset's input noise is scaled with it (DMN rows)")
    p.add_argument("--train-curve-n", type=int, default=10000,
                   help="training images scored every epoch (at most the training set)")
    p.add_argument("--name", default="convnet_budget", help="record name")
    p.add_argument("--rows", default="",
                   help="semicolon-separated specs to run, e.g. 'c10,m,de10;c27,m,de10' "
                   "(default: all)")
    p.add_argument("--checkpoint-dir", type=pathlib.Path,
                   default=REPO / "checkpoints/dmn_convnet_budget")
    args = p.parse_args(argv)
    if not args.input_scale > 0:
        p.error(f"--input-scale: expected a positive number; got {args.input_scale}")
    import jax
    import numpy as np

    from layerlab.data import load
    from layerlab.dmn import DMNConfig
    from layerlab.dmn.experiments import train_and_evaluate

    wanted = [s for s in args.rows.split(";") if s] if args.rows else None
    table = {spec: (label, pv, pt) for label, spec, pv, pt in ROWS + DMN_ROWS}
    if wanted is not None and (bad := [w for w in wanted if w not in table]):
        p.error(f"--rows: unknown spec(s) {bad}; choose from {sorted(table)}")
    specs = wanted if wanted is not None else [spec for _, spec, _, _ in ROWS]
    t0 = time.perf_counter()
    n_train = args.n_train or None
    subsets = {}  # subset seed -> training set, loaded when a run needs it

    def train_set(seed):
        if seed not in subsets:
            subsets[seed] = load("cifar10", "train", n=n_train, balanced=n_train is not None,
                                 seed=seed)
        return subsets[seed]

    te = load("cifar10", "test")
    preset = DMNConfig.paper if args.preset == "paper" else DMNConfig.authors
    args.out.mkdir(parents=True, exist_ok=True)
    rows = {}
    for spec in specs:
        label, pv, pt = table[spec]
        dmn = spec.startswith("d")
        runs = []
        for seed in range(args.seed, args.seed + args.seeds):
            # the subset's seed (the full training set has none: every seed shares it)
            dseed = seed if args.subset_per_seed and n_train is not None else args.seed
            key = jax.random.fold_in(jax.random.key(0), seed)  # run_table's key for a seed
            tag = (f"-{args.preset}-{args.pca}"
                   + (f"-std_{args.standardize}" if args.standardize else "")) if dmn else ""
            tag += f"-x{args.input_scale:g}" if args.input_scale != 1.0 else ""
            # the data subset's seed and the scored rows name the run too
            ck = args.checkpoint_dir / (f"{spec.replace(',', '_')}{tag}-n{args.n_train}"
                                        f"d{dseed}-t{args.train_curve_n}-e{args.epochs}"
                                        f"-s{seed}")
            done = ck / "result.json"
            if done.exists():
                r = json.loads(done.read_text())
            else:
                std = {} if args.standardize is None else {"standardize": args.standardize}
                cfg = preset(var_fraction=None, cutoff=0.9, pca=args.pca, **std) if dmn \
                    else DMNConfig.paper()
                if dmn and args.input_scale != 1.0:  # the noise is in pixel units
                    cfg = dataclasses.replace(cfg, input_noise=cfg.input_noise * args.input_scale)
                tr = train_set(dseed)
                xs = np.float32(args.input_scale)
                r = train_and_evaluate(spec, np.asarray(tr.x) * xs, tr.y,
                                       np.asarray(te.x) * xs, te.y, 10, key=key, config=cfg,
                                       epochs=args.epochs,
                                       batch_size=128, eval_every_epoch=True, progress=False,
                                       train_eval_n=None, train_curve_n=args.train_curve_n,
                                       checkpoint_dir=ck)
                ck.mkdir(parents=True, exist_ok=True)
                done.write_text(json.dumps(r))
            runs.append(r)
        rows[label] = summarise(label, spec, pv, pt, runs)
        s = rows[label]
        print(f"{label}: final {s['final']['val']:.2f} / {s['final']['train']:.2f} (paper "
              f"{pv} / {pt}); epochs matching: {s['epochs_matching_paper_eval_train']} "
              f"(running train: {s['epochs_matching_paper_running_train']}); per seed "
              f"{s['per_seed']} [{s['train_s']:.0f} s]", flush=True)
    rec = {"what": __doc__.split("\n")[0], "n_train": n_train or 50000, "n_test": 10000,
           "epochs": args.epochs, "seed": args.seed, "seeds": args.seeds, "batch_size": 128,
           "subset": ("each seed its own, drawn with the seed" if args.subset_per_seed
                      else "one, drawn with the first seed"),
           "preset": args.preset, "pca": args.pca, "train_curve_n": args.train_curve_n,
           "standardize": args.standardize or preset().standardize,
           "input_scale": args.input_scale,
           "optimizer": "adam(lr=1e-3)", "tol": TOL, "rows": rows,
           "wall_s": time.perf_counter() - t0, "device": str(jax.devices()[0]),
           "command": "python -m reproduce._dmn_convnet_budget "
           + " ".join(sys.argv[1:] if argv is None else argv)}
    t2 = pathlib.Path(__file__).resolve().parents[1] / "results" / "dmn" / "table2.json"
    setting = (f"{rec['n_train']} training images, {args.epochs} epochs, {args.seeds} seed(s), "
               f"subset {rec['subset']}")
    if t2.exists() and (h := headline(rows, json.loads(t2.read_text()), setting)) is not None:
        rec["headline"] = h
        print(f"headline (DMN >= ConvNet of this run): final {h['holds_final']}, best epoch "
              f"{h['holds_best']}", flush=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(rec, indent=1))
    plot(rec, args.out / f"{args.name}.png")
    print(f"wrote {args.out / (args.name + '.json')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
