"""Fig. 3 of Buffelli et al. 2024: % change of each mini-batch's loss across its own
update (does GN overfit each mini-batch?).
"""
from __future__ import annotations

from reproduce import _cli, _gnrev


def build_parser():
    return _gnrev.minibatch_parser("fig3", __doc__)


def main(argv=None) -> int:
    return _gnrev.minibatch_main("fig3", __doc__, argv)


if __name__ == "__main__":
    _cli.run(main)
