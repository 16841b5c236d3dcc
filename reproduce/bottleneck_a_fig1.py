"""Paper A, Fig. 1 / Sec. 3.1: attraction and repulsion cancel at a critical point.

Part 1: a smooth (tanh) depth-3 net on MNIST 7/8/9 (N = 30 <= width 50), float64 full-batch GD
polished by L-BFGS + Newton-CG to a gradient norm <= 1e-8; |F_att + F_rep| / |F_att| per layer.
Part 2: the paper's figure, L = 3 ReLU, width 50, N = 42, 20k full-batch GD steps, then the same
polish; the remaining imbalance is split into the admissible directions (row space of
Z_{l-1}^sigma) and the rest.  Default: 5000 GD steps, 1000 L-BFGS iterations.
"""
from __future__ import annotations

import argparse

from reproduce import _bottleneck, _cli


def build_parser() -> argparse.ArgumentParser:
    return _bottleneck.parser("a_fig1", __doc__, seeds=(), seeds_help=(
        "none: one run per part, from a fixed data seed and init key"))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return _bottleneck.main("a_fig1", "AFig1Config", args, argv, data=True)


if __name__ == "__main__":
    _cli.run(main)
