"""Every `reproduce/gnrev_*.py` script: a --smoke run writes a valid record and figure
(parametrized in tests/reproduce/conftest.py)."""
import pytest

PAPER = "gnrev"


def test_smoke_run_writes_a_valid_record(smoke_script, tmp_path, run_smoke):
    run_smoke(smoke_script, tmp_path)


def _smoke(name, argv, tmp_path):
    import importlib
    import json

    import pytest

    from layerlab.data import DatasetNotFoundError
    out = tmp_path / f"{name}.json"
    try:
        rc = importlib.import_module(f"reproduce.{name}").main(
            [*argv, "--smoke", "--no-progress", "--checkpoint-dir", str(tmp_path / "ck"),
             "--out", str(out)])
    except DatasetNotFoundError as e:
        pytest.skip(f"{name} --smoke needs a dataset that is not here: {e}")
    assert rc == 0 and out.with_suffix(".png").stat().st_size > 1000
    return json.loads(out.read_text())


def test_variants_long_ablation_switches_at_the_asked_epoch(tmp_path):
    # Adam->GN shares Adam's init and batches: its curve is Adam's, to the float, up to the
    # switch, and departs from it after (GN's steps are not Adam's)
    import numpy as np
    # (the smoke configuration's own switch is epoch 1: asking for 2 must move it)
    r = _smoke("_gnrev_variants_long", ["--artifact", "appF", "--arms", "gn,adam,adam_then_gn",
                                        "--epochs", "4", "--switch", "2"], tmp_path)
    assert r["config"]["switch_epoch"] == 2
    ad = np.array(r["arms"]["adam"]["train_loss_per_epoch"])
    ag = np.array(r["arms"]["adam_then_gn"]["train_loss_per_epoch"])
    assert ad.shape == ag.shape == (5,)
    np.testing.assert_allclose(ag[:3], ad[:3], rtol=1e-5)  # JSON keeps 6 significant digits
    assert abs(ag[3] - ad[3]) > 1e-3 * ad[3]
    names = [c["claim"] for c in r["claims"]]
    assert any("continued from an Adam-trained point" in n for n in names)
    # crossings: the first epoch at which one curve is below another, recomputed here
    g = np.array(r["arms"]["gn"]["train_loss_per_epoch"])
    below = [e for e in range(1, 5) if ad[e] < g[e]]
    assert r["crossings"]["adam below gn"] == (below[0] if below else None)


def test_variants_long_weight_decays_add_app_j_arms(tmp_path):
    # --weight-decays adds GN arms gn_wd<w> (the decay is the only change: same init and
    # batches, so at w > 0 the curve leaves the undecayed one); other artifacts refuse it
    import numpy as np
    import pytest

    from reproduce._gnrev_variants_long import main

    r = _smoke("_gnrev_variants_long", ["--artifact", "appJ", "--arms", "gn",
                                        "--weight-decays", "0,0.1", "--epochs", "2",
                                        "--seeds", "2"], tmp_path)
    assert r["config"]["arms"] == ["gn", "gn_wd0", "gn_wd0.1"] and r["config"]["seeds"] == 2
    acc = r["arms"]["gn"]["test_acc_pct_per_epoch"]
    assert len(acc) == 3 and all(0 <= a <= 100 for a in acc)
    assert {a: v["weight_decay"] for a, v in r["arms"].items()} == {
        "gn": 0.0, "gn_wd0": 0.0, "gn_wd0.1": 0.1}
    g, g0, g1 = (np.array(r["arms"][a]["train_loss_per_epoch"]) for a in
                 ("gn", "gn_wd0", "gn_wd0.1"))
    np.testing.assert_allclose(g0, g, rtol=1e-5)
    assert g1[0] == g[0] and abs(g1[-1] - g[-1]) > 1e-3 * g[-1]
    for argv, msg in ((["--artifact", "appE", "--weight-decays", "0.1"], "App. J's arms only"),
                      (["--artifact", "appJ", "--weight-decays", "x"], "comma-separated numbers"),
                      (["--artifact", "appJ", "--weight-decays", "-1"], "decays >= 0"),
                      (["--artifact", "appJ", "--weight-decays", "inf"], "finite decays"),
                      (["--artifact", "appJ", "--seeds", "0"], "--seeds: expected >= 1")):
        with pytest.raises(SystemExit, match=msg):
            main([*argv, "--arms", "gn", "--epochs", "2", "--smoke",
                  "--out", str(tmp_path / "x.json")])


