"""Fig. 4 of Buffelli et al. 2024: NTK rate of change and similarity to init; CKA of the
first, middle and last block with init (GN vs Adam vs SGD, mini-batch).
"""
from __future__ import annotations

from reproduce import _cli, _gnrev


def build_parser():
    return _gnrev.minibatch_parser("fig4", __doc__)


def main(argv=None) -> int:
    return _gnrev.minibatch_main("fig4", __doc__, argv)


if __name__ == "__main__":
    _cli.run(main)
