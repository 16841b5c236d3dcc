"""Fig. 2 of Buffelli et al. 2024: mini-batch training loss, test loss and test accuracy,
exact GN vs Adam vs SGD on a RevMLP (§5.2).
"""
from __future__ import annotations

from reproduce import _cli, _gnrev


def build_parser():
    return _gnrev.minibatch_parser("fig2", __doc__)


def main(argv=None) -> int:
    return _gnrev.minibatch_main("fig2", __doc__, argv)


if __name__ == "__main__":
    _cli.run(main)
