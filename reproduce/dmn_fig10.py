"""Fig. 10 of Dehmamy, Rohani & Katsaggelos: one- and two-layer networks (two DMN, DMN + Conv,
two Conv, with and without BN) on MNIST, CIFAR-10, CIFAR-100 -- the architectures of Tables 3-5,
with the paper's qualitative claims checked on our numbers.

    python -m reproduce.dmn_fig10 --paper     # every architecture, full data, 3 seeds, 50 epochs
    python -m reproduce.dmn_fig10 --smoke     # seconds

DMN layers are built once in closed form; only the head (and the ConvNets) are trained, with
Adam (lr 1e-3), batch 128, as the authors' notebook does. See docs/dmn.md.
"""
from __future__ import annotations

from reproduce import _cli, _dmn


def build_parser():
    return _dmn.table_parser("fig10", __doc__)


def main(argv=None) -> int:
    return _dmn.table_main("fig10", __doc__, argv, run="run_fig10")


if __name__ == "__main__":
    _cli.run(main)
