"""Paper B, Sec. 5: symmetry learning.  From w_0 predict the next T GD log-losses of
||w w^T - e e^T - E||^2 (BN-rank 2); the learned representation is 2-D (a bijection of the
summary statistics) and ~2 weight singular values sit near 1.
"""
from __future__ import annotations

import argparse

from reproduce import _cli


def build_parser() -> argparse.ArgumentParser:
    return _cli.parser("bottleneck", "b_symmetry", __doc__)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import dataclasses

    import jax

    from layerlab.bottleneck import experiments as ex

    C = ex.BSymmetryConfig
    cfg = C.paper() if args.paper else C.smoke() if args.smoke else (
        C.cpu() if hasattr(C, "cpu") else C())
    if args.seeds is not None:
        field = next((f for f in ("seeds", "teacher_seeds", "gd_seeds")
                      if f in {f.name for f in dataclasses.fields(cfg)}), None)
        if field is not None:
            cfg = dataclasses.replace(cfg, **{field: args.seeds})
    rec = ex.run_b_symmetry(cfg, key=jax.random.key(0), progress=not args.no_progress,
                      checkpoint_dir=_cli.checkpoint_dir(args))
    _cli.finish(args, rec, figure=lambda path: ex.plot_b_symmetry(rec, path), argv=argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
