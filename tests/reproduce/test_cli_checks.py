"""The reproduction scripts refuse bad flags when parsing (exit status 2, the flag, what was
expected and what came), before JAX work or training; a missing dataset or a run in which no
row ran ends with the loader's message and status 1, not a traceback; --record never writes a
smoke record or replaces a paper-scale one.  Parse-time checks only: nothing here trains."""
from __future__ import annotations

import importlib
import json
import pathlib
import runpy
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPTS = sorted(p.stem for p in (REPO / "reproduce").glob("*.py")
                 if not p.name.startswith("_") and p.stem != "make_index")


def _parser(name):
    return importlib.import_module(f"reproduce.{name}").build_parser()


def _options(name) -> set[str]:
    import argparse
    return {s for a in _parser(name)._actions if a.help != argparse.SUPPRESS
            for s in a.option_strings}


def _refused(name, argv, capsys) -> str:
    """``main(argv)`` exits with status 2 while parsing; returns stderr (one line)."""
    with pytest.raises(SystemExit) as e:
        importlib.import_module(f"reproduce.{name}").main(argv)
    assert e.value.code == 2, e.value.code
    return " ".join(capsys.readouterr().err.split())


@pytest.mark.parametrize("name", SCRIPTS)
def test_seeds_is_a_positive_count_or_refused(name, capsys):
    if "--seeds" in _options(name):
        for bad, shown in (("0", "0"), ("-2", "-2"), ("x", "'x'")):
            err = _refused(name, ["--seeds", bad], capsys)
            assert f"argument --seeds: expected an integer >= 1, got {shown}" in err, err
        assert _parser(name).parse_args(["--seeds", "1"]).seeds == 1
    else:  # a script without a number of seeds says so, and why
        err = _refused(name, ["--seeds", "3"], capsys)
        assert "argument --seeds: this script does not take it (" in err, err


@pytest.mark.parametrize("name", SCRIPTS)
def test_record_refuses_smoke(name, capsys):
    err = _refused(name, ["--smoke", "--record"], capsys)
    assert "argument --record: not allowed with argument --smoke" in err, err


def test_record_refuses_to_replace_a_paper_scale_record(capsys):
    committed = json.loads((REPO / "results" / "dgl" / "fig4.json").read_text())
    assert committed["scale"] == "paper"
    err = _refused("dgl_fig4", ["--record"], capsys)
    assert "argument --record: results/dgl/fig4.json is a paper-scale record" in err
    assert "only --paper does" in err
    # the record a flag set writes is the one checked: fig2_cifar10 is reduced, fig2 paper
    assert json.loads((REPO / "results" / "gnrev" / "fig2.json").read_text())["scale"] == "paper"
    assert _parser("gnrev_fig2").parse_args(["--record", "--dataset", "cifar10"]).record
    assert "results/gnrev/fig2.json" in _refused("gnrev_fig2", ["--record"], capsys)
    # --paper replaces it; --out writes elsewhere
    assert _parser("dgl_fig4").parse_args(["--record", "--paper"]).paper


def test_a_reduced_record_of_a_paper_run_goes_to_scratch(tmp_path, monkeypatch, capsys):
    """--paper (or --record with a merge) whose record comes out reduced: the paper-scale
    record in results/ is kept, this run's goes to scratch/<paper>/, exit status 1."""
    from layerlab.record import Record, Row
    from reproduce import _cli

    monkeypatch.setattr(_cli, "REPO", tmp_path)
    committed = tmp_path / "results" / "dmn" / "table2.json"
    committed.parent.mkdir(parents=True)
    committed.write_text(json.dumps({"scale": "paper"}))
    args = _cli.parser("dmn", "table2", "t").parse_args(["--paper"])
    rec = Record("dmn", "table2", "t", "reduced", {}, rows=[Row("a", 1.0)], wall_s=1.0,
                 command="python -m reproduce.dmn_table2 --paper")
    with pytest.raises(SystemExit) as e:
        _cli.finish(args, rec)
    assert e.value.code == 1
    assert json.loads(committed.read_text()) == {"scale": "paper"}
    assert json.loads((tmp_path / "scratch" / "dmn" / "table2.json").read_text())["rows"]
    assert "not written over results/dmn/table2.json" in capsys.readouterr().err


