"""Paper B, Fig. 1: local minima across depths from several seeds per depth, classified by
rank; minima of the same rank represent about the same function, with ||theta||^2 ~ L R^(0).
"""
from __future__ import annotations

import argparse

from reproduce import _bottleneck, _cli


def build_parser() -> argparse.ArgumentParser:
    return _bottleneck.parser("b_minima", __doc__)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return _bottleneck.main("b_minima", "BMinimaConfig", args, argv)


if __name__ == "__main__":
    _cli.run(main)
