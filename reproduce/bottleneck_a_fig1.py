"""Paper A, Fig. 1 / Sec. 3.1: attraction and repulsion cancel at a critical point.

Part 1: a smooth (tanh) depth-3 net on MNIST 7/8/9 (N = 30 <= width 50), float64 full-batch GD
polished by L-BFGS + Newton-CG to a gradient norm <= 1e-8; |F_att + F_rep| / |F_att| per layer.
Part 2: the paper's figure, L = 3 ReLU, width 50, N = 42, 20k full-batch GD steps, then the same
polish; the remaining imbalance is split into the admissible directions (row space of
Z_{l-1}^sigma) and the rest.  Default: 5000 GD steps, 1000 L-BFGS iterations.
"""
from __future__ import annotations

import argparse

from reproduce import _cli


def build_parser() -> argparse.ArgumentParser:
    return _cli.parser("bottleneck", "a_fig1", __doc__)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import dataclasses

    import jax

    from layerlab.bottleneck import experiments as ex

    C = ex.AFig1Config
    cfg = C.paper() if args.paper else C.smoke() if args.smoke else (
        C.cpu() if hasattr(C, "cpu") else C())
    if args.seeds is not None:
        field = next((f for f in ("seeds", "teacher_seeds", "gd_seeds")
                      if f in {f.name for f in dataclasses.fields(cfg)}), None)
        if field is not None:
            cfg = dataclasses.replace(cfg, **{field: args.seeds})
    rec = ex.run_a_fig1(cfg, key=jax.random.key(0), progress=not args.no_progress,
                      checkpoint_dir=_cli.checkpoint_dir(args), data_dir=args.data_dir)
    _cli.finish(args, rec, figure=lambda path: ex.plot_a_fig1(rec, path), argv=argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
