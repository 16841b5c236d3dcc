"""Fig. 6 of Dehmamy et al.: accuracy vs number of filters, one DMN layer vs one conv layer.

    python -m benchmarks.dmn_fig6                                # MNIST subset, CPU minutes
    python -m benchmarks.dmn_fig6 --dataset cifar10 --filters 2,4,8,16,32,64 --full

For each ``F``: ``dF, m, de10`` with class-based and naive PCA filters, and ``cF, m, de10``
trained end to end (Adam), all with the same classifier training budget.
"""
from __future__ import annotations

import argparse

import jax
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from benchmarks._common import results_dir, write_json  # noqa: E402
from layerlab.data import load  # noqa: E402
from layerlab.dmn import DMNConfig  # noqa: E402
from layerlab.dmn._pipeline import train_and_evaluate  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--dataset", default="mnist")
    p.add_argument("--filters", default="2,4,8,16")
    p.add_argument("--n-train", type=int, default=4000)
    p.add_argument("--n-val", type=int, default=2000)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--full", action="store_true", help="all data, full test set, 20 epochs")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if args.full:
        args.n_train, args.n_val, args.epochs = None, None, 20
    tr = load(args.dataset, "train", n=args.n_train, balanced=args.n_train is not None)
    te = load(args.dataset, "test", n=args.n_val, balanced=args.n_val is not None)
    c = tr.num_classes
    filters = [int(f) for f in args.filters.split(",")]
    res = {"dmn-class": [], "dmn-naive": [], "convnet": []}
    key = jax.random.key(0)
    for f in filters:
        for label, spec, cfg in [("dmn-class", f"d{f},m,de{c}", DMNConfig(pca="class")),
                                 ("dmn-naive", f"d{f},m,de{c}", DMNConfig(pca="naive")),
                                 ("convnet", f"c{f},m,de{c}", DMNConfig())]:
            r = train_and_evaluate(spec, tr.x, tr.y, te.x, te.y, c, key=key, config=cfg,
                                   epochs=args.epochs, progress=False)
            print(f"F={f:3d} {label:10s} val {r['val_acc']:.4f} train {r['train_acc']:.4f} "
                  f"({r['total_s']:.1f}s)", flush=True)
            res[label].append({"filters": f, **r})
    out = results_dir("dmn_fig6", args.out)
    write_json(out / "fig6.json", {"what": "accuracy vs number of filters (Fig. 6)",
                                   "settings": vars(args), "results": res})
    fig, ax = plt.subplots(figsize=(5, 3.6))
    for label, rs in res.items():
        ax.plot(filters, [100 * r["val_acc"] for r in rs], "o-", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("number of filters F (one layer: F, m, de)")
    ax.set_ylabel("validation accuracy %")
    ax.set_title(f"{args.dataset}: one DMN layer vs one conv layer")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "fig6.png", dpi=120)


if __name__ == "__main__":
    main()
