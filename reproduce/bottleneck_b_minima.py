"""Paper B, Fig. 1: local minima across depths from several seeds per depth, classified by
rank; minima of the same rank represent about the same function, with ||theta||^2 ~ L R^(0).
"""
from __future__ import annotations

import argparse

from reproduce import _cli


def build_parser() -> argparse.ArgumentParser:
    return _cli.parser("bottleneck", "b_minima", __doc__)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import dataclasses

    import jax

    from layerlab.bottleneck import experiments as ex

    C = ex.BMinimaConfig
    cfg = C.paper() if args.paper else C.smoke() if args.smoke else (
        C.cpu() if hasattr(C, "cpu") else C())
    if args.seeds is not None:
        field = next((f for f in ("seeds", "teacher_seeds", "gd_seeds")
                      if f in {f.name for f in dataclasses.fields(cfg)}), None)
        if field is not None:
            cfg = dataclasses.replace(cfg, **{field: args.seeds})
    rec = ex.run_b_minima(cfg, key=jax.random.key(0), progress=not args.no_progress,
                      checkpoint_dir=_cli.checkpoint_dir(args))
    _cli.finish(args, rec, figure=lambda path: ex.plot_b_minima(rec, path), argv=argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