def test_variants_long_first_seed_runs_the_later_seeds_of_a_study(tmp_path):
    # --first-seed 1 --seeds 1 is seed 1 of a 2-seed run (its own key fold_in(key, 1), the
    # sweeps at seed 0's key), kept per seed in the record; a bad value is refused
    import numpy as np
    import pytest

    from reproduce._gnrev_variants_long import main

    argv = ["--artifact", "appJ", "--arms", "gn,adam", "--epochs", "1", "--n-val", "40"]
    both = _smoke("_gnrev_variants_long", [*argv, "--seeds", "2"], tmp_path / "a")
    one = _smoke("_gnrev_variants_long", [*argv, "--seeds", "1", "--first-seed", "1"],
                 tmp_path / "b")
    assert both["config"]["seed_indices"] == [0, 1] and one["config"]["seed_indices"] == [1]
    # GN's residual certificate is the first seed run's, labelled with its own index
    assert one["arms"]["gn"]["certificate"]["seed"] == 1
    assert both["arms"]["gn"]["certificate"]["seed"] == 0
    assert "seeds 1..1" in one["config"]["scale_note"]
    # the CPU note's sizes, which --n-train / --n-val rewrite, are spelt as main() expects
    from layerlab.gnrev import experiments as ex
    cpu = ex.variants_config("appJ", "cpu")
    assert f" {cpu.n_train} training images" in cpu.scale_note
    assert f"; {cpu.n_val} validation images held out" in cpu.scale_note
    for arm in ("gn", "adam"):
        assert one["arms"][arm]["lr"] == both["arms"][arm]["lr"]
        assert list(one["arms"][arm]["per_seed"]) == ["1"]
        for k in ("eval_train_loss_full", "eval_test_loss", "eval_val_loss"):
            s1, s01 = (np.array(r["arms"][arm]["per_seed"][i][k]) for r, i in
                       ((one, "1"), (both, "1")))
            np.testing.assert_allclose(s1, s01, rtol=1e-5)
            s0 = np.array(both["arms"][arm]["per_seed"]["0"][k])
            assert np.abs(s0 - s01).max() > 1e-6  # seed 0 is another run
        # the record's curves are the mean over its seeds' own ones
        np.testing.assert_allclose(
            both["arms"][arm]["test_loss_per_epoch"],
            np.mean([both["arms"][arm]["per_seed"][i]["eval_test_loss"] for i in "01"], 0),
            rtol=1e-5)
    # --bottleneck widens every block (the CPU note's d'=512 follows it); Fig. 5 has none
    wide = _smoke("_gnrev_variants_long", [*argv, "--bottleneck", "64"], tmp_path / "c")
    assert wide["config"]["bottleneck"] == 64 and "d'=64" in wide["config"]["scale_note"]
    assert wide["arms"]["gn"]["test_loss_per_epoch"] != both["arms"]["gn"]["test_loss_per_epoch"]
    assert f"d'={cpu.bottleneck} " in cpu.scale_note
    for bad, msg in (([*argv, "--bottleneck", "0", "--smoke"],
                      "--bottleneck: expected a width >= 1"),
                     (["--artifact", "fig5", "--arms", "gn", "--epochs", "1", "--bottleneck",
                       "64"], "fig5's net has no inverted bottleneck")):  # (CPU config)
        with pytest.raises(SystemExit, match=msg):
            main([*bad, "--out", str(tmp_path / "x.json")])
    with pytest.raises(SystemExit, match="--first-seed: expected >= 0"):
        main([*argv, "--first-seed", "-1", "--smoke", "--out", str(tmp_path / "x.json")])


