"""Fig. 6 of Dehmamy, Rohani & Katsaggelos: test accuracy vs number of filters F, one DMN layer
(top-F class-PCA filters, Cutoff 0.9) vs one conv layer (dF/cF, m, de), MNIST, CIFAR-10 and
CIFAR-100 (not run when its files are absent), with the classifier-only baselines.

    python -m reproduce.dmn_fig6 --paper      # F = 2..27, full data, 3 seeds, 50 epochs
    python -m reproduce.dmn_fig6              # MNIST + CIFAR-10, 6000/2000 images, 10 epochs
    python -m reproduce.dmn_fig6 --smoke      # seconds
    python -m reproduce.dmn_fig6 --merge results/dmn/fig6_mnist.json \
        results/dmn/fig6_cifar10_convnet.json --out results/dmn/fig6.json   # trains nothing
    python -m reproduce.dmn_fig6 --paper --datasets cifar10 --no-convnet --out dmn.json
    python -m reproduce.dmn_fig6 --merge results/dmn/fig6.json dmn.json \
        --out merged.json                      # the new DMN curve, the ConvNets kept

A merge takes each dataset half by half: its DMN curve and baseline from the last record that
ran them (with or without ConvNets), its ConvNet curve from the last record that ran the
ConvNets. See docs/dmn.md.
"""
from __future__ import annotations

from reproduce import _cli, _dmn


def build_parser():
    p = _dmn.parser("fig6", __doc__)
    p.add_argument("--preset", choices=("authors", "paper"), default=None,
                   help="DMN selection rules (default: authors)")
    _dmn.pca_flag(p)
    p.add_argument("--datasets", type=_cli.name_list(_dmn.DATASETS), default=None,
                   help=f"comma-separated, of {', '.join(_dmn.DATASETS)} (default: config's)")
    p.add_argument("--filters", type=_cli.int_list(1), default=None,
                   help="comma-separated F values (default: config's)")
    p.add_argument("--epochs", type=_cli.positive_int, default=None,
                   help="training epochs (default: config's)")
    p.add_argument("--n-train", type=_cli.positive_int, default=None,
                   help="training images (default: config's; paper: all)")
    p.add_argument("--n-test", type=_cli.positive_int, default=None,
                   help="test images (default: config's; paper: all)")
    p.add_argument("--no-convnet", action="store_true",
                   help="DMN curve and baselines only (the one-layer ConvNets take minutes "
                   "each at full CIFAR-10 on a 2-core CPU); the record is then reduced")
    p.add_argument("--merge", nargs="+", default=None, metavar="RECORD",
                   help="train nothing: merge Fig. 6 records that each ran some datasets "
                   "(--datasets, on different machines) into one record of all three, a later "
                   "record replacing an earlier one dataset by dataset; datasets no record "
                   "holds are marked not run. A DMN-only record (run with --no-convnet) "
                   "replaces the DMN curve and baseline of its datasets only, keeping the "
                   "ConvNet curves of the records before it. Writes to scratch/dmn/ unless "
                   "--record or --out")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.merge:
        return _dmn.merge_main("fig6", args, argv)
    import dataclasses

    import jax

    from layerlab.dmn import experiments as ex

    if args.paper:
        cfg = ex.Fig6Config.paper()
    elif args.smoke:
        cfg = ex.Fig6Config.smoke()
    else:
        cfg = ex.Fig6Config(datasets=("mnist", "cifar10"), seeds=1, epochs=10, n_train=6000,
                            n_test=2000)
    changes = dict(preset=args.preset, pca=args.pca, seeds=args.seeds, epochs=args.epochs,
                   n_train=args.n_train, n_test=args.n_test, data_dir=args.data_dir,
                   datasets=args.datasets, filters=args.filters,
                   convnet=False if args.no_convnet else None)
    cfg = dataclasses.replace(cfg, **{k: v for k, v in changes.items() if v is not None})
    rec = ex.run_fig6(cfg, key=jax.random.key(0), progress=not args.no_progress,
                      checkpoint_dir=_cli.checkpoint_dir(args))
    _cli.finish(args, rec, figure=lambda path: ex.plot_fig6(rec, path), argv=argv,
                variant=_dmn.variant(rec))
    return 0


if __name__ == "__main__":
    _cli.run(main)
