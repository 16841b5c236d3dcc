"""Fig. 1 of Ben-David & Ringel (2019): accuracy of the mean-field (MF) and fitted (FIT)
NNGP covariance against the sampled covariance of finite random ReLU nets (10 000 nets per
sample), in units of the sampling noise, over narrow widths and two depths.

    python -m reproduce.dgl_fig1 --paper
    python -m reproduce.dgl_fig1 --paper --inputs centred --out results/dgl/fig1_centred.json
"""
from __future__ import annotations

import argparse

from reproduce import _cli


def build_parser() -> argparse.ArgumentParser:
    p = _cli.parser("dgl", "fig1", __doc__)
    p.add_argument("--widths", default=None, help="comma list of hidden widths")
    p.add_argument("--depths", default=None, help="comma list of depths (activated layers)")
    p.add_argument("--num-nets", type=int, default=None, help="nets per sampled covariance")
    p.add_argument("--n-points", type=int, default=None, help="input images")
    p.add_argument("--inputs", choices=["raw", "centred"], default=None,
                   help="raw pixels (default) or mean-image-centred, unit mean-square images "
                   "(low pairwise cosine, where MF's finite-width bias shows)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import jax

    from layerlab.dgl import experiments as ex

    cfg = ex.Fig1Config.paper() if args.paper else ex.Fig1Config.smoke() if args.smoke else \
        ex.Fig1Config(num_nets=4000, repeats=2)
    kw = {}
    if args.widths:
        kw["widths"] = tuple(int(w) for w in args.widths.split(","))
    if args.depths:
        kw["depths"] = tuple(int(w) for w in args.depths.split(","))
    if args.num_nets:
        kw["num_nets"] = args.num_nets
    if args.n_points:
        kw["n_points"] = args.n_points
    if args.seeds:
        kw["repeats"] = args.seeds
    if args.data_dir is not None:
        kw["data_dir"] = args.data_dir
    if args.inputs:
        kw["inputs"] = args.inputs
    cfg = ex.Fig1Config(**{**cfg.__dict__, **kw})
    rec = ex.run_fig1(cfg, key=jax.random.key(0), progress=not args.no_progress)
    _cli.finish(args, rec, figure=lambda path: ex.plot_fig1(rec, path), argv=argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