def test_variants_long_n_train_n_val_gn_rate_set_the_data_and_rate(tmp_path):
    # --n-train / --n-val resize the App. J data (the full-data ablation), --gn-rate sets GN's
    # rate; one epoch runs
    # without a switch arm (the switch is checked only where a *_then_* arm needs it)
    import pytest

    from reproduce._gnrev_variants_long import main

    r = _smoke("_gnrev_variants_long", ["--artifact", "appJ", "--arms", "gn,adam", "--epochs",
                                        "1", "--n-train", "96", "--n-val", "40",
                                        "--gn-rate", "0.05"], tmp_path)
    assert r["config"]["n_train"] == 96
    # --gn-rate sets GN's rate only (Adam keeps the configuration's)
    assert r["arms"]["gn"]["lr"] == 0.05 and r["arms"]["adam"]["lr"] == 1e-3
    assert r["config"]["gn_rate"] == 0.05 and r["config"]["n_val"] == 40
    from layerlab.gnrev import experiments as ex
    from reproduce._gnrev_variants_long import with_gn_rate

    arms = {a.name: with_gn_rate(a, 0.05) for a in ex.variants_config("appF", "cpu").arms}
    assert arms["gn"].lrs == (0.05,) and arms["gn"].fallback_lrs == ()
    assert arms["adam_then_gn"].then.lrs == (0.05,)  # the GN phase too (was left at 0.2)
    assert arms["adam_then_gn"].lrs == arms["adam"].lrs == (1e-4,)
    assert arms["gn_then_adam"].lrs == (0.05,) and arms["gn_then_adam"].then.lrs == (1e-4,)
    assert "but for 96 training images, 40 validation images, GN at 0.05" in r["_note"]
    assert "n_train 96, n_val 40" in r["config"]["scale_note"]
    assert len(r["arms"]["gn"]["train_loss_per_epoch"]) == 2
    for argv, msg in ((["--artifact", "appJ", "--n-train", "-1"], "--n-train: expected >= 0"),
                      (["--artifact", "appE", "--n-val", "8"], "App. J only"),
                      (["--artifact", "appJ", "--epochs", "0"], "--epochs: expected >= 1"),
                      (["--artifact", "appJ", "--gn-rate", "0"], "--gn-rate: expected a finite"),
                      (["--artifact", "appF", "--arms", "adam_then_gn", "--epochs", "1"],
                       "--switch: expected an epoch in 1..0"),
                      (["--artifact", "appJ", "--switch", "5"], "--switch: expected an epoch")):
        argv = argv if "--epochs" in argv else [*argv, "--epochs", "2"]
        argv = argv if "--arms" in argv else [*argv, "--arms", "gn"]
        with pytest.raises(SystemExit, match=msg):
            main([*argv, "--smoke", "--out", str(tmp_path / "x.json")])


@pytest.fixture(scope="module")
def appG_rate_run(tmp_path_factory):
    """One smoke run of the App. G rate ablation (GN at 0.1 / 0.2, Adam at 3e-5, 3 epochs),
    shared by the tests that read its record (one training run instead of one per test)."""
    return _smoke("_gnrev_appG_rate", ["--gn-rates", "0.1,0.2", "--adam-rates", "3e-5",
                                       "--epochs", "3"], tmp_path_factory.mktemp("appG_rate"))


def test_appG_rate_ablation_weight_movement_grows_with_gns_rate(appG_rate_run):
    # 1 - cos(W, W0) is 0 at init and, for small steps, grows like the rate squared: doubling
    # GN's rate must multiply it by well over 2 (the smoke net, 3 epochs: ~3.1)
    r = appG_rate_run
    c = r["w_one_minus_cos_per_epoch"]
    assert all(abs(v[0]) < 1e-6 for v in c.values())
    e = r["w_one_minus_cos_end"]
    assert 2.5 < e["gn_0.2"] / e["gn_0.1"] < 4.5
    # the record's two-sided test, 1/3 <= GN / Adam <= 3, recomputed from the end values
    for g in ("gn_0.1", "gn_0.2"):
        q = e[g] / e["adam_3e-05"]
        assert r["within_3x"][g]["adam_3e-05"] == (1 / 3 <= q <= 3)


