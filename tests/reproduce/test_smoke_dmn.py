"""Every `reproduce/dmn_*.py` script: a --smoke run writes a valid record and figure
(parametrized in tests/reproduce/conftest.py)."""
import pytest

PAPER = "dmn"


def test_smoke_run_writes_a_valid_record(smoke_script, tmp_path, run_smoke):
    run_smoke(smoke_script, tmp_path)


def test_convnet_input_ablation_refuses_an_unknown_arm(capsys):
    import pytest

    from reproduce._dmn_convnet_input import main

    with pytest.raises(SystemExit):
        main(["--arms", "unit,tanh"])
    assert "unknown arm(s) ['tanh']" in capsys.readouterr().err


def test_convnet_budget_matches_need_both_accuracies_within_tolerance():
    from reproduce._dmn_convnet_budget import matches

    val, train = [40.0, 50.0, 51.0, 53.0], [45.0, 57.0, 61.0, 66.0]
    assert matches(val, train, 51.94, None) == [2, 3, 4]        # test accuracy only
    assert matches(val, train, 51.94, 62.69) == [3]              # 51.0 / 61.0 both within 2
    assert matches(val, train, 51.94, 70.0) == []
    assert matches([49.94], [0.0], 51.94, None) == [1]           # the bound is inclusive
    assert matches([float("nan"), 51.0], [61.0, float("nan")], 51.94, 62.69) == []  # no score


def _fake_budget_runs(monkeypatch):
    """Fake ``data.load`` (training images filled with the subset's seed, test images -1) and
    ``train_and_evaluate`` (constant curves: test 50 %, train 60 %, running 55 %) for
    ``reproduce._dmn_convnet_budget``; returns the list each faked run appends to."""
    import types

    import numpy as np

    import layerlab.data
    import layerlab.dmn.experiments

    def fake_load(name, split, n=None, balanced=False, seed=0):
        x = np.full((n or 3, 2), float(seed) if split == "train" else -1.0)
        return types.SimpleNamespace(x=x, y=np.zeros(len(x), int))

    seen = []

    def fake_train(spec, xtr, ytr, xte, yte, classes, *, key, checkpoint_dir, epochs, config,
                   **kw):
        seen.append({"x": float(xtr[0, 0]), "n": len(xtr), "name": checkpoint_dir.name,
                     "spec": spec, "standardize": config.standardize, "pca": config.pca,
                     "x_test": float(xte[0, 0]), "noise": config.input_noise})
        ep = list(range(1, epochs + 1))
        return {"epochs": epochs, "curve": [(e, 0.0, 0.5) for e in ep],
                "train_curve": [(e, 0.6) for e in ep],
                "running_train_acc": [(e, 0.55) for e in ep], "train_s": 1.0}

    monkeypatch.setattr(layerlab.data, "load", fake_load)
    monkeypatch.setattr(layerlab.dmn.experiments, "train_and_evaluate", fake_train)
    return seen


def test_convnet_budget_subset_per_seed_draws_each_seeds_own_subset(tmp_path, monkeypatch):
    """``--subset-per-seed``: seed s trains on the subset drawn with s (and its run is named
    by it); by default every seed trains on the first seed's subset.  Training is faked: the
    test checks which data each run gets and where it is kept."""
    import json

    from reproduce import _dmn_convnet_budget as budget

    runs = _fake_budget_runs(monkeypatch)

    def seen():
        return [(r["x"], r["n"], r["name"]) for r in runs]
    common = ["--n-train", "4", "--epochs", "2", "--rows", "c10,m,de10;c27,m,de10",
              "--seeds", "2", "--seed", "5", "--out", str(tmp_path / "o")]
    budget.main(common + ["--subset-per-seed", "--checkpoint-dir", str(tmp_path / "a")])
    assert seen() == [(5.0, 4, "c10_m_de10-n4d5-t10000-e2-s5"),
                    (6.0, 4, "c10_m_de10-n4d6-t10000-e2-s6"),
                    (5.0, 4, "c27_m_de10-n4d5-t10000-e2-s5"),   # not the last subset loaded
                    (6.0, 4, "c27_m_de10-n4d6-t10000-e2-s6")]
    rec = json.loads((tmp_path / "o" / "convnet_budget.json").read_text())
    assert rec["subset"].startswith("each seed its own")
    assert rec["rows"]["Table 4 c27"]["final"] == {"val": 50.0, "train": 60.0}
    runs.clear()
    budget.main(common + ["--checkpoint-dir", str(tmp_path / "b")])
    assert [s[0] for s in seen()] == [5.0, 5.0, 5.0, 5.0]
    assert [s[2] for s in seen()[:2]] == ["c10_m_de10-n4d5-t10000-e2-s5",
                                        "c10_m_de10-n4d5-t10000-e2-s6"]
    runs.clear()
    budget.main(common + ["--subset-per-seed", "--checkpoint-dir", str(tmp_path / "a")])
    assert seen() == []  # every run kept: nothing retrained