def test_a_committed_record_is_not_replaced_by_one_that_loses_its_numbers(
        tmp_path, monkeypatch, capsys):
    """A reduced --paper record replaced a committed *reduced* one with fewer seeds or rows
    (``--paper --seeds 1`` over the 3-seed dgl table1), and ``--out results/...`` skipped
    every guard (a smoke run replaced a paper-scale record, a run in which no row ran was
    written): both go to scratch/ now (exit 1); one that keeps every number is written."""
    from layerlab.record import Record, Row
    from reproduce import _cli

    monkeypatch.setattr(_cli, "REPO", tmp_path)
    committed = tmp_path / "results" / "dgl" / "table1.json"
    committed.parent.mkdir(parents=True)
    old = {"scale": "reduced", "rows": [
        {"name": "a", "ours": 1.0, "seeds": 3}, {"name": "b", "ours": 2.0, "seeds": 1},
        {"name": "c", "ours": None, "seeds": 0}]}
    committed.write_text(json.dumps(old))

    def rec(rows, scale="reduced"):
        return Record("dgl", "table1", "t", scale, {}, rows=rows, wall_s=1.0,
                      command="python -m reproduce.dgl_table1 --paper")

    def run(argv, record):
        args = _cli.parser("dgl", "table1", "t").parse_args(argv)
        with pytest.raises(SystemExit) as e:
            _cli.finish(args, record)
        return e.value.code

    scratch = tmp_path / "scratch" / "dgl" / "table1.json"
    for rows, why in (([Row("a", 1.1, seeds=1), Row("b", 2.0)],
                       "its row 'a' has 3 seeds, this run's 1"),
                      ([Row("a", 1.1, seeds=3)], "its row 'b' ran (1 seeds) and this run's did "
                                                  "not"),
                      ([Row("a", 1.1, seeds=3), Row("b", None, seeds=0)], "its row 'b' ran")):
        assert run(["--paper"], rec(rows)) == 1
        assert json.loads(committed.read_text()) == old
        assert json.loads(scratch.read_text())["rows"][0]["ours"] == 1.1
        err = capsys.readouterr().err
        assert "not written over results/dgl/table1.json: this run's 'reduced' record would " \
               f"lose numbers of it: {why}" in err
    # --out into results/ is guarded alike, however it is spelt
    monkeypatch.chdir(tmp_path)
    assert run(["--out", "results/dgl"], rec([Row("a", 1.1, seeds=1), Row("b", 2.0)])) == 1
    assert json.loads(committed.read_text()) == old
    with pytest.raises(_cli.NothingRan):
        _cli.finish(_cli.parser("dgl", "table1", "t").parse_args(
            ["--out", str(tmp_path / "results" / "dgl" / "table1.json")]),
            rec([Row("a", None, seeds=0, note="not run: no data")]))
    assert json.loads(committed.read_text()) == old
    paper = tmp_path / "results" / "dgl" / "fig4.json"
    paper.write_text(json.dumps({"scale": "paper"}))
    args = _cli.parser("dgl", "fig4", "t").parse_args(["--smoke", "--out", "results/dgl"])
    with pytest.raises(SystemExit):
        _cli.finish(args, Record("dgl", "fig4", "t", "reduced", {}, rows=[Row("a", 1.0)],
                                 wall_s=1.0, command="x"))
    assert json.loads(paper.read_text()) == {"scale": "paper"}
    # every number kept (the same seeds, a row more): written over it
    path = _cli.finish(_cli.parser("dgl", "table1", "t").parse_args(["--paper"]),
                       rec([Row("a", 1.2, seeds=3), Row("b", 2.1), Row("c", 3.0)]))
    assert path == committed and json.loads(committed.read_text())["rows"][2]["ours"] == 3.0
    # outside results/ nothing is guarded (an explicit --out elsewhere writes)
    elsewhere = tmp_path / "mine" / "table1.json"
    elsewhere.parent.mkdir()
    elsewhere.write_text(json.dumps(old))
    _cli.finish(_cli.parser("dgl", "table1", "t").parse_args(["--out", str(elsewhere)]),
                rec([Row("a", 1.1)]))
    assert json.loads(elsewhere.read_text())["rows"][0]["ours"] == 1.1