def test_appG_rate_ablation_compares_at_matched_training_loss(appG_rate_run):
    # Adam at 3e-5 and GN at 0.1 / 0.2 overlap in training loss on the smoke net (3 epochs)
    r = appG_rate_run
    c = r["w_one_minus_cos_per_epoch"]
    # at matched training loss: every GN epoch whose loss lies inside Adam's range (epochs >= 1)
    # is listed, with Adam's movement between that of the two Adam epochs bracketing the loss
    import numpy as np
    import pytest

    la = np.array(r["train_loss_per_epoch"]["adam_3e-05"][1:])
    ma = np.array(c["adam_3e-05"][1:])
    order = np.argsort(la)
    la, ma = la[order], ma[order]
    for g in ("gn_0.1", "gn_0.2"):
        lg = np.array(r["train_loss_per_epoch"][g])
        rows = r["gn_over_adam_at_matched_loss"][g]["adam_3e-05"]
        inside = [k for k in range(1, len(lg)) if la.min() <= lg[k] <= la.max()]
        assert inside and [row["epoch"] for row in rows] == inside
        for row in rows:
            k = row["epoch"]
            assert row["loss"] == pytest.approx(lg[k]) and row["gn"] == pytest.approx(c[g][k])
            j = int(np.searchsorted(la, lg[k]))  # Adam's epochs whose losses bracket GN's
            lo, hi = max(j - 1, 0), min(j, len(la) - 1)
            assert min(ma[lo], ma[hi]) - 1e-12 <= row["adam"] <= max(ma[lo], ma[hi]) + 1e-12
            assert row["ratio"] == pytest.approx(row["gn"] / row["adam"])


def test_matched_loss_ratio_interpolates_adam_in_log_loss():
    import numpy as np
    import pytest

    from reproduce._gnrev_appG_rate import matched_loss_ratio

    # Adam: loss 1 -> 0.1 -> 0.01 (epochs 1, 2), movement 0 -> 1 -> 3; GN at loss 10^-1.5
    # (halfway in log between Adam's epochs 1 and 2) and 0.5 (outside Adam's [0.01, 0.1])
    rows = matched_loss_ratio([2.0, 0.5, 10 ** -1.5], [0.0, 4.0, 8.0],
                              [2.0, 0.1, 0.01], [0.0, 1.0, 3.0])
    assert [r["epoch"] for r in rows] == [2]
    assert rows[0]["adam"] == pytest.approx(2.0) and rows[0]["ratio"] == pytest.approx(4.0)
    # linear instead of log interpolation would give 1 + 2 * (0.1 - 0.0316) / 0.09 = 2.52
    assert matched_loss_ratio([2.0, 5.0], [0.0, 1.0], [2.0, 0.1, 0.01], [0.0, 1.0, 3.0]) == []
    assert matched_loss_ratio([2.0, 0.5], [0.0, 1.0], [2.0], [0.0]) == []  # Adam: init only
    # Adam's loss rising again (epoch 3 back at 0.05): only its new-lowest epochs count, so
    # GN at 0.05 is read between epochs 1 and 2 (log-halfway 0.0316 is not hit exactly)
    rows = matched_loss_ratio([2.0, 0.05], [0.0, 1.0], [2.0, 0.1, 0.01, 0.05],
                              [0.0, 1.0, 3.0, 100.0])
    want = 1.0 + 2.0 * np.log(0.05 / 0.1) / np.log(0.01 / 0.1)
    assert rows[0]["adam"] == pytest.approx(want)


def test_appG_rate_ablation_runs_at_the_width_asked(tmp_path):
    r = _smoke("_gnrev_appG_rate", ["--gn-rates", "0.1", "--adam-rates", "1e-3", "--epochs",
                                    "1", "--bottleneck", "40"], tmp_path)
    assert r["config"]["bottleneck"] == 40 and "d'=40" in r["_note"]
    assert r["config"]["augment"] is None and "augmented" not in r["_note"]


