"""Shared command lines of the dmn table scripts (no JAX import at module level)."""
from __future__ import annotations

import argparse
import re

from reproduce import _cli

# the data sets of the dmn experiments (layerlab.dmn.experiments: the tables' rows, Fig6Config,
# TimescalesConfig.cnn_datasets), typed out so that flags are checked before JAX is imported
# (tests/reproduce checks they are the experiments' own)
DATASETS = ("mnist", "cifar10", "cifar100")


def stem(artifact: str):
    """The record's file name a run with these flags writes (``variant``, from the flags)."""
    def name(args) -> str:
        return (artifact + ("_paper_preset" if getattr(args, "preset", None) == "paper" else "")
                + ("_naive" if getattr(args, "pca", None) == "naive" else "")
                + ("_best" if getattr(args, "report", None) == "best" else ""))
    return name


def parser(artifact: str, doc: str | None):
    """``_cli.parser`` for ``dmn_<artifact>``."""
    return _cli.parser("dmn", artifact, doc, stem=stem(artifact))


def table_parser(artifact: str, doc: str | None):
    """Flags of a table-like dmn reproduction (Tables 3-5, Fig. 10)."""
    p = parser(artifact, doc)
    dmn_flags(p)
    return p


def dmn_flags(p):
    """The flags every dmn table script shares."""
    p.add_argument("--preset", choices=("authors", "paper"), default=None,
                   help="DMN selection rules: the authors' code or the paper's text "
                   "(default: authors)")
    pca_flag(p)
    p.add_argument("--datasets", type=_cli.name_list(DATASETS), default=None,
                   help=f"comma-separated, of {', '.join(DATASETS)}: run only these datasets' "
                   "rows (e.g. mnist; refused when the table has no row of them; default: all)")
    p.add_argument("--epochs", type=_cli.positive_int, default=None,
                   help="training epochs (default: config's)")
    p.add_argument("--n-train", type=_cli.positive_int, default=None,
                   help="training images per dataset (default: config's; paper: all)")
    p.add_argument("--n-test", type=_cli.positive_int, default=None,
                   help="test images per dataset (default: config's; paper: all)")
    p.add_argument("--report", choices=("final", "best"), default=None,
                   help="accuracy after the last epoch, or the best epoch (authors' checkpoint) "
                   "(default: final)")
    p.add_argument("--rows", type=_cli.int_list(1), default=None,
                   help="comma-separated 1-based numbers of the paper's table rows to run "
                   "(e.g. 6,7,8: Table 2's first CIFAR-10 rows); default: every row")
    p.add_argument("--no-conv-rows", action="store_true",
                   help="skip the rows that train conv layers end to end (c tokens): the "
                   "DMN-only rows on a CPU; the record is then reduced")
    p.add_argument("--merge", nargs="+", default=None, metavar="RECORD",
                   help="train nothing: merge these records of the same table (each ran some "
                   "rows, e.g. with --rows on different machines) into one record of every "
                   "row, later records replacing earlier ones row by row; rows no record "
                   "holds are marked not run. Table 2: a DMN-only record (run with "
                   "--no-convnet) replaces the DMN half of its rows only, keeping the ConvNets "
                   "of the records before it. Writes to scratch/dmn/ unless --record "
                   "(results/dmn/<artifact>.json) or --out (e.g. --out "
                   "results/dmn/table2.json)")


def pca_flag(p):
    """``--pca class|naive`` (``TableConfig.pca`` / ``Fig6Config.pca``)."""
    p.add_argument("--pca", choices=("class", "naive"), default=None,
                   help="class-based PCA (eq. 15 per class; the presets' own, default) or "
                   "naive PCA of the class-blind density matrix (the paper's Sec. 5: Figs. 6 "
                   "and 10 'use a naive DMN, i.e. agnostic to labels')")


_RUN_FLAGS = ("paper", "smoke", "preset", "pca", "datasets", "epochs", "n_train", "n_test",
              "report", "rows", "no_conv_rows", "no_convnet", "seeds", "checkpoint_dir",
              "filters")


