"""Reproduce Table I of Ben-David & Ringel (2019): End-to-end | DGL-LEGO | Random, + Fig. 4.

Protocol (``layerlab.data.dgl_protocol``): label-balanced MNIST10k / CIFAR10_10k / BMNIST2k
(digits 1 vs 7) training sets, a disjoint balanced validation set of the same size, the
standard test sets; zero-mean one-hot targets except CIFAR-10.  Per row (dataset, L, d):

* End-to-end: MSE, Adam(W), learning rate chosen on validation accuracy from ``--e2e-lrs``;
* DGL-LEGO: MF variances of the chosen end-to-end net; each ReLU layer trained alone on the
  DGL (mini-batch estimator, ``--dgl-batch`` points per step), ``eps_rel`` chosen on
  validation from ``--eps-rels``; closed-form MSE classifier (ridge chosen on validation);
* Random: the same classifier on the frozen random initial layers.

Fig. 4: the per-sample DGL of every layer (MF variances of the current net) during
end-to-end training of BMNIST2k, L=3, d=20, next to the training MSE.

CPU default (minutes on 2 shared cores): MNIST/CIFAR with 1000 training points and width
<= 128, BMNIST2k at full size (2000, d = 20), few steps.  Paper scale (GPU):
``--paper`` (N = 10k / 2k, the paper's widths, more steps).

    python -m benchmarks.dgl_table1            # CPU default
    python -m benchmarks.dgl_table1 --paper    # paper sizes, needs a GPU
"""
from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from benchmarks._common import results_dir, write_json
from layerlab import data, dgl, nets
from layerlab.loop import history_to_jsonable

# dataset, L, paper width, paper numbers (End-to-end, DGL-LEGO, Random) in % test accuracy
ROWS = [
    ("MNIST10k", 2, 2000, (97.71, 97.18, 94.42)),
    ("MNIST10k", 3, 1000, (96.59, 97.15, 92.18)),
    ("CIFAR10_10k", 5, 2000, (45.40, 47.45, 34.28)),
    ("BMNIST2k", 2, 20, (98.52, 99.26, 87.29)),
    ("BMNIST2k", 3, 20, (98.61, 99.21, 93.52)),
]
RIDGES = (1e-4, 1e-2, 1.0)


def _prep(name, n_train, seed):
    sp = data.dgl_protocol(name, n_train=n_train, seed=seed)
    c = sp.train.num_classes
    zero_mean = not name.lower().startswith("cifar")
    out = {}
    for split in ("train", "val", "test"):
        ds = getattr(sp, split)
        x = jnp.asarray(data.flatten(ds.x), jnp.float32)
        lab = np.asarray(ds.y)
        y = jnp.asarray(data.one_hot(lab, c, zero_mean=zero_mean), jnp.float32)
        out[split] = (x, y, jnp.asarray(lab))
    return out, c


def _classifier_on_val(params, h_tr, y_tr, d):
    """Pick the classifier ridge on validation accuracy (closed form, cheap)."""
    best = None
    for r in RIDGES:
        p = [dict(q) for q in params]
        p[-1] = dgl.fit_classifier(h_tr, y_tr, ridge_rel=r)
        acc = float(dgl.accuracy(p, *d["val"][::2]))
        if best is None or acc > best[0]:
            best = (acc, r, p)
    return best


