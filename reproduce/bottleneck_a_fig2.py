"""Paper A, Fig. 2: train/test loss vs width; the plateau starts around width 10.

Left: MNIST subset N = 1000, depth 3, cross-entropy, two lambdas.  Right: teacher (50, 10, 10,
10), N = 1000 Gaussian inputs, MSE, lambda = 1e-6, three nets per width, the minimum taken.
Adam then full-batch GD; all widths x seeds in one vmapped program (bottleneck.width_sweep).
Default: N = 200, 3000 Adam + 1000 GD steps (CPU); --paper needs a GPU.
"""
from __future__ import annotations

import argparse

from reproduce import _cli


def build_parser() -> argparse.ArgumentParser:
    p = _cli.parser("bottleneck", "a_fig2", __doc__)
    p.add_argument("--parts", nargs="+", choices=["mnist", "teacher"], default=None,
                   help="run only these panels (default: both)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import dataclasses

    import jax

    from layerlab.bottleneck import experiments as ex

    C = ex.AFig2Config
    cfg = C.paper() if args.paper else C.smoke() if args.smoke else (
        C.cpu() if hasattr(C, "cpu") else C())
    if args.seeds is not None:
        field = next((f for f in ("seeds", "teacher_seeds", "gd_seeds")
                      if f in {f.name for f in dataclasses.fields(cfg)}), None)
        if field is not None:
            cfg = dataclasses.replace(cfg, **{field: args.seeds})
    if args.parts:
        cfg = dataclasses.replace(cfg, parts=tuple(args.parts))
    rec = ex.run_a_fig2(cfg, key=jax.random.key(0), progress=not args.no_progress,
                      checkpoint_dir=_cli.checkpoint_dir(args), data_dir=args.data_dir)
    _cli.finish(args, rec, figure=lambda path: ex.plot_a_fig2(rec, path), argv=argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