@pytest.mark.parametrize("name, argv, want", [
    ("dmn_fig6", ["--smoke", "--datasets", "cifar100x"],
     "argument --datasets: expected a comma-separated list of mnist, cifar10, cifar100; "
     "got 'cifar100x'"),
    ("dmn_table2", ["--smoke", "--datasets", "svhn"], "argument --datasets: expected"),
    ("dmn_table3", ["--datasets", "mnist,foo"], "('foo' unknown)"),
    ("gnrev_appM", ["--smoke", "--datasets", "foo"],
     "argument --datasets: expected a comma-separated list of wine, superconductivity"),
    ("dmn_timescales", ["--cnn-datasets", "svhn"], "argument --cnn-datasets: expected"),
    ("dmn_timescales", ["--parts", "foo"],
     "argument --parts: expected a comma-separated list of fig2, fig3, fig5, fig7"),
    ("dgl_table1", ["--rows", "foo"], "argument --rows: expected a comma-separated list of "
     "mnist, cifar, bmnist or the row ids"),
    ("dgl_table1", ["--full-n", "mnist,x"], "argument --full-n: expected"),
])
def test_unknown_names_are_refused_when_parsing(name, argv, want, capsys):
    assert want in _refused(name, argv, capsys)


@pytest.mark.parametrize("name, argv, want", [
    ("dgl_fig1", ["--widths", "abc"], "argument --widths: expected a comma-separated list of "
     "integers >= 1 (e.g. 2,4,8), got 'abc'"),
    ("dgl_fig1", ["--depths", "2,0"], "argument --depths: expected"),
    ("dgl_fig1", ["--num-nets", "1"], "argument --num-nets: expected an integer >= 2, got 1"),
    ("dgl_fig1", ["--n-points", "1"], "argument --n-points: expected an integer >= 2, got 1"),
    ("dgl_table1", ["--dgl-batch", "abc"],
     "argument --dgl-batch: expected 'full' or an integer >= 1, got 'abc'"),
    ("dgl_table1", ["--max-width", "-1"], "argument --max-width: expected an integer >= 0"),
    ("dgl_table1", ["--eps-rel", "nan"], "argument --eps-rel: expected a finite number > 0"),
    ("dgl_table1", ["--init", "xavier"], "argument --init: invalid choice: 'xavier'"),
    ("dgl_table1", ["--dgl-lrs", "1e-3,0"], "argument --dgl-lrs: expected a comma-separated "
     "list of numbers > 0 (e.g. 1e-4,1e-3); got '1e-3,0' ('0')"),
    ("dgl_table1", ["--e2e-wds", "0,-1e-4"], "argument --e2e-wds: expected a comma-separated "
     "list of numbers >= 0"),
    ("dgl_table1", ["--dgl-wds", "nan"], "argument --dgl-wds: expected"),
    ("dgl_table1", ["--seed-list", "1,-1"], "argument --seed-list: expected a comma-separated "
     "list of integers >= 0"),
    ("dgl_table1", ["--seed-list", "1,2", "--seeds", "3"], "argument --seed-list: it names the "
     "seeds to run, so --seeds (how many) has no effect with it; got --seed-list 1,2 and "
     "--seeds 3"),
    ("dgl_fig4", ["--epochs", "-1"], "argument --epochs: expected an integer >= 1, got -1"),
    ("dgl_fig4", ["--lr", "0"], "argument --lr: expected a finite number > 0, got 0"),
    ("dgl_fig4", ["--seed", "-1"], "argument --seed: expected an integer >= 0, got -1"),
    ("dmn_table2", ["--rows", "6,x"], "argument --rows: expected a comma-separated list"),
    ("dmn_fig6", ["--filters", "0"], "argument --filters: expected"),
    ("dmn_timescales", ["--mlp-epochs", "0"], "argument --mlp-epochs: expected an integer >= 1"),
    ("gnrev_fig2", ["--epochs", "-1"], "argument --epochs: expected an integer >= 1, got -1"),
    ("gnrev_fig2", ["--n-train", "-5"], "argument --n-train: expected an integer >= 0, got -5"),
    ("gnrev_appE", ["--epochs", "0"], "argument --epochs: expected an integer >= 1, got 0"),
    ("gnrev_fig1", ["--steps", "-1"], "argument --steps: expected an integer >= 1, got -1"),
    ("gnrev_fig1", ["--depth", "0"], "argument --depth: expected an integer >= 1, got 0"),
    ("bottleneck_a_fig2", ["--merge-into", "no/such/record.json"],
     "argument --merge-into: expected an a_fig2 record file, got no/such/record.json"),
])
def test_bad_values_are_refused_when_parsing(name, argv, want, capsys):
    assert want in _refused(name, argv, capsys)


