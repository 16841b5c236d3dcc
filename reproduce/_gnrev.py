"""Shared command lines of the gnrev reproduction scripts (no JAX import at module level).

The mini-batch artifacts (Figs. 2, 3, 4, Apps. G, H) are views of one cached run; the variant
artifacts (Fig. 5, Apps. E, F, I, J, K) share one runner.  Each script names its artifact and
passes its docstring; everything else lives here.
"""
from __future__ import annotations

import dataclasses
import pathlib
import tempfile

from reproduce import _cli

MINIBATCH_DOC = """Figs. 2, 3, 4 and Apps. G, H are views of ONE mini-batch run per optimizer
(`layerlab.gnrev.experiments.run_minibatch`), cached under the configuration's fingerprint, so
running the five scripts in a row trains once.  Learning rates: one-epoch vmapped sweeps
(largest progress without instability, §5.2); GN in the authors' per-block convention; 'gn' =
exact regime (ReLU in every block), 'gn_first_linear' = the authors' code (inexact at batch
1024); every GN step logs the residual certificate ‖JΔθ−ε‖/‖ε‖.

    python -m reproduce.gnrev_<artifact>            # reduced CPU config (MNIST 8192, d'=2048)
    python -m reproduce.gnrev_<artifact> --paper    # full MNIST, batch 1024, d'=8000, 3 seeds
    python -m reproduce.gnrev_<artifact> --dataset cifar10  # full CIFAR-10, 6 blocks, d'=1024 (CPU)
"""


def minibatch_parser(artifact: str, doc: str | None):
    """Flags of the mini-batch scripts (Figs. 2-4, Apps. G, H): one shared cached run; the
    script's own docstring is followed by the shared description (``MINIBATCH_DOC``)."""
    shared = MINIBATCH_DOC.replace("<artifact>", artifact)
    p = _cli.parser("gnrev", artifact, f"{(doc or '').rstrip()}\n\n{shared}")
    p.add_argument("--dataset", default="mnist", choices=("mnist", "cifar10"),
                   help="dataset (non-MNIST records get the suffix _<dataset>)")
    p.add_argument("--epochs", type=int, default=None,
                   help="training epochs (default: the configuration's)")
    p.add_argument("--bottleneck", type=int, default=None,
                   help="inverted-bottleneck width d' (default: the configuration's)")
    p.add_argument("--n-train", type=int, default=None,
                   help="training images, label-balanced subset; 0 = the whole training set "
                   "(default: the configuration's)")
    p.add_argument("--augment", choices=("none", "random_resized_crop"), default=None,
                   help="training-batch augmentation: random_resized_crop = App. L's 'random "
                   "crops and resizes' as the authors' CIFAR-10 configs set it (torchvision "
                   "RandomResizedCrop, scale 0.08-1, ratio 0.75-1.33); default: the "
                   "configuration's (CIFAR-10: random_resized_crop, MNIST: none)")
    p.add_argument("--cache-dir", type=pathlib.Path, default=None,
                   help="where the shared mini-batch run is cached (default: "
                   "checkpoints/gnrev_minibatch_<dataset> with --paper, else scratch/gnrev_cache)")
    return p


