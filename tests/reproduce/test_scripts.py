"""Every reproduction script: --help without JAX, a smoke run that writes a valid record."""
from __future__ import annotations

import importlib
import json
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

from layerlab.record import load_record

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPTS = sorted(p.stem for p in (REPO / "reproduce").glob("*.py")
                 if not p.name.startswith("_") and p.stem != "make_index")


def test_there_are_scripts_to_test():
    assert SCRIPTS, "no reproduce/<paper>_<artifact>.py scripts found"


@pytest.mark.parametrize("name", SCRIPTS)
def test_help_parses_flags_before_importing_jax(name):
    code = ("import runpy, sys\n"
            f"sys.argv = ['{name}', '--help']\n"
            "try:\n"
            f"    runpy.run_module('reproduce.{name}', run_name='__main__')\n"
            "except SystemExit as e:\n"
            "    assert e.code in (0, None), e.code\n"
            "heavy = [m for m in ('jax', 'numpy', 'flax', 'optax') if m in sys.modules]\n"
            "print('HEAVY=' + ','.join(heavy))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "--paper" in out.stdout and "--smoke" in out.stdout
    assert "HEAVY=\n" in out.stdout or out.stdout.rstrip().endswith("HEAVY="), (
        f"{name} --help imported {out.stdout.rsplit('HEAVY=', 1)[-1].strip()}")


def test_every_script_has_a_smoke_test_file():
    # the smoke runs live in one file per paper (tests/reproduce/test_smoke_<paper>.py) so that
    # pytest-xdist's --dist loadfile can spread them over the workers
    papers = {s.split("_", 1)[0] for s in SCRIPTS}
    assert papers <= {"gnrev", "dgl", "dmn", "bottleneck"}, papers
    for paper in papers:
        assert (REPO / "tests" / "reproduce" / f"test_smoke_{paper}.py").exists(), paper


def test_bottleneck_a_fig2_merges_a_teacher_run_into_a_full_record(tmp_path):
    """--parts teacher --merge-into: MNIST sweeps kept byte-for-byte, teacher replaced, rows
    and claims recomputed from the merged sweeps."""
    from layerlab.data import DatasetNotFoundError
    mod = importlib.import_module("reproduce.bottleneck_a_fig2")
    # the full record is a copy of the committed one (its MNIST part is what a teacher-only
    # run is merged with in practice); a fresh full smoke run would double this test's time
    full, merged = tmp_path / "full", tmp_path / "merged"
    full.mkdir()
    shutil.copy(REPO / "results" / "bottleneck" / "a_fig2.json", full / "a_fig2.json")
    argv = ["--smoke", "--parts", "teacher", "--seeds", "3", "--merge-into",
            str(full / "a_fig2.json"), "--out", str(merged), "--no-progress"]
    try:
        assert mod.main(argv) in (0, None)
    except DatasetNotFoundError as e:
        pytest.skip(f"bottleneck_a_fig2 --smoke needs a dataset that is not here: {e}")
    old, new = load_record(full / "a_fig2.json"), load_record(merged / "a_fig2.json")
    mnist = [k for k in old["extra"]["sweeps"] if k.startswith("mnist")]
    assert mnist and list(new["extra"]["sweeps"]) == [*mnist, "teacher"]
    for k in mnist:
        assert json.dumps(new["extra"]["sweeps"][k]) == json.dumps(old["extra"]["sweeps"][k])
    t = new["extra"]["sweeps"]["teacher"]
    assert np.shape(t["loss"]) == (2, 3)  # the smoke teacher run (2 widths x 3 seeds) ...
    assert np.shape(old["extra"]["sweeps"]["teacher"]["loss"])[0] > 2  # ... replaced the paper's
    rows = {r["name"]: r for r in new["rows"]}
    assert rows["teacher: plateau start (width, best train loss within 5% of the min over "
                "widths)"]["ours"] == t["plateau_start"]
    below = sum(a <= b for a, b in zip(t["test_best"], t["best"]))
    assert rows["teacher: widths whose test loss is below the regularised train loss (best "
                "seeds)"]["ours"] == below
    claim = next(c for c in new["claims"] if c["claim"].startswith("teacher: test loss"))
    assert claim["holds"] is (below == len(t["best"]))
    assert str([float(f"{v:.3g}") for v in t["test_best"]]) in claim["evidence"]
    for k in mnist:  # the MNIST rows are the full run's
        name = f"{k}: max final gradient norm over widths (best seeds)"
        assert rows[name]["ours"] == next(r for r in old["rows"] if r["name"] == name)["ours"]
    assert new["scale"] == "reduced" and "--merge-into" in new["command"]
    assert new["config"]["per_part"]["teacher"]["teacher_seeds"] == 3
    runs = old["extra"].get("runs")  # the committed record may itself be a merged one
    kept = (old["wall_s"] if not runs else
            sum(r["wall_s"] for r in runs if "mnist" in r["parts_kept"]))
    assert "--merge-into" in new["extra"]["runs"][-1]["command"]  # this run's own command
    assert new["wall_s"] > kept and new["wall_s"] == pytest.approx(
        kept + new["extra"]["runs"][-1]["wall_s"], abs=0.1)
    assert "teacher: this run on" in new["note"] and "mnist: kept from" in new["note"]
    assert (merged / "a_fig2.png").stat().st_size > 1000


def test_committed_records_follow_the_schema_and_index_is_current():
    for path in sorted((REPO / "results").glob("*/*.json")):
        if path.parent.name in ("gnrev", "dgl", "dmn", "bottleneck"):
            load_record(path)
    from reproduce import make_index
    text = make_index.build()
    readme = REPO / "reproduce" / "README.md"
    assert readme.exists() and readme.read_text() == text, (
        "reproduce/README.md is stale: run python -m reproduce.make_index")


def test_record_rows_holds_is_the_tolerance_rule(tmp_path):
    from layerlab.record import Claim, Record, Row, row_from_values, write_record
    r = row_from_values("a", [97.0, 97.4, 97.8], paper=97.18, unit="%", tol=1.0)
    assert r.ours == pytest.approx(97.4) and r.spread == pytest.approx(0.4) and r.seeds == 3
    assert r.holds is True
    assert Row("b", 95.0, paper=97.18, tol=1.0).holds is False
    assert Row("c", 95.0).holds is None  # paper gives no number
    with pytest.raises(ValueError, match="ours must be a finite number"):
        Row("d", float("nan"))
    with pytest.raises(ValueError, match="paper must be one of"):
        Record("nope", "x", "t", "paper", {})
    rec = Record("dgl", "x", "t", "reduced", {"seed": 0}, rows=[r], claims=[Claim("c", True, "e")])
    p = write_record(rec, tmp_path)
    d = json.loads(p.read_text())
    assert d["rows"][0]["holds"] is True and d["versions"]["jax"]
    d["rows"][0]["holds"] = False
    p.write_text(json.dumps(d))
    with pytest.raises(ValueError, match="holds=False"):
        load_record(p)


def test_record_rows_refuse_inconsistent_values(tmp_path):
    from layerlab.record import Claim, Record, Row, validate_record, write_record
    # holds is decided on the unrounded numbers; the 6-digit rounding of the written ones
    # must not make write_record refuse the row afterwards
    for row in (Row("r1", 1234564.9, paper=1234565.1, tol=0.5),
                Row("r2", 100.0004, paper=100.0, tol=0.0004 - 1e-9)):
        rec = Record("dgl", "x", "t", "reduced", {}, rows=[row])
        assert load_record(write_record(rec, tmp_path))["rows"][0]["holds"] is row.holds
    assert Row("nan paper", 1.0, paper=float("nan"), tol=1.0).holds is None
    with pytest.raises(ValueError, match="not run"):
        Row("e", None, paper=1.0, tol=1.0, holds=True)
    with pytest.raises(TypeError, match="holds must be True, False or None"):
        Row("f", 1.0, holds="no")
    with pytest.raises(TypeError, match="holds must be True, False or None"):
        Claim("g", "False")
    with pytest.raises(ValueError, match="tol must be a finite number >= 0"):
        Row("h", 1.0, paper=1.0, tol=-1)
    with pytest.raises(ValueError, match="seeds must be an integer >= 1 for a row that ran"):
        Row("i", 1.0, seeds=0)
    with pytest.raises(TypeError, match="ours must be a real number"):
        Row("j", "1.0")
    d = json.loads(write_record(Record("dgl", "x", "t", "reduced", {},
                                       rows=[Row("k", 2.0, paper=1.0, tol=0.5)]),
                                tmp_path).read_text())
    for field, bad, msg in (("holds", None, "holds is null"), ("holds", "no", "true, false"),
                            ("tol", -1.0, "tol must be >= 0"), ("ours", "2", "number or null")):
        dd = json.loads(json.dumps(d))
        dd["rows"][0][field] = bad
        with pytest.raises(ValueError, match=msg):
            validate_record(dd)


def test_out_names_a_folder_or_the_record_file(tmp_path):
    """--out DIR writes DIR/<artifact>.{json,png}; --out DIR/NAME.json writes DIR/NAME.json
    and DIR/NAME.png (and nothing named after the artifact, which could be a committed record
    of the same folder)."""
    from layerlab.record import Record, Row
    from reproduce import _cli

    def run(out):
        args = _cli.parser("dmn", "table2", "t").parse_args(["--out", str(out)])
        rec = Record("dmn", "table2", "t", "reduced", {}, rows=[Row("a", 1.0)], wall_s=1.0,
                     command="python -m reproduce.dmn_table2")
        return _cli.finish(args, rec, figure=lambda p: p.write_bytes(b"png"))

    assert run(tmp_path / "d") == tmp_path / "d" / "table2.json"
    assert (tmp_path / "d" / "table2.png").exists()
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "table2.json").write_text("committed")
    p = run(tmp_path / "e" / "table2_rows9_10.json")
    assert p == tmp_path / "e" / "table2_rows9_10.json" and load_record(p)["artifact"] == "table2"
    assert (tmp_path / "e" / "table2_rows9_10.png").read_bytes() == b"png"
    assert (tmp_path / "e" / "table2.json").read_text() == "committed"
    assert _cli.out_stem(_cli.parser("dgl", "table1", "t").parse_args(
        ["--out", str(tmp_path / "x.json")])) == "x"  # dgl_table1 keeps its parts in x_parts/
    (tmp_path / "old.json").mkdir()  # what --out old.json made before it named the file
    with pytest.raises(SystemExit):
        _cli.parser("dmn", "table2", "t").parse_args(["--out", str(tmp_path / "old.json")])