def run_row(name, L, width, args, key, monitor=False):
    d, c = _prep(name, args.n_train.get(name), args.seed)
    x, y, _ = d["train"]
    k_init, k_e2e, k_lego = jax.random.split(key, 3)
    p0 = nets.mlp_init(k_init, [x.shape[1]] + [width] * L + [c], init="he")
    rec = {"dataset": name, "L": L, "width": width, "n_train": int(x.shape[0]),
           "n_val": int(d["val"][0].shape[0]), "n_test": int(d["test"][0].shape[0])}
    # ---- end-to-end, lr on validation
    e2e = None
    mon = None
    for lr in args.e2e_lrs:
        t0 = time.perf_counter()
        eval_fn = None
        if monitor:
            m = min(args.monitor_n, x.shape[0])
            eval_fn = dgl.monitor_fn(x[:m], y[:m], eps_rel=args.monitor_eps_rel)
        pe, hist = dgl.train_end_to_end(
            k_e2e, p0, x, y, optimizer=optax.adamw(lr, weight_decay=args.weight_decay),
            steps=args.e2e_steps, batch_size=args.e2e_batch, eval_fn=eval_fn,
            eval_every=args.monitor_every if monitor else None,
            desc=f"{name} L={L} e2e lr={lr:g}")
        va = float(dgl.accuracy(pe, *d["val"][::2]))
        print(f"  e2e lr={lr:g}: val {va:.4f} ({time.perf_counter() - t0:.0f}s)")
        if e2e is None or va > e2e[0]:
            e2e = (va, lr, pe)
            mon = hist if monitor else None
    va_e, lr_e, pe = e2e
    rec["end_to_end"] = {"lr": lr_e, "val": va_e, "test": float(dgl.accuracy(pe, *d["test"][::2]))}
    v = dgl.mf_variances(pe)
    rec["mf_variances"] = {"w_var": np.asarray(v.w_var), "b_var": np.asarray(v.b_var)}
    # ---- LEGO, eps_rel on validation
    best = None
    for eps_rel in args.eps_rels:
        t0 = time.perf_counter()
        cfg = dgl.LegoConfig(steps=args.dgl_steps, lr=args.dgl_lr, batch_size=args.dgl_batch,
                             eps_rel=eps_rel, weight_decay=args.weight_decay)
        pl, hists = dgl.lego(k_lego, p0, x, y, v, cfg)
        h = dgl.hidden_representations(pl, x)[-1]
        va, ridge, pl = _classifier_on_val(pl, h, y, d)
        print(f"  LEGO eps_rel={eps_rel:g}: val {va:.4f} ({time.perf_counter() - t0:.0f}s)")
        if best is None or va > best[0]:
            best = (va, eps_rel, ridge, pl, [
                (float(hh["train"]["loss"][0]), float(hh["train"]["loss"][-1])) for hh in hists])
    va_l, eps_l, ridge_l, pl, curves = best
    rec["dgl_lego"] = {"eps_rel": eps_l, "ridge_rel": ridge_l, "val": va_l,
                       "test": float(dgl.accuracy(pl, *d["test"][::2])),
                       "layer_dgl_first_last": curves, "dgl_lr": args.dgl_lr,
                       "dgl_steps": args.dgl_steps, "dgl_batch": args.dgl_batch}
    # ---- Random features
    h0 = dgl.hidden_representations(p0, x)[-1]
    va_r, ridge_r, pr = _classifier_on_val(p0, h0, y, d)
    rec["random"] = {"ridge_rel": ridge_r, "val": va_r,
                     "test": float(dgl.accuracy(pr, *d["test"][::2]))}
    return rec, mon


