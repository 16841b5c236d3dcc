"""Fig. 1 of Buffelli et al. 2024: full-batch training of a RevMLP, exact GN vs Adam vs SGD.

A fixed random subset of n = 1024 training images, trained full batch; every optimizer's
learning-rate grid runs in one vmapped program and the largest non-diverging rate is reported
(§5.1); while a grid's largest rate is stable the sweep adds up to 3 larger ones (x the grid's
ratio).  Every finished (seed, optimizer) sweep is kept under --checkpoint-dir (default with
--paper: checkpoints/gnrev_fig1), so a stopped run resumes at the next sweep.  GN uses the
authors' per-block step convention; the 'gn' arm is the exact regime (ReLU in every block),
'gn_first_linear' the authors' code (linear first block: inexact at n = 1024).

    python -m reproduce.gnrev_fig1                    # reduced CPU: n=512, d'=1024, 40 steps
    python -m reproduce.gnrev_fig1 --paper            # MNIST, d'=8000, 100 steps, 3 seeds (GPU)
    python -m reproduce.gnrev_fig1 --dataset cifar10  # Fig. 1b, reduced: n=512, d'=1024, 6 blocks
    python -m reproduce.gnrev_fig1 --dataset cifar10 --paper  # Fig. 1b at the paper's size (GPU)
"""
from __future__ import annotations

import dataclasses

from reproduce import _cli


def build_parser():
    p = _cli.parser("gnrev", "fig1", __doc__, stem=lambda args: (
        "fig1" if args.dataset == "mnist" else f"fig1_{args.dataset}")
        + ("_nobottleneck" if args.no_bottleneck else ""))
    p.add_argument("--dataset", default="mnist", choices=("mnist", "cifar10"),
                   help="MNIST (Fig. 1a) or CIFAR-10 (Fig. 1b, record fig1_cifar10)")
    p.add_argument("--steps", type=_cli.positive_int, default=None,
                   help="full-batch steps (default: the configuration's)")
    p.add_argument("--bottleneck", type=_cli.positive_int, default=None,
                   help="inverted-bottleneck width d' (default: the configuration's)")
    p.add_argument("--n-train", type=_cli.positive_int, default=None,
                   help="training images of the fixed full-batch subset (default: 512; 1024 "
                   "with --paper, the paper's; --smoke: 32)")
    p.add_argument("--no-bottleneck", action="store_true",
                   help="no inverted bottleneck (V = I, d' = d/2): Fig. 5's full-batch panel")
    p.add_argument("--depth", type=_cli.positive_int, default=None,
                   help="number of reversible blocks (default: 2 MNIST, 6 CIFAR-10 at --paper)")
    p.add_check(_check)
    return p


def _check(p, args) -> None:
    if args.no_bottleneck and args.bottleneck is not None:
        p.error(f"argument --bottleneck: not allowed with argument --no-bottleneck (it removes "
                f"the inverted bottleneck, so there is no width d'={args.bottleneck} to set)")


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    import os
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # threaded LAPACK eigh thrashes on 2 cores
    import jax

    from layerlab.gnrev import experiments as ex

    if args.paper:
        cfg = ex.FullBatchConfig.paper(args.dataset)
    elif args.smoke:
        cfg = ex.FullBatchConfig.smoke()
    elif args.dataset == "cifar10":
        cfg = ex.FullBatchConfig.cifar_cpu()
    else:
        cfg = ex.FullBatchConfig()
    over = {k: v for k, v in (("steps", args.steps), ("bottleneck", args.bottleneck),
                              ("depth", args.depth), ("seeds", args.seeds),
                              ("n_train", args.n_train)) if v is not None}
    if args.no_bottleneck:
        # Fig. 5 removes the bottlenecks: the net keeps its own Xavier init (as the mini-batch
        # fig5 record), not the d'=8000 variance a reduced-width CPU config borrows
        over["bottleneck"] = None
        over["init_bottleneck"] = None
    if over:
        base = cfg.scale_note
        if args.no_bottleneck:  # the preset's note describes its bottleneck: say what runs
            c = dataclasses.replace(cfg, **over)
            base = (f"{base.split(':')[0] if ':' in base else 'reduced'}: {c.dataset} "
                    f"n={c.n_train} images (paper 1024), no inverted bottleneck (V = I, "
                    "d' = d/2, as the paper's Fig. 5; W with its own Xavier variance), "
                    f"{c.steps} steps (paper 100), {c.seeds} seed(s) (paper 3)")
        cfg = dataclasses.replace(cfg, **over,
                                  scale_note=(base + f"; overridden: {over}").strip("; "))
    rec = ex.run_fig1(cfg, key=jax.random.key(0), progress=not args.no_progress,
                      checkpoint_dir=_cli.checkpoint_dir(args), data_dir=args.data_dir)
    _cli.finish(args, rec, figure=lambda path: ex.plot_fig1(rec, path), argv=argv)
    return 0


if __name__ == "__main__":
    _cli.run(main)
