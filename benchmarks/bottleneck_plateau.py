"""Width plateau of the minimal L2-regularised loss (paper A, Fig. 2, Props. 13-15, Remark 23).

    python -m benchmarks.bottleneck_plateau            # CPU defaults (a few minutes)
    python -m benchmarks.bottleneck_plateau --paper    # paper scale (GPU): N=1000, lam=1e-6, ...

Four experiments, each a width x seed sweep compiled once per phase (masked neurons of one
maximal width, ``layerlab.loop.fit(runs=True)``; Adam with cosine decay, then full-batch GD):

1. teacher network (50, 10, 10, 10), Gaussian inputs, MSE (Fig. 2 right): plateau near 10;
2. MNIST subset, cross-entropy, two lambdas (Fig. 2 left);
3. X = I_N, Y = B_N (bias-free shallow ReLU; Remark 23): plateau near N^2/4, against the exact
   infinite-width loss; one-hot targets with C classes: plateau at C; the width-N construction;
4. scalar inputs (shallow ReLU with bias; Prop. 15): plateau by width 4N.

Writes ``results/bottleneck_plateau/plateau.json`` and ``plateau.png``.
"""
from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from benchmarks._common import results_dir, write_json  # noqa: E402
from layerlab import bottleneck as bn  # noqa: E402
from layerlab import data  # noqa: E402


def teacher_sweep(args, key):
    ds = data.teacher(key, args.n_teacher, (50, 10, 10, 10))
    x, y = jnp.asarray(ds.x), jnp.asarray(ds.y)
    r = bn.width_sweep(jax.random.fold_in(key, 1), x, y, widths=args.teacher_widths, depth=3,
                       cost=bn.mse_cost, lam=args.lam_teacher, seeds=args.seeds,
                       adam_steps=args.steps, adam_lr=3e-3, gd_steps=args.gd_steps,
                       gd_lr=1e-2, desc="teacher")
    start = bn.plateau_start(r["widths"], r["best"], rel_tol=args.rel_tol)
    return {"widths": r["widths"], "best": r["best"], "loss": r["loss"], "cost": r["cost"],
            "reg": r["reg"], "plateau_start": start, "paper_plateau_start": 10,
            "n": args.n_teacher, "lam": args.lam_teacher}


def mnist_sweep(args, key):
    try:
        ds = data.load("mnist", n=args.n_mnist, balanced=True, seed=0)
    except Exception as err:  # missing data: say so, keep the other experiments
        return {"skipped": f"MNIST not available: {err}"}
    x = jnp.asarray(data.flatten(ds.x))
    y = jnp.asarray(ds.y).astype(jnp.int32)
    out = {"n": args.n_mnist, "lams": args.lams_mnist, "widths": args.mnist_widths}
    for lam in args.lams_mnist:
        r = bn.width_sweep(jax.random.fold_in(key, int(1e6 * lam)), x, y,
                           widths=args.mnist_widths, depth=3, cost=bn.cross_entropy_cost,
                           lam=lam, seeds=args.seeds, adam_steps=args.steps, adam_lr=3e-3,
                           gd_steps=args.gd_steps, gd_lr=1e-2, desc=f"mnist lam={lam:g}")
        out[f"lam={lam:g}"] = {"best": r["best"], "loss": r["loss"], "cost": r["cost"],
                               "reg": r["reg"],
                               "plateau_start": bn.plateau_start(r["widths"], r["best"],
                                                                 rel_tol=args.rel_tol)}
    return out