def test_dmn_fig6_epochs_reads_curves_and_compares_by_hand(tmp_path):
    """``reproduce._dmn_fig6_epochs``: from (variant, width, seed) checkpoint JSONs (the names
    ``run_table`` writes) it pairs DMN and ConvNet seeds, averages the curves and finds the
    epochs where DMN >= ConvNet and the first epoch a ConvNet reaches the paper's numbers."""
    from reproduce import _dmn_fig6_epochs as m

    def put(name, accs):
        (tmp_path / name).write_text(json.dumps(
            {"curve": [[i + 1, 0.0, a] for i, a in enumerate(accs)]}))

    tail = "-e3-nNone-None-b128-adam(lr=1e-3)-float32.json"
    put(f"cifar10-d9_m_de10-authors-in1.0-varNone-lvNone-cut0.9-s0{tail}", [0.50, 0.40, 0.45])
    put(f"cifar10-d9_m_de10-authors-in1.0-varNone-lvNone-cut0.9-s1{tail}", [0.48, 0.42, 0.47])
    put(f"cifar10-c9_m_de10-s0{tail}", [0.47, 0.49, 0.52])
    put(f"cifar10-c9_m_de10-s1{tail}", [0.45, 0.47, 0.53])
    put(f"cifar10-d9_m_de10-paper-in1.0-varNone-lvNone-cut0.9-s0{tail}", [0.9, 0.9, 0.9])
    put(f"cifar10-c12_m_de10-s0{tail}", [0.5, 0.5, 0.5])  # no DMN partner: skipped
    rows = m.summarise(m.collect(tmp_path))
    assert list(rows) == ["9"]
    r = rows["9"]
    assert r["seeds"] == [0, 1] and r["epochs"] == 3
    # means: DMN 49, 41, 46; ConvNet 46, 48, 52.5 (the 'paper'-preset file is ignored)
    assert r["dmn_mean"] == {1: 49.0, 2: 41.0, 3: 46.0}
    assert r["convnet_mean"] == {1: 46.0, 2: 48.0, 3: 52.5}
    assert r["epochs_dmn_at_least_convnet"] == [1]
    assert (r["max_dmn_minus_convnet"], r["min_dmn_minus_convnet"]) == (3.0, -7.0)
    assert r["convnet_first_epoch_reaching_paper"] == {
        "Table 2 c10": [2, 3], "Table 2 c22": [3, 3], "Table 4 c27": [3, 3]}
    assert m.main(["--checkpoint-dir", str(tmp_path / "missing")]) == 2


