"""Separation of time scales in Dehmamy, Rohani & Katsaggelos: Figs. 2 and 3 (main text) and
Figs. 5 and 7 (SI), on MNIST (SI Fig. 5 also on CIFAR-10 and CIFAR-100 with --paper).

* Fig. 2: top singular values of every dense W(k) and of prod_{m>=k} W(m) during SGD;
* Fig. 3: eigenvalue fluctuations of the 5x5-patch density matrix against eq. 18;
* SI Fig. 5: each layer's distance to its final weights in conv32, m, conv32, m, dense;
* SI Fig. 7: eigenvalues of the 3x3-patch density matrix against the number of images.

    python -m reproduce.dmn_timescales --paper    # all of MNIST, 10 / 100 epochs, 3 data sets
    python -m reproduce.dmn_timescales            # 6000 / 2000 images, 3 / 1 epochs, MNIST
    python -m reproduce.dmn_timescales --smoke    # seconds
"""
from __future__ import annotations

from reproduce import _cli, _dmn

# layerlab.dmn.experiments.TIMESCALE_PARTS, typed out (checked against it in tests/reproduce)
PARTS = ("fig2", "fig3", "fig5", "fig7")


def build_parser():
    p = _cli.parser("dmn", "timescales", __doc__,
                    seeds="none: one run per part, as the paper's figures")
    p.add_argument("--parts", type=_cli.name_list(PARTS), default=None,
                   help=f"comma-separated parts to run: {', '.join(PARTS)} (default: all)")
    p.add_argument("--n-train", type=_cli.positive_int, default=None,
                   help="MNIST training images (default: config's; paper: all)")
    p.add_argument("--mlp-epochs", type=_cli.positive_int, default=None,
                   help="Fig. 2 SGD epochs (default: config's)")
    p.add_argument("--cnn-epochs", type=_cli.positive_int, default=None,
                   help="SI Fig. 5 SGD epochs (default: config's)")
    p.add_argument("--cnn-datasets", type=_cli.name_list(_dmn.DATASETS), default=None,
                   help=f"comma-separated SI Fig. 5 data sets, of {', '.join(_dmn.DATASETS)} "
                   "(default: config's)")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    import dataclasses

    import jax

    from layerlab.dmn import experiments as ex

    if args.paper:
        cfg = ex.TimescalesConfig.paper()
    elif args.smoke:
        cfg = ex.TimescalesConfig.smoke()
    else:
        cfg = ex.TimescalesConfig()
    changes = dict(n_train=args.n_train, mlp_epochs=args.mlp_epochs, cnn_epochs=args.cnn_epochs,
                   data_dir=args.data_dir,
                   parts=args.parts, cnn_datasets=args.cnn_datasets)
    cfg = dataclasses.replace(cfg, **{k: v for k, v in changes.items() if v is not None})
    rec = ex.run_timescales(cfg, key=jax.random.key(0), progress=not args.no_progress,
                            checkpoint_dir=_cli.checkpoint_dir(args))
    _cli.finish(args, rec, figure=lambda path: ex.plot_timescales(rec, path), argv=argv)
    return 0


if __name__ == "__main__":
    _cli.run(main)
