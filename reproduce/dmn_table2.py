"""Table 2 of Dehmamy, Rohani & Katsaggelos: DMN (per row Input, Var., Cutoff as printed) vs the
ConvNet of the same widths, MNIST, CIFAR-10 and CIFAR-100 (CIFAR-100 rows are marked not run
when its files are absent).

    python -m reproduce.dmn_table2 --paper     # every row, full data, 3 seeds, 50 epochs
    python -m reproduce.dmn_table2             # every row, 6000/2000 images, 10 epochs, 1 seed
    python -m reproduce.dmn_table2 --smoke     # seconds
    python -m reproduce.dmn_table2 --merge results/dmn/table2.json part.json \
        --out results/dmn/table2.json          # one record of rows run in parts
    python -m reproduce.dmn_table2 --paper --datasets cifar10 --no-convnet --out dmn.json
    python -m reproduce.dmn_table2 --merge results/dmn/table2.json dmn.json \
        --out merged.json                      # new DMN halves, the ConvNets kept

DMN layers are built once in closed form; only the head (and the ConvNets) are trained, with
Adam (lr 1e-3), batch 128, as the authors' notebook does. See docs/dmn.md.
"""
from __future__ import annotations

from reproduce import _cli, _dmn


def build_parser():
    p = _dmn.parser("table2", __doc__)
    _dmn.dmn_flags(p)
    p.add_argument("--no-convnet", action="store_true",
                   help="skip the matching ConvNets (e.g. CIFAR DMN rows on a CPU)")
    return p


def main(argv=None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    if args.merge:
        return _dmn.merge_main("table2", args, argv)
    import jax

    from layerlab.dmn import experiments as ex

    cfg = _dmn.config(p, args, "table2", convnet=False if args.no_convnet else None)
    rec = ex.run_table(cfg, key=jax.random.key(0), progress=not args.no_progress,
                       checkpoint_dir=_cli.checkpoint_dir(args))
    _cli.finish(args, rec, figure=lambda path: ex.plot_table(rec, path), argv=argv,
                variant=_dmn.variant(rec))
    return 0


if __name__ == "__main__":
    _cli.run(main)
