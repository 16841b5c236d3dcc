"""Table I of Ben-David & Ringel (2019): test accuracy of End-to-end / DGL-LEGO / Random.

The five-step protocol of Sec. VI (see ``layerlab.dgl.experiments``) on MNIST10k (2/2000,
3/1000), CIFAR10_10k (5/2000) and BMNIST2k (2/20, 3/20), 3 seeds per cell, hyper-parameters
chosen on a disjoint balanced validation set.  Rows run separately (``--rows``, e.g. MNIST
and BMNIST on a GPU, CIFAR on a CPU) leave per-row parts in ``<out>/table1_parts/``
(``<name>_parts/`` with ``--out DIR/<name>.json``); every run merges all parts there into
``<out>/table1.json``.

    python -m reproduce.dgl_table1 --paper --rows mnist,bmnist   # GPU
    python -m reproduce.dgl_table1 --record --rows cifar          # CPU, reduced CIFAR row
    python -m reproduce.dgl_table1                                # the same, to scratch/

Without ``--paper`` (``Table1Config.cpu()``): the CIFAR row at N = 2000, widths capped at 256,
3 seeds, 300 Adam steps per LEGO layer (tens of minutes per seed on a 2-core CPU; ``--smoke``
takes seconds).  With ``--paper`` all five rows at the paper's N and widths (a GPU: an MNIST10k
row 5-6 min on an H100; the BMNIST rows 28-55 min per seed on a 2-core CPU).
"""
from __future__ import annotations

import argparse
import shlex
import sys

from reproduce import _cli

# the row ids of layerlab.dgl.experiments.ROWS and the inits of layerlab.nets.INITS, typed out
# so that flags are checked before JAX is imported (tests/reproduce checks they are the same)
ROW_IDS = ("mnist-2x2000", "mnist-3x1000", "cifar-5x2000", "bmnist-2x20", "bmnist-3x20")
INITS = ("glorot", "he", "ntk", "normal", "lecun", "torch")


def _rows(value: str) -> tuple[str, ...]:
    """``--rows``: dataset prefixes (mnist, cifar, bmnist) or row ids -> row ids."""
    out: list[str] = []
    for it in (t.strip().lower() for t in value.split(",") if t.strip()):
        hit = [r for r in ROW_IDS if it in (r, r.split("-")[0])]
        if not hit:
            raise argparse.ArgumentTypeError(
                f"expected a comma-separated list of mnist, cifar, bmnist or the row ids "
                f"{', '.join(ROW_IDS)}; got {value!r} ({it!r} matches none)")
        out += [r for r in hit if r not in out]
    if not out:
        raise argparse.ArgumentTypeError(f"expected at least one row, got {value!r}")
    return tuple(out)


def _full_n(value: str) -> tuple[str, ...]:
    return () if value.strip().lower() == "none" else _rows(value)


def _dgl_batch(value: str) -> int | str:
    if value.strip().lower() == "full":
        return "full"
    try:
        return _cli.positive_int(value)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"expected 'full' or an integer >= 1, got {value!r}") from None


# what --merge-only ignores (it trains nothing): refused with it
_RUN_FLAGS = ("smoke", "rows", "n_mnist", "n_cifar", "n_bmnist", "max_width", "e2e_epochs",
              "dgl_steps", "dgl_batch", "eps_rel", "full_n", "full_n_steps", "readout",
              "init", "seeds", "seed_list", "dgl_lrs", "dgl_wds", "e2e_adam_lrs", "e2e_wds",
              "dgl_lr_extend", "e2e_lr_extend", "reuse_steps", "checkpoint_dir")