def test_gnrev_fig1_no_bottleneck_keeps_the_nets_own_init(monkeypatch, tmp_path):
    """Fig. 5's full-batch panel (``--no-bottleneck``): V = I and W at the net's own Xavier
    variance (``init_bottleneck=None``, factor 1), not the d'=8000 variance the CPU config
    gives its d'=1024 net; the record is named ``fig1_cifar10_nobottleneck``."""
    from layerlab.gnrev import experiments as ex
    from reproduce import gnrev_fig1

    seen = {}

    def fake_run(cfg, **kw):
        seen["cfg"] = cfg
        raise SystemExit(0)

    monkeypatch.setattr(ex, "run_fig1", fake_run)
    with pytest.raises(SystemExit):
        gnrev_fig1.main(["--dataset", "cifar10", "--no-bottleneck", "--out", str(tmp_path)])
    cfg = seen["cfg"]
    assert cfg.bottleneck is None and cfg.init_bottleneck is None
    assert ex.init_w_scale(3072, cfg.bottleneck, cfg.init_bottleneck) == 1.0
    assert "overridden" in cfg.scale_note
    # the note says what runs (it once kept the d'=1024 preset's "d'=1024 ... d'=8000 variance")
    assert "no inverted bottleneck" in cfg.scale_note and "d'=1024" not in cfg.scale_note
    assert "1 seed(s)" in cfg.scale_note


