"""Fig. 1 of Ben-David & Ringel (2019): accuracy of the mean-field (MF) and fitted (FIT)
NNGP covariance against the sampled covariance of finite random ReLU nets (10 000 nets per
sample), in units of the sampling noise, over narrow widths and two depths.

Monte-Carlo sampling without a training loop (the paper-scale record: minutes), so there is
nothing to checkpoint: this script has no --checkpoint-dir.

    python -m reproduce.dgl_fig1 --paper
    python -m reproduce.dgl_fig1 --paper --inputs centred     # results/dgl/fig1_centred.json
"""
from __future__ import annotations

import argparse

from reproduce import _cli


def build_parser() -> argparse.ArgumentParser:
    p = _cli.parser("dgl", "fig1", __doc__, checkpoint="none: Monte-Carlo sampling without a "
                    "training loop, minutes at the paper's scale; nothing to resume",
                    seeds="independent sampled covariances per (width, depth), the error bars "
                    "(Fig1Config.repeats; default: the configuration's)",
                    stem=lambda args: "fig1" + variant(args))
    p.add_argument("--widths", type=_cli.int_list(1), default=None,
                   help="comma list of hidden widths (default: 2,3,5,10,20,50; --smoke: 3)")
    p.add_argument("--depths", type=_cli.int_list(1), default=None,
                   help="comma list of depths (activated layers) (default: 2,4; --smoke: 2)")
    p.add_argument("--num-nets", type=_cli.int_at_least(2), default=None,
                   help="nets per sampled covariance (default: 10000, the caption's; --smoke: 400)")
    p.add_argument("--n-points", type=_cli.int_at_least(2), default=None,
                   help="input images (pairs of them: at least 2) (default: 20; --smoke: 8)")
    p.add_argument("--inputs", choices=["raw", "centred"], default=None,
                   help="raw pixels (default) or mean-image-centred, unit mean-square images "
                   "(low pairwise cosine, where MF's finite-width bias shows)")
    return p


def variant(args: argparse.Namespace) -> str:
    """``_centred`` for ``--inputs centred``: that record is ``fig1_centred.json``, beside the
    raw-pixel ``results/dgl/fig1.json``, which ``--paper`` alone writes (the inputs are a
    protocol choice, not a size, so the scale rule does not tell them apart)."""
    return "_centred" if args.inputs == "centred" else ""


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import jax

    from layerlab.dgl import experiments as ex

    cfg = ex.Fig1Config.paper() if args.paper else ex.Fig1Config.smoke() if args.smoke else \
        ex.Fig1Config(num_nets=4000, repeats=2)
    kw = {}
    for name, field in (("widths", "widths"), ("depths", "depths"), ("num_nets", "num_nets"),
                        ("n_points", "n_points"), ("seeds", "repeats")):
        if getattr(args, name) is not None:
            kw[field] = getattr(args, name)
    if args.data_dir is not None:
        kw["data_dir"] = args.data_dir
    if args.inputs:
        kw["inputs"] = args.inputs
    cfg = ex.Fig1Config(**{**cfg.__dict__, **kw})
    rec = ex.run_fig1(cfg, key=jax.random.key(0), progress=not args.no_progress)
    _cli.finish(args, rec, figure=lambda path: ex.plot_fig1(rec, path), argv=argv,
                variant=variant(args))
    return 0


if __name__ == "__main__":
    _cli.run(main)
