"""Paper A, Fig. 2: train/test loss vs width; the plateau starts around width 10.

Left: MNIST subset N = 1000, depth 3, cross-entropy, two lambdas.  Right: teacher (50, 10, 10,
10), N = 1000 Gaussian inputs, MSE, lambda = 1e-6, three nets per width, the minimum taken.
Adam, then full-batch GD, then an L-BFGS polish of every run; all widths x seeds in one
vmapped program (bottleneck.width_sweep).  Default: N = 200 (CPU); --paper: MNIST needs a GPU,
the teacher part runs on a CPU (~30-40 min) and can be merged into a GPU record:

    python -m reproduce.bottleneck_a_fig2 --paper --parts teacher \\
        --merge-into results/bottleneck/a_fig2.json
"""
from __future__ import annotations

import argparse
import pathlib

from reproduce import _bottleneck, _cli


def build_parser() -> argparse.ArgumentParser:
    p = _bottleneck.parser("a_fig2", __doc__, seeds=("mnist_seeds", "teacher_seeds"),
                           seeds_help="nets per width, in both panels (default: MNIST 1, "
                           "teacher 3, as the paper)")
    p.add_argument("--parts", choices=["mnist", "teacher", "all"], default="all",
                   help="run only this panel (left: mnist, right: teacher)")
    p.add_argument("--merge-into", type=_record_file, default=None, metavar="PATH",
                   help="merge this run's parts into the a_fig2 record at PATH (its other "
                   "parts are kept) and write the merged record where this run writes "
                   "(default: no merge)")
    return p


def _record_file(value: str) -> pathlib.Path:
    path = pathlib.Path(value)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"expected an a_fig2 record file, got {value}: "
                                         "no such file")
    return path


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    parts = None if args.parts == "all" else (args.parts,)
    run_kw = {} if args.merge_into is None else {"merge_into": args.merge_into}
    return _bottleneck.main("a_fig2", "AFig2Config", args, argv, data=True, parts=parts,
                            run_kw=run_kw)


if __name__ == "__main__":
    _cli.run(main)