def test_row_filters_that_leave_nothing_are_refused_before_training(capsys):
    """dmn: --rows beyond the table, or --datasets/--rows that leave no row, stop before any
    run (the config is built, nothing trains)."""
    assert ("argument --rows: expected row numbers 1..14 of table2, got 99"
            in _refused("dmn_table2", ["--smoke", "--rows", "99"], capsys))
    err = _refused("dmn_table3", ["--smoke", "--datasets", "cifar10"], capsys)
    assert "--datasets cifar10: no row of table3 is left to run" in err and "of mnist" in err


@pytest.mark.parametrize("flag", ["--out", "--checkpoint-dir", "--cache-dir"])
def test_folders_that_cannot_be_written_are_refused_when_parsing(flag, tmp_path, capsys):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    for bad, why in ((a_file, "which is a file"), (a_file / "sub", "is a file, so no folder")):
        err = _refused("gnrev_fig2", [flag, str(bad)], capsys)
        assert f"argument {flag}: expected a folder" in err and why in err, err
    if flag == "--out":  # a record's file name under a file
        err = _refused("dgl_fig4", ["--out", str(a_file / "x.json")], capsys)
        assert "argument --out: expected a folder" in err and "a_file" in err
    new = tmp_path / "new" / "deeper"
    args = _parser("gnrev_fig2").parse_args([flag, str(new)])
    assert new.is_dir() and pathlib.Path(getattr(args, flag[2:].replace("-", "_"))) == new


def test_conflicting_flags_are_refused(capsys):
    err = _refused("gnrev_fig1", ["--smoke", "--no-bottleneck", "--bottleneck", "512"], capsys)
    assert "argument --bottleneck: not allowed with argument --no-bottleneck" in err
    err = _refused("dgl_table1", ["--smoke", "--merge-only", "--rows", "mnist"], capsys)
    assert "argument --merge-only: it trains nothing" in err and "got --smoke, --rows" in err
    assert _parser("dgl_table1").parse_args(["--merge-only", "--record"]).merge_only
    # the run flags added since, and a flag given as 0 (0 == False once let it through)
    err = _refused("dgl_table1", ["--merge-only", "--seed-list", "1", "--dgl-lrs", "1e-3",
                                  "--e2e-wds", "0", "--max-width", "0", "--dgl-lr-extend",
                                  "0"], capsys)
    assert "got --max-width, --seed-list, --dgl-lrs, --e2e-wds, --dgl-lr-extend" in err, err
    err = _refused("dgl_fig1", ["--checkpoint-dir", "ck"], capsys)
    assert "argument --checkpoint-dir: this script does not take it (Monte-Carlo" in err
    assert "--checkpoint-dir" not in _options("dgl_fig1")


