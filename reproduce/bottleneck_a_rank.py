"""Paper A, Sec. 3.3-4: Rank_sigma, Frank-Wolfe on L^k, Remark 4.

X = I_N, Y = B_N (Props. 13-14): Frank-Wolfe on the covariance reformulation L^k over the cone
S vs full-batch GD on the weights (loss and cost per step); a computable CP-rank lower bound on
Rank_sigma of the optimum (>= N^2/4); the Prop. 19 counterexample (a local minimum of L_lambda
whose covariances are not a local minimum of L^k).
"""
from __future__ import annotations

import argparse

from reproduce import _cli


def build_parser() -> argparse.ArgumentParser:
    return _cli.parser("bottleneck", "a_rank", __doc__)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import dataclasses

    import jax

    from layerlab.bottleneck import experiments as ex

    C = ex.ARankConfig
    cfg = C.paper() if args.paper else C.smoke() if args.smoke else (
        C.cpu() if hasattr(C, "cpu") else C())
    if args.seeds is not None:
        field = next((f for f in ("seeds", "teacher_seeds", "gd_seeds")
                      if f in {f.name for f in dataclasses.fields(cfg)}), None)
        if field is not None:
            cfg = dataclasses.replace(cfg, **{field: args.seeds})
    rec = ex.run_a_rank(cfg, key=jax.random.key(0), progress=not args.no_progress,
                      checkpoint_dir=_cli.checkpoint_dir(args))
    _cli.finish(args, rec, figure=lambda path: ex.plot_a_rank(rec, path), argv=argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