def test_appG_rate_ablation_augments_when_asked(tmp_path):
    # same keys, one arm: the augmented run's weights differ from the plain run's
    argv = ["--gn-rates", "0.1", "--adam-rates", "", "--epochs", "1"]
    plain = _smoke("_gnrev_appG_rate", argv, tmp_path / "plain")
    aug = _smoke("_gnrev_appG_rate", [*argv, "--augment", "random_resized_crop"],
                 tmp_path / "aug")
    assert aug["config"]["augment"] == "random_resized_crop" and "augmented" in aug["_note"]
    a, b = plain["w_one_minus_cos_end"]["gn_0.1"], aug["w_one_minus_cos_end"]["gn_0.1"]
    assert a > 0 and b > 0 and abs(a - b) > 1e-3 * a


def test_appG_rate_ablation_refuses_a_bad_width(tmp_path, capsys):
    import pytest

    with pytest.raises(SystemExit):
        _smoke("_gnrev_appG_rate", ["--bottleneck", "0"], tmp_path)
    assert "--bottleneck must be a positive width, got 0" in capsys.readouterr().err


def test_variants_long_without_adam_decides_only_the_claims_it_can(tmp_path):
    # run_variants compares with Adam for most claims: a run of chosen arms without Adam must
    # leave those out (not fail, not invent an Adam), and keep the ones it can decide
    r = _smoke("_gnrev_variants_long", ["--artifact", "appF", "--arms", "gn,gn_then_adam",
                                        "--epochs", "2", "--switch", "1"], tmp_path)
    assert [c["claim"] for c in r["claims"]] == [
        "Adam continued from a GN-trained point goes below GN's saturation"]
    gt = r["arms"]["gn_then_adam"]["train_loss_per_epoch"][-1]
    assert r["claims"][0]["holds"] == (gt < r["arms"]["gn"]["train_loss_per_epoch"][-1])


def test_ntk_rate_ablation_decides_fig3_from_its_own_adam_and_sgd(tmp_path):
    # reproduce/_gnrev_ntk_rate.py (main(argv), what python -m runs; in process, so its
    # programs share this worker's compilation cache): with one Adam and one SGD arm it
    # decides Fig. 3's claims for each GN arm by the records' rule, recomputed here from the
    # per-epoch curves it writes; --baselines-first trains (and lists) them first
    import json

    import numpy as np
    import pytest

    from layerlab.data import DatasetNotFoundError, load
    try:
        load("mnist", "test", n=8)
    except DatasetNotFoundError as e:
        pytest.skip(f"needs MNIST: {e}")
    out = tmp_path / "fig3_rate.json"
    from reproduce._gnrev_ntk_rate import main
    # batch 64 > d' + 1 = 49: GN's layer-wise update is not an exact right inverse, and says so
    with pytest.warns(UserWarning, match="exceeds the rank bound"):
        rc = main(["--n-train", "256", "--n-test", "512", "--bottleneck", "48", "--batch", "64",
                   "--epochs", "2", "--gn-rates", "0.1", "--adam-rates", "1e-3", "--sgd-rate",
                   "0.1", "--ntk-n", "2", "--baselines-first", "--checkpoint-dir",
                   str(tmp_path / "ck"), "--out", str(out)])
    assert rc == 0
    r = json.loads(out.read_text())
    assert list(r["arms"]) == ["adam_1e-3", "sgd_0.1", "gn_0.1"]
    pe = {a: np.asarray(v["batch_loss_change_pct_per_epoch"]) for a, v in r["arms"].items()}
    assert all(p.shape == (2,) and np.all(np.isfinite(p)) for p in pe.values())
    first = [pe[b][0] - pe["gn_0.1"][0] for b in ("adam_1e-3", "sgd_0.1")]
    last = [pe[b][-1] - pe["gn_0.1"][-1] for b in ("adam_1e-3", "sgd_0.1")]
    cl = r["fig3_claims"]["gn_0.1"]
    assert [c["claim"][:36] for c in cl] == ["per-batch loss drop of GN (gn) large",
                                             "GN's (gn) per-batch advantage over S",
                                             "GN's (gn) per-batch advantage over S"]
    assert [c["holds"] for c in cl] == [min(first) > 0, all(a < b for a, b in zip(last, first)),
                                        min(last) > 0]