def test_dgl_table1_passes_the_grids_and_seed_list_to_run_table1(tmp_path, monkeypatch):
    from layerlab.dgl import experiments as ex
    from reproduce import dgl_table1

    seen = {}

    def fake_run(cfg, **kw):
        seen.update(cfg=cfg, **kw)
        return ex.merge_table1(tmp_path / "none")

    monkeypatch.setattr(ex, "run_table1", fake_run)
    monkeypatch.setattr(dgl_table1._cli, "finish", lambda *a, **k: None)
    dgl_table1.main(["--paper", "--rows", "cifar", "--seed-list", "2,1", "--dgl-lrs",
                     "1e-4,3e-4,1e-3,3e-3", "--dgl-wds", "0", "--e2e-adam-lrs", "1e-3,3e-3",
                     "--e2e-wds", "0,1e-4", "--dgl-lr-extend", "2", "--e2e-lr-extend", "0",
                     "--reuse-steps", "a", "--reuse-steps", "b",
                     "--out", str(tmp_path), "--no-progress"])
    assert seen["reuse_steps"] == ["a", "b"]
    cfg = seen["cfg"]
    assert cfg.dgl_lr_extend == 2 and cfg.e2e_lr_extend == 0
    assert seen["seed_list"] == (2, 1) and cfg.seeds == 3
    assert cfg.dgl_lrs == (1e-4, 3e-4, 1e-3, 3e-3) and cfg.dgl_wds == (0.0,)
    assert cfg.e2e_adam_lrs == (1e-3, 3e-3) and cfg.e2e_wds == (0.0, 1e-4)
    assert cfg.rows == ("cifar-5x2000",) and cfg.is_paper_scale("cifar-5x2000")


def test_a_missing_dataset_ends_with_its_message_not_a_traceback(tmp_path, monkeypatch,
                                                                 capsys):
    """``python -m reproduce.gnrev_appM --datasets superconductivity`` without the file: the
    loader's message (where it looked, how to get it) and exit status 1."""
    empty = tmp_path / "data"
    empty.mkdir()
    monkeypatch.setenv("LAYERLAB_DATA", str(empty))
    monkeypatch.setattr(sys, "argv", [
        str(REPO / "reproduce" / "gnrev_appM.py"), "--smoke", "--datasets", "superconductivity",
        "--data-dir", str(empty), "--out", str(tmp_path / "out"), "--no-progress"])
    monkeypatch.delitem(sys.modules, "reproduce.gnrev_appM", raising=False)  # run as -m does
    with pytest.raises(SystemExit) as e:
        runpy.run_module("reproduce.gnrev_appM", run_name="__main__")
    assert e.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("reproduce.gnrev_appM: regression dataset 'superconductivity' not "
                          "found") and "Traceback" not in err
    assert "Looked for:" in err and str(empty) in err
    assert "python -m layerlab.data download superconductivity" in err


def test_a_run_in_which_no_row_ran_prints_the_whole_message_and_exits_1(tmp_path, capsys):
    """dmn_table5 without CIFAR-100 (a default-style run to --out): the record is written (every
    row marked not run, as documented) and the loader's whole message printed; status 1."""
    from reproduce import _cli, dmn_table5

    empty = tmp_path / "data"
    empty.mkdir()
    try:
        dmn_table5.main(["--smoke", "--data-dir", str(empty), "--out", str(tmp_path / "o"),
                         "--no-progress"])
    except _cli.NothingRan as e:
        assert e.code == 1
    else:
        pytest.fail("dmn_table5 ran rows without CIFAR-100 files")
    err = capsys.readouterr().err
    assert "dmn table5: no row ran -- Dataset 'cifar100' not found" in err
    assert "Looked for:" in err and "Expected, under a data directory" in err
    assert "exit status 1" in err
    rec = json.loads((tmp_path / "o" / "table5.json").read_text())
    assert all(r["ours"] is None for r in rec["rows"])