def test_convnet_budget_standardize_reaches_the_dmn_config_and_names_the_run(tmp_path,
                                                                             monkeypatch):
    """``--standardize sample_channel`` (``dmn2.py``'s per-channel z-scoring) replaces the
    preset's mode for DMN rows, is part of the kept run's name (a run under another mode is
    not reused) and of the record; without it the preset's mode and the old names stay.  The
    control row (d20, d180 without BN) has no paper number: nothing matches, no dashed line."""
    import json

    from reproduce import _dmn_convnet_budget as budget

    runs = _fake_budget_runs(monkeypatch)

    def seen():
        return [(r["spec"], r["standardize"], r["pca"], r["name"]) for r in runs]
    common = ["--n-train", "0", "--epochs", "2", "--rows", "d10,m,de10;d20,m,d180,m,de10",
              "--preset", "authors", "--pca", "naive", "--out", str(tmp_path / "o"),
              "--checkpoint-dir", str(tmp_path / "ck")]
    budget.main(common + ["--standardize", "sample_channel"])
    assert seen() == [
        ("d10,m,de10", "sample_channel", "naive",
         "d10_m_de10-authors-naive-std_sample_channel-n0d0-t10000-e2-s0"),
        ("d20,m,d180,m,de10", "sample_channel", "naive",
         "d20_m_d180_m_de10-authors-naive-std_sample_channel-n0d0-t10000-e2-s0")]
    rec = json.loads((tmp_path / "o" / "convnet_budget.json").read_text())
    assert rec["standardize"] == "sample_channel"
    control = rec["rows"]["d20, d180 without BN (control)"]
    assert control["paper_val"] is None and control["epochs_matching_paper_eval_train"] == []
    assert (tmp_path / "o" / "convnet_budget.png").is_file()
    runs.clear()
    budget.main(common[:-2] + ["--checkpoint-dir", str(tmp_path / "ck2")])
    rec = json.loads((tmp_path / "o" / "convnet_budget.json").read_text())
    assert rec["standardize"] == "notebook"  # the authors' preset's, resolved
    assert [(s[1], s[3]) for s in seen()] == [
        ("notebook", "d10_m_de10-authors-naive-n0d0-t10000-e2-s0"),
        ("notebook", "d20_m_d180_m_de10-authors-naive-n0d0-t10000-e2-s0")]


def test_convnet_budget_input_scale_scales_images_and_noise_and_names_the_run(tmp_path,
                                                                           monkeypatch):
    """``--input-scale 255`` (the authors' raw pixel scale): training and test images are
    multiplied by it, the preset's input noise (in pixel units: 1/255 on [0, 1]) becomes 1.0,
    the run's name and the record carry the scale; the default leaves all three as before; a
    non-positive scale is refused naming the flag."""
    import json

    import pytest

    from reproduce import _dmn_convnet_budget as budget

    runs = _fake_budget_runs(monkeypatch)
    common = ["--n-train", "4", "--seed", "2", "--epochs", "2", "--rows",
              "d10,m,de10;c27,m,de10", "--preset", "authors", "--out", str(tmp_path / "o"),
              "--checkpoint-dir", str(tmp_path / "ck")]
    budget.main(common + ["--input-scale", "255"])
    (d, c) = runs
    assert (d["x"], d["x_test"], c["x"], c["x_test"]) == (510.0, -255.0, 510.0, -255.0)
    assert d["noise"] == pytest.approx(1.0) and c["noise"] == 0.0  # ConvNet rows: no noise
    assert d["name"] == "d10_m_de10-authors-class-x255-n4d2-t10000-e2-s2"
    assert c["name"] == "c27_m_de10-x255-n4d2-t10000-e2-s2"
    assert json.loads((tmp_path / "o" / "convnet_budget.json").read_text())["input_scale"] == 255
    runs.clear()
    budget.main(common)
    assert [(r["x"], r["name"]) for r in runs] == [
        (2.0, "d10_m_de10-authors-class-n4d2-t10000-e2-s2"), (2.0, "c27_m_de10-n4d2-t10000-e2-s2")]
    assert runs[0]["noise"] == pytest.approx(1 / 255)
    with pytest.raises(SystemExit):
        budget.main(common + ["--input-scale", "0"])