def test_index_names_each_machine_of_a_record_merged_from_parts():
    from reproduce.make_index import _devices_label
    rec = {"machine": {"device_kind": "cpu"},
           "extra": {"devices": {"a": ["cpu"], "b": ["H100"], "c": ["H100"]},
                     "row_wall_s": {"a": 600.0, "b": 60.0, "c": 120.0}}}
    assert _devices_label(rec) == "summed over parts: H100 3.0 min, cpu 10.0 min"
    one = {"machine": {"device_kind": "cpu"},
           "extra": {"devices": {"a": ["H100"]}, "row_wall_s": {"a": 60.0}}}
    assert _devices_label(one) == "H100"
    mixed = {"machine": {"device_kind": "cpu"},  # a part on two machines: the writer's
             "extra": {"devices": {"a": ["cpu", "H100"]}, "row_wall_s": {"a": 60.0}}}
    assert _devices_label(mixed) == "cpu"
    assert _devices_label({"machine": {"device_kind": "cpu"}}) == "cpu"


def test_gnrev_variants_seed_override_recounts_the_note(monkeypatch):
    """``--seeds 3`` / ``--epochs 5`` on a CPU variant: the note's "1 seed" / "10 epochs"
    become "3 seeds" / "5 epochs" (not "1 seed ...; overridden: {'seeds': 3}")."""
    from layerlab.gnrev import experiments as ex
    from reproduce import gnrev_appK

    seen = []

    def fake_run(cfg, artifact, **kw):
        seen.append(cfg)
        raise SystemExit(0)

    monkeypatch.setattr(ex, "run_variants", fake_run)
    for argv in (["--seeds", "3"], ["--seeds", "3", "--epochs", "5"], ["--epochs", "5"]):
        with pytest.raises(SystemExit):
            gnrev_appK.main(argv)
    a, b, c = seen
    assert (a.seeds, b.seeds, c.seeds) == (3, 3, 1) and (b.epochs, c.epochs) == (5, 5)
    assert ", 3 seeds," in a.scale_note and "1 seed" not in a.scale_note
    assert "overridden" not in a.scale_note + b.scale_note + c.scale_note
    assert ", 3 seeds," in b.scale_note and ", 5 epochs," in b.scale_note
    assert ", 1 seed," in c.scale_note and ", 5 epochs," in c.scale_note
    assert ", 10 epochs," in a.scale_note and "10 epochs" not in b.scale_note + c.scale_note


def test_a_paper_run_in_which_no_row_ran_keeps_the_committed_record(tmp_path, capsys):
    """dmn_table5 --paper without the CIFAR-100 files: every row is not run, so the script
    says why on stderr (with the download command) and exits 1 without writing over
    results/dmn/table5.json."""
    from reproduce import dmn_table5

    rec = REPO / "results" / "dmn" / "table5.json"
    before = rec.read_bytes()
    with pytest.raises(SystemExit) as e:
        dmn_table5.main(["--paper", "--data-dir", str(tmp_path), "--no-progress",
                         "--checkpoint-dir", str(tmp_path / "ck")])
    assert e.value.code == 1
    err = capsys.readouterr().err
    assert "dmn table5: no row ran -- Dataset 'cifar100' not found" in err
    assert "python -m layerlab.data download cifar100" in err
    assert "not written" in err and "table5.json" in err
    assert rec.read_bytes() == before