def test_typed_out_names_are_the_experiments_own():
    """Names checked before JAX is imported (typed out in the scripts) match the code."""
    from layerlab import nets
    from layerlab.dgl import experiments as dgl
    from layerlab.dmn import experiments as dmn
    from layerlab.gnrev import experiments as gnrev
    from reproduce import _dmn, dgl_table1, dmn_timescales, gnrev_appM

    assert dgl_table1.ROW_IDS == tuple(dgl.ROWS) and dgl_table1.INITS == nets.INITS
    assert dmn_timescales.PARTS == dmn.TIMESCALE_PARTS
    assert _dmn.DATASETS == dmn.Fig6Config().datasets
    assert _dmn.DATASETS == dmn.TimescalesConfig.paper().cnn_datasets
    for art in ("table2", "table3", "table4", "table5"):
        assert {r.dataset for r in dmn.table_rows(art)} <= set(_dmn.DATASETS)
    assert gnrev_appM.DATASETS == gnrev.RegressionConfig.paper().datasets


def test_variant_help_states_the_configurations():
    """The variant scripts' --help (made from _gnrev.VARIANTS_*) is variants_config's."""
    from layerlab.gnrev import experiments as ex
    from reproduce import _gnrev

    P, C = _gnrev.VARIANTS_PAPER, _gnrev.VARIANTS_CPU
    for art in ("appE", "appF", "appI", "appJ", "appK", "fig5"):
        paper, cpu = ex.variants_config(art, "paper"), ex.variants_config(art, "cpu")
        assert (paper.batch_size, paper.depth, paper.seeds) == (P["batch"], P["depth"],
                                                                P["seeds"])
        assert (cpu.n_train, cpu.batch_size, cpu.depth, cpu.seeds) == (
            C["n_train"], C["batch"], C["depth"], C["seeds"])
        key = "epochs_appE" if art == "appE" else "epochs"
        assert (paper.epochs, cpu.epochs) == (P[key], C[key])
        if art == "fig5":
            assert paper.bottleneck is None and cpu.bottleneck is None
        else:
            assert (paper.bottleneck, cpu.bottleneck, cpu.init_bottleneck) == (
                P["bottleneck"], C["bottleneck"], C["init_bottleneck"])
        for cfg, want in ((paper, P), (cpu, C)):
            lrs = {a.name: a.lrs[0] for a in cfg.arms}
            assert lrs["adam"] == pytest.approx(want["adam"])
            gn = want["gn"] / 4 if art == "appI" else want["gn"]
            assert min(v for k, v in lrs.items() if k.startswith("gn")) == pytest.approx(gn)
            assert lrs.get("sgd") == (pytest.approx(want["sgd"]) if art in ("fig5", "appE")
                                      else None)
        text = " ".join(_parser(f"gnrev_{art}").description.split())
        assert f"(record {art}_mnist)" in text
        assert ("without inverted bottleneck" in text) == (art == "fig5")
        assert ("d'=512 with the paper's d'=8000 init variance" in text) == (art != "fig5")
        assert f"{C[key]} epochs" in text and f"{P[key]} epochs" in text
    text = " ".join(_parser("gnrev_fig5").description.split())
    assert "reproduce.gnrev_fig1 --no-bottleneck" in text


