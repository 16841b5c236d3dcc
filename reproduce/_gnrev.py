"""Shared command lines of the gnrev reproduction scripts (no JAX import at module level).

The mini-batch artifacts (Figs. 2, 3, 4, Apps. G, H) are views of one cached run; the variant
artifacts (Fig. 5, Apps. E, F, I, J, K) share one runner.  Each script names its artifact and
passes its docstring; everything else lives here.
"""
from __future__ import annotations

import argparse
import dataclasses
import pathlib
import tempfile
import textwrap

from reproduce import _cli

SMOKE_CACHE = "layerlab_gnrev_smoke_cache"  # under $TMPDIR: the smoke runs' shared cache

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


def _arm_names(value: str) -> tuple[str, ...]:
    """``--arms``: a non-empty comma list of distinct names (checked against the configuration's
    arms once it is built)."""
    names = tuple(v.strip() for v in value.split(","))
    if not all(names) or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(
            f"expected a comma list of distinct arm names (e.g. gn,adam,sgd), got {value!r}")
    return names


def minibatch_parser(artifact: str, doc: str | None):
    """Flags of the mini-batch scripts (Figs. 2-4, Apps. G, H): one shared cached run; the
    script's own docstring is followed by the shared description (``MINIBATCH_DOC``)."""
    shared = MINIBATCH_DOC.replace("<artifact>", artifact)
    p = _cli.parser("gnrev", artifact, f"{(doc or '').rstrip()}\n\n{shared}",
                    stem=lambda args: artifact if args.dataset == "mnist"
                    else f"{artifact}_{args.dataset}")
    p.add_argument("--dataset", default="mnist", choices=("mnist", "cifar10"),
                   help="dataset (non-MNIST records get the suffix _<dataset>)")
    p.add_argument("--epochs", type=_cli.positive_int, default=None,
                   help="training epochs (default: the configuration's)")
    p.add_argument("--bottleneck", type=_cli.positive_int, default=None,
                   help="inverted-bottleneck width d' (default: the configuration's)")
    p.add_argument("--n-train", type=_cli.nonneg_int, default=None,
                   help="training images, label-balanced subset; 0 = the whole training set "
                   "(default: the configuration's)")
    p.add_argument("--augment", choices=("none", "random_resized_crop"), default=None,
                   help="training-batch augmentation: random_resized_crop = App. L's 'random "
                   "crops and resizes' as the authors' CIFAR-10 configs set it (torchvision "
                   "RandomResizedCrop, scale 0.08-1, ratio 0.75-1.33); default: the "
                   "configuration's (CIFAR-10: random_resized_crop, MNIST: none)")
    p.add_argument("--arms", type=_arm_names, default=None,
                   help="comma list of the configuration's arms to run (default: all; gn, adam "
                   "and sgd must stay, gn_first_linear may go), e.g. gn,adam,sgd for a GPU "
                   "lease too short for the authors'-setup arm; the record's note says so")
    p.add_argument("--cache-dir", type=_cli.folder, default=None,
                   help="where the shared mini-batch run is cached (default: "
                   "checkpoints/gnrev_minibatch_<dataset> with --paper, "
                   f"$TMPDIR/{SMOKE_CACHE} with --smoke, else scratch/gnrev_cache)")
    return p


def minibatch_config(args):
    """The :class:`MinibatchConfig` the parsed flags ask for (``--paper`` / ``--smoke`` / the
    CPU default, then the overrides: epochs, width, training images, seeds, augmentation,
    arms).  ``ValueError`` for arms the configuration lacks or the views need."""
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
    if args.arms is not None:
        have = [a.name for a in cfg.arms]
        unknown = [a for a in args.arms if a not in have]
        if unknown:
            raise ValueError(f"argument --arms: unknown arm(s) {unknown}; this "
                             f"configuration's arms are {have}")
        missing = [a for a in ("gn", "adam", "sgd") if a in have and a not in args.arms]
        if missing:
            raise ValueError(f"argument --arms: the figures compare GN with Adam and SGD, so "
                             f"gn, adam and sgd must stay; missing {missing}")
        if set(args.arms) != set(have):
            over["arms"] = tuple(a for a in cfg.arms if a.name in args.arms)
    if over:
        note = {k: ([a.name for a in v] if k == "arms" else v) for k, v in over.items()}
        cfg = dataclasses.replace(cfg, **over,
                                  scale_note=(cfg.scale_note + f"; overridden: {note}").strip("; "))
    return cfg


