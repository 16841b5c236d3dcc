"""Figs. 2–4 and App. G of Buffelli et al. 2024: mini-batch GN vs Adam vs SGD on a RevMLP.

    python -m benchmarks.gnrev_minibatch                 # CPU default (minutes)
    python -m benchmarks.gnrev_minibatch --paper         # MNIST, batch 1024, d'=8000 (GPU)
    python -m benchmarks.gnrev_minibatch --paper --dataset cifar10 --depth 6

One run per optimiser (rates: the authors' mini-batch GN rate 0.1 and, for Adam/SGD, the
rates our full-batch sweep selected; ``--sweep`` picks them by a one-epoch vmapped sweep
instead), recording
per epoch: full-train loss, test loss and accuracy (Fig. 2); per step the percentage change
of the mini-batch loss across its own update (Fig. 3); the empirical NTK of the logits on a
fixed probe set -- alignment with the NTK at init and relative change between epochs
(Fig. 4a-b); linear CKA of each block's output with its initial value over the whole probe
set (Fig. 4c-e); weight cosine similarity and relative norm change vs init (App. G).
Writes ``results/gnrev_minibatch/minibatch.json`` and ``fig2.png``, ``fig3.png``,
``fig4.png``, ``appG.png``.
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import matplotlib  # noqa: E402
import numpy as np  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from benchmarks._common import csv_list, results_dir, write_json  # noqa: E402
from layerlab.gnrev._experiments import lr_sweep, make_model, prepare_classification, train  # noqa: E402,E501
from layerlab.loop import history_to_jsonable  # noqa: E402

COLORS = {"gn": "C3", "adam": "C0", "sgd": "C2"}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="mnist")
    ap.add_argument("--n-train", type=int, default=4096)
    ap.add_argument("--n-test", type=int, default=1000)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--bottleneck", type=int, default=512)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--gn-lrs", default="0.03,0.1,0.3")
    ap.add_argument("--adam-lrs", default="1e-4,1e-3,1e-2")
    ap.add_argument("--sgd-lrs", default="0.01,0.1,1.0")
    ap.add_argument("--gn-lr", type=float, default=0.1)
    ap.add_argument("--adam-lr", type=float, default=1e-3)
    ap.add_argument("--sgd-lr", type=float, default=0.1)
    ap.add_argument("--sweep", action="store_true",
                    help="pick each rate by a one-epoch vmapped sweep over --*-lrs instead")
    ap.add_argument("--probe-n", type=int, default=500, help="probe images for CKA")
    ap.add_argument("--ntk-n", type=int, default=32, help="probe images for the NTK")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--paper", action="store_true",
                    help="paper scale: full MNIST, batch 1024, d'=8000, 100 epochs (GPU)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.paper:
        args.n_train, args.n_test, args.bottleneck = 60000, 10000, 8000
        args.batch_size, args.epochs, args.ntk_n = 1024, 100, 128
    out = results_dir("gnrev_minibatch", args.out)
    prep = prepare_classification(args.dataset, args.n_train, args.n_test, seed=args.seed)
    dim = prep.x_train.shape[1]
    params, frozen, P = make_model(jax.random.key(args.seed), dim, args.depth, prep.num_outputs,
                                   bottleneck=args.bottleneck)
    data = (jnp.asarray(prep.x_train), jnp.asarray(prep.y_train))
    spe = len(prep.x_train) // args.batch_size
    probe_x = prep.x_test[: args.probe_n]
    runs, sweeps = {}, {}
    for opt, lrs in (("gn", args.gn_lrs), ("adam", args.adam_lrs), ("sgd", args.sgd_lrs)):
        lr = getattr(args, f"{opt}_lr")
        if args.sweep:
            kw = {"residual": False} if opt == "gn" else {}
            sw = lr_sweep(opt, csv_list(lrs), params, frozen, P, data, steps=spe,
                          batch_size=args.batch_size, key=jax.random.key(1), **kw)
            sweeps[opt] = sw
            lr = sw["best"]
            print(f"{opt}: one-epoch sweep {dict(zip(sw['lrs'].tolist(), sw['final_loss']))} "
                  f"-> lr {lr}", flush=True)
        _, rec = train(opt, lr, params, frozen, P, prep, key=jax.random.key(2),
                       epochs=args.epochs, batch_size=args.batch_size, eval_every=spe,
                       probe_x=probe_x, ntk_n=args.ntk_n, loss_after=True)
        runs[opt] = rec
    summary = {}
    for o, r in runs.items():
        h, pr = r["history"], r["probes"]
        ev = h["eval"]
        summary[o] = {
            "lr": r["lr"],
            "train_loss_final": float(ev["train_loss_full"][-1]),
            "test_loss_final": float(ev["test_loss"][-1]),
            "test_loss_min": float(np.min(ev["test_loss"])),
            "test_accuracy_final": float(ev["test_accuracy"][-1]),
            "test_accuracy_max": float(np.max(ev["test_accuracy"])),
            "loss_change_pct_first_epoch": float(np.mean(h["train"]["loss_change_pct"][:spe])),
            "loss_change_pct_last_epoch": float(np.mean(h["train"]["loss_change_pct"][-spe:])),
            "ntk_align_init_final": float(pr["ntk_align_init"][-1]),
            "cka_block_final": pr["cka_block"][-1].tolist(),
            "w_cos_final": float(pr["w_cos"][-1]),
            "w_rel_final": float(pr["w_rel"][-1]),
        }
        if o == "gn":
            summary[o]["min_rank_min"] = float(np.min(h["train"]["min_rank"]))
            summary[o]["residual_median"] = float(np.median(h["train"]["residual"]))
    print(summary)
    ep = {o: np.asarray(r["history"]["eval_step"]) / spe for o, r in runs.items()}

    fig, ax = plt.subplots(1, 3, figsize=(13, 3.6))
    for o, r in runs.items():
        ev = r["history"]["eval"]
        lab = f"{o.upper()} (lr={r['lr']:g})"
        ax[0].semilogy(ep[o], ev["train_loss_full"], color=COLORS[o], label=lab)
        ax[1].plot(ep[o], ev["test_loss"], color=COLORS[o], label=lab)
        ax[2].plot(ep[o], ev["test_accuracy"], color=COLORS[o], label=lab)
    for a, t in zip(ax, ("train loss", "test loss", "test accuracy")):
        a.set(xlabel="epoch", title=t)
    ax[0].legend()
    fig.suptitle(f"mini-batch {prep.name} n={len(prep.x_train)}, batch {args.batch_size}, "
                 f"{args.depth} blocks, d'={args.bottleneck} (cf. Fig. 2)", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "fig2.png", dpi=110)

    fig, a = plt.subplots(figsize=(6, 3.6))
    k = max(1, spe // 2)
    for o, r in runs.items():
        v = np.asarray(r["history"]["train"]["loss_change_pct"])
        sm = np.convolve(v, np.ones(k) / k, mode="valid")
        a.plot(np.arange(len(sm)) / spe, sm, color=COLORS[o], label=o.upper())
    a.axhline(0, color="k", lw=0.5)
    a.set(xlabel="epoch", ylabel="% change of batch loss across its update",
          title="cf. Fig. 3 (moving average over half an epoch)")
    a.legend()
    fig.tight_layout()
    fig.savefig(out / "fig3.png", dpi=110)

    L = args.depth
    fig, ax = plt.subplots(1, 2 + L, figsize=(4 * (2 + L), 3.4))
    for o, r in runs.items():
        pr = r["probes"]
        e = np.asarray(pr["probe_step"]) / spe
        ax[0].plot(e, pr["ntk_align_init"], color=COLORS[o], label=o.upper())
        ax[1].semilogy(e[1:], pr["ntk_change"][1:], color=COLORS[o])
        for b in range(L):
            ax[2 + b].plot(e, pr["cka_block"][:, b], color=COLORS[o])
    ax[0].set(title="NTK alignment with init", xlabel="epoch")
    ax[1].set(title="NTK relative change per epoch", xlabel="epoch")
    for b in range(L):
        ax[2 + b].set(title=f"CKA block {b + 1} vs init", xlabel="epoch")
    ax[0].legend()
    fig.suptitle("cf. Fig. 4 (NTK on a fixed probe set, Frobenius alignment; CKA over the "
                 "whole probe set)", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "fig4.png", dpi=110)

    fig, ax = plt.subplots(1, 2, figsize=(9, 3.4))
    for o, r in runs.items():
        pr = r["probes"]
        e = np.asarray(pr["probe_step"]) / spe
        ax[0].plot(e, pr["w_cos"], color=COLORS[o], label=o.upper())
        ax[1].plot(e, pr["w_rel"], color=COLORS[o])
    ax[0].set(title="cosine(θ_t, θ_0)", xlabel="epoch")
    ax[1].set(title="‖θ_t − θ_0‖ / ‖θ_0‖", xlabel="epoch")
    ax[0].legend()
    fig.tight_layout()
    fig.savefig(out / "appG.png", dpi=110)

    write_json(out / "minibatch.json", {
        "what": "Figs. 2-4, App. G: mini-batch GN vs Adam vs SGD; NTK/CKA/weight drift",
        "config": vars(args) | {"dataset_used": prep.name, "data_note": prep.note, "dim": dim},
        "summary": summary,
        "sweeps": {o: {k_: v for k_, v in s.items() if k_ != "loss"} for o, s in sweeps.items()},
        "histories": {o: history_to_jsonable(r["history"]) for o, r in runs.items()},
        "probes": {o: r["probes"] for o, r in runs.items()},
    })
    print(f"written {out}")
    return summary


if __name__ == "__main__":
    main()