def test_gnrev_help_states_fig1_and_cache_defaults():
    from layerlab.gnrev import experiments as ex

    cfg = ex.FullBatchConfig()
    doc = _parser("gnrev_fig1").description
    assert f"n={cfg.n_train}, d'={cfg.bottleneck}, {cfg.steps} steps" in doc
    helps = {a.dest: " ".join(a.help.split()) for a in _parser("gnrev_fig2")._actions if a.help}
    assert "$TMPDIR/layerlab_gnrev_smoke_cache with --smoke" in helps["cache_dir"]


def test_seeds_and_seed_reach_the_configuration(monkeypatch, tmp_path):
    """--seeds is a count where a script takes it (a_fig2: both panels; dgl_fig1: repeats,
    also 1); dgl_fig4's one run takes --seed, its PRNG seed."""
    import jax

    from layerlab.bottleneck import experiments as bex
    from layerlab.dgl import experiments as dex
    from reproduce import bottleneck_a_fig2, dgl_fig1, dgl_fig4

    seen = {}

    def fake(name):
        def run(cfg, **kw):
            seen[name] = (cfg, kw)
            raise SystemExit(0)
        return run

    monkeypatch.setattr(bex, "run_a_fig2", fake("a_fig2"))
    monkeypatch.setattr(dex, "run_fig1", fake("fig1"))
    monkeypatch.setattr(dex, "run_fig4", fake("fig4"))
    out = ["--out", str(tmp_path)]
    for mod, argv in ((bottleneck_a_fig2, ["--smoke", "--seeds", "4"]),
                      (dgl_fig1, ["--smoke", "--seeds", "1"]),
                      (dgl_fig4, ["--smoke", "--seed", "5"])):
        with pytest.raises(SystemExit):
            mod.main([*argv, *out])
    cfg = seen["a_fig2"][0]
    assert (cfg.mnist_seeds, cfg.teacher_seeds) == (4, 4)
    assert seen["fig1"][0].repeats == 1
    key = seen["fig4"][1]["key"]
    assert jax.random.key_data(key).tolist() == jax.random.key_data(jax.random.key(5)).tolist()


def test_a_refused_command_makes_no_folder_and_out_expands_the_home(tmp_path, monkeypatch):
    """Folders are made only once every flag passed: a refused command leaves none behind;
    ``--out ~/x`` is checked, made and used as the same expanded folder."""
    import importlib

    appE = importlib.import_module("reproduce.gnrev_appE")
    ck = tmp_path / "made_by_refused" / "ck"
    with pytest.raises(SystemExit) as e:
        appE.build_parser().parse_args(["--checkpoint-dir", str(ck), "--seeds", "0"])
    assert e.value.code == 2 and not ck.parent.exists()
    out = tmp_path / "refused_out"
    with pytest.raises(SystemExit):
        appE.build_parser().parse_args(["--out", str(out), "--smoke", "--record"])
    assert not out.exists()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    args = appE.build_parser().parse_args(["--out", "~/x", "--smoke"])
    assert args.out == tmp_path / "home" / "x" and args.out.is_dir()
    args = appE.build_parser().parse_args(["--checkpoint-dir", str(ck), "--smoke"])
    assert args.checkpoint_dir == ck and ck.is_dir()