def test_dgl_table1_help_states_the_configurations_defaults():
    """The defaults written in dgl_table1's --help (parsed before JAX is imported, so typed
    out) are the configurations' own."""
    from layerlab.dgl.experiments import Table1Config
    from reproduce import _cli, dgl_table1

    helps = {a.dest: " ".join(a.help.split()) for a in dgl_table1.build_parser()._actions
             if a.help}
    paper, cpu = Table1Config.paper(), Table1Config.cpu()
    for dest, field in (("n_mnist", "n_mnist"), ("n_cifar", "n_cifar"),
                        ("dgl_steps", "dgl_steps"), ("dgl_batch", "dgl_batch")):
        assert (f"default: {getattr(paper, field)} with --paper, {getattr(cpu, field)} without"
                in helps[dest]), dest
    assert paper.n_bmnist == cpu.n_bmnist and f"default: {paper.n_bmnist})" in helps["n_bmnist"]
    assert paper.e2e_epochs == cpu.e2e_epochs and f"(default: {cpu.e2e_epochs})" in helps[
        "e2e_epochs"]
    assert paper.eps_rel == cpu.eps_rel and f"(default: {cpu.eps_rel})" in helps["eps_rel"]
    assert paper.max_width is None and "256 without" in helps["max_width"] and cpu.max_width == 256
    assert cpu.rows == ("cifar-5x2000",) and len(paper.rows) == 5
    for dest in ("dgl_lrs", "dgl_wds", "e2e_adam_lrs", "e2e_wds"):  # the grids, typed out
        said = helps[dest].split("(default: ")[1].rstrip(")")
        with_paper, rest = said.split(" with --paper, ")
        without, smoke = rest.split(" without; --smoke: ")
        for text, c in ((with_paper, paper), (without, cpu), (smoke, Table1Config.smoke())):
            assert _cli.float_list(False)(text) == getattr(c, dest), (dest, text)


@pytest.mark.parametrize("name", [s for s in SCRIPTS if not s.startswith("_")])
def test_help_states_every_value_flags_default(name):
    """Every flag that takes a value shows its default in --help, as the README says: flags
    with the configuration's default (None) say so in words, and a default of 0 is shown
    (the formatter took 0 == False for "no default": dgl_fig4's --seed)."""
    import argparse

    module = importlib.import_module(f"reproduce.{name}")
    if not hasattr(module, "build_parser"):
        pytest.skip(f"{name} has no build_parser")
    p = module.build_parser()
    fmt = p._get_formatter()
    silent = [a.option_strings[0] for a in p._actions
              if a.nargs != 0 and a.help != argparse.SUPPRESS and a.dest != "merge"
              and "default" not in (fmt._get_help_string(a) or "").lower()]
    assert not silent, f"{name} --help shows no default for {silent}"


def test_dgl_fig1_fig4_help_states_the_configurations_defaults():
    """The defaults typed out in dgl_fig1's and dgl_fig4's --help are the configurations'."""
    from layerlab.dgl.experiments import Fig1Config, Fig4Config
    from reproduce import dgl_fig1, dgl_fig4

    def helps(module):
        return {a.dest: " ".join(a.help.split()) for a in module.build_parser()._actions
                if a.help}

    h1, h4 = helps(dgl_fig1), helps(dgl_fig4)
    for cfg_cls, h, fields in ((Fig1Config, h1, ("widths", "depths", "num_nets", "n_points")),
                               (Fig4Config, h4, ("epochs", "lr", "evals", "eps_rel"))):
        assert cfg_cls.paper() == cfg_cls()
        for field in fields:
            v, s = getattr(cfg_cls(), field), getattr(cfg_cls.smoke(), field)
            text = ",".join(map(str, v)) if isinstance(v, tuple) else str(v)
            assert f"(default: {text}" in h[field], (field, h[field])
            if s != v:
                smoke = ",".join(map(str, s)) if isinstance(s, tuple) else str(s)
                assert f"--smoke: {smoke})" in h[field], (field, h[field])


def test_help_says_what_the_committed_record_cost(capsys):
    import json

    from reproduce import gnrev_appM

    with pytest.raises(SystemExit):
        gnrev_appM.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    rec = json.loads((REPO / "results" / "gnrev" / "appM.json").read_text())
    assert f"The committed record results/gnrev/appM.json (scale '{rec['scale']}') took" in out
    w = rec["wall_s"]
    took = f"{w / 60:.1f} min" if w >= 120 else f"{w:.0f} s"
    assert f"{took} on {rec['machine']['device_kind']}" in out