def test_fig3_matched_loss_crossing_matches_the_closed_form():
    """Arm a's drop is linear in log loss (-18 - 8 ln x at its epochs' end losses e^-1, e^-2),
    arm b's a constant -6 on [e^-1.8, e^-1.2]: they cross where -18 - 8 ln x = -6."""
    import math

    import pytest

    from reproduce._gnrev_fig3_matched_loss import anchored, at, compare

    a = anchored([1.0, math.exp(-1), math.exp(-2)], [-10.0, -2.0], "end")
    b = anchored([1.0, math.exp(-1.2), math.exp(-1.8)], [-6.0, -6.0], "end")
    assert at(*a, math.exp(-1.25)) == pytest.approx(-18 + 8 * 1.25, abs=1e-12)
    c = compare(a, b)
    assert c["overlap"] == pytest.approx([math.exp(-1.8), math.exp(-1.2)], rel=1e-12)
    assert len(c["crossings"]) == 1
    assert math.log(c["crossings"][0]) == pytest.approx(-1.5, abs=1e-9)
    assert c["a_leads_fraction"] == pytest.approx(200 / 401)   # a drops more above e^-1.5
    # the geometric middle of each epoch: a's points move to e^-0.5, e^-1.5 (-14 - 8 ln x)
    am = anchored([1.0, math.exp(-1), math.exp(-2)], [-10.0, -2.0], "middle")
    assert am[0] == pytest.approx([math.exp(-1.5), math.exp(-0.5)], rel=1e-12)
    b2 = anchored([1.0, math.exp(-0.4), math.exp(-1.6)], [-3.0, -3.0], "end")
    assert math.log(compare(am, b2)["crossings"][0]) == pytest.approx(-11 / 8, abs=1e-9)
    assert compare(am, b)["crossings"] == []          # -14 - 8 ln x > -6 on the whole overlap
    assert compare(a, anchored([1.0, 0.9, 0.8], [-1.0, -1.0], "end"))["overlap"] is None
    with pytest.raises(ValueError, match="one entry more"):
        anchored([1.0, 0.5], [-1.0, -2.0], "end")
    with pytest.raises(ValueError, match="anchor must be one of"):
        anchored([1.0, 0.5], [-1.0], "mean")


def test_fig3_matched_loss_record_is_what_the_script_computes(tmp_path):
    """The committed ablation is the script's output on the committed curves."""
    import json
    import pathlib

    import pytest

    from reproduce._gnrev_fig3_matched_loss import main

    res = pathlib.Path(__file__).resolve().parents[2] / "results" / "gnrev"
    out = tmp_path / "m.json"
    assert main(["--out", str(out), "--fig3", str(res / "fig3.json"), "--fig2",
                 str(res / "fig2.json"), "--ablation",
                 str(res / "ablation" / "fig3_gn_rate_mnist.json")]) == 0
    got = json.loads(out.read_text())
    ref = json.loads((res / "ablation" / "fig3_matched_loss.json").read_text())
    for src in ("record", "authors_rate"):
        for anchor, pairs in ref[src].items():
            for k, v in pairs.items():
                assert got[src][anchor][k]["crossings"] == pytest.approx(v["crossings"])
    # the numbers docs/gnrev.md quotes: GN 0.1 meets Adam at 0.056 / 0.064 / 0.074
    cr = [got["authors_rate"][an]["gn_0.1 vs adam_3e-4"]["crossings"]
          for an in ("end", "middle", "start")]
    assert [round(c[0], 3) for c in cr] == [0.056, 0.064, 0.074]