def test_convnet_budget_headline_pairs_table2_dmn_rows_with_this_runs_convnets():
    from reproduce._dmn_convnet_budget import headline

    rows = {"Table 2 c22, c41": {"paper_val": 51.96, "final": {"val": 55.0, "train": 80.0},
                                 "best_val": {"epoch": 20, "val": 59.0}},
            "Table 2 c10": {"paper_val": 48.61, "final": {"val": 48.0, "train": 70.0},
                            "best_val": {"epoch": 30, "val": 49.5}}}
    table2 = {"rows": [
        {"name": "cifar10 d22, d41 (Input 0.2, Var 0.995) val acc", "ours": 59.93, "paper": 59.64,
         "seeds": 3},
        {"name": "cifar10 d22, d41 (Input 0.2, Var 0.995) ConvNet val acc", "ours": 69.4},
        {"name": "cifar10 d22, d41 (Input 0.7, Var 0.995) val acc", "ours": 58.53, "seeds": 3},
        {"name": "cifar10 d10 (Input 0.7, Var 0.99) val acc", "ours": 48.73, "seeds": 3},
        {"name": "cifar10 d10, d11 (Input 0.7, Var 0.99) val acc", "ours": 45.70, "seeds": 3},
        {"name": "cifar100 d79 (Input 1.0, Var 0.999) val acc", "ours": None}]}
    h = headline(rows, table2)
    assert [(p["convnet_row"], p["dmn_row"].split(" Var")[0]) for p in h["pairs"]] == [
        ("Table 2 c10", "cifar10 d10 (Input 0.7,"),
        ("Table 2 c22, c41", "cifar10 d22, d41 (Input 0.2,"),
        ("Table 2 c22, c41", "cifar10 d22, d41 (Input 0.7,")]
    # d10, d11 has no ConvNet row in this run; the ConvNet and CIFAR-100 rows are skipped
    assert [p["dmn_ge_convnet_final"] for p in h["pairs"]] == [True, True, True]
    assert [p["dmn_ge_convnet_best"] for p in h["pairs"]] == [False, True, False]
    assert (h["holds_final"], h["holds_best"]) == ("3/3", "1/3")
    assert headline({}, table2) is None
    assert "6000 training images" in headline(rows, table2, "6000 training images")["claim"]


def test_linear_separability_fits_separable_features_to_100_percent(tmp_path, monkeypatch):
    """``_dmn_linear_separability`` on a tiny stand-in for CIFAR-10 (60 random 8x8x3 images,
    6 per class): the d10 prefix gives 3*3*10 = 90 features for 60 points, linearly separable
    in general position, so the unpenalised softmax fit must reach 100 % training accuracy;
    the record names what was fitted."""
    import json
    import types

    import numpy as np
    import pytest

    import layerlab.data
    from reproduce import _dmn_linear_separability as sep

    rng = np.random.default_rng(0)

    def fake_load(name, split, **kw):
        n = 60 if split == "train" else 20
        return types.SimpleNamespace(x=rng.uniform(0, 1, (n, 8, 8, 3)).astype(np.float32),
                                     y=np.arange(n) % 10)

    monkeypatch.setattr(layerlab.data, "load", fake_load)
    assert sep.main(["--iters", "500", "--out", str(tmp_path), "--name", "t"]) == 0
    rec = json.loads((tmp_path / "t.json").read_text())
    assert rec["features"] == 90 and rec["n_train"] == 60 and rec["widths"] == [10]
    assert rec["train_acc"] == 100.0
    assert rec["standardize"] == "notebook" and rec["paper"] == {"test": 60.41, "train": 73.21}
    with pytest.raises(SystemExit):
        sep.main(["--spec", "d10,m,c4,m,de10", "--out", str(tmp_path)])


@pytest.mark.datasets("mnist")
def test_dmn_widths_script_pairs_each_var_with_its_printed_input(shared_data, tmp_path):
    """The widths script builds each Var at Table 2's printed Input (0.5 / 0.3 / 0.3) and all
    three at the small fraction: the same counts as direct widths_for calls with those pairs."""
    import json

    import jax

    from layerlab.data import load
    from layerlab.dmn.experiments import widths_for
    from reproduce._dmn_widths import _config, main

    out = tmp_path / "w.json"
    assert main(["--n-train", "600", "--seeds", "1", "--rules", "authors_crossing",
                 "--small-fraction", "0.2", "--out", str(out)]) == 0
    got = json.loads(out.read_text())["widths"]["authors_crossing"]
    tr = load("mnist", "train", n=600, seed=0)
    cfg = _config("authors_crossing")
    assert cfg.threshold == "crossing"
    key = jax.random.key(0)
    assert got["printed_input"] == [[widths_for(tr.x, tr.y, 10, (v,), cfg, key=key, fraction=f)[0]
                                     for v, f in ((0.85, 0.5), (0.95, 0.3), (0.99, 0.3))]]
    assert got["small_fraction"] == [widths_for(tr.x, tr.y, 10, (0.85, 0.95, 0.99), cfg,
                                                key=key, fraction=0.2)]
    with pytest.raises(SystemExit):
        main(["--rules", "authors,nope", "--out", str(out)])
