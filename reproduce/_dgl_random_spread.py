"""How far one run of Table I's Random column spreads on BMNIST2k (width 20).

Table I's two BMNIST2k Random cells miss the paper by +5.67 (2/20) and -3.38 (3/20) points
against our 3-seed means, 3.3x and 2.0x our seed std.  The paper states no number of runs per
cell; if its Random cells are single runs, the question is whether one run of our protocol
lands that far from our mean often enough.  This script draws many runs of the Random column
(same protocol, splits and key chain as ``run_table1``: seed ``s`` uses ``prepare_row_data(...,
seed=s)`` and the init key ``split(fold_in(key(0), s), 4)[0]``, so seeds 0-2 are the record's
runs) under three designs:

* ``both``: split and init redrawn together (seed ``s`` is a whole Table I run's Random cell);
* ``init``: the split of seed 0 kept, only the init redrawn;
* ``split``: the init of seed 0 kept, only the train/val split redrawn,

and reads each out with the committed closed-form ridge (``he/ridge``) and with the paper's
text's iterative classifier (``he/iterative``).  Per (design, row, variant) it reports mean,
std, 2.5/50/97.5 % quantiles, where the paper's value falls in the single-run distribution,
and how often a single run (and a 3-run mean) lands within Table I's 1-point tolerance of it.

    python -m reproduce._dgl_random_spread [--rows bmnist-2x20,bmnist-3x20] [--seeds 200]
        [--designs both,init,split] [--variants he/ridge,he/iterative]
        [--out results/dgl/ablation/random_spread.json]

Resumable: finished runs are kept in the output JSON and skipped on a rerun.  The default
output is under scratch/ (committed records are written only with an explicit ``--out``).
"""
import argparse
import json
import pathlib
import sys
import time

import jax
import numpy as np

from layerlab import nets, probes
from layerlab.dgl import experiments as ex

REPO = pathlib.Path(__file__).resolve().parents[1]
DESIGNS = ("both", "init", "split")
VARIANTS = ("he/ridge", "he/iterative", "torch/ridge", "torch/iterative")
TOL = 1.0  # Table I's tolerance on MNIST/BMNIST (points)


def _keys(design: str, seed: int) -> tuple[int, int]:
    """(split seed, init seed) of run ``seed`` under ``design``."""
    return {"both": (seed, seed), "init": (0, seed), "split": (seed, 0)}[design]


def random_cell(row: str, split_seed: int, init_seed: int, variants, cfg=None, cache=None,
                with_info: bool = False):
    """Test accuracy (%) of the Random column of ``row`` for one (split, init) pair, per variant
    (``"he/ridge"`` ...); with ``with_info`` each entry is ``{"test": acc, **readout info}``.

    ``cache`` (a dict) keeps the prepared data per split seed across calls.  The net and its
    frozen features are built once per init scheme and shared by that scheme's readouts.
    """
    cfg = cfg or ex.Table1Config.paper()
    dataset, L, width, _ = ex.ROWS[row]
    kind = "sgd" if dataset == "BMNIST2k" else "adam"
    cache = {} if cache is None else cache
    if (dataset, split_seed) not in cache:
        cache[(dataset, split_seed)] = ex.prepare_row_data(dataset, cfg.n_train(dataset),
                                                           split_seed)
    d = cache[(dataset, split_seed)]
    x, y, _ = d["train"]
    xv, yv, _ = d["val"]
    xt, _, lt = d["test"]
    # the same key chain as run_table1: fold_in(key(0), seed), then the first of 4 splits
    k_init, _, k_lego, _ = jax.random.split(jax.random.fold_in(jax.random.key(0), init_seed), 4)
    sizes = [x.shape[1]] + [width] * L + [d["num_classes"]]
    hid = jax.jit(lambda p, x: ex.hidden_representations(p, x)[-1])
    nets_by_init = {}
    out = {}
    for v in variants:
        init, readout = v.split("/")
        if init not in nets_by_init:
            p0 = nets.mlp_init(k_init, sizes, init=init)
            nets_by_init[init] = (p0, hid(p0, x), hid(p0, xv), hid(p0, xt))
        p0, h, hv, ht = nets_by_init[init]
        c = ex.Table1Config.paper(readout=readout, init=init)
        head, info = ex._readout(c, kind, h, y, hv, yv, p0[-1], jax.random.fold_in(k_lego, 11),
                                 False)
        acc = 100.0 * float(probes.accuracy(ht @ head["w"] + head["b"][None, :], lt))
        out[v] = {"test": acc, **info} if with_info else acc
    return out


def summarise(vals, paper: float, *, tol: float = TOL, rng_seed: int = 0) -> dict:
    """Distribution of single runs ``vals`` against the paper's value."""
    a = np.asarray(vals, float)
    q = np.quantile(a, [0.025, 0.5, 0.975])
    rng = np.random.default_rng(rng_seed)
    means3 = rng.choice(a, size=(20000, 3), replace=True).mean(axis=1)
    return {"runs": int(a.size), "mean": float(a.mean()), "std": float(a.std(ddof=1)),
            "min": float(a.min()), "max": float(a.max()),
            "q2.5": float(q[0]), "median": float(q[1]), "q97.5": float(q[2]),
            "paper": paper, "paper_percentile": float(100.0 * np.mean(a <= paper)),
            "paper_z": float((paper - a.mean()) / a.std(ddof=1)),
            "p_single_within_tol": float(np.mean(np.abs(a - paper) <= tol)),
            "p_mean3_within_tol": float(np.mean(np.abs(means3 - paper) <= tol)),
            "p_single_at_least_as_far": float(np.mean(np.abs(a - a.mean())
                                                      >= abs(paper - a.mean())))}


