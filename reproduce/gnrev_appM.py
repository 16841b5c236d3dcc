"""App. M (Fig. 15) of Buffelli et al. 2024: UCI regression (wine, superconductivity), full
batch and mini-batch, exact GN vs Adam vs SGD with the squared loss.

Superconductivity is not shipped: put the UCI ``train.csv`` (21263 rows, 81 features +
critical_temp) under ``<data-dir>/superconductivity/`` and add it with ``--datasets``; the
run stops with a message saying where it looked when the file is absent.

    python -m reproduce.gnrev_appM                                   # wine (CPU, minutes)
    python -m reproduce.gnrev_appM --datasets wine,superconductivity --data-dir DIR
    python -m reproduce.gnrev_appM --paper                           # both, d'=8000, 3 seeds
"""
from __future__ import annotations

import dataclasses

from reproduce import _cli

# layerlab.gnrev.experiments.load_regression's data sets, typed out so that --datasets is
# checked before JAX is imported (tests/reproduce checks the experiments know them)
DATASETS = ("wine", "superconductivity")


def build_parser():
    p = _cli.parser("gnrev", "appM", __doc__)
    p.add_argument("--datasets", type=_cli.name_list(DATASETS), default=None,
                   help=f"comma-separated, of {', '.join(DATASETS)} (default: the "
                   "configuration's)")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    import os
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # threaded LAPACK eigh thrashes on 2 cores
    import jax

    from layerlab.gnrev import experiments as ex

    cfg = (ex.RegressionConfig.paper() if args.paper else
           ex.RegressionConfig.smoke() if args.smoke else ex.RegressionConfig())
    if args.datasets is not None:
        cfg = dataclasses.replace(cfg, datasets=args.datasets)
    if args.seeds is not None:
        cfg = dataclasses.replace(cfg, seeds=args.seeds)
    rec = ex.run_appM(cfg, key=jax.random.key(0), progress=not args.no_progress,
                      checkpoint_dir=_cli.checkpoint_dir(args), data_dir=args.data_dir)
    _cli.finish(args, rec, figure=lambda path: ex.plot_appM(rec, path), argv=argv)
    return 0


if __name__ == "__main__":
    _cli.run(main)
