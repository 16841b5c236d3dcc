"""App. H (Figs. 10, 11) of Buffelli et al. 2024: CKA with init for every block, and
the CKA between the GN model and the Adam / SGD models per block and epoch.
"""
from __future__ import annotations

from reproduce import _cli, _gnrev


def build_parser():
    return _gnrev.minibatch_parser("appH", __doc__)


def main(argv=None) -> int:
    return _gnrev.minibatch_main("appH", __doc__, argv)


if __name__ == "__main__":
    _cli.run(main)
