"""Settle the run-length misses of the CPU-scale variant records (Fig. 5, Apps. E, F, I) by
running them longer, with only the arms their claims compare.

The CPU records (``reproduce.gnrev_appE`` / ``_appF`` / ``_fig5``: CIFAR-10, 4096 images, batch
256, 6 blocks) run 10–30 epochs; the paper 80–1000.  Four of their claims failed for reasons the
docs put down to length, and App. J's to its decay grid; untested until this script:

* App. E — "with longer training even SGD reaches a lower training loss than GN": at 30 epochs
  SGD 0.01 is at 0.200, GN 0.2 at 0.031.  ``--artifact appE --arms gn,sgd --epochs 120``.
* App. F — "GN continued from an Adam point saturates above Adam continued": the record switches
  at epoch 5, where Adam (0.807) is still far above GN (0.372); the paper switches from an Adam
  point below GN's loss.  In the App. E record Adam passes GN at epoch 14–15, so
  ``--artifact appF --arms gn,adam,adam_then_gn --epochs 40 --switch 20``.
* Fig. 5 — "GN's training loss saturates early": the net without the inverted bottleneck starts
  at loss 21.6 and GN was still falling at epoch 10.  ``--artifact fig5 --arms gn,adam
  --epochs 30``, and from a smaller init (``--w-scale 0.5``: initial loss 3.2) for 10 epochs.
* App. J — "weight decay tuned on the validation set has a minimal effect on GN's test loss"
  failed (-12 %) with the then grid's largest decay, 1e-2, selected: ``--weight-decays
  0.03,0.1`` adds decays to the selection (the record's grid has since been extended,
  ``experiments.APPJ_DECAYS``).
* App. I — "GN's training loss saturates early at every rate that trains" fails at 0.05 only,
  whose 10 epochs are 5 of 0.1's in rate x time (Eq. 11's gradient-flow limit): ``--artifact
  appI --arms gn_lr0.05,gn_lr0.1,adam --epochs 20`` runs 0.05 as long as 0.1's 10 epochs.

Everything else is the record's own configuration (``variants_config(artifact, "cpu")``: data,
init, batches, rates, residual certificate), and the record's own claim code
(``run_variants``) judges the longer run; the JSON adds, per arm, the training-loss curve, the
epoch at which each pair of curves cross, and the per-epoch relative drop of the last epochs (a
plateau measure).  Resumable (``--checkpoint-dir``, one ``loop.fit`` checkpoint per epoch).

    python -m reproduce._gnrev_variants_long --artifact appF --arms gn,adam,adam_then_gn \
        --epochs 40 --switch 20 --out results/gnrev/ablation/appF_switch20.json
    python -m reproduce._gnrev_variants_long --artifact fig5 --arms gn,adam --epochs 30 \
        --out results/gnrev/ablation/fig5_30epochs.json
    python -m reproduce._gnrev_variants_long --artifact fig5 --arms gn,adam --epochs 10 \
        --w-scale 0.5 --out results/gnrev/ablation/fig5_init_x0.5.json
    python -m reproduce._gnrev_variants_long --artifact appE --arms gn,sgd --epochs 120 \
        --out results/gnrev/ablation/appE_120epochs.json
    python -m reproduce._gnrev_variants_long --artifact appJ --arms gn_wd0,gn_wd0.01,adam \
        --weight-decays 0.03,0.1 --epochs 10 --out results/gnrev/ablation/appJ_larger_decays.json
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import time

REPO = pathlib.Path(__file__).resolve().parents[1]


def _crossings(curves: dict, names: list[str]) -> dict[str, int | None]:
    """First epoch at which arm b's training loss is below arm a's (for every ordered pair)."""
    import numpy as np

    out = {}
    for a in names:
        for b in names:
            if a == b:
                continue
            ca, cb = np.asarray(curves[a]), np.asarray(curves[b])
            below = np.nonzero(cb < ca)[0]
            below = below[below > 0]
            out[f"{b} below {a}"] = int(below[0]) if below.size else None
    return out


def with_gn_rate(arm, rate: float):
    """``arm`` with GN at the fixed ``rate`` (no fallbacks): its own optimizer if GN, and the
    GN phase (``arm.then``) of an ``*_then_gn`` arm; other optimizers unchanged."""
    import dataclasses

    from layerlab.gnrev import experiments as ex

    if isinstance(arm.optimizer, ex.GaussNewton):
        arm = dataclasses.replace(arm, lrs=(rate,), fallback_lrs=())
    if arm.then is not None:
        arm = dataclasses.replace(arm, then=with_gn_rate(arm.then, rate))
    return arm


# per-epoch curves kept per seed in the record
_PER_SEED = ("eval_train_loss_full", "eval_test_loss", "eval_test_accuracy", "eval_val_loss")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--artifact", required=True, choices=("appE", "appF", "appI", "appJ", "fig5"))
    p.add_argument("--arms", required=True, help="comma-separated arm names of the record")
    p.add_argument("--epochs", type=int, required=True)
    p.add_argument("--seeds", type=int, default=None,
                   help="seeds (default: the CPU configuration's, 1); curves are seed means")
    p.add_argument("--first-seed", type=int, default=0,
                   help="run seeds FIRST .. FIRST + SEEDS - 1 (keys fold_in(key, s)): the other "
                   "seeds of a study whose first seeds ran in another record (the rate sweeps "
                   "keep seed 0's key; the stability fallback sees only these seeds: check "
                   "that each arm's lr agrees before pooling); each arm's per_seed curves are "
                   "kept in the record")
    p.add_argument("--switch", type=int, default=None,
                   help="App. F switch epoch of the *_then_* arms (default: half of --epochs)")
    p.add_argument("--w-scale", type=float, default=1.0,
                   help="multiplies every arm's initial weight standard deviation (App. F's "
                   "init factor); Fig. 5's net starts at loss 21.6 at 1, 3.2 at 0.5")
    p.add_argument("--weight-decays", default=None,
                   help="App. J only: comma-separated decays w whose GN arms gn_wd<w> run beside "
                   "the --arms ones (the record's grid: experiments.APPJ_DECAYS); the "
                   "selection on the validation split ranges over every GN arm run)")
    p.add_argument("--n-train", type=int, default=None,
                   help="training images (default: the CPU configuration's 4096; 0: the full "
                   "training set less the validation images)")
    p.add_argument("--gn-rate", type=float, default=None,
                   help="every GN arm's rate per block (default: the CPU configuration's 0.2, "
                   "swept on 4096 images)")
    p.add_argument("--bottleneck", type=int, default=None,
                   help="every block's inverted-bottleneck width d' (default: the CPU "
                   "configuration's 512; the paper's is 8000); the initial weights keep the "
                   "paper's d'=8000 Xavier variance, so only the width changes")
    p.add_argument("--n-val", type=int, default=None,
                   help="App. J's validation images held out to tune the decay (default: the "
                   "CPU configuration's 1024)")
    p.add_argument("--smoke", action="store_true", help="the tiny MNIST smoke configuration")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--checkpoint-dir", default=None,
                   help="default checkpoints/gnrev_long_<artifact>")
    p.add_argument("--out", type=pathlib.Path, required=True)
    args = p.parse_args(argv)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    import jax
    import numpy as np

    from layerlab.gnrev import experiments as ex
    from layerlab.record import machine_info, to_jsonable

    base = ex.variants_config(args.artifact, "smoke" if args.smoke else "cpu")
    names = [a.strip() for a in args.arms.split(",") if a.strip()]
    if args.epochs < 1:
        raise SystemExit(f"--epochs: expected >= 1, got {args.epochs}")
    switch = args.switch if args.switch is not None else max(1, args.epochs // 2)
    if args.gn_rate is not None and not 0 < args.gn_rate < float("inf"):
        raise SystemExit(f"--gn-rate: expected a finite rate > 0, got {args.gn_rate}")
    by_name = {a.name: a for a in base.arms}
    if args.weight_decays:
        if args.artifact != "appJ":
            raise SystemExit(f"--weight-decays: App. J's arms only, not --artifact "
                             f"{args.artifact}")
        try:
            wds = [float(w) for w in args.weight_decays.split(",") if w.strip()]
        except ValueError:
            raise SystemExit(f"--weight-decays: expected comma-separated numbers, got "
                             f"{args.weight_decays!r}") from None
        if not wds or any(not (0 <= w < float("inf")) for w in wds):
            raise SystemExit(f"--weight-decays: expected finite decays >= 0, got "
                             f"{args.weight_decays!r}")
        template = by_name.get("gn_wd0", by_name.get("gn"))  # the smoke config's one GN arm
        for w in wds:
            extra = dataclasses.replace(template, name=f"gn_wd{w:g}", weight_decay=w)
            by_name.setdefault(extra.name, extra)
            names += [] if extra.name in names else [extra.name]
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise SystemExit(f"--arms: {unknown} not arms of {args.artifact} "
                         f"(its arms: {sorted(by_name)})")
    if ((args.switch is not None or any(by_name[n].then is not None for n in names))
            and not 0 < switch < args.epochs):
        raise SystemExit(f"--switch: expected an epoch in 1..{args.epochs - 1} (both phases "
                         f"of the *_then_* arms train), got {switch}")
    arms = []
    for n in names:
        a = by_name[n]
        if a.then is not None:
            a = dataclasses.replace(a, switch_epoch=switch)
        if args.gn_rate is not None:
            a = with_gn_rate(a, args.gn_rate)
        if args.w_scale != 1.0:
            a = dataclasses.replace(a, w_scale=a.w_scale * args.w_scale)
        arms.append(a)
    data_kw = {}
    if args.n_train is not None:
        if args.n_train < 0:
            raise SystemExit(f"--n-train: expected >= 0 (0: the full set), got {args.n_train}")
        data_kw["n_train"] = args.n_train or None
    if args.n_val is not None:
        if args.n_val < 0 or (args.n_val and args.artifact != "appJ"):
            raise SystemExit(f"--n-val: expected >= 0 and App. J only, got {args.n_val} for "
                             f"--artifact {args.artifact}")
        data_kw["n_val"] = args.n_val
    if args.seeds is not None and args.seeds < 1:
        raise SystemExit(f"--seeds: expected >= 1, got {args.seeds}")
    if args.first_seed < 0:
        raise SystemExit(f"--first-seed: expected >= 0, got {args.first_seed}")
    if args.seeds is not None:  # the CPU note counts the seeds: recount it
        base = dataclasses.replace(base, scale_note=base.scale_note.replace(
            ", 1 seed,", f", {args.seeds} seed{'s' if args.seeds != 1 else ''},"))
    if args.n_train is not None:  # ... its training images
        base = dataclasses.replace(base, scale_note=base.scale_note.replace(
            f" {base.n_train} training images", f" {args.n_train} training images"
            if args.n_train else " the full training set (less the validation images)"))
    if args.bottleneck is not None:  # ... its width
        if args.bottleneck < 1:
            raise SystemExit(f"--bottleneck: expected a width >= 1, got {args.bottleneck}")
        if base.bottleneck is None:
            raise SystemExit(f"--bottleneck: --artifact {args.artifact}'s net has no inverted "
                             "bottleneck to widen")
        base = dataclasses.replace(base, bottleneck=args.bottleneck, scale_note=(
            base.scale_note.replace(f"d'={base.bottleneck}", f"d'={args.bottleneck}", 1)))
    if args.n_val is not None:  # ... and its validation images
        base = dataclasses.replace(base, scale_note=base.scale_note.replace(
            f"; {base.n_val} validation images", f"; {args.n_val} validation images"))
    cfg = dataclasses.replace(
        base, epochs=args.epochs, arms=tuple(arms), **data_kw,
        **({} if args.seeds is None else {"seeds": args.seeds}),
        scale_note=base.scale_note + f"; ablation: {args.epochs} epochs, arms {names}"
        + (f", switch at epoch {switch}" if any(a.then for a in arms) else "")
        + (f", initial weights x{args.w_scale:g}" if args.w_scale != 1.0 else "")
        + (f", GN rate {args.gn_rate:g} per block" if args.gn_rate is not None else "")
        + (f", d'={args.bottleneck}" if args.bottleneck is not None else "")
        + (f", n_train {data_kw.get('n_train', base.n_train) or 'full'}, n_val "
           f"{data_kw.get('n_val', base.n_val)}" if data_kw else "")
        + (f", seeds {args.first_seed}..{args.first_seed + (args.seeds or base.seeds) - 1}"
           if args.first_seed else ""))
    ck = args.checkpoint_dir or str(REPO / "checkpoints" / f"gnrev_long_{args.artifact}")
    t0 = time.perf_counter()
    res = ex.run_minibatch(cfg, key=jax.random.key(0), progress=not args.no_progress,
                           checkpoint_dir=ck,
                           data_dir=args.data_dir, first_seed=args.first_seed)
    curves = {a: ex._stack(res, a, "eval_train_loss_full").mean(0) for a in res["arms"]}
    tests = {a: ex._stack(res, a, "eval_test_loss").mean(0) for a in res["arms"]}
    accs = {a: 100 * ex._stack(res, a, "eval_test_accuracy").mean(0) for a in res["arms"]}
    rec = ex.run_variants(cfg, args.artifact, key=jax.random.key(0), result=res)
    claims = [dataclasses.asdict(c) for c in rec.claims]
    arms_out = {}
    for a, c in curves.items():
        s0 = res["arms"][a]["seeds"][0]
        tail = c[-6:]
        arms_out[a] = {
            "lr": res["arms"][a]["lr"], "weight_decay": by_name[a].weight_decay,
            "replaced_lrs": res["arms"][a].get("diverged_lrs", []),  # unstable, fell back
            "train_loss_per_epoch": c.tolist(), "test_loss_per_epoch": tests[a].tolist(),
            "test_acc_pct_per_epoch": accs[a].tolist(),
            "epoch1_drop": float(c[0] - c[1]), "later_drop": float(c[1] - c[-1]),
            "last5_mean_relative_drop_per_epoch": float(np.mean(1 - tail[1:] / tail[:-1])),
            "certificate": ({"seed": res["seed_indices"][0],
                             "median_residual": float(np.median(s0["residual"])),
                             "min_rank": float(np.min(s0["min_rank"]))}
                            if "residual" in s0 else None),
            # each seed's own curves (a later run of other seeds can be pooled with these)
            "per_seed": {str(s): {k: np.asarray(sd[k]).tolist() for k in _PER_SEED if k in sd}
                         for s, sd in zip(res["seed_indices"], res["arms"][a]["seeds"],
                                          strict=True)},
        }
    changed = ([f"{res['n_train']} training images"] if args.n_train is not None else []) + (
        [f"{cfg.n_val} validation images"] if args.n_val is not None else []) + (
        [f"GN at {args.gn_rate:g} per block"] if args.gn_rate is not None else []) + (
        [f"d'={args.bottleneck}"] if args.bottleneck is not None else [])
    out = {"_note": f"{args.artifact} at the CPU record's configuration"
           + (f" but for {', '.join(changed)}" if changed else "")
           + f", run for {args.epochs} epochs with arms " + ", ".join(names)
           + ". Claims judged by the record's own code (run_variants) on this run.",
           "command": "python -m reproduce._gnrev_variants_long " + " ".join(
               argv if argv is not None else __import__("sys").argv[1:]),
           "config": {"epochs": args.epochs, "seeds": cfg.seeds, "arms": names,
                      "fallback_lrs": {a.name: list(a.fallback_lrs) for a in arms},
                      "switch_epoch": switch if any(a.then for a in arms) else None,
                      "w_scale": args.w_scale,
                      "scale_note": cfg.scale_note, "n_train": res["n_train"],
                      "n_val": cfg.n_val, "gn_rate": args.gn_rate,
                      "seed_indices": res["seed_indices"],
                      "batch_size": cfg.batch_size, "bottleneck": cfg.bottleneck,
                      "depth": cfg.depth},
           "claims": claims, "crossings": _crossings(curves, list(curves)), "arms": arms_out,
           "wall_s": time.perf_counter() - t0, "machine": machine_info()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(to_jsonable(out), indent=1) + "\n")
    print(json.dumps(out["claims"], indent=1))
    print(json.dumps(out["crossings"]))
    print("wrote", args.out, f"({out['wall_s']:.0f} s)")

    from layerlab._plotting import subplots

    fig, ax = subplots(1, 2, figsize=(11, 3.6))
    for a, c in curves.items():
        e = np.arange(len(c))
        ax[0].semilogy(e, c, label=a)
        ax[1].semilogy(e, tests[a], label=a)
    if any(a.then for a in arms):
        for x in ax:
            x.axvline(switch, color="gray", lw=0.8, ls=":")
    ax[0].set(xlabel="epoch", title=f"training loss ({res['n_train']} images)")
    ax[1].set(xlabel="epoch", title="test loss")
    ax[0].legend(fontsize=8)
    fig.suptitle(f"gnrev {args.artifact}, CPU configuration"
                 + (f" but for {', '.join(changed)}" if changed else "")
                 + f", run for {args.epochs} epochs",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(args.out.with_suffix(".png"), dpi=100)
    print("wrote", args.out.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