def _check(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.seed_list is not None and args.seeds is not None:
        p.error(f"argument --seed-list: it names the seeds to run, so --seeds (how many) has "
                f"no effect with it; got --seed-list {','.join(map(str, args.seed_list))} "
                f"and --seeds {args.seeds}")
    if args.merge_only:
        _cli.refuse_with(p, args, "argument --merge-only: it trains nothing (it merges the "
                         "parts already in <out>/table1_parts), so it takes no run flags",
                         _RUN_FLAGS)


def build_parser() -> argparse.ArgumentParser:
    p = _cli.parser("dgl", "table1", __doc__)
    p.add_argument("--rows", type=_rows, default=None,
                   help="comma list of rows: mnist, cifar, bmnist or ids like mnist-2x2000 "
                   "(default: all five with --paper, cifar-5x2000 without)")
    p.add_argument("--n-mnist", type=_cli.positive_int, default=None,
                   help="MNIST10k training size (default: 10000 with --paper, 2000 without)")
    p.add_argument("--n-cifar", type=_cli.positive_int, default=None,
                   help="CIFAR10_10k training size (default: 10000 with --paper, 2000 without)")
    p.add_argument("--n-bmnist", type=_cli.positive_int, default=None,
                   help="BMNIST2k training size (default: 2000)")
    p.add_argument("--max-width", type=_cli.nonneg_int, default=None,
                   help="cap on the paper's widths (0: no cap; default: none "
                   "with --paper, 256 without)")
    p.add_argument("--e2e-epochs", type=_cli.positive_int, default=None,
                   help="end-to-end epochs (default: 30)")
    p.add_argument("--dgl-steps", type=_cli.positive_int, default=None,
                   help="Adam steps per LEGO layer (default: 1000 with --paper, 300 without)")
    p.add_argument("--dgl-batch", type=_dgl_batch, default=None,
                   help="points per DGL step (an int, or 'full' for the full-N DGL; "
                   "default: 1000 with --paper, 500 without)")
    p.add_argument("--eps-rel", type=_cli.positive_float, default=None,
                   help="eps^2 / mean diag K (default: 0.01)")
    p.add_argument("--full-n", type=_full_n, default=None,
                   help="rows (as --rows) on which to compare full-N vs mini-batch LEGO; "
                   "'none' for none (default: mnist-2x2000 with --paper, none without; not "
                   "part of --smoke: add --full-n bmnist-2x20 to exercise it, ~15 s)")
    p.add_argument("--full-n-steps", type=_cli.positive_int, default=None,
                   help="Adam steps per layer of the full-N vs mini-batch comparison, both "
                   "estimators (default: 300; a full-N MNIST10k step is ~20-35 s on a 2-core CPU)")
    p.add_argument("--dgl-lrs", type=_cli.float_list(True), default=None,
                   help="Adam learning-rate grid of every LEGO layer (default: 1e-4,3e-4,1e-3 with "
                   "--paper, 3e-4,1e-3 without; --smoke: 1e-3)")
    p.add_argument("--dgl-wds", type=_cli.float_list(False), default=None,
                   help="weight-decay grid of every LEGO layer (default: 0,1e-4 with --paper, 0 "
                   "without; --smoke: 0,1e-4)")
    p.add_argument("--e2e-adam-lrs", type=_cli.float_list(True), default=None,
                   help="end-to-end Adam learning-rate grid, MNIST and CIFAR rows "
                   "(default: 1e-4,3e-4,1e-3 with --paper, 3e-4,1e-3 without; --smoke: "
                   "1e-4,3e-4,1e-3)")
    p.add_argument("--e2e-wds", type=_cli.float_list(False), default=None,
                   help="end-to-end weight-decay grid (default: 0,1e-4 with --paper, 0 without; "
                   "--smoke: 0,1e-4)")
    p.add_argument("--dgl-lr-extend", type=_cli.nonneg_int, default=None,
                   help="learning rates tried past the top of a LEGO layer's grid, one at a "
                   "time while the layer picks the largest rate tried, each the top times the "
                   "ratio of the grid's two largest (default: 0, the grid as given; a separate "
                   "--out: parts of different protocols do not merge)")
    p.add_argument("--e2e-lr-extend", type=_cli.nonneg_int, default=None,
                   help="the same for the end-to-end grid (default: 0)")
    p.add_argument("--reuse-steps", action="append", default=None, metavar="DIR",
                   help="another run's --checkpoint-dir (repeatable): each finished step "
                   "(end-to-end run, LEGO layer) found there with exactly this run's settings, "
                   "data, key and layers below is reused, the rest trained; for an ablation "
                   "beside the protocol (a run removes its own steps once its part is written: "
                   "reuse a copy; default: none, every step trained here)")
    p.add_argument("--seed-list", type=_cli.int_list(0), default=None,
                   help="comma list of the seed indices to run, e.g. 1 to run the second "
                   "seed alone with the key it has in a full run (default: 0 .. --seeds - 1); "
                   "every part in the folder is merged")
    p.add_argument("--readout", choices=("ridge", "iterative"), default=None,
                   help="step 5's classifier: closed-form ridge (default) or trained under MSE "
                   "with the row's optimizer (the paper's text); use a separate --out, parts "
                   "of different protocols do not merge")
    p.add_argument("--init", choices=INITS, default=None,
                   help="initialisation of the net (layerlab.nets.INITS; default he, 'torch' "
                   "for PyTorch's nn.Linear default)")
    p.add_argument("--merge-only", action="store_true",
                   help="do not train: merge the parts already in <out>/table1_parts (no "
                   "run flags with it)")
    p.add_check(_check)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import jax

    from layerlab.dgl import experiments as ex

    C = ex.Table1Config
    cfg = C.paper() if args.paper else C.smoke() if args.smoke else C.cpu()
    kw = {}
    if args.rows is not None:
        kw["rows"] = args.rows
    for name in ("n_mnist", "n_cifar", "n_bmnist", "e2e_epochs", "dgl_steps", "eps_rel",
                 "readout", "init", "full_n_steps", "dgl_lrs", "dgl_wds", "e2e_adam_lrs",
                 "e2e_wds", "dgl_lr_extend", "e2e_lr_extend"):
        if getattr(args, name) is not None:
            kw[name] = getattr(args, name)
    if args.seeds is not None:
        kw["seeds"] = args.seeds
    if args.max_width is not None:
        kw["max_width"] = None if args.max_width == 0 else args.max_width
    if args.dgl_batch is not None:
        kw["dgl_batch"] = None if args.dgl_batch == "full" else args.dgl_batch
    if args.full_n is not None:
        kw["full_n_rows"] = args.full_n
    if args.data_dir is not None:
        kw["data_dir"] = args.data_dir
    cfg = ex.Table1Config(**{**cfg.__dict__, **kw})
    parts = _cli.out_dir(args) / f"{_cli.out_stem(args)}_parts"  # one per named record
    flags = sys.argv[1:] if argv is None else list(argv)
    command = shlex.join(["python", "-m", "reproduce.dgl_table1", *flags])
    if args.merge_only:
        rec = ex.merge_table1(parts)
    else:
        rec = ex.run_table1(cfg, key=jax.random.key(0), progress=not args.no_progress,
                            parts_dir=parts, command=command,
                            checkpoint_dir=_cli.checkpoint_dir(args), seed_list=args.seed_list,
                            reuse_steps=args.reuse_steps or ())
    _cli.finish(args, rec, figure=lambda path: ex.plot_table1(rec, path), argv=flags)
    return 0


if __name__ == "__main__":
    _cli.run(main)
