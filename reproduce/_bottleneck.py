"""Shared command line of the bottleneck reproduction scripts (no JAX import at module level)."""
from __future__ import annotations

import argparse

from reproduce import _cli


def parser(artifact: str, doc: str | None, seeds: tuple[str, ...] = ("seeds",),
           seeds_help: str = _cli.SEEDS_HELP) -> argparse.ArgumentParser:
    """The common flags (``reproduce._cli.parser``) for ``bottleneck_<artifact>``.

    ``seeds``: the configuration's fields that ``--seeds`` sets (every one of them); ``()``
    for a configuration without a number of seeds, with ``seeds_help`` ``"none: <why>"``:
    the script then refuses ``--seeds``.
    """
    p = _cli.parser("bottleneck", artifact, doc, seeds=seeds_help)
    p.set_defaults(_seed_fields=tuple(seeds))
    return p


def main(artifact: str, config: str, args: argparse.Namespace, argv: list[str] | None, *,
         data: bool = False, run_kw: dict | None = None, **replace) -> int:
    """Build ``experiments.<config>`` for the scale flags, apply ``--seeds`` (to the fields
    ``parser`` named) and ``replace`` (non-``None`` values), run ``run_<artifact>`` (with
    ``run_kw``: its extra keyword arguments), write the record and ``plot_<artifact>``."""
    import dataclasses

    import jax

    from layerlab.bottleneck import experiments as ex

    C = getattr(ex, config)
    cfg = C.paper() if args.paper else C.smoke() if args.smoke else (
        C.cpu() if hasattr(C, "cpu") else C())
    if args.seeds is not None:
        cfg = dataclasses.replace(cfg, **{f: args.seeds for f in args._seed_fields})
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
