"""Table 3 of Dehmamy, Rohani & Katsaggelos: MNIST, one- and two-layer DMN, DMN + Conv and
ConvNets (training and validation accuracy).

    python -m reproduce.dmn_table3 --paper     # every row, full data, 3 seeds, 50 epochs
    python -m reproduce.dmn_table3             # every row, 6000/2000 images, 10 epochs, 1 seed
    python -m reproduce.dmn_table3 --smoke     # seconds

DMN layers are built once in closed form; only the head (and the ConvNets) are trained, with
Adam (lr 1e-3), batch 128, as the authors' notebook does. See docs/dmn.md.
"""
from __future__ import annotations

from reproduce import _cli


def build_parser():
    p = _cli.parser("dmn", "table3", __doc__)
    _cli_dmn_flags(p)
    return p


def _cli_dmn_flags(p):
    p.add_argument("--preset", choices=("authors", "paper"), default=None,
                   help="DMN selection rules: the authors' code or the paper's text "
                   "(default: authors)")
    p.add_argument("--datasets", default=None,
                   help="comma-separated: run only these datasets' rows (e.g. mnist)")
    p.add_argument("--epochs", type=int, default=None, help="training epochs (default: config's)")
    p.add_argument("--n-train", type=int, default=None,
                   help="training images per dataset (default: config's; paper: all)")
    p.add_argument("--n-test", type=int, default=None,
                   help="test images per dataset (default: config's; paper: all)")
    p.add_argument("--report", choices=("final", "best"), default=None,
                   help="accuracy after the last epoch, or the best epoch (authors' checkpoint)")


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    import jax

    from layerlab.dmn import experiments as ex

    scale = "paper" if args.paper else "smoke" if args.smoke else "default"
    cfg = ex.table_config(
        "table3", scale, preset=args.preset, seeds=args.seeds, epochs=args.epochs,
        n_train=args.n_train, n_test=args.n_test, report=args.report, data_dir=args.data_dir,
        datasets=tuple(args.datasets.split(",")) if args.datasets else None,
    )
    rec = ex.run_table(cfg, key=jax.random.key(0), progress=not args.no_progress,
                       checkpoint_dir=_cli.checkpoint_dir(args))
    _cli.finish(args, rec, figure=lambda path: ex.plot_table(rec, path), argv=argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