@pytest.mark.parametrize("name", ["_gnrev_ntk_rate", "_gnrev_ntk_rate_claims"])
def test_ntk_rate_ablation_scripts_run_only_as_main(name):
    """Importing them once parsed sys.argv and trained (_gnrev_ntk_rate) or rewrote a JSON
    (_gnrev_ntk_rate_claims); now the work is in main(), run by ``python -m``."""
    code = ("import sys\n"
            "sys.argv = ['x', '--no-such-flag', '/nonexistent.json']\n"
            f"import reproduce.{name} as m\n"
            "assert callable(m.main)\n"
            "print('IMPORTED', 'jax' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "IMPORTED False"


def test_ntk_rate_claims_main_rewrites_the_committed_claims(tmp_path, capsys):
    """``main([path])`` (what ``python -m reproduce._gnrev_ntk_rate_claims path`` runs) decides
    the same claims as the committed ablation record holds; _gnrev_ntk_rate's main parses its
    argv and refuses a run without arms before training."""
    from reproduce import _gnrev_ntk_rate, _gnrev_ntk_rate_claims

    src = REPO / "results" / "gnrev" / "ablation" / "ntk_rate_cifar10.json"
    path = tmp_path / "ntk_rate_cifar10.json"
    rec = json.loads(src.read_text())
    want = rec.pop("claims_by_adam_rate")  # the copy lacks it: main must write it back
    path.write_text(json.dumps(rec))
    assert _gnrev_ntk_rate_claims.main([str(path)]) == 0
    assert json.loads(path.read_text())["claims_by_adam_rate"] == want
    assert f"wrote claims_by_adam_rate into {path}" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        _gnrev_ntk_rate.main(["--gn-rates", "", "--adam-rates", "", "--sgd-rate", "0"])
    assert e.value.code == 2 and "no arms" in capsys.readouterr().err


_SAFE_CALLS = {"pathlib.Path", "pathlib.Path(__file__).resolve", "time.perf_counter",
               "re.compile", "dict", "tuple", "frozenset"}


def test_no_reproduce_module_does_work_when_imported():
    """Every ``reproduce/*.py`` runs only from ``main()`` under ``if __name__ == "__main__"``:
    importing one (a test, ``make_index``, a user's ``help()``) must not parse sys.argv,
    train or write files.  Checked on the source: the module level holds only imports,
    definitions, the docstring, the ``__main__`` guard and constants (``_SAFE_CALLS``)."""
    import ast
    bad = []
    for path in sorted((REPO / "reproduce").glob("*.py")):
        for s in ast.parse(path.read_text()).body:
            if isinstance(s, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)):
                continue
            if isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant):
                continue
            if isinstance(s, ast.If) and ast.unparse(s.test) in ('__name__ == "__main__"',
                                                                 "__name__ == '__main__'"):
                continue
            if isinstance(s, (ast.Assign, ast.AnnAssign)) and all(
                    ast.unparse(n.func) in _SAFE_CALLS
                    for n in ast.walk(s) if isinstance(n, ast.Call)):
                continue
            bad.append(f"{path.name}:{s.lineno}: {ast.unparse(s).splitlines()[0][:70]}")
    assert not bad, "module-level work in reproduce/ (move it into main()):\n" + "\n".join(bad)


def test_ntk_rate_claims_needs_an_explicit_path(capsys):
    """The script edits the JSON it is given in place; a bare run used to rewrite the committed
    ``results/gnrev/ablation/ntk_rate_cifar10.json``.  Now it prints its usage and returns 2,
    leaving the record untouched."""
    from reproduce import _gnrev_ntk_rate_claims

    src = REPO / "results" / "gnrev" / "ablation" / "ntk_rate_cifar10.json"
    before = (src.stat().st_mtime_ns, src.read_bytes())
    assert _gnrev_ntk_rate_claims.main([]) == 2
    assert "usage: python -m reproduce._gnrev_ntk_rate_claims PATH" in capsys.readouterr().err
    assert (src.stat().st_mtime_ns, src.read_bytes()) == before


def _relative_default_paths(path: pathlib.Path) -> list[str]:
    """``add_argument(..., default=...)`` and ``state_file=``/``checkpoint_dir=`` keyword values
    that are relative paths into results/, scratch/ or checkpoints/ (a string constant, an
    f-string or ``pathlib.Path`` of one), which resolve against the caller's working directory."""
    import ast

    def literal(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.JoinedStr) and node.values \
                and isinstance(node.values[0], ast.Constant):
            return str(node.values[0].value)
        if isinstance(node, ast.Call) and node.args and getattr(node.func, "attr", None) == "Path":
            return literal(node.args[0])
        if isinstance(node, ast.BoolOp):          # args.out or "scratch/..."
            return next((v for v in map(literal, node.values) if v), None)
        return None

    bad = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        values = [k.value for k in node.keywords
                  if k.arg in ("default", "state_file", "checkpoint_dir", "out")]
        if getattr(node.func, "attr", None) == "Path":
            values += node.args[:1]
        for v in values:
            s = literal(v)
            if s and s.split("/")[0] in ("results", "scratch", "checkpoints"):
                bad.append(f"{path.name}:{node.lineno}: {s!r}")
    return sorted(set(bad))


