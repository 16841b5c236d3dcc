"""Table 4 of Dehmamy, Rohani & Katsaggelos: CIFAR-10, one- and two-layer DMN, DMN + Conv and
ConvNets (training and validation accuracy).

    python -m reproduce.dmn_table4 --paper     # every row, full data, 3 seeds, 50 epochs
    python -m reproduce.dmn_table4             # every row, 6000/2000 images, 10 epochs, 1 seed
    python -m reproduce.dmn_table4 --smoke     # seconds

DMN layers are built once in closed form; only the head (and the ConvNets) are trained, with
Adam (lr 1e-3), batch 128, as the authors' notebook does. See docs/dmn.md.
"""
from __future__ import annotations

from reproduce import _cli, _dmn


def build_parser():
    return _dmn.table_parser("table4", __doc__)


def main(argv=None) -> int:
    return _dmn.table_main("table4", __doc__, argv)


if __name__ == "__main__":
    _cli.run(main)