def bipartite_sweeps(args, key):
    out = {}
    lam = args.lam_bn
    for N in args.bn_sizes:
        B = bn.bipartite_matrix(N)
        widths = list(range(1, N * N // 4 + 5))
        r = bn.width_sweep(jax.random.fold_in(key, N), jnp.eye(N), jnp.asarray(B, jnp.float32),
                           widths=widths, depth=2, cost=bn.mse_cost, lam=lam, seeds=args.seeds_bn,
                           adam_steps=args.steps_bn, adam_lr=1e-2, beta=0.0, desc=f"B_{N}")
        lb = bn.identity_inputs_loss_lower_bound(B, lam)
        _, norm_n = bn.bipartite_width_n_network(N)
        out[f"B_{N}"] = {
            "N": N, "widths": widths, "best": r["best"], "lower_bound": lb,
            "ratio_to_lower_bound": r["best"] / lb,
            "plateau_start_rel1e-3": bn.plateau_start(widths, r["best"], rel_tol=1e-3,
                                                      reference=lb),
            "plateau_start_rel1e-2": bn.plateau_start(widths, r["best"], rel_tol=1e-2,
                                                      reference=lb),
            "theory_min_width": N * N // 4,
            "width_N_construction_norm": norm_n, "optimal_norm": N * N,
            "learned_reg_at_width_N": float(r["reg"][widths.index(N)].min()),
        }
    # one-hot classification with C classes, X = I_N
    N, C = args.onehot
    labels = np.arange(N) % C
    Y = np.eye(C)[labels]
    widths = list(range(1, 2 * C + 3))
    r = bn.width_sweep(jax.random.fold_in(key, 99), jnp.eye(N), jnp.asarray(Y, jnp.float32),
                       widths=widths, depth=2, cost=bn.mse_cost, lam=lam, seeds=args.seeds_bn,
                       adam_steps=args.steps_bn, adam_lr=1e-2, beta=0.0, desc="one-hot")
    lb = bn.identity_inputs_loss_lower_bound(Y.T, lam)
    out["one_hot"] = {"N": N, "classes": C, "widths": widths, "best": r["best"],
                      "lower_bound": lb, "ratio_to_lower_bound": r["best"] / lb,
                      "plateau_start_rel1e-3": bn.plateau_start(widths, r["best"], rel_tol=1e-3,
                                                                reference=lb),
                      "theory_min_width": C}
    return out


def scalar_input_sweep(args, key):
    N = args.n_1d
    kx, ky = jax.random.split(key)
    del kx
    x = jnp.linspace(-1.0, 1.0, N)[:, None]
    y = jax.random.normal(ky, (N, 1))
    widths = list(range(1, 4 * N + 3))
    r = bn.width_sweep(jax.random.fold_in(key, 7), x, y, widths=widths, depth=2,
                       cost=bn.mse_cost, lam=args.lam_1d, seeds=2 * args.seeds_bn,
                       adam_steps=args.steps_bn, adam_lr=3e-3, desc="1-D")
    return {"N": N, "widths": widths, "best": r["best"], "lam": args.lam_1d,
            "cost_at_best": r["cost"][np.arange(len(widths)), np.argmin(r["loss"], 1)],
            "plateau_start": bn.plateau_start(widths, r["best"], rel_tol=args.rel_tol),
            "theory_bound": 4 * N}


def plot(res, path):
    fig, ax = plt.subplots(1, 4, figsize=(18, 4))
    t = res["teacher"]
    ax[0].semilogy(t["widths"], t["best"], "o-")
    ax[0].axvline(10, ls=":", c="k", label="teacher width 10")
    ax[0].set(title=f"teacher (50,10,10,10), N={t['n']}, lam={t['lam']:g}", xlabel="width",
              ylabel="min regularised loss (best of seeds)")
    ax[0].legend()
    m = res["mnist"]
    if "skipped" not in m:
        for lam in m["lams"]:
            ax[1].semilogy(m["widths"], m[f"lam={lam:g}"]["best"], "o-", label=f"lam={lam:g}")
        ax[1].legend()
    ax[1].set(title=f"MNIST subset N={m.get('n')}, CE", xlabel="width")
    for k, v in res["bipartite"].items():
        if k.startswith("B_"):
            line, = ax[2].semilogy(v["widths"], np.asarray(v["ratio_to_lower_bound"]) - 1 + 1e-5,
                                   "o-", ms=3, label=f"X=I, Y=B_{v['N']}")
            ax[2].axvline(v["N"] ** 2 / 4, ls=":", c=line.get_color())
    v = res["bipartite"]["one_hot"]
    ax[2].semilogy(v["widths"], np.asarray(v["ratio_to_lower_bound"]) - 1 + 1e-5, "s--", ms=3,
                   label=f"one-hot, {v['classes']} classes")
    ax[2].set(title="loss / infinite-width loss - 1 (dotted: N^2/4)", xlabel="width")
    ax[2].legend(fontsize=7)
    s = res["scalar_1d"]
    ax[3].semilogy(s["widths"], s["best"], "o-")
    ax[3].axvline(4 * s["N"], ls=":", c="k", label="4N (Prop. 15)")
    ax[3].set(title=f"scalar inputs, N={s['N']}", xlabel="width")
    ax[3].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--paper", action="store_true", help="paper scale (N=1000, lam=1e-6, ...)")
    p.add_argument("--n-teacher", type=int, default=200)
    p.add_argument("--lam-teacher", type=float, default=1e-4)
    p.add_argument("--n-mnist", type=int, default=200)
    p.add_argument("--lams-mnist", type=float, nargs="+", default=[1e-3, 1e-4])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--steps", type=int, default=3000, help="Adam steps (teacher/MNIST)")
    p.add_argument("--gd-steps", type=int, default=1000, help="full-batch GD steps after Adam")
    p.add_argument("--bn-sizes", type=int, nargs="+", default=[4, 6, 8])
    p.add_argument("--onehot", type=int, nargs=2, default=[8, 3], metavar=("N", "C"))
    p.add_argument("--lam-bn", type=float, default=1e-2)
    p.add_argument("--steps-bn", type=int, default=8000)
    p.add_argument("--seeds-bn", type=int, default=4)
    p.add_argument("--n-1d", type=int, default=5)
    p.add_argument("--lam-1d", type=float, default=1e-2)
    p.add_argument("--rel-tol", type=float, default=0.02, help="plateau tolerance")
    p.add_argument("--only", nargs="+", default=None,
                   choices=["bipartite", "scalar_1d", "teacher", "mnist"],
                   help="rerun only these experiments, keeping the others from the JSON")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if args.paper:
        args.n_teacher, args.lam_teacher, args.n_mnist = 1000, 1e-6, 1000
        args.steps, args.gd_steps, args.steps_bn = 20000, 5000, 30000
        args.bn_sizes = [4, 6, 8, 10, 12]
    args.teacher_widths = [2, 4, 6, 8, 10, 12, 16, 24, 32] + ([48, 64] if args.paper else [])
    args.mnist_widths = [2, 4, 8, 16, 32, 64] + ([128, 256] if args.paper else [])
    out = results_dir("bottleneck_plateau", args.out)
    key = jax.random.key(0)
    res, times = {}, {}
    if args.only and (out / "plateau.json").exists():
        import json
        old = json.loads((out / "plateau.json").read_text())
        res = {k: old[k] for k in ("bipartite", "scalar_1d", "teacher", "mnist") if k in old}
        times = old.get("wall_s", {})
    for name, fn in [("bipartite", bipartite_sweeps), ("scalar_1d", scalar_input_sweep),
                     ("teacher", teacher_sweep), ("mnist", mnist_sweep)]:
        if args.only and name not in args.only:
            continue
        t0 = time.perf_counter()
        res[name] = fn(args, jax.random.fold_in(key, len(name)))
        times[name] = time.perf_counter() - t0
        print(f"{name}: {time.perf_counter() - t0:.1f}s", flush=True)
    res["wall_s"] = times
    res["config"] = {k: v for k, v in vars(args).items() if k != "only"}
    res["paper"] = {"teacher_plateau_start": "about 10 (the teacher width), far below N^2",
                    "B_N_min_width": "N^2/4 (Prop. 14 / Remark 23)",
                    "one_hot_plateau": "number of classes", "scalar_input_bound": "4N (Prop. 15)"}
    write_json(out / "plateau.json", res)
    plot(res, out / "plateau.png")
    b = res["bipartite"]
    for k, v in b.items():
        print(k, "plateau start (rel 1e-3 of infinite-width loss):", v["plateau_start_rel1e-3"],
              "theory:", v["theory_min_width"])
    print("teacher plateau start:", res["teacher"]["plateau_start"], "(paper ~10)")
    print("1-D plateau start:", res["scalar_1d"]["plateau_start"], "bound 4N =",
          res["scalar_1d"]["theory_bound"])
    print("written:", out)


if __name__ == "__main__":
    main()
