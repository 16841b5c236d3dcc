"""Paper B, Thms. 3, 6, 7: bottleneck structure vs depth on latent-k data (k = 1, 2, 3).

Per-layer weight singular values (count within 0.25 of 1 -> k), representation rank, Jacobian
rank and pseudo-determinant, NTK trace vs depth against order L; plain GD with a small and a
large learning rate at one depth.
"""
from __future__ import annotations

import argparse

from reproduce import _bottleneck, _cli


def build_parser() -> argparse.ArgumentParser:
    return _bottleneck.parser("b_structure", __doc__)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return _bottleneck.main("b_structure", "BStructureConfig", args, argv)


if __name__ == "__main__":
    _cli.run(main)
