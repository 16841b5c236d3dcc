"""App. I (Fig. 12) of Buffelli et al. 2024: GN with different learning rates.

The paper runs this on CIFAR-10 (6 blocks, d'=8000, batch 1024): `--paper` sets that scale
(a GPU with CIFAR-10 on it); the default is a CPU-sized CIFAR-10 run (4096 images, batch 256,
d'=256, 6 blocks).  Fixed rates: GN 1.0 per block (the authors' CIFAR-10 rate), Adam 1e-4,
SGD 0.1; every GN step logs the residual certificate.

    python -m reproduce.gnrev_appI                      # CPU-sized CIFAR-10 (minutes)
    python -m reproduce.gnrev_appI --dataset mnist      # MNIST instead (record )
    python -m reproduce.gnrev_appI --paper              # the paper's CIFAR-10 scale (GPU)
"""
from __future__ import annotations

import dataclasses

from reproduce import _cli


def build_parser():
    p = _cli.parser("gnrev", "appI", __doc__)
    p.add_argument("--dataset", default="cifar10", choices=("cifar10", "mnist"),
                   help="dataset (the paper: cifar10)")
    p.add_argument("--epochs", type=int, default=None,
                   help="training epochs (default: the configuration's)")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    import os
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # threaded LAPACK eigh thrashes on 2 cores
    import jax

    from layerlab.gnrev import experiments as ex

    scale = "paper" if args.paper else "smoke" if args.smoke else "cpu"
    cfg = ex.variants_config("appI", scale, args.dataset)
    if args.epochs or args.seeds:
        over = {k: v for k, v in (("epochs", args.epochs), ("seeds", args.seeds)) if v}
        cfg = dataclasses.replace(cfg, **over,
                                  scale_note=(cfg.scale_note + f"; overridden: {over}").strip("; "))
    import pathlib
    import tempfile
    cache = (pathlib.Path(tempfile.gettempdir()) / "layerlab_gnrev_smoke_cache" if args.smoke
             else None)
    rec = ex.run_variants(cfg, "appI", key=jax.random.key(0), progress=not args.no_progress,
                          checkpoint_dir=_cli.checkpoint_dir(args), cache_dir=cache,
                          data_dir=args.data_dir)
    _cli.finish(args, rec, figure=lambda path: ex.plot_variants(rec, path), argv=argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
