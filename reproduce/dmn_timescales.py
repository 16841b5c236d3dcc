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

from reproduce import _cli


def build_parser():
    p = _cli.parser("dmn", "timescales", __doc__)
    p.add_argument("--parts", default=None,
                   help="comma-separated parts to run: fig2, fig3, fig5, fig7 (default: all)")
    p.add_argument("--n-train", type=int, default=None,
                   help="MNIST training images (default: config's; paper: all)")
    p.add_argument("--mlp-epochs", type=int, default=None,
                   help="Fig. 2 SGD epochs (default: config's)")
    p.add_argument("--cnn-epochs", type=int, default=None,
                   help="SI Fig. 5 SGD epochs (default: config's)")
    p.add_argument("--cnn-datasets", default=None,
                   help="comma-separated SI Fig. 5 data sets (default: config's)")
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
                   parts=tuple(args.parts.split(",")) if args.parts else None,
                   cnn_datasets=tuple(args.cnn_datasets.split(",")) if args.cnn_datasets
                   else None)
    cfg = dataclasses.replace(cfg, **{k: v for k, v in changes.items() if v is not None})
    rec = ex.run_timescales(cfg, key=jax.random.key(0), progress=not args.no_progress,
                            checkpoint_dir=_cli.checkpoint_dir(args))
    _cli.finish(args, rec, figure=lambda path: ex.plot_timescales(rec, path), argv=argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
