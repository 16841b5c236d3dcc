"""Variations of the mini-batch study (Apps. F, I, J, K and §5.3 of Buffelli et al. 2024).

    python -m benchmarks.gnrev_variations                 # CPU default (minutes)
    python -m benchmarks.gnrev_variations --paper         # MNIST, batch 1024, d'=8000 (GPU)

Every variant is a mini-batch GN run on the same data and initialisation unless stated:
learning rates (App. F), weight decay (App. I), initialisation scale of W (App. J), the three
pseudo-inverse regularisations (App. K), no bottleneck (V = I, §5.3), and switching
optimiser after ``--switch-epoch`` epochs (Adam→GN, GN→Adam).  Writes
``results/gnrev_variations/variations.json`` and ``variations.png``.
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402

import jax  # noqa: E402
import matplotlib  # noqa: E402
import numpy as np  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from benchmarks._common import results_dir, write_json  # noqa: E402
from layerlab.gnrev._experiments import (  # noqa: E402
    init_state,
    make_model,
    make_step,
    prepare_classification,
    train,
)
from layerlab.loop import history_to_jsonable  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="mnist")
    ap.add_argument("--n-train", type=int, default=1024)
    ap.add_argument("--n-test", type=int, default=1000)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--bottleneck", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--switch-epoch", type=int, default=2)
    ap.add_argument("--gn-lr", type=float, default=0.1)
    ap.add_argument("--adam-lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--paper", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.paper:
        args.n_train, args.n_test, args.bottleneck = 60000, 10000, 8000
        args.batch_size, args.epochs, args.switch_epoch = 1024, 100, 50
    out = results_dir("gnrev_variations", args.out)
    prep = prepare_classification(args.dataset, args.n_train, args.n_test, seed=args.seed)
    dim = prep.x_train.shape[1]
    spe = len(prep.x_train) // args.batch_size
    key = jax.random.key(args.seed)

    def model(**kw):
        return make_model(key, dim, args.depth, prep.num_outputs,
                          bottleneck=kw.pop("bottleneck", args.bottleneck), **kw)

    base = model()
    common = dict(key=jax.random.key(2), batch_size=args.batch_size, eval_every=spe,
                  progress=True)
    variants = {}

    def run(name, opt, lr, m=base, epochs=args.epochs, state=None, **kw):
        print(f"--- {name}", flush=True)
        st, rec = train(opt, lr, *m, prep, epochs=epochs, state=state, **common, **kw)
        variants[name] = rec
        return st, rec

    for lr in (args.gn_lr, args.gn_lr * 3):
        run(f"GN lr={lr:.3g}", "gn", lr)                                   # App. F
    run("GN wd=1e-2", "gn", args.gn_lr, weight_decay=1e-2)                # App. I
    run("GN init x2", "gn", args.gn_lr, m=model(w_scale=2.0))             # App. J
    for pv in ("damp", "noise"):                                           # App. K
        run(f"GN pinv={pv}", "gn", args.gn_lr, pinv=pv)
    run("GN no bottleneck", "gn", args.gn_lr, m=model(bottleneck=None))   # §5.3
    run("Adam", "adam", args.adam_lr)
    # switching optimiser after k epochs (params carried over, fresh optimiser state)
    k = args.switch_epoch
    for first, second, lr1, lr2 in (("adam", "gn", args.adam_lr, args.gn_lr),
                                    ("gn", "adam", args.gn_lr, args.adam_lr)):
        st, r1 = train(first, lr1, *base, prep, epochs=k, **common)
        ts2 = make_step(second, base[1], base[2])
        st2 = init_state(second, ts2, st.params, lr2)
        _, r2 = train(second, lr2, st.params, base[1], base[2], prep, epochs=args.epochs - k,
                      state=st2, **common)
        name = f"{first.upper()}→{second.upper()} @ {k}"
        h1, h2 = r1["history"], r2["history"]
        variants[name] = {"history": {
            "eval_step": np.concatenate([h1["eval_step"], h2["eval_step"][1:] + k * spe]),
            "eval": {m: np.concatenate([h1["eval"][m], h2["eval"][m][1:]])
                     for m in h1["eval"]},
            "step": np.concatenate([h1["step"], h2["step"] + k * spe]),
            "train": {m: np.concatenate([h1["train"][m], h2["train"][m]])
                      for m in ("loss",)}}, "lr": [lr1, lr2], "opt": f"{first}->{second}"}
    summary = {}
    for name, r in variants.items():
        ev = r["history"]["eval"]
        summary[name] = {"train_loss_final": float(ev["train_loss_full"][-1]),
                         "test_loss_final": float(ev["test_loss"][-1]),
                         "test_accuracy_final": float(ev["test_accuracy"][-1]),
                         "test_accuracy_max": float(np.max(ev["test_accuracy"]))}
        tr = r["history"]["train"]
        if "min_rank" in tr:
            summary[name]["min_rank_min"] = float(np.min(tr["min_rank"]))
    for n_, s in summary.items():
        print(f"{n_:22s} train {s['train_loss_final']:.4f} test {s['test_loss_final']:.4f} "
              f"acc {s['test_accuracy_final']:.3f}")
    fig, ax = plt.subplots(1, 2, figsize=(12, 4.2))
    for i, (name, r) in enumerate(variants.items()):
        h = r["history"]
        e = np.asarray(h["eval_step"]) / spe
        st_ = "-" if name.startswith("GN") else "--"
        ax[0].semilogy(e, h["eval"]["train_loss_full"], st_, color=f"C{i % 10}", label=name)
        ax[1].plot(e, h["eval"]["test_accuracy"], st_, color=f"C{i % 10}")
    ax[0].set(xlabel="epoch", title="train loss (full train subset)")
    ax[1].set(xlabel="epoch", title="test accuracy")
    ax[0].legend(fontsize=7, ncol=2)
    fig.suptitle(f"variations, mini-batch {prep.name} n={len(prep.x_train)}, batch "
                 f"{args.batch_size}, d'={args.bottleneck} (Apps. F, I, J, K, §5.3)", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "variations.png", dpi=110)
    write_json(out / "variations.json", {
        "what": "GN variations: lr, weight decay, init scale, pinv regularisation, no "
                "bottleneck, optimiser switching",
        "config": vars(args) | {"dataset_used": prep.name, "data_note": prep.note},
        "summary": summary,
        "histories": {n_: history_to_jsonable(r["history"]) for n_, r in variants.items()},
    })
    print(f"written {out}")
    return summary


if __name__ == "__main__":
    main()