def plot_monitor(hist, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    st = hist["eval_step"]
    ax.plot(st, hist["eval"]["mse"], "k-", lw=2.5, label="training MSE")
    names = sorted(k for k in hist["eval"] if k.startswith("dgl_"))
    for k in names:
        lab = "input (l=0)" if k == "dgl_0" else f"layer {k[4:]}"
        ax.plot(st, hist["eval"][k], "--", label=f"DGL {lab}")
    ax.set_yscale("log")
    ax.set_xlabel("end-to-end training step")
    ax.set_ylabel("per-sample loss")
    ax.set_title("DGL monitoring (Fig. 4): BMNIST2k, L=3, d=20")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--paper", action="store_true", help="paper sizes (GPU)")
    ap.add_argument("--rows", default="0,1,2,3,4", help="indices into ROWS")
    ap.add_argument("--n-mnist", type=int, default=None)
    ap.add_argument("--n-cifar", type=int, default=None)
    ap.add_argument("--n-bmnist", type=int, default=None)
    ap.add_argument("--max-width", type=int, default=None)
    ap.add_argument("--e2e-steps", type=int, default=None)
    ap.add_argument("--e2e-batch", type=int, default=100)
    ap.add_argument("--e2e-lrs", type=float, nargs="+", default=[1e-3, 3e-3])
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--dgl-steps", type=int, default=None)
    ap.add_argument("--dgl-lr", type=float, default=3e-3)
    ap.add_argument("--dgl-batch", type=int, default=None)
    ap.add_argument("--eps-rels", type=float, nargs="+", default=[0.01, 0.1])
    ap.add_argument("--monitor-n", type=int, default=500)
    ap.add_argument("--monitor-every", type=int, default=50)
    ap.add_argument("--monitor-eps-rel", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.paper:
        n = {"MNIST10k": 10000, "CIFAR10_10k": 10000, "BMNIST2k": 2000}
        args.max_width = args.max_width or 10**9
        args.e2e_steps = args.e2e_steps or 10000
        args.dgl_steps = args.dgl_steps or 3000
        args.dgl_batch = args.dgl_batch or 2000
    else:
        n = {"MNIST10k": 1000, "CIFAR10_10k": 1000, "BMNIST2k": 2000}
        args.max_width = args.max_width or 128
        args.e2e_steps = args.e2e_steps or 600
        args.dgl_steps = args.dgl_steps or 150
        args.dgl_batch = args.dgl_batch or 250
    for k, a in (("MNIST10k", args.n_mnist), ("CIFAR10_10k", args.n_cifar),
                 ("BMNIST2k", args.n_bmnist)):
        if a:
            n[k] = a
    args.n_train = n
    out = results_dir("dgl_table1", args.out)
    key = jax.random.key(args.seed)
    recs = []
    t_all = time.perf_counter()
    for i in [int(r) for r in args.rows.split(",")]:
        name, L, w_paper, paper = ROWS[i]
        width = min(w_paper, args.max_width)
        print(f"[{i}] {name} L={L} d={width} (paper d={w_paper})")
        t0 = time.perf_counter()
        monitor = name == "BMNIST2k" and L == 3
        rec, mon = run_row(name, L, width, args, jax.random.fold_in(key, i), monitor=monitor)
        rec.update(paper_width=w_paper, paper={"end_to_end": paper[0], "dgl_lego": paper[1],
                                               "random": paper[2]},
                   seconds=time.perf_counter() - t0)
        recs.append(rec)
        if mon is not None:
            plot_monitor(mon, out / "fig4_monitoring.png")
            rec["monitoring"] = history_to_jsonable(mon)
        print(f"  test: e2e {rec['end_to_end']['test']:.4f}  LEGO {rec['dgl_lego']['test']:.4f}"
              f"  random {rec['random']['test']:.4f}   paper {paper}")
    lines = ["| dataset | L/d (ours; paper) | N | End-to-end | DGL-LEGO | Random | "
             "paper E2E / LEGO / Random |", "|---|---|---|---|---|---|---|"]
    for r in recs:
        p = r["paper"]
        lines.append(
            f"| {r['dataset']} | {r['L']}/{r['width']} ; {r['L']}/{r['paper_width']} | "
            f"{r['n_train']} | {100 * r['end_to_end']['test']:.2f} | "
            f"{100 * r['dgl_lego']['test']:.2f} | {100 * r['random']['test']:.2f} | "
            f"{p['end_to_end']:.2f} / {p['dgl_lego']:.2f} / {p['random']:.2f} |")
    table = "\n".join(lines)
    print(table)
    (out / "table1.md").write_text(table + "\n")
    settings = {k: (v if not isinstance(v, dict) else dict(v)) for k, v in vars(args).items()}
    write_json(out / "table1.json", {"what": "Table I reproduction (test accuracy)",
                                     "settings": settings, "rows": recs,
                                     "total_seconds": time.perf_counter() - t_all})
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