def test_the_index_shows_commands_that_rewrite_the_record():
    """The index's command column: a machine's --out (``/root/out/...``) points at the record
    itself, --checkpoint-dir / --cache-dir / --data-dir are left out (both spellings); a
    command without them is shown as it is."""
    from reproduce.make_index import REPO, shown_command

    rec = REPO / "results" / "gnrev" / "fig2.json"
    assert shown_command("python -m reproduce.gnrev_fig2 --paper --cache-dir ck "
                         "--checkpoint-dir=ck --out /root/out/r3/fig2.json", rec) == \
        "python -m reproduce.gnrev_fig2 --paper --out results/gnrev/fig2.json"
    assert shown_command("python -m reproduce.dmn_table2 --paper --data-dir /d --seeds 3",
                         REPO / "results" / "dmn" / "table2.json") == \
        "python -m reproduce.dmn_table2 --paper --seeds 3"
    plain = "python -m reproduce.dgl_fig4 --paper --lr 0.05 --note 'a b'"
    assert shown_command(plain, REPO / "results" / "dgl" / "fig4_lr0.05.json") == plain
    assert shown_command("python -m x --out 'unclosed", rec) == "python -m x --out 'unclosed"
    # a merged record's commands, each rewritten and still separate commands
    t1 = REPO / "results" / "dgl" / "table1.json"
    assert shown_command("python -m reproduce.dgl_table1 --paper --rows bmnist ; python -m "
                         "reproduce.dgl_table1 --paper --rows cifar --out /tmp/out/dgl && "
                         "python -m y --cache-dir=c", t1) == (
        "python -m reproduce.dgl_table1 --paper --rows bmnist ; python -m "
        "reproduce.dgl_table1 --paper --rows cifar --out results/dgl/table1.json && "
        "python -m y")
    # the committed index shows no machine's output folder
    idx = (REPO / "reproduce" / "README.md").read_text().split("\n## ")[1:]
    table = [ln for part in idx for ln in part.splitlines() if ln.startswith("| [")]
    assert table and not [ln for ln in table if "/root/" in ln or "--checkpoint-dir" in ln
                          or "';'" in ln]


def test_arms_subset_of_the_paper_config_and_refusals(capsys):
    """--arms keeps the named arms of the configuration, in its order, and says so in the
    note; an arm the configuration lacks, or leaving out gn / adam / sgd, exits 2."""
    from reproduce import _gnrev
    args = _parser("gnrev_fig2").parse_args(["--paper", "--dataset", "cifar10",
                                             "--arms", "sgd,gn,adam", "--seeds", "1"])
    cfg = _gnrev.minibatch_config(args)
    assert [a.name for a in cfg.arms] == ["gn", "adam", "sgd"]
    assert (cfg.bottleneck, cfg.depth, cfg.batch_size, cfg.seeds) == (8000, 6, 1024, 1)
    assert "'arms': ['gn', 'adam', 'sgd']" in cfg.scale_note and not cfg.is_paper_scale
    full = _gnrev.minibatch_config(_parser("gnrev_fig2").parse_args(["--paper"]))
    assert "gn_first_linear" in [a.name for a in full.arms] and "overridden" not in full.scale_note
    assert full.is_paper_scale
    # the paper's seeds without the authors'-setup arm do not make a paper-scale record
    from layerlab.record import Record
    rec = Record(paper="gnrev", artifact="fig2", title="t", scale="paper", command="c",
                 config={}, rows=[], claims=[], note="n.")
    args = _parser("gnrev_fig2").parse_args(["--paper", "--arms", "gn,adam,sgd"])
    assert _gnrev.minibatch_config(args).seeds == 3
    out = _gnrev.arms_scale(rec, args)
    assert out.scale == "reduced" and "['gn_first_linear'] were left out" in out.note
    for argv in (["--paper"], ["--paper", "--arms", "sgd,adam,gn_first_linear,gn"]):
        assert _gnrev.arms_scale(rec, _parser("gnrev_fig2").parse_args(argv)) is rec
    # all arms in another order: nothing overridden
    perm = _gnrev.minibatch_config(_parser("gnrev_fig2").parse_args(
        ["--paper", "--arms", "sgd,adam,gn_first_linear,gn"]))
    assert perm == full
    err = _refused("gnrev_fig2", ["--smoke", "--arms", "gn,foo"], capsys)
    assert "argument --arms: unknown arm(s) ['foo']" in err and "'gn', 'adam', 'sgd'" in err
    err = _refused("gnrev_fig2", ["--smoke", "--arms", "gn,adam"], capsys)
    assert "gn, adam and sgd must stay; missing ['sgd']" in err
    assert "argument --arms: expected a comma list" in _refused("gnrev_fig2", ["--arms", "gn,,sgd"],
                                                               capsys)