def minibatch_main(artifact: str, doc: str | None, argv=None) -> int:
    """Run one view of the shared mini-batch run and write its record."""
    parser = minibatch_parser(artifact, doc)
    args = parser.parse_args(argv)
    import os
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # threaded LAPACK eigh thrashes on 2 cores
    import jax

    from layerlab.gnrev import experiments as ex

    try:
        cfg = minibatch_config(args)
    except ValueError as e:  # a flag against the configuration (--arms): exit 2, as parsing
        parser.error(str(e))
    shared = _cli.REPO / "checkpoints" / f"gnrev_minibatch_{args.dataset}"
    if args.cache_dir is not None:
        cache = args.cache_dir
    elif args.paper:
        cache = shared
    elif args.smoke:
        cache = pathlib.Path(tempfile.gettempdir()) / SMOKE_CACHE
    else:
        cache = _cli.REPO / "scratch" / "gnrev_cache"
    ckpt = args.checkpoint_dir or (shared if args.paper else None)
    run, plot = getattr(ex, f"run_{artifact}"), getattr(ex, f"plot_{artifact}")
    rec = run(cfg, key=jax.random.key(0), progress=not args.no_progress,
              checkpoint_dir=ckpt, cache_dir=cache, data_dir=args.data_dir)
    rec = arms_scale(rec, args)
    _cli.finish(args, rec, figure=lambda path: plot(rec, path), argv=argv)
    return 0


def arms_scale(rec, args):
    """A record of a run that left arms out (``--arms``) is never paper scale: the paper's
    figures include the authors'-setup arm (``gn_first_linear``).  Returns the record, with
    ``scale`` ``"reduced"`` and the reason in its note where the run left arms out."""
    if args.arms is None or rec.scale != "paper":
        return rec
    full = minibatch_config(argparse.Namespace(**{**vars(args), "arms": None}))
    left = [a.name for a in full.arms if a.name not in args.arms]
    if not left:
        return rec
    return dataclasses.replace(rec, scale="reduced", note=(
        f"{rec.note} Scale: reduced — the paper's data, model, batch and seeds, but the arms "
        f"{left} were left out (--arms).").strip())


# layerlab.gnrev.experiments.variants_config's CIFAR-10 numbers, typed out because --help is
# built before JAX is imported (tests/reproduce checks them against variants_config)
VARIANTS_PAPER = dict(batch=1024, bottleneck=8000, depth=6, seeds=3, gn=1.0, adam=1e-4,
                      sgd=0.1, epochs=20, epochs_appE=100)
VARIANTS_CPU = dict(n_train=4096, batch=256, bottleneck=512, init_bottleneck=8000, depth=6,
                    seeds=1, gn=0.2, adam=1e-4, sgd=0.01, epochs=10, epochs_appE=30)


