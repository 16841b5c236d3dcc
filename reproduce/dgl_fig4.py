"""Fig. 4 of Ben-David & Ringel (2019): DGL monitoring of end-to-end vanilla-SGD training on
BMNIST2k with (L, d) = (3, 20): every layer's DGL (MF variances of the current net) beside
the training MSE, and the caption's three observations checked as claims.

    python -m reproduce.dgl_fig4 --paper
"""
from __future__ import annotations

import argparse

from reproduce import _cli


def build_parser() -> argparse.ArgumentParser:
    p = _cli.parser("dgl", "fig4", __doc__, seeds="none: Fig. 4 is one training run; --seed N "
                    "picks its PRNG seed", stem=lambda args: "fig4" + variant(args))
    p.add_argument("--seed", type=_cli.nonneg_int, default=0,
                   help="PRNG seed of the run (the net's init and the SGD batches)")
    p.add_argument("--epochs", type=_cli.positive_int, default=None,
                   help="SGD epochs (default: 200; --smoke: 10)")
    p.add_argument("--lr", type=_cli.positive_float, default=None,
                   help="SGD learning rate (default: 0.1; the paper does not state it)")
    p.add_argument("--evals", type=_cli.positive_int, default=None,
                   help="monitoring points (default: 40; --smoke: 5)")
    p.add_argument("--eps-rel", type=_cli.positive_float, default=None,
                   help="eps^2 / mean diag K (default: 0.01)")
    p.add_argument("--monitor-n", type=_cli.positive_int, default=None,
                   help="training points the DGLs are evaluated on (default: all)")
    return p


_PROTOCOL = (("epochs", "epochs"), ("lr", "lr"), ("evals", "evals"), ("eps_rel", "eps"))


def variant(args: argparse.Namespace) -> str:
    """The record's file-name suffix when ``--seed`` or an SGD/monitoring setting differs from
    the main record's (``Fig4Config.paper()``; e.g. ``_epochs100_lr0.05``), so that ``--paper``
    with such a flag writes ``fig4_<variant>.json`` beside ``results/dgl/fig4.json`` instead of
    over it.  ``--monitor-n`` is a reduction: the record's scale says so."""
    from layerlab.dgl.experiments import Fig4Config

    main = Fig4Config.paper()
    parts = [f"_{tag}{getattr(args, name):g}" for name, tag in _PROTOCOL
             if getattr(args, name) is not None and getattr(args, name) != getattr(main, name)]
    return "".join(parts) + (f"_seed{args.seed}" if args.seed else "")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import jax

    from layerlab.dgl import experiments as ex

    cfg = ex.Fig4Config.paper() if args.paper else ex.Fig4Config.smoke() if args.smoke else \
        ex.Fig4Config()
    kw = {k: getattr(args, k) for k in ("epochs", "lr", "evals", "eps_rel", "monitor_n")
          if getattr(args, k) is not None}
    if args.data_dir is not None:
        kw["data_dir"] = args.data_dir
    cfg = ex.Fig4Config(**{**cfg.__dict__, **kw})
    rec = ex.run_fig4(cfg, key=jax.random.key(args.seed), progress=not args.no_progress,
                      checkpoint_dir=_cli.checkpoint_dir(args))
    _cli.finish(args, rec, figure=lambda path: ex.plot_fig4(rec, path), argv=argv,
                variant=variant(args))
    return 0


if __name__ == "__main__":
    _cli.run(main)
