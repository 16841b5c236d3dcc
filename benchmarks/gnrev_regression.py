"""App. M of Buffelli et al. 2024: regression with MSE, GN vs Adam vs SGD on a RevMLP.

    python -m benchmarks.gnrev_regression                       # wine + winequality (CPU)
    python -m benchmarks.gnrev_regression --datasets superconductivity --bottleneck 8000

Data: UCI wine via scikit-learn (3 cultivars; trained with MSE on one-hot targets, full
batch) and UCI wine quality (red + white, standardised quality score, mini-batch) from
``../shared/data``; superconductivity runs when the user provides it (not available here).
Inputs are standardised and zero-padded to an even dimension; no linear first block (with
d/2 + 1 < n a linear block's pseudo-inverse is rank deficient).  For each optimiser a
short vmapped sweep picks the largest stable learning rate.  Writes
``results/gnrev_regression/regression.json`` and ``regression.png``.
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

from benchmarks._common import results_dir, write_json  # noqa: E402
from layerlab.gnrev._experiments import (  # noqa: E402
    lr_sweep,
    make_model,
    prepare_regression,
    train,
)
from layerlab.loop import history_to_jsonable  # noqa: E402

COLORS = {"gn": "C3", "adam": "C0", "sgd": "C2"}
LRS = {"gn": [0.03, 0.1, 0.3, 1.0], "adam": [1e-4, 1e-3, 1e-2], "sgd": [1e-3, 1e-2, 1e-1]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", default="wine,winequality")
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--bottleneck", type=int, default=512)
    ap.add_argument("--batch-size", type=int, default=256,
                    help="mini-batch size (data sets with n <= batch run full batch)")
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--full-batch-steps", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    out = results_dir("gnrev_regression", args.out)
    results, skipped = {}, {}
    for name in [s for s in args.datasets.split(",") if s]:
        try:
            prep = prepare_regression(name, seed=args.seed)
        except (FileNotFoundError, OSError, ValueError, RuntimeError) as err:
            print(f"skipping {name}: {err}")
            skipped[name] = str(err)
            continue
        n = len(prep.x_train)
        full = n <= args.batch_size
        bs = None if full else args.batch_size
        spe = 1 if full else n // bs
        total = args.full_batch_steps if full else args.epochs * spe
        every = max(1, total // 20) if full else spe
        params, frozen, P = make_model(jax.random.key(args.seed), prep.x_train.shape[1],
                                       args.depth, prep.num_outputs,
                                       bottleneck=args.bottleneck, first_linear=False)
        data = (jnp.asarray(prep.x_train), jnp.asarray(prep.y_train))
        runs = {}
        for opt in ("gn", "adam", "sgd"):
            kw = {"residual": False} if opt == "gn" else {}
            sw = lr_sweep(opt, LRS[opt], params, frozen, P, data, steps=max(spe, 10),
                          batch_size=bs, loss="mse", key=jax.random.key(1), **kw)
            print(f"{name} {opt}: lr {sw['best']}")
            _, rec = train(opt, sw["best"], params, frozen, P, prep, key=jax.random.key(2),
                           steps=total, batch_size=bs, loss="mse", eval_every=every)
            rec["sweep"] = {k: v for k, v in sw.items() if k != "loss"}
            runs[opt] = rec
        results[name] = {"runs": runs, "n_train": n, "n_test": len(prep.x_test),
                         "dim": prep.x_train.shape[1], "full_batch": full,
                         "steps": total, "note": prep.note}
    summary = {
        name: {o: {"lr": r["lr"],
                   "train_mse_final": 2 * float(r["history"]["eval"]["train_loss_full"][-1]),
                   "test_mse_final": 2 * float(r["history"]["eval"]["test_loss"][-1]),
                   "test_mse_min": 2 * float(np.min(r["history"]["eval"]["test_loss"]))}
               for o, r in res["runs"].items()}
        for name, res in results.items()}
    print(summary)
    if results:
        fig, ax = plt.subplots(len(results), 2, figsize=(10, 3.6 * len(results)), squeeze=False)
        for i, (name, res) in enumerate(results.items()):
            for o, r in res["runs"].items():
                h = r["history"]
                ax[i, 0].semilogy(h["eval_step"], 2 * np.asarray(h["eval"]["train_loss_full"]),
                                  color=COLORS[o], label=f"{o.upper()} (lr={r['lr']:g})")
                ax[i, 1].plot(h["eval_step"], 2 * np.asarray(h["eval"]["test_loss"]),
                              color=COLORS[o])
            kind = "full batch" if res["full_batch"] else f"batch {args.batch_size}"
            ax[i, 0].set(title=f"{name}: train MSE ({kind})", xlabel="step")
            ax[i, 1].set(title=f"{name}: test MSE", xlabel="step")
            ax[i, 0].legend(fontsize=8)
        fig.suptitle("regression with MSE (cf. App. M)", fontsize=9)
        fig.tight_layout()
        fig.savefig(out / "regression.png", dpi=110)
    write_json(out / "regression.json", {
        "what": "App. M: MSE regression, GN vs Adam vs SGD",
        "config": vars(args), "summary": summary, "skipped": skipped,
        "runs": {name: {"meta": {k: v for k, v in res.items() if k != "runs"},
                        **{o: {"lr": r["lr"], "sweep": r["sweep"],
                               "history": history_to_jsonable(r["history"])}
                           for o, r in res["runs"].items()}}
                 for name, res in results.items()},
    })
    print(f"written {out}")
    return summary


if __name__ == "__main__":
    main()
