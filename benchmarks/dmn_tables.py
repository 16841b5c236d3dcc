"""Reproduce Tables 2-5 of Dehmamy et al. (DMN vs ConvNet of the same architecture).

    python -m benchmarks.dmn_tables                       # CPU default: subsets, few epochs
    python -m benchmarks.dmn_tables --full                # paper scale (GPU): all data, 30 epochs
    python -m benchmarks.dmn_tables --cifar100            # also the CIFAR-100 rows (needs files)
    python -m benchmarks.dmn_tables --datasets mnist      # one dataset only

Every row trains one architecture written as in the paper (``d`` = conv DMN layer from PCA of
3x3 patches, ``m`` = 2x2 max-pool, ``c`` = trained conv, ``bn`` = batch-norm, ``de`` = dense;
the last ``de`` is the softmax classifier) in three ways: class-based PCA DMN, naive PCA DMN,
and the ConvNet of the same architecture trained end to end (``d -> c``) with Adam (and SGD
for the first MNIST row).  Reports train/val accuracy and wall-clock of each pipeline next to
the paper's numbers, as JSON, a markdown table and a PNG.
"""
from __future__ import annotations

import argparse

import jax
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks._common import results_dir, write_json  # noqa: E402
from layerlab.data import DatasetNotFoundError, load  # noqa: E402
from layerlab.dmn import DMNConfig, convnet_spec, format_spec  # noqa: E402
from layerlab.dmn._pipeline import train_and_evaluate  # noqa: E402

# (dataset, architecture, DMN settings, paper numbers {variant: val acc %}, note)
ROWS = [
    ("mnist", "d6,m,de10", {}, {"dmn": 97.78, "convnet": 98.12}, "Table 2, MNIST"),
    ("mnist", "d6,m,de10", {"input_fraction": 0.1, "var_fraction": 0.9}, {},
     "Input 0.1, Var 0.9 (data-fraction row)"),
    ("mnist", "d6,m,d40,m,de10", {}, {}, "stacked DMN (Sec. 4)"),
    ("cifar10", "d22,m,d41,m,de10", {}, {"dmn": 59.64, "convnet": 51.96},
     "Table 2, CIFAR-10 'd22,d41' (we pool after each layer)"),
    ("cifar10", "d15,m,c80,m,de10", {}, {"hybrid": 68.03}, "hybrid, CIFAR-10"),
    ("cifar10", "d15,m,c80,bn,m,de10", {}, {}, "hybrid with batch-norm"),
    ("cifar100", "d79,m,de100", {}, {"dmn": 30.93, "convnet": 26.14}, "Table 2, CIFAR-100"),
]


def load_split(name, n_train, n_val, seed):
    tr = load(name, "train", n=n_train, balanced=n_train is not None, seed=seed)
    te = load(name, "test", n=n_val, balanced=n_val is not None, seed=seed)
    return tr, te


def main(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--datasets", default="mnist,cifar10")
    p.add_argument("--cifar100", action="store_true", help="also run the CIFAR-100 rows")
    p.add_argument("--n-train", type=int, default=10000, help="MNIST training images")
    p.add_argument("--n-val", type=int, default=2000, help="MNIST test images")
    p.add_argument("--n-train-cifar", type=int, default=3000)
    p.add_argument("--n-val-cifar", type=int, default=1000)
    p.add_argument("--epochs", type=int, default=8, help="classifier epochs (MNIST)")
    p.add_argument("--epochs-cifar", type=int, default=2, help="classifier epochs (CIFAR)")
    p.add_argument("--all-variants", action="store_true",
                   help="CIFAR: also naive-PCA hybrids and the ConvNets of the hybrid rows")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=3e-3, help="Adam learning rate")
    p.add_argument("--full", action="store_true",
                   help="paper scale: all training data, the full test set, 30 epochs")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if args.full:
        args.n_train, args.n_val, args.epochs, args.epochs_cifar = None, None, 30, 30
        args.n_train_cifar, args.n_val_cifar, args.all_variants = None, None, True
    datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    if args.cifar100 and "cifar100" not in datasets:
        datasets.append("cifar100")
    data = {}
    for name in datasets:
        try:
            cif = name.startswith("cifar")
            data[name] = load_split(name, args.n_train_cifar if cif else args.n_train,
                                    args.n_val_cifar if cif else args.n_val, args.seed)
        except DatasetNotFoundError as e:
            raise SystemExit(
                f"dmn_tables: {name} is not available, so its rows cannot run.\n{e}\n"
                "Put the files where the message says (or set LAYERLAB_DATA) and re-run."
            ) from None
    out = results_dir("dmn_tables", args.out)
    key = jax.random.key(args.seed)
    records = []
    for ds_name, spec, dmn_kw, paper, note in ROWS:
        if ds_name not in data:
            continue
        tr, te = data[ds_name]
        hybrid = "c" in spec.replace("de", "")
        variants = [("dmn-class", spec, DMNConfig(pca="class", **dmn_kw), "adam")]
        if not hybrid or args.all_variants:
            variants.append(("dmn-naive", spec, DMNConfig(pca="naive", **dmn_kw), "adam"))
        if not dmn_kw and (not hybrid or args.all_variants):
            variants.append(("convnet-adam", format_spec(convnet_spec(spec)), DMNConfig(), "adam"))
            if ds_name == "mnist" and spec == "d6,m,de10":
                variants.append(("convnet-sgd", format_spec(convnet_spec(spec)), DMNConfig(),
                                 "sgd"))
        for label, sp, cfg, opt in variants:
            print(f"--- {ds_name} {sp} [{label}] {note}", flush=True)
            r = train_and_evaluate(
                sp, tr.x, tr.y, te.x, te.y, tr.num_classes, key=key, config=cfg, optimizer=opt,
                lr=args.lr if opt == "adam" else 0.02,
                epochs=args.epochs if ds_name == "mnist" else args.epochs_cifar,
                batch_size=args.batch_size, progress=True,
            )
            r.update(dataset=ds_name, row=spec, variant=label, note=note,
                     input_fraction=cfg.input_fraction, var_fraction=cfg.var_fraction,
                     cutoff=cfg.cutoff if label == "dmn-class" else None,
                     paper=paper)
            print(f"    train {r['train_acc']:.4f} val {r['val_acc']:.4f} widths {r['widths']} "
                  f"total {r['total_s']:.1f}s (build {r['build_s']:.1f}s, "
                  f"train {r['train_s']:.1f}s)", flush=True)
            records.append(r)
            save(out, records, vars(args))  # after every row: a killed run keeps its rows
    print(markdown(records, vars(args)))