def variants_doc(artifact: str) -> str:
    """The part of a variant script's --help that says what its configurations are (made from
    ``VARIANTS_PAPER`` / ``VARIANTS_CPU``, so that the six scripts cannot disagree)."""
    P, C = VARIANTS_PAPER, VARIANTS_CPU
    sgd = artifact in ("fig5", "appE")  # the others compare GN variants with Adam only

    def r(x):  # 1e-4, 0.01, 0.2, 1.0
        return f"{x:.0e}".replace("e-0", "e-") if x < 1e-3 else f"{x:.1f}" if x == int(x) \
            else f"{x:g}"

    def gn(rate, why):
        if artifact == "appI":  # App. I: GN at 1/4, 1/2, 1 and 2 times the rate
            return (f"GN {r(rate / 4)}, {r(rate / 2)}, {r(rate)} and {r(2 * rate)} per block "
                    f"(around {r(rate)}, {why})")
        return f"GN {r(rate)} per block ({why})"

    def epochs(c):
        return c["epochs_appE"] if artifact == "appE" else c["epochs"]

    if artifact == "fig5":
        paper_net = f"{P['depth']} blocks without inverted bottleneck, batch {P['batch']}"
        cpu_net = (f"{C['n_train']} images, batch {C['batch']}, no inverted bottleneck (V = I, "
                   f"d' = d/2; W with its own Xavier variance), {C['depth']} blocks")
    else:
        paper_net = f"{P['depth']} blocks, d'={P['bottleneck']}, batch {P['batch']}"
        cpu_net = (f"{C['n_train']} images, batch {C['batch']}, d'={C['bottleneck']} with the "
                   f"paper's d'={C['init_bottleneck']} init variance, {C['depth']} blocks")
    text = (
        f"The paper runs this on CIFAR-10 ({paper_net}): `--paper` sets that scale (a GPU "
        f"with CIFAR-10 on it; {epochs(P)} epochs, {P['seeds']} seeds) with fixed rates "
        + gn(P["gn"], "the authors' CIFAR-10 rate") + f", Adam {r(P['adam'])}"
        + (f", SGD {r(P['sgd'])}" if sgd else "")
        + f"; the default is a CPU-sized CIFAR-10 run ({cpu_net}, {epochs(C)} epochs, "
        f"{C['seeds']} seed) at "
        + gn(C["gn"], ("a one-epoch sweep at that size" if artifact != "fig5" else
                       f"swept for one epoch on the other variants' d'={C['bottleneck']} net")
             + f"; the authors' {r(P['gn'])} overshoots at batch {C['batch']}")
        + (f", SGD {r(C['sgd'])} (the same sweep)" if sgd else "") + f", Adam {r(C['adam'])}"
        + ("; a rate whose full run is unstable falls back one grid step" if sgd else "")
        + ". Every GN step logs the residual certificate. `--smoke` is one tiny MNIST run "
        f"that every variant script shares, cached under $TMPDIR/{SMOKE_CACHE}.")
    a = artifact
    return (textwrap.fill(text, 92, break_on_hyphens=False) + "\n\n"
            f"    python -m reproduce.gnrev_{a}                      # CPU-sized CIFAR-10 "
            "(minutes)\n"
            f"    python -m reproduce.gnrev_{a} --dataset mnist      # MNIST instead (record "
            f"{a}_mnist)\n"
            f"    python -m reproduce.gnrev_{a} --paper              # the paper's CIFAR-10 "
            "scale (GPU)\n")


def variants_parser(artifact: str, doc: str | None):
    """Flags of the variant scripts (Fig. 5, Apps. E, F, I, J, K); the script's docstring is
    followed by ``variants_doc(artifact)``."""
    p = _cli.parser("gnrev", artifact, f"{(doc or '').rstrip()}\n\n{variants_doc(artifact)}",
                    stem=lambda args: artifact if args.dataset == "cifar10"
                    else f"{artifact}_{args.dataset}")
    p.add_argument("--dataset", default="cifar10", choices=("cifar10", "mnist"),
                   help="dataset (the paper: cifar10; other datasets' records get the suffix "
                   "_<dataset>)")
    p.add_argument("--epochs", type=_cli.positive_int, default=None,
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
    if args.epochs is not None or args.seeds is not None:
        over = {k: v for k, v in (("epochs", args.epochs), ("seeds", args.seeds))
                if v is not None}
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
    cache = pathlib.Path(tempfile.gettempdir()) / SMOKE_CACHE if args.smoke else None
    rec = ex.run_variants(cfg, artifact, key=jax.random.key(0), progress=not args.no_progress,
                          checkpoint_dir=_cli.checkpoint_dir(args), cache_dir=cache,
                          data_dir=args.data_dir)
    _cli.finish(args, rec, figure=lambda path: ex.plot_variants(rec, path), argv=argv)
    return 0