def minibatch_main(artifact: str, doc: str | None, argv=None) -> int:
    """Run one view of the shared mini-batch run and write its record."""
    args = minibatch_parser(artifact, doc).parse_args(argv)
    import os
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # threaded LAPACK eigh thrashes on 2 cores
    import jax

    from layerlab.gnrev import experiments as ex

    if args.paper:
        cfg = ex.MinibatchConfig.paper(args.dataset)
    elif args.smoke:
        cfg = ex.MinibatchConfig.smoke()
    else:
        cfg = ex.MinibatchConfig() if args.dataset == "mnist" else ex.MinibatchConfig.cifar_cpu(
            **({} if args.augment is None else
               {"augment": None if args.augment == "none" else args.augment}),
            **({} if args.seeds is None else {"seeds": args.seeds}))  # its note counts them
    over = {k: v for k, v in (("epochs", args.epochs), ("bottleneck", args.bottleneck),
                              ("n_train", args.n_train), ("seeds", args.seeds))
            if v is not None and v != getattr(cfg, k)}
    if over.get("n_train") == 0:
        over["n_train"] = None
    aug = None if args.augment in (None, "none") else args.augment
    if args.augment is not None and aug != cfg.augment:  # cifar_cpu took it already
        over["augment"] = aug
    if over:
        cfg = dataclasses.replace(cfg, **over,
                                  scale_note=(cfg.scale_note + f"; overridden: {over}").strip("; "))
    shared = _cli.REPO / "checkpoints" / f"gnrev_minibatch_{args.dataset}"
    if args.cache_dir is not None:
        cache = args.cache_dir
    elif args.paper:
        cache = shared
    elif args.smoke:
        cache = pathlib.Path(tempfile.gettempdir()) / "layerlab_gnrev_smoke_cache"
    else:
        cache = _cli.REPO / "scratch" / "gnrev_cache"
    ckpt = args.checkpoint_dir or (shared if args.paper else None)
    run, plot = getattr(ex, f"run_{artifact}"), getattr(ex, f"plot_{artifact}")
    rec = run(cfg, key=jax.random.key(0), progress=not args.no_progress,
              checkpoint_dir=ckpt, cache_dir=cache, data_dir=args.data_dir)
    _cli.finish(args, rec, figure=lambda path: plot(rec, path), argv=argv)
    return 0


def variants_parser(artifact: str, doc: str | None):
    """Flags of the variant scripts (Fig. 5, Apps. E, F, I, J, K)."""
    p = _cli.parser("gnrev", artifact, doc)
    p.add_argument("--dataset", default="cifar10", choices=("cifar10", "mnist"),
                   help="dataset (the paper: cifar10; other datasets' records get the suffix "
                   "_<dataset>)")
    p.add_argument("--epochs", type=int, default=None,
                   help="training epochs (default: the configuration's)")
    return p


def variants_main(artifact: str, doc: str | None, argv=None) -> int:
    """Run one variant experiment and write its record."""
    args = variants_parser(artifact, doc).parse_args(argv)
    import os
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # threaded LAPACK eigh thrashes on 2 cores
    import jax

    from layerlab.gnrev import experiments as ex

    scale = "paper" if args.paper else "smoke" if args.smoke else "cpu"
    cfg = ex.variants_config(artifact, scale, args.dataset)
    if args.epochs or args.seeds:
        over = {k: v for k, v in (("epochs", args.epochs), ("seeds", args.seeds)) if v}
        note, said = cfg.scale_note, dict(over)
        if "seeds" in over and ", 1 seed," in note:  # the CPU notes count the seeds: recount
            note = note.replace(", 1 seed,", f", {over['seeds']} seed"
                                f"{'s' if over['seeds'] != 1 else ''},")
            said.pop("seeds")
        if "epochs" in over and f", {cfg.epochs} epochs," in note:  # and the epochs
            note = note.replace(f", {cfg.epochs} epochs,", f", {over['epochs']} epochs,")
            said.pop("epochs")
        cfg = dataclasses.replace(cfg, **over, scale_note=(
            note + (f"; overridden: {said}" if said else "")).strip("; "))
    import pathlib
    import tempfile
    cache = (pathlib.Path(tempfile.gettempdir()) / "layerlab_gnrev_smoke_cache" if args.smoke
             else None)
    rec = ex.run_variants(cfg, artifact, key=jax.random.key(0), progress=not args.no_progress,
                          checkpoint_dir=_cli.checkpoint_dir(args), cache_dir=cache,
                          data_dir=args.data_dir)
    _cli.finish(args, rec, figure=lambda path: ex.plot_variants(rec, path), argv=argv)
    return 0