def save(out, records, settings):
    tag = "_".join(sorted({r["dataset"] for r in records}))
    write_json(out / f"tables_{tag}.json", {"what": "DMN vs ConvNet, Tables 2-5",
                                            "settings": settings, "records": records})
    (out / f"tables_{tag}.md").write_text(markdown(records, settings))
    plot(records, out / f"tables_{tag}.png")


def _paper(r):
    p = r["paper"]
    v = r["variant"]
    if v.startswith("dmn") and "dmn" in p:
        return f"{p['dmn']:.2f}"
    if v.startswith("dmn") and "hybrid" in p:
        return f"{p['hybrid']:.2f}"
    if v.startswith("convnet") and "convnet" in p:
        return f"{p['convnet']:.2f}"
    return "-"


def markdown(records, settings):
    lines = [
        f"Settings: MNIST {settings['n_train']} train / {settings['n_val']} test images, "
        f"{settings['epochs']} epochs; CIFAR {settings['n_train_cifar']} / "
        f"{settings['n_val_cifar']}, {settings['epochs_cifar']} epochs; "
        f"batch={settings['batch_size']}, Cutoff 0.9 (class PCA).",
        "",
        "| data | architecture | variant | Input | Var | filters | train acc % | val acc % "
        "| paper val % | wall-clock s (build + train) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        lines.append(
            f"| {r['dataset']} | {r['spec']} | {r['variant']} | {r['input_fraction']} | "
            f"{r['var_fraction'] or '-'} | {r['widths'] or '-'} | {100 * r['train_acc']:.2f} | "
            f"{100 * r['val_acc']:.2f} | {_paper(r)} | {r['total_s']:.1f} ({r['build_s']:.1f}"
            f" + {r['train_s']:.1f}) |"
        )
    return "\n".join(lines) + "\n"


def plot(records, path):
    fig, ax = plt.subplots(figsize=(10, 4.5))
    labels = [f"{r['dataset']}\n{r['row']}\n{r['variant']}" for r in records]
    x = np.arange(len(records))
    colors = {"dmn-class": "C0", "dmn-naive": "C1", "convnet-adam": "C2", "convnet-sgd": "C3"}
    ax.bar(x, [100 * r["val_acc"] for r in records],
           color=[colors.get(r["variant"], "C4") for r in records])
    for i, r in enumerate(records):
        ax.text(i, 100 * r["val_acc"] + 0.5, f"{r['total_s']:.0f}s", ha="center", fontsize=7)
        pv = _paper(r)
        if pv != "-":
            ax.plot([i - 0.4, i + 0.4], [float(pv)] * 2, "k--", lw=1)
    ax.set_xticks(x, labels, fontsize=6, rotation=90)
    ax.set_ylabel("validation accuracy % (dashes: paper)")
    ax.set_title("DMN (class / naive PCA) vs ConvNet of the same architecture; labels: wall-clock")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
