"""Paper B, Sec. 5: symmetry learning.  From w_0 predict the next T GD log-losses of
||w w^T - e e^T - E||^2 (BN-rank 2); the learned representation is 2-D (a bijection of the
summary statistics) and ~2 weight singular values sit near 1.
"""
from __future__ import annotations

import argparse

from reproduce import _bottleneck, _cli


def build_parser() -> argparse.ArgumentParser:
    return _bottleneck.parser("b_symmetry", __doc__)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return _bottleneck.main("b_symmetry", "BSymmetryConfig", args, argv)


if __name__ == "__main__":
    _cli.run(main)