def plot(res: dict, rows, path: pathlib.Path) -> None:
    from layerlab._plotting import subplots

    fig, axes = subplots(1, len(rows), figsize=(5.5 * len(rows), 3.8), squeeze=False)
    for ax, row in zip(axes[0], rows):
        paper = ex.ROWS[row][3][2]
        for v, c in (("he/ridge", "C0"), ("he/iterative", "C1")):
            vals = [r[v] for k, r in res["runs"].items() if k.startswith(f"both {row} ") and v in r]
            if vals:
                ax.hist(vals, bins=30, alpha=0.5, color=c, label=f"{v} ({len(vals)} runs)")
        ax.axvline(paper, color="k", lw=2, label=f"paper {paper}")
        rec = [res["runs"].get(f"both {row} {s}", {}).get("he/ridge") for s in range(3)]
        if all(r is not None for r in rec):
            ax.axvline(np.mean(rec), color="C3", ls="--",
                       label=f"record's 3-seed mean {np.mean(rec):.2f}")
        ax.set_title(f"{row}: Random column, one run = new split + init")
        ax.set_xlabel("test accuracy (%)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", default="bmnist-2x20,bmnist-3x20")
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--designs", default=",".join(DESIGNS))
    ap.add_argument("--variants", default="he/ridge,he/iterative")
    ap.add_argument("--out", default=str(REPO / "scratch/dgl/ablation/random_spread.json"))
    args = ap.parse_args(argv)
    designs = [d for d in args.designs.split(",") if d]
    variants = [v for v in args.variants.split(",") if v]
    for d in designs:
        if d not in DESIGNS:
            ap.error(f"--designs: {d!r} is not one of {DESIGNS}")
    for v in variants:
        if v not in VARIANTS:
            ap.error(f"--variants: {v!r} is not one of {VARIANTS}")
    if args.seeds < 3:
        ap.error("--seeds: expected at least 3 (the record's seeds 0-2 are checked), "
                 f"got {args.seeds}")
    rows = ex.select_rows(args.rows)
    out_path = pathlib.Path(args.out)
    res = json.loads(out_path.read_text()) if out_path.exists() else {}
    res.setdefault("runs", {})
    res.setdefault("wall_s", 0.0)
    cfg = ex.Table1Config.paper()
    cache: dict = {}
    t0 = time.perf_counter()
    last_save = t0
    for design in designs:
        for row in rows:
            for s in range(args.seeds):
                tag = f"{design} {row} {s}"
                have = res["runs"].get(tag, {})
                todo = [v for v in variants if v not in have]
                if not todo:
                    continue
                split_seed, init_seed = _keys(design, s)
                have.update(random_cell(row, split_seed, init_seed, todo, cfg, cache))
                res["runs"][tag] = have
                if len(cache) > 8:
                    cache.clear()
                if s % 20 == 19:
                    print(f"{design} {row}: {s + 1}/{args.seeds} runs "
                          f"({time.perf_counter() - t0:.0f} s)", flush=True)
                if time.perf_counter() - last_save > 30:
                    out_path.parent.mkdir(parents=True, exist_ok=True)
                    out_path.write_text(json.dumps(res, indent=1))
                    last_save = time.perf_counter()
    res["wall_s"] = float(res["wall_s"]) + time.perf_counter() - t0
    # seeds 0-2 of "both" are the record's runs: check them against the committed parts
    checks = {}
    for row in rows:
        for s in range(3):
            part = REPO / "results/dgl/table1_parts" / f"{row}_seed{s}.json"
            got = res["runs"].get(f"both {row} {s}", {}).get("he/ridge")
            if part.exists() and got is not None:
                want = json.loads(part.read_text())["random"]["test"]
                checks[f"{row} seed {s}"] = {"this_run": got, "record": want,
                                             "equal_to_0.01": abs(got - want) <= 0.01}
    res["record_check"] = checks
    summary = {}
    for design in designs:
        for row in rows:
            paper = ex.ROWS[row][3][2]
            for v in variants:
                vals = [r[v] for k, r in res["runs"].items()
                        if k.startswith(f"{design} {row} ") and v in r
                        and int(k.rsplit(" ", 1)[1]) < args.seeds]
                if len(vals) >= 3:
                    summary[f"{design} {row} {v}"] = summarise(vals, paper)
    res["summary"] = summary
    res["note"] = ("Spread of single runs of Table I's Random column (linear readout of a "
                   "randomly initialised width-20 ReLU net) on BMNIST2k; designs: both = new "
                   "split and init per run (a whole Table I run), init = split 0 fixed, split = "
                   "init 0 fixed.  he/ridge = the record's protocol; he/iterative = the paper's "
                   "text (classifier trained by SGD with the row's grid).  paper_percentile: % of "
                   "single runs <= the paper's value; p_mean3_within_tol: bootstrap probability "
                   "that a 3-run mean is within 1 point of the paper.")
    res["config"] = {"rows": list(rows), "seeds": args.seeds, "designs": designs,
                     "variants": variants, "tol": TOL,
                     "command": "python -m reproduce._dgl_random_spread "
                     + " ".join(sys.argv[1:] if argv is None else argv),
                     "device": jax.devices()[0].device_kind}
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(res, indent=1))
    plot(res, rows, out_path.with_suffix(".png"))
    for k, v in summary.items():
        print(f"{k:36s} {v['mean']:.2f} +- {v['std']:.2f}  [{v['q2.5']:.2f}, {v['q97.5']:.2f}]  "
              f"paper {v['paper']} at pct {v['paper_percentile']:.1f}  "
              f"P(single within 1) {v['p_single_within_tol']:.3f}  "
              f"P(mean3 within 1) {v['p_mean3_within_tol']:.3f}")
    for k, c in checks.items():
        print(f"record check {k}: {c}")
    print(f"wall {res['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
