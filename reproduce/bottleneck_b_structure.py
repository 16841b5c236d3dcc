"""Paper B, Thms. 3, 6, 7: bottleneck structure vs depth on latent-k data (k = 1, 2, 3).

Per-layer weight singular values (count within 0.25 of 1 -> k), representation rank, Jacobian
rank and pseudo-determinant, NTK trace vs depth against order L; plain GD with a small and a
large learning rate at one depth.
"""
from __future__ import annotations

import argparse

from reproduce import _cli


def build_parser() -> argparse.ArgumentParser:
    return _cli.parser("bottleneck", "b_structure", __doc__)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import dataclasses

    import jax

    from layerlab.bottleneck import experiments as ex

    C = ex.BStructureConfig
    cfg = C.paper() if args.paper else C.smoke() if args.smoke else (
        C.cpu() if hasattr(C, "cpu") else C())
    if args.seeds is not None:
        field = next((f for f in ("seeds", "teacher_seeds", "gd_seeds")
                      if f in {f.name for f in dataclasses.fields(cfg)}), None)
        if field is not None:
            cfg = dataclasses.replace(cfg, **{field: args.seeds})
    rec = ex.run_b_structure(cfg, key=jax.random.key(0), progress=not args.no_progress,
                             checkpoint_dir=_cli.checkpoint_dir(args))
    _cli.finish(args, rec, figure=lambda path: ex.plot_b_structure(rec, path), argv=argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
