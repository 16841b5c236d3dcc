"""App. G (Fig. 9) of Buffelli et al. 2024: cosine similarity of every half-layer's
weights with their initial values during mini-batch training.
"""
from __future__ import annotations

from reproduce import _cli, _gnrev


def build_parser():
    return _gnrev.minibatch_parser("appG", __doc__)


def main(argv=None) -> int:
    return _gnrev.minibatch_main("appG", __doc__, argv)


if __name__ == "__main__":
    _cli.run(main)
