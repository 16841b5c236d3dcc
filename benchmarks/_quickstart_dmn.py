"""Quickstart section for layerlab.dmn: one conv DMN layer + classifier vs backprop, on digits.

``run(out_dir)`` builds ``d8, m, de10`` (8 filters = class-based PCA of 3x3 patches, ReLU,
2x2 max-pool, then a softmax classifier trained by ``layerlab.loop.fit``) and trains the same
architecture ``c8, m, de10`` end to end by backprop, both with the test accuracy after every
epoch; prints accuracies and wall-clock, writes ``dmn.json`` and ``dmn.png`` (test accuracy
against wall-clock seconds, the DMN's PCA build included).
"""
from __future__ import annotations

import pathlib

import jax

from benchmarks._common import write_json
from layerlab.data import load
from layerlab.dmn import DMNConfig
from layerlab.dmn.experiments import train_and_evaluate


def run(out_dir: pathlib.Path, progress: bool = True) -> dict:
    tr, te = load("digits", "train"), load("digits", "test")
    common = dict(key=jax.random.key(0), epochs=15, batch_size=64, lr=3e-3, progress=progress,
                  eval_every_epoch=True)
    dmn = train_and_evaluate("d8,m,de10", tr.x, tr.y, te.x, te.y, 10,
                             config=DMNConfig(pca="class"), **common)
    conv = train_and_evaluate("c8,m,de10", tr.x, tr.y, te.x, te.y, 10, **common)
    summary = {
        "dmn_val_acc": round(dmn["val_acc"], 4),
        "conv_val_acc": round(conv["val_acc"], 4),
        "dmn_total_s": round(dmn["total_s"], 2),
        "dmn_build_s": round(dmn["build_s"], 2),
        "conv_total_s": round(conv["total_s"], 2),
    }
    write_json(pathlib.Path(out_dir) / "dmn.json",
               {"what": "digits: DMN d8,m,de10 vs ConvNet c8,m,de10 (15 epochs Adam)",
                "dmn": dmn, "convnet": conv, "summary": summary})
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2))
    for r, label in ((dmn, "DMN d8,m,de10"), (conv, "ConvNet c8,m,de10 (backprop)")):
        ax.plot([c[1] for c in r["curve"]], [100 * c[2] for c in r["curve"]], "o-", ms=3,
                label=label)
    ax.set(xlabel="wall-clock s (compilation and PCA build included)",
           ylabel="test accuracy %", title="digits: closed-form layer vs backprop")
    ax.legend()
    fig.tight_layout()
    fig.savefig(pathlib.Path(out_dir) / "dmn.png", dpi=110)
    plt.close(fig)
    summary["rows"] = [
        ["DMN test acc", dmn["val_acc"],
         f"8 class-PCA 3x3 filters (closed form), classifier trained 15 epochs; "
         f"{dmn['total_s']:.1f} s"],
        ["ConvNet test acc", conv["val_acc"],
         f"same architecture trained end to end by backprop, 15 epochs; "
         f"{conv['total_s']:.1f} s"],
    ]
    summary["figure"] = "dmn.png"
    print(f"dmn: digits test acc DMN {dmn['val_acc']:.3f} ({dmn['total_s']:.1f}s, of which "
          f"PCA build {dmn['build_s']:.1f}s) vs backprop ConvNet {conv['val_acc']:.3f} "
          f"({conv['total_s']:.1f}s)")
    return summary


if __name__ == "__main__":
    from benchmarks._common import out_dir

    run(out_dir("quickstart"))
