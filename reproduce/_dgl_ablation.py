"""The CIFAR-10 LEGO ablation of docs/dgl.md (N = 500, L = 5, d = 128, one seed): one row per
variant of the DGL protocol; results in results/dgl/ablation/cifar500.json.

    python -m reproduce._dgl_ablation [variant-prefix ...]
"""
import pathlib
import sys

import jax

from layerlab.dgl import experiments as ex

REPO = pathlib.Path(__file__).resolve().parents[1]


def main(argv=None):
    cfg = ex.Table1Config(rows=("cifar-5x2000",), n_cifar=500, max_width=128, seeds=1,
                          e2e_epochs=30, e2e_adam_lrs=(3e-4, 1e-3), e2e_wds=(0.0,),
                          dgl_steps=60, dgl_batch=250, dgl_lrs=(1e-3,), dgl_wds=(0.0,),
                          eps_rel=0.01, dgl_evals=3, val_subsets=1)
    V = {
     "base (B=250, eps 0.01, early stop on val DGL)": {},
     "no early stopping (last step)": {"dgl_evals": 1},
     "full-N DGL (B=N=500)": {"dgl_batch": None},
     "eps_rel 0.1": {"eps_rel": 0.1},
     "eps_rel 0.001": {"eps_rel": 0.001},
     "top kernel He (w_var 2, b_var 0), not MF": {"top": "he"},
     "B=100": {"dgl_batch": 100},
     "lr 3e-4": {"dgl_lrs": (3e-4,)},
     "lr 1e-4": {"dgl_lrs": (1e-4,)},
     "width 256": {"width": 256},
     "old protocol (lr 3e-3, 150 steps, no early stop, eps 0.05)": {
         "dgl_lrs": (3e-3,), "dgl_steps": 60, "dgl_evals": 1, "eps_rel": 0.05},
    }
    names = (sys.argv[1:] if argv is None else argv) or list(V)
    chosen = {k: V[k] for k in V if any(k.startswith(n) for n in names)}
    res = ex.run_lego_ablation(cfg, "cifar-5x2000", chosen, key=jax.random.key(0),
                               state_file=str(REPO / "scratch/abl/cifar500.json"), progress=False)
    print(res.get("_e2e"))
    for k, v in res.items():
        if k.startswith("_"):  # "_e2e", "_fingerprint"
            continue
        layers = [(ly["train_dgl_first_last"][1], ly["val_dgl_first_best"][1], ly["best_step"])
                  for ly in v["layers"]]
        print(f"{k:60s} {v['lego_test']:.2f} val {v['lego_val_acc']:.2f} {v['wall_s']:.0f}s",
              layers)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