def test_no_script_default_is_relative_to_the_working_directory():
    """Every script's default output, state and checkpoint paths are built from the
    repository's root (``REPO / "scratch/..."``), never a bare ``"scratch/..."`` or
    ``"results/..."``: run from another folder those littered it, and ``_dmn_bn``'s
    ``--out results/dmn/ablation`` default overwrote committed records on a bare run."""
    files = sorted((REPO / "reproduce").glob("*.py")) + sorted((REPO / "benchmarks").glob("*.py"))
    assert len(files) > 40
    bad = [b for f in files for b in _relative_default_paths(f)]
    assert not bad, "relative default paths:\n" + "\n".join(bad)


def test_relative_default_checker_sees_the_old_forms(tmp_path):
    """The checker above flags each form the scripts used before (so it can fail)."""
    f = tmp_path / "old.py"
    f.write_text('p.add_argument("--out", default="results/dmn/ablation")\n'
                 'p.add_argument("--ck", default=pathlib.Path("checkpoints/x"))\n'
                 'path = pathlib.Path(args.out or f"scratch/gnrev/{d}.json")\n'
                 'ex.run(cfg, state_file="scratch/abl/c.json")\n'
                 'p.add_argument("--ok", default=str(REPO / "scratch/x"))\n')
    assert len(_relative_default_paths(f)) == 4


def test_protocol_flags_do_not_write_over_the_main_paper_record():
    """``--paper`` with a flag that changes the protocol writes beside the committed record,
    not over it: dgl_fig4's SGD/monitoring settings and seed, dgl_fig1's ``--inputs centred``
    (the committed ``fig1_centred.json``), dmn's ``--report best``; the names are the ones
    ``--record``'s check uses too (``_stem``)."""
    from reproduce import _dmn, dgl_fig1, dgl_fig4

    p4 = dgl_fig4.build_parser()
    for argv, stem in ((["--paper"], "fig4"), (["--paper", "--epochs", "200"], "fig4"),
                       (["--paper", "--epochs", "100", "--lr", "0.05"], "fig4_epochs100_lr0.05"),
                       (["--paper", "--eps-rel", "0.1", "--seed", "2"], "fig4_eps0.1_seed2"),
                       (["--paper", "--evals", "10"], "fig4_evals10")):
        a = p4.parse_args(argv)
        assert "fig4" + dgl_fig4.variant(a) == stem == a._stem(a), argv
    p1 = dgl_fig1.build_parser()
    for argv, stem in ((["--paper"], "fig1"), (["--paper", "--inputs", "raw"], "fig1"),
                       (["--paper", "--inputs", "centred"], "fig1_centred")):
        a = p1.parse_args(argv)
        assert a._stem(a) == stem, argv
    assert (REPO / "results" / "dgl" / "fig1_centred.json").is_file()

    class Rec:
        config = {"preset": "authors", "pca": "class", "report": "best"}
    assert _dmn.variant(Rec) == "_best"
    Rec.config = {"preset": "authors", "pca": "class", "report": "final"}
    assert _dmn.variant(Rec) == ""
    from reproduce import dmn_table4
    a = dmn_table4.build_parser().parse_args(["--paper", "--report", "best"])
    assert a._stem(a) == "table4_best"


def test_fewer_seeds_or_widths_make_a_reduced_record():
    """The scale rules that ignored a reduction (``--seeds 1`` on bottleneck a_rank and gnrev
    appM, a missing appM dataset, fewer ``--filters`` on dmn fig6) now mark it, so ``--paper``
    with it does not replace a paper-scale record."""
    import dataclasses

    from layerlab.bottleneck import experiments as bx
    from layerlab.dmn import experiments as dx
    from layerlab.gnrev import experiments as gx

    full = bx.ARankConfig.paper()
    assert bx._a_rank_scale(full) == "paper"
    assert bx._a_rank_scale(dataclasses.replace(full, gd_seeds=1)) == "reduced"
    assert bx._a_rank_scale(dataclasses.replace(full, gd_steps=5000)) == "reduced"
    assert bx._a_rank_scale(dataclasses.replace(full, sizes=(4, 6))) == "reduced"
    assert bx._a_rank_scale(bx.ARankConfig.cpu()) == "reduced"

    m = gx.RegressionConfig.paper()
    assert gx._appM_scale(m) == ("paper", [])
    scale, short = gx._appM_scale(dataclasses.replace(m, seeds=1))
    assert scale == "reduced" and short == ["1 seed(s) (paper 3)"]
    scale, short = gx._appM_scale(dataclasses.replace(m, datasets=("wine",)))
    assert scale == "reduced" and "datasets wine" in short[0]
    assert gx._appM_scale(gx.RegressionConfig())[0] == "reduced"

    class Row:
        ours = 1.0
    f6 = dx.Fig6Config.paper()
    assert dx._fig6_scale(f6, [Row]) == "paper"
    assert dx._fig6_scale(dataclasses.replace(f6, filters=(2, 6)), [Row]) == "reduced"
    assert dx._fig6_scale(dataclasses.replace(f6, seeds=1), [Row]) == "reduced"


