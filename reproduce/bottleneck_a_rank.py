"""Paper A, Sec. 3.3-4: Rank_sigma, Frank-Wolfe on L^k, Remark 4.

X = I_N, Y = B_N (Props. 13-14): Frank-Wolfe on the covariance reformulation L^k over the cone
S vs full-batch GD on the weights (loss and cost per step); a computable CP-rank lower bound on
Rank_sigma of the optimum (>= N^2/4); the Prop. 19 counterexample (a local minimum of L_lambda
whose covariances are not a local minimum of L^k).
"""
from __future__ import annotations

import argparse

from reproduce import _bottleneck, _cli


def build_parser() -> argparse.ArgumentParser:
    return _bottleneck.parser("a_rank", __doc__, seeds=("gd_seeds",), seeds_help=(
        "random starts of the weight-space runs (GD and the Adam sweep keep the best of them; "
        "default: the configuration's)"))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return _bottleneck.main("a_rank", "ARankConfig", args, argv)


if __name__ == "__main__":
    _cli.run(main)