def merge_main(artifact: str, args, argv=None) -> int:
    """``--merge``: write the merged record (and its figure) of ``args.merge``."""
    used = [f"--{f.replace('_', '-')}" for f in _RUN_FLAGS if getattr(args, f, None)]
    if used:
        raise SystemExit(f"--merge trains nothing, so it takes no run flags; got {used} "
                         "(the protocol comes from the records, --no-convnet too: a record "
                         "run with it merges as the DMN half of its rows, for Fig. 6 the DMN "
                         "curves of its datasets; write to results/ with --record or --out)")
    from layerlab.dmn import experiments as ex

    try:
        if artifact == "fig6":
            rec = ex.merge_fig6(args.merge, data_dir=args.data_dir)
        else:
            rec = ex.merge_tables(artifact, args.merge, data_dir=args.data_dir)
    except (ValueError, OSError) as e:
        raise SystemExit(f"--merge: {e}") from None
    plot = ex.plot_fig6 if artifact == "fig6" else ex.plot_table
    _cli.finish(args, rec, figure=lambda path: plot(rec, path), argv=argv,
                variant=variant(rec))
    return 0


def table_main(artifact: str, doc: str | None, argv=None, *, run: str = "run_table") -> int:
    """Build the artifact's config from the flags, run it, write the record and figure."""
    p = table_parser(artifact, doc)
    args = p.parse_args(argv)
    if args.merge:
        return merge_main(artifact, args, argv)
    import jax

    from layerlab.dmn import experiments as ex

    cfg = config(p, args, artifact)
    rec = getattr(ex, run)(cfg, key=jax.random.key(0), progress=not args.no_progress,
                       checkpoint_dir=_cli.checkpoint_dir(args))
    _cli.finish(args, rec, figure=lambda path: ex.plot_table(rec, path), argv=argv,
                variant=variant(rec))
    return 0


def variant(record) -> str:
    """The file-name suffix of a record run under another protocol than the main records'
    (``--preset paper``: ``_paper_preset``; ``--pca naive``: ``_naive``; ``--report best``:
    ``_best``), so that ``--paper`` or ``--record`` without an ``--out`` file name never writes
    it over the main record."""
    cfg = record.config if isinstance(record.config, dict) else {}
    return (("_paper_preset" if cfg.get("preset") == "paper" else "")
            + ("_naive" if cfg.get("pca", "class") != "class" else "")
            + ("_best" if cfg.get("report", "final") != "final" else ""))


def config(p: argparse.ArgumentParser, args, artifact: str, **changes):
    """``experiments.table_config`` for the flags (and ``changes``); flags it cannot use are
    refused with ``p.error`` before anything trains: ``--rows`` beyond the table, filters
    (``--datasets``, ``--rows``, ``--no-conv-rows``) that leave no row."""
    from layerlab.dmn import experiments as ex

    scale = "paper" if args.paper else "smoke" if args.smoke else "default"
    try:
        cfg = ex.table_config(
            artifact, scale, preset=args.preset, pca=args.pca, seeds=args.seeds,
            epochs=args.epochs, n_train=args.n_train, n_test=args.n_test, report=args.report,
            data_dir=args.data_dir, datasets=args.datasets,
            conv_rows=False if args.no_conv_rows else None, row_numbers=args.rows, **changes)
    except ValueError as e:
        span = re.search(r"\((\d+\.\.\d+)\)", str(e))
        if "row_numbers" not in str(e) or span is None:
            p.error(str(e))
        p.error(f"argument --rows: expected row numbers {span.group(1)} of {artifact}, got "
                f"{','.join(map(str, args.rows))}")
    if not cfg.rows:
        full = ex.table_config(artifact, scale).rows
        used = [f for f, v in (("--datasets " + ",".join(args.datasets or ()), args.datasets),
                               (f"--rows {','.join(map(str, args.rows or ()))}", args.rows),
                               ("--no-conv-rows", args.no_conv_rows)) if v]
        sets = ", ".join(dict.fromkeys(r.dataset for r in full))
        p.error(f"{' and '.join(used) or 'the flags'}: no row of {artifact} is left to run "
                f"(the {scale} configuration's {len(full)} row(s) are of {sets})")
    return cfg
