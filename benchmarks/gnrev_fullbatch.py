"""Fig. 1 of Buffelli et al. 2024: full-batch training of a RevMLP with exact GN vs Adam vs SGD.

    python -m benchmarks.gnrev_fullbatch                       # CPU default (minutes)
    python -m benchmarks.gnrev_fullbatch --paper               # MNIST 1024 images, d'=8000
    python -m benchmarks.gnrev_fullbatch --dataset cifar10 --depth 6 --paper

For each optimiser a short vmapped learning-rate sweep (one program, ``fit(runs=True)``) picks
the largest rate that does not diverge; then a full run records training loss and accuracy
per step.  Writes ``results/gnrev_fullbatch/fullbatch.json`` and ``fullbatch.png``.
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # LAPACK eigh thrashes on a loaded box
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402

import jax  # noqa: E402
import matplotlib  # noqa: E402
import numpy as np  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from benchmarks._common import csv_list, results_dir, write_json  # noqa: E402
from layerlab.gnrev._experiments import (  # noqa: E402
    lr_sweep,
    make_model,
    prepare_classification,
    train,
)
from layerlab.loop import history_to_jsonable  # noqa: E402

COLORS = {"gn": "C3", "gn_newton": "C1", "adam": "C0", "sgd": "C2"}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="mnist")
    ap.add_argument("--n-train", type=int, default=512)
    ap.add_argument("--n-test", type=int, default=1000)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--bottleneck", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--sweep-steps", type=int, default=15)
    ap.add_argument("--gn-lrs", default="0.3,1.0,3.0")
    ap.add_argument("--gn-newton-lrs", default="0.01,0.03,0.1")
    ap.add_argument("--with-newton", action="store_true",
                    help="also run GN with the Newton target (Eq. 19); diverges at CE init here")
    ap.add_argument("--adam-lrs", default="1e-4,1e-3,1e-2")
    ap.add_argument("--sgd-lrs", default="0.01,0.1,1.0")
    ap.add_argument("--first-linear", action=argparse.BooleanOptionalAction, default=True,
                    help="linear first block (authors' code); --no-first-linear uses σ everywhere")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--paper", action="store_true",
                    help="paper scale: 1024 images, d'=8000, 1000 steps (GPU)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.paper:
        args.n_train, args.bottleneck, args.steps, args.sweep_steps = 1024, 8000, 1000, 50
    out = results_dir("gnrev_fullbatch", args.out)
    prep = prepare_classification(args.dataset, args.n_train, args.n_test, seed=args.seed)
    dim = prep.x_train.shape[1]
    key = jax.random.key(args.seed)
    params, frozen, P = make_model(key, dim, args.depth, prep.num_outputs,
                                   bottleneck=args.bottleneck, first_linear=args.first_linear)
    data = (jax.numpy.asarray(prep.x_train), jax.numpy.asarray(prep.y_train))
    sweeps, runs = {}, {}
    opts = [("gn", args.gn_lrs), ("adam", args.adam_lrs), ("sgd", args.sgd_lrs)]
    if args.with_newton:
        opts.insert(1, ("gn_newton", args.gn_newton_lrs))
    for opt, lrs in opts:
        kw = {"residual": False} if opt.startswith("gn") else {}
        sw = lr_sweep(opt, csv_list(lrs), params, frozen, P, data, steps=args.sweep_steps,
                      key=jax.random.key(1), **kw)
        sweeps[opt] = sw
        print(f"{opt}: sweep final losses {dict(zip(sw['lrs'].tolist(), sw['final_loss']))}"
              f" -> lr {sw['best']}")
        _, rec = train(opt, sw["best"], params, frozen, P, prep, key=jax.random.key(2),
                       steps=args.steps, eval_every=max(1, args.steps // 6))
        runs[opt] = rec
    h = {o: r["history"] for o, r in runs.items()}
    summary = {}
    for o in runs:
        loss = np.asarray(h[o]["train"]["loss"])
        summary[o] = {"lr": runs[o]["lr"], "loss_first": float(loss[0]),
                      "loss_final": float(loss[-1]),
                      "train_accuracy_final": float(np.asarray(h[o]["train"]["accuracy"])[-1]),
                      "test_accuracy_final": float(np.asarray(h[o]["eval"]["test_accuracy"])[-1])}
        if o.startswith("gn"):
            summary[o]["residual_median"] = float(np.median(h[o]["train"]["residual"]))
            summary[o]["min_rank"] = float(np.min(h[o]["train"]["min_rank"]))
    summary["loss_ratio_adam_over_gn"] = summary["adam"]["loss_final"] / summary["gn"]["loss_final"]
    summary["loss_ratio_sgd_over_gn"] = summary["sgd"]["loss_final"] / summary["gn"]["loss_final"]
    print(summary)

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for o in runs:
        lab = f"{o.upper()} (lr={runs[o]['lr']:g})"
        axes[0].semilogy(h[o]["step"], h[o]["train"]["loss"], color=COLORS[o], label=lab)
        axes[1].plot(h[o]["step"], h[o]["train"]["accuracy"], color=COLORS[o], label=lab)
    axes[0].set(xlabel="step", ylabel="train loss (CE)", title="full batch: training loss")
    axes[1].set(xlabel="step", ylabel="train accuracy", title="full batch: training accuracy")
    axes[0].legend()
    fig.suptitle(f"RevMLP {prep.name} n={args.n_train}, {args.depth} blocks, d'={args.bottleneck}"
                 " (cf. Fig. 1 of Buffelli et al. 2024)", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "fullbatch.png", dpi=110)
    write_json(out / "fullbatch.json", {
        "what": "Fig. 1: full-batch training loss/accuracy, GN vs Adam vs SGD on a RevMLP",
        "config": vars(args) | {"dataset_used": prep.name, "data_note": prep.note, "dim": dim},
        "summary": summary,
        "sweeps": {o: {k: v for k, v in s.items() if k != "loss"} for o, s in sweeps.items()},
        "histories": {o: history_to_jsonable(v) for o, v in h.items()},
    })
    print(f"written {out}/fullbatch.json, fullbatch.png")
    return summary


if __name__ == "__main__":
    main()
