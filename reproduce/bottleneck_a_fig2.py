"""Paper A, Fig. 2: train/test loss vs width; the plateau starts around width 10.

Left: MNIST subset N = 1000, depth 3, cross-entropy, two lambdas.  Right: teacher (50, 10, 10,
10), N = 1000 Gaussian inputs, MSE, lambda = 1e-6, three nets per width, the minimum taken.
Adam then full-batch GD; all widths x seeds in one vmapped program (bottleneck.width_sweep).
Default: N = 200, 3000 Adam + 1000 GD steps (CPU); --paper needs a GPU.
"""
from __future__ import annotations

import argparse

from reproduce import _bottleneck


def build_parser() -> argparse.ArgumentParser:
    p = _bottleneck.parser("a_fig2", __doc__)
    p.add_argument("--parts", nargs="+", choices=["mnist", "teacher"], default=None,
                   help="run only these panels (default: both)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    parts = tuple(args.parts) if args.parts else None
    return _bottleneck.main("a_fig2", "AFig2Config", args, argv, data=True, parts=parts)


if __name__ == "__main__":
    raise SystemExit(main())