def test_dgl_random_spread_summary_is_the_distribution_by_hand():
    mod = importlib.import_module("reproduce._dgl_random_spread")
    vals = [90.0, 91.0, 92.0, 93.0, 94.0, 95.0, 96.0, 97.0]
    s = mod.summarise(vals, paper=92.5, tol=1.0)
    assert s["mean"] == pytest.approx(93.5) and s["std"] == pytest.approx(np.sqrt(6.0))
    assert s["paper_percentile"] == pytest.approx(100 * 3 / 8)       # 90, 91, 92 <= 92.5
    assert s["p_single_within_tol"] == pytest.approx(2 / 8)          # 92 and 93
    assert s["paper_z"] == pytest.approx(-1.0 / np.sqrt(6.0))
    assert s["p_single_at_least_as_far"] == pytest.approx(6 / 8)     # all but 93 and 94
    # a 3-run mean within 1 of 92.5: brute force over all 8^3 ordered triples
    import itertools
    p = np.mean([abs(np.mean(t) - 92.5) <= 1.0 for t in itertools.product(vals, repeat=3)])
    assert s["p_mean3_within_tol"] == pytest.approx(p, abs=0.015)
    assert mod._keys("both", 7) == (7, 7) and mod._keys("init", 7) == (0, 7)
    assert mod._keys("split", 7) == (7, 0)


def test_dgl_random_spread_seed0_is_the_table1_records_random_cell():
    """Seed 0 of the spread is the run the record holds (same split, init key and readout)."""
    from layerlab import data
    mod = importlib.import_module("reproduce._dgl_random_spread")
    try:
        got = mod.random_cell("bmnist-2x20", 0, 0, ["he/ridge"])["he/ridge"]
    except data.DatasetNotFoundError as e:
        pytest.skip(f"needs MNIST: {e}")
    want = json.loads((REPO / "results/dgl/table1_parts/bmnist-2x20_seed0.json").read_text())
    assert got == pytest.approx(want["random"]["test"], abs=0.01)


def test_cifar10_paper_gpu_record_summarises_per_epoch_from_the_steps(tmp_path):
    """``_gnrev_cifar10_paper_gpu`` turns a kept run's per-step series into per-epoch numbers
    (means, median residual, smallest kept rank) and the end weights' 1 - cos per block: checked
    against numpy on a synthetic 2-epoch run; the committed record's GN 0.1 arm holds what its
    per-step losses give."""
    from reproduce import _gnrev_cifar10_paper_gpu as m
    rng = np.random.default_rng(0)
    T = 2 * m.SPE
    run = {k: rng.uniform(0.1, 3, T) for k in ("loss", "loss_change_pct", "residual",
                                                "min_rank", "update_norm")}
    run.update(eval_train_loss_full=[4.0, 2.0, 1.5], eval_test_loss=[4.1, 2.1, 1.6],
               eval_test_accuracy=[0.1, 0.3, 0.4], ntk_cos_init=[1.0, 0.99, 0.98],
               cka_init=np.ones((3, 6)), w_cos=rng.uniform(0.9, 1, (3, 6, 2)), w_rel=0.2)
    s = m.arm_summary(run)
    assert s["epochs"] == 2
    np.testing.assert_allclose(s["batch_loss_mean_per_epoch"],
                               run["loss"].reshape(2, -1).mean(1), atol=6e-5)
    np.testing.assert_allclose(s["residual_median_per_epoch"],
                               np.median(run["residual"].reshape(2, -1), 1), atol=6e-5)
    assert s["kept_rank_min_per_epoch"] == [round(float(v)) for v in
                                            run["min_rank"].reshape(2, -1).min(1)]
    np.testing.assert_allclose(s["w_one_minus_cos_end_per_block"], 1 - run["w_cos"][-1],
                               atol=6e-6)
    assert s["test_acc_per_epoch"] == [10.0, 30.0, 40.0]
    rec = json.loads((REPO / "results/gnrev/ablation/minibatch_cifar10_paper_gn_h200.json")
                     .read_text())
    a = rec["arms"]["gn_0.1"]
    steps = np.asarray(a["batch_loss_per_step"]).reshape(a["epochs"], m.SPE)
    np.testing.assert_allclose(a["batch_loss_mean_per_epoch"], steps.mean(1), atol=1e-4)
    assert rec["sweep"]["best"] == 0.2 and rec["replaced_rates"] == [0.2]
