"""Table 5 of Dehmamy, Rohani & Katsaggelos: CIFAR-100, one- and two-layer DMN, DMN + Conv and
ConvNets. Runs when the cifar100 files are present (layerlab.data.load('cifar100')); otherwise
every row is recorded as not run, with the loader's message, which is printed in full, and the
run exits with status 1 (a --paper or --record run then keeps the committed record).

    python -m reproduce.dmn_table5 --paper     # every row, full data, 3 seeds, 50 epochs
    python -m reproduce.dmn_table5             # every row, 6000/2000 images, 10 epochs, 1 seed
    python -m reproduce.dmn_table5 --smoke     # seconds

DMN layers are built once in closed form; only the head (and the ConvNets) are trained, with
Adam (lr 1e-3), batch 128, as the authors' notebook does. See docs/dmn.md.
"""
from __future__ import annotations

from reproduce import _cli, _dmn


def build_parser():
    return _dmn.table_parser("table5", __doc__)


def main(argv=None) -> int:
    return _dmn.table_main("table5", __doc__, argv)


if __name__ == "__main__":
    _cli.run(main)
