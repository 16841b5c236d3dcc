"""Shared command line of the bottleneck reproduction scripts (no JAX import at module level)."""
from __future__ import annotations

import argparse

from reproduce import _cli


def parser(artifact: str, doc: str | None) -> argparse.ArgumentParser:
    """The common flags (``reproduce._cli.parser``) for ``bottleneck_<artifact>``."""
    return _cli.parser("bottleneck", artifact, doc)


def main(artifact: str, config: str, args: argparse.Namespace, argv: list[str] | None, *,
         data: bool = False, run_kw: dict | None = None, **replace) -> int:
    """Build ``experiments.<config>`` for the scale flags, apply ``--seeds`` and ``replace``
    (non-``None`` values), run ``run_<artifact>`` (with ``run_kw``: its extra keyword
    arguments), write the record and ``plot_<artifact>``."""
    import dataclasses

    import jax

    from layerlab.bottleneck import experiments as ex

    C = getattr(ex, config)
    cfg = C.paper() if args.paper else C.smoke() if args.smoke else (
        C.cpu() if hasattr(C, "cpu") else C())
    if args.seeds is not None:
        field = next((f for f in ("seeds", "teacher_seeds", "gd_seeds")
                      if f in {f.name for f in dataclasses.fields(cfg)}), None)
        if field is not None:
            cfg = dataclasses.replace(cfg, **{field: args.seeds})
    over = {k: v for k, v in replace.items() if v is not None}
    if over:
        cfg = dataclasses.replace(cfg, **over)
    kw = {"data_dir": args.data_dir} if data else {}
    kw.update(run_kw or {})
    run, plot = getattr(ex, f"run_{artifact}"), getattr(ex, f"plot_{artifact}")
    rec = run(cfg, key=jax.random.key(0), progress=not args.no_progress,
              checkpoint_dir=_cli.checkpoint_dir(args), **kw)
    _cli.finish(args, rec, figure=lambda path: plot(rec, path), argv=argv)
    return 0
