"""Every `reproduce/gnrev_*.py` script: a --smoke run writes a valid record and figure
(parametrized in tests/reproduce/conftest.py)."""
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
    r = _smoke("_gnrev_variants_long", ["--artifact", "appF", "--arms", "gn,adam,adam_then_gn",
                                        "--epochs", "3", "--switch", "1"], tmp_path)
    ad = np.array(r["arms"]["adam"]["train_loss_per_epoch"])
    ag = np.array(r["arms"]["adam_then_gn"]["train_loss_per_epoch"])
    assert ad.shape == ag.shape == (4,)
    np.testing.assert_allclose(ag[:2], ad[:2], rtol=1e-6)
    assert abs(ag[2] - ad[2]) > 1e-3 * ad[2]
    names = [c["claim"] for c in r["claims"]]
    assert any("continued from an Adam-trained point" in n for n in names)
    # crossings: the first epoch at which one curve is below another, recomputed here
    g = np.array(r["arms"]["gn"]["train_loss_per_epoch"])
    below = [e for e in range(1, 4) if ad[e] < g[e]]
    assert r["crossings"]["adam below gn"] == (below[0] if below else None)


def test_appG_rate_ablation_weight_movement_grows_with_gns_rate(tmp_path):
    # 1 - cos(W, W0) is 0 at init and, for small steps, grows like the rate squared: doubling
    # GN's rate must multiply it by well over 2 (the smoke net: ~3.3)
    r = _smoke("_gnrev_appG_rate", ["--gn-rates", "0.1,0.2", "--adam-rates", "1e-3",
                                    "--epochs", "2"], tmp_path)
    c = r["w_one_minus_cos_per_epoch"]
    assert all(abs(v[0]) < 1e-6 for v in c.values())
    e = r["w_one_minus_cos_end"]
    assert 2.5 < e["gn_0.2"] / e["gn_0.1"] < 4.5
    assert r["gn_over_adam_end"]["gn_0.1"]["adam_0.001"] == e["gn_0.1"] / e["adam_0.001"]
