"""Tests for layerlab.dmn.experiments: DMN build + classifier trained by layerlab.loop.fit."""
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from layerlab.data import load
from layerlab.dmn import DMNConfig
from layerlab.dmn.experiments import train_and_evaluate


def test_dmn_classifier_learns_digits():
    tr, te = load("digits", "train"), load("digits", "test")
    r = train_and_evaluate("d4,m,de10", tr.x, tr.y, te.x, te.y, 10,
                           key=jax.random.key(0), config=DMNConfig(pca="class"), epochs=8,
                           batch_size=64, lr=1e-2, progress=False, eval_every_epoch=True)
    assert r["widths"] == [4]
    assert len(r["curve"]) == 8
    # a linear classifier on 4 PCA filters of 3x3 patches: far above chance (0.1)
    assert r["val_acc"] > 0.85, r["val_acc"]
    assert np.isfinite(r["final_loss"]) and r["final_loss"] < 1.0


def test_running_and_evaluated_training_accuracy_per_epoch():
    """With a frozen head (SGD at rate 0) every batch sees the initial net, so each epoch's
    running training accuracy (Keras' ``acc``: the mean of the per-batch accuracies) equals the
    accuracy of that net on the whole training set, which is also every train_curve entry
    and train_acc; with training, the running value trails the end-of-epoch one."""
    import optax

    tr, te = load("digits", "train"), load("digits", "test")
    n = len(tr.x) // 64 * 64  # whole batches: every sample once per epoch
    kw = dict(key=jax.random.key(2), epochs=3, batch_size=64, progress=False,
              eval_every_epoch=True, train_eval_n=None, train_curve_n=n)
    r = train_and_evaluate("c4,m,de10", tr.x[:n], tr.y[:n], te.x, te.y, 10,
                           optimizer=optax.sgd(0.0), **kw)
    assert [e for e, _ in r["running_train_acc"]] == [1, 2, 3]
    assert [e for e, _ in r["train_curve"]] == [1, 2, 3]
    for (_, run), (_, ev) in zip(r["running_train_acc"], r["train_curve"]):
        assert run == pytest.approx(r["train_acc"], abs=1e-6)
        assert ev == pytest.approx(r["train_acc"], abs=1e-6)
    r = train_and_evaluate("c4,m,de10", tr.x[:n], tr.y[:n], te.x, te.y, 10, lr=1e-2, **kw)
    assert r["train_curve"][-1][1] == pytest.approx(r["train_acc"], abs=1e-6)
    assert r["running_train_acc"][0][1] < r["train_curve"][0][1]  # epoch 1 starts at chance


def _run_stopped_in_epoch_3(monkeypatch, ck, tr, te, kw):
    """train_and_evaluate into ``ck``, interrupted in epoch 3 (two epochs saved): each chunk
    is one epoch, so the 3rd chunk read back is epoch 3's; it stops there, before that
    chunk is logged, evaluated or saved."""
    from layerlab.loop import _run

    real_take, calls = _run.FitRun.take_chunk, []

    def stop_in_epoch_3(self, chunk, check_finite):
        calls.append(chunk.t_from)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_take(self, chunk, check_finite)

    monkeypatch.setattr(_run.FitRun, "take_chunk", stop_in_epoch_3)
    with pytest.raises(KeyboardInterrupt):
        train_and_evaluate("c4,m,de10", tr.x, tr.y, te.x, te.y, 10, checkpoint_dir=ck, **kw)
    monkeypatch.setattr(_run.FitRun, "take_chunk", real_take)


def test_train_curve_survives_a_resume(tmp_path, monkeypatch):
    """train_curve is checkpointed with the curve: a resumed run keeps the stored epochs, an
    epoch restored without its training accuracy is (epoch, None) like the curve's entry, and
    a run whose checkpoint holds the final step scores the final state for a missing last
    entry."""
    tr, te = load("digits", "train"), load("digits", "test")
    kw = dict(key=jax.random.key(1), epochs=4, batch_size=256, lr=1e-2, progress=False,
              eval_every_epoch=True, train_eval_n=None, train_curve_n=10_000)
    want = train_and_evaluate("c4,m,de10", tr.x, tr.y, te.x, te.y, 10, **kw)
    assert [e for e, _ in want["train_curve"]] == [1, 2, 3, 4]
    assert want["train_curve"][-1][1] == want["train_acc"]

    ck = tmp_path / "run"
    _run_stopped_in_epoch_3(monkeypatch, ck, tr, te, kw)
    saved = json.loads((ck / "curve.json").read_text())
    assert [c[0] for c in saved["train_curve"]] == [1, 2]
    saved["train_curve"] = saved["train_curve"][:1]  # epoch 2's training score was lost
    (ck / "curve.json").write_text(json.dumps(saved))
    got = train_and_evaluate("c4,m,de10", tr.x, tr.y, te.x, te.y, 10, checkpoint_dir=ck, **kw)
    assert got["resumed_from_epoch"] == 2
    assert got["train_curve"][1] == (2, None)
    for i in (0, 2, 3):
        assert got["train_curve"][i] == pytest.approx(want["train_curve"][i], abs=1e-7)
    saved = json.loads((ck / "curve.json").read_text())
    saved["train_curve"] = saved["train_curve"][:-1]
    saved["curve"] = saved["curve"][:-1]
    (ck / "curve.json").write_text(json.dumps(saved))
    last = train_and_evaluate("c4,m,de10", tr.x, tr.y, te.x, te.y, 10, checkpoint_dir=ck, **kw)
    assert last["resumed_from_epoch"] == 4
    assert last["train_curve"][-1] == (4, pytest.approx(want["train_acc"], abs=1e-7))


def _write_cifar100(root, n_train=200, n_test=100, seed=0):
    """A tiny CIFAR-100 in the official python format (cifar-100-python/{train,test,meta})."""
    import pickle

    rng = np.random.default_rng(seed)
    d = root / "cifar-100-python"
    d.mkdir(parents=True)
    for split, n in (("train", n_train), ("test", n_test)):
        fine = np.arange(n) % 100
        data = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
        data[:, :1024] = (fine[:, None] * 2).astype(np.uint8)  # red channel encodes the class
        with open(d / split, "wb") as f:
            pickle.dump({b"data": data, b"fine_labels": fine.tolist(),
                         b"coarse_labels": (fine // 5).tolist()}, f)
    with open(d / "meta", "wb") as f:
        pickle.dump({b"fine_label_names": [f"c{i}".encode() for i in range(100)],
                     b"coarse_label_names": [f"s{i}".encode() for i in range(20)]}, f)


def test_table5_runs_on_official_format_files_and_marks_absent(tmp_path, monkeypatch):
    from layerlab.dmn import experiments as ex
    from layerlab.record import load_record, write_record

    # small stand-ins in the official format, not the official files: skip the checksums
    # (format, shape and label checks still run)
    monkeypatch.setattr("layerlab.data._files.verify_file", lambda *a, **k: None)

    _write_cifar100(tmp_path / "c100")
    cfg = ex.TableConfig(artifact="table5", rows=(ex.TABLE5[1],), convnet=False, seeds=1,
                         epochs=2, data_dir=str(tmp_path / "c100"))
    rec = ex.run_table5(cfg, key=jax.random.key(0), progress=False,
                        checkpoint_dir=tmp_path / "ck")
    val, train = rec.rows
    assert val.name == "cifar100 d15, m, de100 val acc" and val.paper == 22.93
    assert 0.0 <= val.ours <= 100.0 and val.seeds == 1 and val.tol == 2.0
    assert train.paper == 37.48 and train.ours is not None
    run = rec.extra["runs"][0]
    assert run["widths"] == [15] and run["spec"] == "d15,m,de100"
    assert len(list((tmp_path / "ck").glob("*.json"))) == 1  # resumable: one cached run
    again = ex.run_table5(cfg, key=jax.random.key(0), progress=False,
                          checkpoint_dir=tmp_path / "ck")
    assert again.rows[0].ours == val.ours
    load_record(write_record(rec, tmp_path / "out"))
    # without the files: every row recorded as not run, with the loader's message
    (tmp_path / "empty").mkdir()
    cfg2 = ex.TableConfig(artifact="table5", rows=ex.TABLE5[:2], convnet=False, seeds=1,
                          epochs=1, data_dir=str(tmp_path / "empty"))
    rec2 = ex.run_table5(cfg2, key=jax.random.key(0), progress=False)
    assert [r.ours for r in rec2.rows] == [None] * 4  # val and train acc of two rows
    assert [r.paper for r in rec2.rows] == [15.96, 23.68, 22.93, 37.48]
    assert all("cifar100" in r.note and r.note.startswith("not run") for r in rec2.rows)
    assert rec2.scale == "reduced" and "Not run" in rec2.note
    load_record(write_record(rec2, tmp_path / "out2"))


def test_table_rows_are_the_papers():
    from layerlab.dmn import experiments as ex

    t2 = ex.table_rows("table2")
    assert len(t2) == 14 and sum(r.dataset == "cifar10" for r in t2) == 7
    r = t2[8]
    assert (r.arch, r.input_fraction, r.var_fraction, r.paper_val, r.paper_convnet) == (
        "d22,m,d41,m,de10", 0.2, 0.995, 59.64, 51.96)
    assert [len(ex.table_rows(t)) for t in ("table3", "table4", "table5")] == [7, 9, 10]
    last = ex.table_rows("table5")[-1]  # the paper's tenth CIFAR-100 row
    assert (last.arch, last.paper_train, last.paper_val) == ("c27,m,c108,m,de100", 36.95, 23.97)
    assert ex.table_rows("table4")[6].arch == "d27,m,c108,m,bn,de10"
    cfg = ex.TableConfig.paper("table2")
    assert cfg.dmn_config(r).var_fraction == (0.999, 0.995) and cfg.is_paper_scale()
    assert cfg.dmn_config(t2[3]).var_fraction == (0.85, 0.99)
    assert cfg.dmn_config(t2[6]).var_fraction == (0.99, 0.99)


def test_cost_is_convnet_time_to_dmn_accuracy_over_dmn_time():
    from layerlab.dmn.experiments import _cost

    runs = [
        {"dataset": "mnist", "row": "d6", "variant": "dmn", "val_acc": 0.9, "total_s": 10.0},
        {"dataset": "mnist", "row": "d6", "variant": "dmn", "val_acc": 0.92, "total_s": 14.0},
        {"dataset": "mnist", "row": "d6", "variant": "convnet",
         "curve": [(1, 5.0, 0.85), (2, 30.0, 0.91), (3, 45.0, 0.95)]},
        {"dataset": "mnist", "row": "d6", "variant": "convnet",
         "curve": [(1, 8.0, 0.93)]},
        {"dataset": "mnist", "row": "d9", "variant": "dmn", "val_acc": 0.99, "total_s": 1.0},
        {"dataset": "mnist", "row": "d9", "variant": "convnet", "curve": [(1, 2.0, 0.5)]},
    ]
    c6, c9 = _cost(runs)
    # target 0.91: first epochs reaching it at 30 s and 8 s -> 19 s; DMN mean 12 s
    assert c6["convnet_s"] == 19.0 and c6["dmn_s"] == 12.0 and abs(c6["ratio"] - 19 / 12) < 1e-12
    assert c9["convnet_s"] is None and c9["ratio"] is None
    # never reached: its whole run (2 s) bounds its time from below, 2x the DMN's 1 s
    assert c9["convnet_total_s"] == 2.0 and c9["ratio_at_least"] == 2.0
    assert c6["ratio_at_least"] is None and c6["convnet_total_s"] == (45.0 + 8.0) / 2


def test_timescales_config_checks_and_missing_data_set_is_recorded(tmp_path):
    import pytest

    from layerlab.dmn.experiments import TimescalesConfig, plot_timescales, run_timescales

    with pytest.raises(ValueError, match="parts"):
        TimescalesConfig(parts=("fig4",))
    with pytest.raises(ValueError, match="fig3_pool"):
        TimescalesConfig(fig3_pool=100, fig3_ns=(250,))
    cfg = TimescalesConfig.smoke(parts=("fig5",), cnn_datasets=("cifar100",),
                                 data_dir=str(tmp_path))  # no files there
    rec = run_timescales(cfg, key=jax.random.key(0), progress=False)
    assert rec.scale == "reduced" and rec.rows and all(r.ours is None for r in rec.rows)
    assert all("not run" in r.note for r in rec.rows)
    assert [c.holds for c in rec.claims] == [None]
    plot_timescales(rec, tmp_path / "t.png")
    assert (tmp_path / "t.png").stat().st_size > 1000


def test_table2_claim_without_convnets_compares_with_the_papers_convnets():
    from layerlab.dmn import experiments as ex
    from layerlab.record import Row

    cfg = ex.TableConfig.paper("table2", convnet=False)
    c = [r for r in cfg.rows if r.dataset == "cifar10"][:2]  # d10 (48.61), d10,d11 (46.88)
    name = lambda r: f"cifar10 {r.label} (Input {r.input_fraction}, Var {r.var_fraction}) val acc"  # noqa: E731
    rows = [Row(name(c[0]), 49.0, c[0].paper_val), Row(name(c[1]), 40.0, c[1].paper_val)]
    (claim,) = ex._table_claims(cfg, rows)
    assert claim.holds is None  # our ConvNets did not run: not decided
    assert "ahead in 1/2 rows" in claim.evidence
    assert f"{c[0].label}: 49.00 vs {c[0].paper_convnet:.2f}" in claim.evidence
    (empty,) = ex._table_claims(cfg, [])
    assert empty.holds is None and empty.evidence == "no CIFAR-10 rows run"


def test_no_conv_rows_keeps_exactly_the_rows_without_trained_conv_layers():
    from layerlab.dmn import experiments as ex

    full = ex.table_config("table4", "paper")
    cfg = ex.table_config("table4", "paper", conv_rows=False)
    kept = {r.arch for r in cfg.rows}
    dropped = {r.arch for r in full.rows} - kept
    # the trained-conv rows of Table 4 by hand: c27; d15+c80; d27+c108+BN; c10+c80; c32+c32
    assert dropped == {"c27,m,de10", "d15,m,c80,m,de10", "d27,m,c108,m,bn,de10",
                       "c10,m,c80,m,de10", "c32,m,c32,m,de10"}
    assert all(not ex.has_trained_conv(a) for a in kept) and "de10" in kept
    assert not cfg.conv_rows and not cfg.is_paper_scale() and full.is_paper_scale()
    assert "conv_rows=False" in ex._note(cfg) and "conv_rows" not in ex._note(full)
    f10 = ex.table_config("fig10", "paper", conv_rows=False, datasets=("cifar10",))
    assert [r.arch for r in f10.rows] == ["d10,m,de10", "d15,m,d108,m,de10",
                                          "d20,m,d180,m,bn,de10"]


def test_fig6_without_convnets_runs_the_dmn_curve_only_and_leaves_the_claim_open(monkeypatch):
    """convnet=False: only DMN runs (counted by a stub of the per-run trainer), the CIFAR-10
    DMN-vs-ConvNet claim is open, the best-width claim is decided from the DMN curve, and the
    record is reduced even at the paper's other settings."""
    from layerlab.dmn import experiments as ex

    calls = []
    acc = {2: 40.0, 12: 55.0, 27: 50.0}

    def fake_one(tcfg, row, variant, seed, data, **kw):
        calls.append((row.arch, variant, seed))
        head = row.arch.split(",")[0]
        f = 0 if head.startswith("de") else int(head[1:])
        return {"variant": variant, "seed": seed, "widths": [f], "val_acc": acc.get(f, 30.0),
                "train_acc": 0.0, "total_s": 0.0}

    monkeypatch.setattr(ex, "_one", fake_one)
    monkeypatch.setattr(ex, "_load_split", lambda ds, tcfg: (None, None))
    monkeypatch.setattr(ex, "_acc", lambda r, tcfg: r["val_acc"])
    cfg = ex.Fig6Config.paper(datasets=("cifar10",), filters=(2, 12, 27), convnet=False)
    rec = ex.run_fig6(cfg, key=jax.random.key(0), progress=False)
    assert {v for _, v, _ in calls} == {"dmn"} and len(calls) == 3 * (1 + 3)
    claims = {c.claim: c for c in rec.claims}
    assert claims["cifar10: best one-layer DMN width is F=12"].holds is True
    assert claims["CIFAR-10: one DMN layer >= one conv layer (most F)"].holds is None
    assert rec.scale == "reduced" and "ConvNets not run" in rec.note
    assert not any("ConvNet" in r.name for r in rec.rows)
    # the rule its DMN curve was made under (merge_fig6 names curves without it as old-rule)
    assert rec.config["width_rule"] == ex.WIDTH_RULE
    calls.clear()
    rec = ex.run_fig6(ex.Fig6Config.paper(datasets=("cifar10",), filters=(2, 12, 27), seeds=1),
                      key=jax.random.key(0), progress=False)
    assert {v for _, v, _ in calls} == {"dmn", "convnet"}
    assert [c.holds for c in rec.claims if "conv layer" in c.claim] == [True]  # fakes equal


def test_row_numbers_select_the_papers_rows_as_printed():
    import pytest

    from layerlab.dmn import experiments as ex

    cfg = ex.table_config("table2", "paper", row_numbers=(8, 6, 7, 6))
    # Table 2 as printed: rows 6-8 are CIFAR-10 d10 (0.7, .99), d10, d11 and d22 (0.7, .999)
    assert [(r.dataset, r.label, r.var_fraction, r.paper_val) for r in cfg.rows] == [
        ("cifar10", "d10", 0.99, 49.92), ("cifar10", "d10, d11", 0.99, 49.94),
        ("cifar10", "d22", 0.999, 56.2)]
    assert not cfg.is_paper_scale() and "Rows run: 3 of the table's 14" in ex._note(cfg)
    assert "Rows run" not in ex._note(ex.table_config("table2", "paper"))
    # the selection indexes the paper's table also when the scale's own pick is smaller
    assert ex.table_config("table2", "smoke", row_numbers=(1,)).rows[0].label == "d4"
    with pytest.raises(ValueError, match="1-based rows of table2"):
        ex.table_config("table2", "paper", row_numbers=(15,))


def test_an_interrupted_training_resumes_to_the_uninterrupted_result(tmp_path, monkeypatch):
    """checkpoint_dir: stopped during epoch 3 (two epochs saved), rerun: the same final
    accuracies, loss and per-epoch curve as one uninterrupted run; stopped just after an
    epoch's save, before its accuracy was stored: that epoch's curve entry is None (when the
    save was committed)."""
    from layerlab.dmn import experiments as ex

    tr, te = load("digits", "train"), load("digits", "test")
    kw = dict(key=jax.random.key(1), epochs=5, batch_size=256, lr=1e-2, progress=False,
              eval_every_epoch=True, train_eval_n=None)
    want = train_and_evaluate("c4,m,de10", tr.x, tr.y, te.x, te.y, 10, **kw)
    assert want["resumed_from_epoch"] == 0

    ck = tmp_path / "run"
    _run_stopped_in_epoch_3(monkeypatch, ck, tr, te, kw)
    assert [c[0] for c in json.loads((ck / "curve.json").read_text())["curve"]] == [1, 2]
    got = train_and_evaluate("c4,m,de10", tr.x, tr.y, te.x, te.y, 10, checkpoint_dir=ck, **kw)
    assert got["resumed_from_epoch"] == 2
    for k in ("val_acc", "train_acc", "final_loss", "best_val_acc"):
        assert got[k] == want[k], k
    assert [c[0] for c in got["curve"]] == [1, 2, 3, 4, 5]
    assert [c[2] for c in got["curve"]] == [c[2] for c in want["curve"]]
    assert all(b[1] > a[1] for a, b in zip(got["curve"], got["curve"][1:]))  # seconds add up

    # stopped after epoch 2's checkpoint, while its accuracy was measured
    real_score, n = ex.probes.accuracy, []

    def stop_at_second_score(logits, *a, **k):
        if not isinstance(logits, jax.core.Tracer):  # not the loss's accuracy metric
            n.append(1)
            if len(n) == 2:
                raise KeyboardInterrupt
        return real_score(logits, *a, **k)

    ck2 = tmp_path / "run2"
    monkeypatch.setattr(ex.probes, "accuracy", stop_at_second_score)
    with pytest.raises(KeyboardInterrupt):
        train_and_evaluate("c4,m,de10", tr.x, tr.y, te.x, te.y, 10, checkpoint_dir=ck2, **kw)
    monkeypatch.setattr(ex.probes, "accuracy", real_score)
    assert [c[0] for c in json.loads((ck2 / "curve.json").read_text())["curve"]] == [1]
    got2 = train_and_evaluate("c4,m,de10", tr.x, tr.y, te.x, te.y, 10, checkpoint_dir=ck2, **kw)
    # epoch 2's checkpoint may or may not have been committed when the interrupt came
    # (orbax finishes a save in the background): resumed from epoch 2 with its accuracy
    # unknown (None), or from epoch 1 with epoch 2 re-run and measured
    r = got2["resumed_from_epoch"]
    assert r in (1, 2) and got2["val_acc"] == want["val_acc"]
    assert [c[0] for c in got2["curve"]] == [1, 2, 3, 4, 5]
    for g, w in zip(got2["curve"], want["curve"]):
        assert g[2] == (None if g[0] == 2 and r == 2 else w[2]), (g, w, r)

    # the checkpoint already holds the final step (stopped before the caller stored the
    # result): nothing is retrained; the curve comes from curve.json, its last accuracy (if
    # that was not stored) from the final state
    stored = json.loads((ck / "curve.json").read_text())["train_s_at"]["5"]
    again = train_and_evaluate("c4,m,de10", tr.x, tr.y, te.x, te.y, 10, checkpoint_dir=ck, **kw)
    assert again["resumed_from_epoch"] == 5 and again["val_acc"] == want["val_acc"]
    assert [c[2] for c in again["curve"]] == [c[2] for c in want["curve"]]
    assert again["train_s"] == stored  # the stored training time, not counted again
    saved = json.loads((ck / "curve.json").read_text())
    saved["curve"] = saved["curve"][:-1]
    (ck / "curve.json").write_text(json.dumps(saved))
    last = train_and_evaluate("c4,m,de10", tr.x, tr.y, te.x, te.y, 10, checkpoint_dir=ck, **kw)
    assert last["curve"][-1] == (5, None, want["val_acc"])

    # curve.json ahead of the checkpoint (its save of epoch 3 never committed): cut back to
    # the restored epoch, then measured again -- no duplicate epochs
    ck3 = tmp_path / "run3"
    _run_stopped_in_epoch_3(monkeypatch, ck3, tr, te, kw)
    saved = json.loads((ck3 / "curve.json").read_text())
    saved["curve"].append([3, 1e9, 0.5])
    saved["train_s_at"]["3"] = 1e9
    (ck3 / "curve.json").write_text(json.dumps(saved))
    got3 = train_and_evaluate("c4,m,de10", tr.x, tr.y, te.x, te.y, 10, checkpoint_dir=ck3, **kw)
    assert got3["resumed_from_epoch"] == 2 and got3["train_s"] < 1e8
    assert [c[2] for c in got3["curve"]] == [c[2] for c in want["curve"]]


def test_table_run_resumes_inside_a_run_and_cleans_up(tmp_path, monkeypatch):
    """A table's (row, variant, seed) run with checkpoint_dir: an unfinished run leaves
    <tag>.run/ (passed to train_and_evaluate), the rerun trains from there and removes it once
    the run's JSON is written; a third call reads the JSON."""
    from layerlab.dmn import experiments as ex

    tr, te = load("digits", "train"), load("digits", "test")
    row = ex.ArchRow("mnist", "c4,m,de10", "c4", 1.0, None, 0.9, 90.0, None, None)
    cfg = ex.TableConfig(artifact="table3", rows=(row,), convnet=False, seeds=1, epochs=2,
                         batch_size=256)
    real, seen = ex.train_and_evaluate, []

    def interrupted(*a, **k):
        seen.append(k["checkpoint_dir"])
        k["checkpoint_dir"].mkdir(parents=True)
        (k["checkpoint_dir"] / "marker").write_text("unfinished")
        raise KeyboardInterrupt

    monkeypatch.setattr(ex, "train_and_evaluate", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ex._one(cfg, row, "dmn", 0, (tr, te), key=jax.random.key(0), progress=False,
                checkpoint_dir=tmp_path)
    (run_dir,) = tmp_path.glob("*.run")
    assert seen == [run_dir] and not list(tmp_path.glob("*.json"))

    def resumed(*a, **k):
        assert (k["checkpoint_dir"] / "marker").exists()  # the unfinished run's folder
        return real(*a, **k)

    monkeypatch.setattr(ex, "train_and_evaluate", resumed)
    r = ex._one(cfg, row, "dmn", 0, (tr, te), key=jax.random.key(0), progress=False,
                checkpoint_dir=tmp_path)
    assert not run_dir.exists() and len(list(tmp_path.glob("*.json"))) == 1
    monkeypatch.setattr(ex, "train_and_evaluate", interrupted)  # must not be called again
    again = ex._one(cfg, row, "dmn", 0, (tr, te), key=jax.random.key(0), progress=False,
                    checkpoint_dir=tmp_path)
    assert again["val_acc"] == r["val_acc"] and len(seen) == 1


def _table_part(artifact, numbers, dmn, convnet=None, *, epochs=50, seeds=3, wall=10.0,
                cost=(), label_only=False, dmn_only=False):
    """A record of some rows of a table as ``run_table`` writes it (no training): row
    ``numbers[i]`` (1-based, as printed) gets DMN accuracy ``dmn[i]`` (and ConvNet
    ``convnet[i]``); one run entry per row and variant.  ``dmn_only``: a Table 2 part run
    with ``--no-convnet`` (``convnet: false``, no ConvNet rows or runs)."""
    from layerlab.dmn import experiments as ex
    from layerlab.record import Record, Row

    full = ex.table_rows(artifact)
    cfg = ex.TableConfig.paper(artifact, rows=tuple(full[n - 1] for n in numbers),
                               epochs=epochs, seeds=seeds,
                               **({"convnet": False} if dmn_only else {}))
    rows, runs = [], []
    for i, r in enumerate(cfg.rows):
        name = ex._row_name(r)
        rows.append(Row(f"{name} val acc", dmn[i], r.paper_val, "%", ex.TOL[r.dataset], seeds))
        if cfg.convnet and convnet is not None:
            rows.append(Row(f"{name} ConvNet val acc", convnet[i], r.paper_convnet, "%",
                            ex.TOL[r.dataset], seeds))
        if r.paper_train is not None:
            rows.append(Row(f"{name} train acc", dmn[i] + 5, r.paper_train, "%",
                            ex.TOL[r.dataset], seeds))
        short = r.label if label_only else name.split(" ", 1)[1]
        runs += [{"dataset": r.dataset, "row": short, "variant": v, "seed": 0}
                 for v in (["dmn", "convnet"] if cfg.convnet else ["dmn"])]
    rec = Record("dmn", artifact, "t", "reduced", ex._config_dict(cfg), rows, [],
                 command=f"part {numbers}", wall_s=wall,
                 extra={"cost": list(cost), "runs": runs})
    return rec.to_dict() | {"machine": {"device_kind": "cpu", "cpu_count": 2}, "git": "x",
                            "versions": {}}


def test_merge_tables_keeps_every_paper_row_and_recomputes_the_claims(tmp_path):
    from layerlab.dmn import experiments as ex

    empty = tmp_path / "empty"
    empty.mkdir()  # no dataset files: the rows no part holds are "not run" with the message
    cost6 = {"row": "cifar10 d10", "dmn_val_acc": 50.0, "dmn_s": 10.0, "convnet_s": 40.0,
             "ratio": 4.0, "convnet_total_s": 90.0, "ratio_at_least": None}
    a = _table_part("table2", [6, 7], [50.0, 47.0], [45.0, 49.0], wall=100.0, cost=[cost6],
                    label_only=True)  # an older record: runs and cost named by the label
    b = _table_part("table2", [6], [44.0], [46.0], wall=30.0)  # a rerun of row 6
    rec = ex.merge_tables("table2", [a, b], data_dir=empty)
    full = ex.table_rows("table2")
    names = [r.name for r in rec.rows]
    # every paper row, in the paper's order, DMN then ConvNet
    assert names == [f"{ex._row_name(r)} {v}val acc" for r in full for v in ("", "ConvNet ")]
    by = {r.name: r for r in rec.rows}
    r6, r7 = ex._row_name(full[5]), ex._row_name(full[6])
    assert by[f"{r6} val acc"].ours == 44.0 and by[f"{r6} ConvNet val acc"].ours == 46.0  # b
    assert by[f"{r7} val acc"].ours == 47.0 and by[f"{r7} ConvNet val acc"].ours == 49.0  # a
    others = [r for r in rec.rows if not r.name.startswith((r6, r7))]
    assert others and all(r.ours is None and "not found" in r.note for r in others)
    # claims from the merged rows: row 6 44 < 46, row 7 47 < 49 -> 0/2
    (claim,) = rec.claims  # b has no cost entry for row 6, a's (replaced) is dropped
    assert claim.holds is False and claim.evidence.startswith("0/2 rows")
    assert rec.scale == "reduced" and rec.wall_s == 130.0
    assert {p["path"]: p["rows"] for p in rec.extra["parts"]} == {"parts[0]": [r7],
                                                                  "parts[1]": [r6]}
    # runs named as the record names the row (the older part's label-only names renamed)
    assert {(r["row"], r["variant"]) for r in rec.extra["runs"]} == {
        (r7.split(" ", 1)[1], "dmn"), (r7.split(" ", 1)[1], "convnet"),
        (r6.split(" ", 1)[1], "dmn"), (r6.split(" ", 1)[1], "convnet")}
    # the older part's cost entry is kept when its row is
    rec2 = ex.merge_tables("table2", [b, a], data_dir=empty)
    by2 = {r.name: r.ours for r in rec2.rows}
    assert by2[f"{r6} val acc"] == 50.0 and by2[f"{r6} ConvNet val acc"] == 45.0
    assert rec2.claims[0].evidence.startswith("1/2 rows") and rec2.claims[1].holds is True
    ev = rec2.claims[1].evidence  # the cost entry renamed to the row's name; row 7 untimed
    assert f"{r6}: DMN 10 s, ConvNet 40 s (4.0x)" in ev
    assert f"no timing recorded for: [{r7!r}]" in ev


def test_merge_tables_is_paper_scale_only_when_every_row_ran_at_the_papers_protocol(tmp_path):
    from layerlab.dmn import experiments as ex

    n = len(ex.table_rows("table3"))
    first = _table_part("table3", range(1, 4), [90.0, 91.0, 92.0])
    rest = _table_part("table3", range(4, n + 1), [93.0] * (n - 3))
    rec = ex.merge_tables("table3", [first, rest], data_dir=tmp_path)
    assert rec.scale == "paper" and all(r.ours is not None for r in rec.rows)
    assert len(rec.rows) == 2 * n  # validation and training accuracy per row
    short = _table_part("table3", range(4, n + 1), [93.0] * (n - 3), epochs=10)
    with pytest.raises(ValueError, match="epochs=10"):
        ex.merge_tables("table3", [first, short])
    with pytest.raises(ValueError, match="not dmn table3"):
        ex.merge_tables("table3", [first, _table_part("table4", [1], [40.0])])
    with pytest.raises(ValueError, match="parts is empty"):
        ex.merge_tables("table3", [])


def test_merge_command_writes_one_record_and_refuses_run_flags(tmp_path):
    from layerlab.record import load_record
    from reproduce import dmn_table2

    paths = []
    for i, (nums, d, c) in enumerate([([6], [50.0], [45.0]), ([7], [47.0], [49.0])]):
        p = tmp_path / f"p{i}.json"
        p.write_text(json.dumps(_table_part("table2", nums, d, c)))
        paths.append(str(p))
    out = tmp_path / "out" / "table2.json"
    dmn_table2.main(["--merge", *paths, "--out", str(out), "--data-dir", str(tmp_path)])
    rec = load_record(out)
    assert rec["wall_s"] == 20.0 and rec["claims"][0]["evidence"].startswith("1/2 rows")
    assert (out.parent / "table2.png").stat().st_size > 1000
    with pytest.raises(SystemExit, match="--rows"):
        dmn_table2.main(["--merge", *paths, "--rows", "6", "--out", str(out)])
    with pytest.raises(SystemExit, match="--no-convnet"):
        dmn_table2.main(["--merge", *paths, "--no-convnet", "--out", str(out)])
    with pytest.raises(SystemExit, match="no record at|No such file"):
        dmn_table2.main(["--merge", str(tmp_path / "nope.json"), "--out", str(out)])


def test_a_merged_record_merges_again_without_its_not_run_rows_winning(tmp_path):
    from layerlab.dmn import experiments as ex

    a = _table_part("table2", [6], [50.0], [45.0])
    merged = ex.merge_tables("table2", [a], data_dir=tmp_path)
    merged = merged.to_dict() | {"machine": {}, "versions": {}, "git": "x"}
    b = _table_part("table2", [7], [47.0], [49.0])
    r7 = ex._row_name(ex.table_rows("table2")[6])
    for parts in ([b, merged], [merged, b]):  # row 7 is "not run" in merged: b's stays
        by = {r.name: r.ours for r in ex.merge_tables("table2", parts, data_dir=tmp_path).rows}
        assert by[f"{r7} val acc"] == 47.0 and by[f"{r7} ConvNet val acc"] == 49.0


def test_fig10_merges_from_the_records_of_tables_3_and_4(tmp_path):
    from layerlab.dmn import experiments as ex

    t3 = ex.table_rows("table3")
    vals3 = [90.0 + i for i in range(len(t3))]
    a = _table_part("table3", range(1, len(t3) + 1), vals3)
    t4 = ex.table_rows("table4")
    want = [i for i, r in enumerate(t4, 1) if r.arch in ("d10,m,de10", "d15,m,d108,m,de10")]
    b = _table_part("table4", want, [60.0, 55.0])
    rec = ex.merge_tables("fig10", [a, b], data_dir=tmp_path)
    fig10 = ex.fig10_config().rows
    assert [r.name for r in rec.rows if r.name.endswith("val acc")] == [
        f"{ex._row_name(r)} val acc" for r in fig10]
    by = {r.name: r.ours for r in rec.rows}
    for r, v in zip(t3, vals3):  # every Fig. 10 row of Table 3 comes from the Table 3 part
        if r in fig10:
            assert by[f"{ex._row_name(r)} val acc"] == v
            assert by[f"{ex._row_name(r)} train acc"] == v + 5
    assert by["cifar10 d10, m, de10 val acc"] == 60.0
    assert by["cifar10 d20, m, d180, m, BN, de10 val acc"] is None  # in no part
    claims = {c.claim: c for c in rec.claims}
    # MNIST: d9,m,d40 (Table 3 row 4: 93) > d6,m (row 2: 91); CIFAR: 60 > 55
    assert claims["MNIST: a second DMN layer increases accuracy"].holds is True
    assert claims["CIFAR-10 without BN: two DMN layers < one DMN layer"].holds is True
    assert claims["CIFAR-10: DMN + Conv beats two Conv layers"].holds is None
    best = "CIFAR-10: of the two-layer networks the best is DMN + Conv, the worst two Conv"
    assert claims[best].holds is None and "c32, m, c32, m, de10" in claims[best].evidence
    assert rec.title.startswith("Fig. 10") and rec.scale == "reduced"
    # every two-layer CIFAR-10 row present: best / worst decided over all six
    six = [i for i, r in enumerate(t4, 1) if r.arch.count(",") >= 4]
    assert len(six) == 6
    for vals, holds in (([50.0, 51.0, 60.0, 59.0, 40.0, 41.0], True),   # hybrid best, cc worst
                        ([50.0, 51.0, 60.0, 59.0, 52.0, 41.0], True),
                        ([61.0, 51.0, 60.0, 59.0, 40.0, 41.0], False),  # two DMN best
                        ([50.0, 39.0, 60.0, 59.0, 40.0, 41.0], False)):  # two DMN worst
        c = {c.claim: c for c in ex.merge_tables(
            "fig10", [a, _table_part("table4", six, vals)], data_dir=tmp_path).claims}
        assert c[best].holds is holds, (vals, c[best].evidence)
        pair = c["CIFAR-10: d15, c80 (DMN + Conv) beats c10, c80 (two Conv)"]
        assert pair.holds is (vals[2] > vals[4])
        assert pair.evidence == f"{vals[2]:.2f} vs {vals[4]:.2f}"
    with pytest.raises(ValueError, match="not dmn table2"):
        ex.merge_tables("table2", [a])


def test_merge_tables_keeps_rows_that_share_a_label_apart_and_checks_the_protocol(tmp_path):
    from layerlab.dmn import experiments as ex

    full = ex.table_rows("table2")
    r9, r10 = ex._row_name(full[8]), ex._row_name(full[9])  # "d22, d41" at Input 0.2 / 0.7
    assert full[8].label == full[9].label and r9 != r10
    cost = [{"row": f"cifar10 {n.split(' ', 1)[1]}", "dmn_val_acc": 59.0, "dmn_s": 50.0,
             "convnet_s": 300.0 + k, "ratio": 6.0, "convnet_total_s": 900.0,
             "ratio_at_least": None} for k, n in enumerate((r9, r10))]
    a = _table_part("table2", [9, 10], [59.9, 58.5], [69.4, 69.4], cost=cost)
    rec = ex.merge_tables("table2", [a], data_dir=tmp_path)
    by = {r.name: r.ours for r in rec.rows}
    assert by[f"{r9} val acc"] == 59.9 and by[f"{r10} val acc"] == 58.5
    assert sorted(c["convnet_s"] for c in rec.extra["cost"]) == [300.0, 301.0]
    assert {r["row"] for r in rec.extra["runs"]} == {r9.split(" ", 1)[1], r10.split(" ", 1)[1]}
    claim = rec.claims[0]
    assert "d22, d41 (Input 0.2): 59.90 vs 69.40" in claim.evidence
    assert "d22, d41 (Input 0.7): 58.50 vs 69.40" in claim.evidence
    # label-only names (older records) are ambiguous for these two rows: not taken
    old = _table_part("table2", [9, 10], [59.9, 58.5], [69.4, 69.4], label_only=True)
    assert ex.merge_tables("table2", [old], data_dir=tmp_path).extra["runs"] == []
    # the protocol: the DMN rules themselves, not only the preset's name
    b = _table_part("table2", [6], [50.0], [45.0])
    b["config"]["dmn_preset"] = b["config"]["dmn_preset"] | {"cutoff": 0.8}
    with pytest.raises(ValueError, match="dmn_preset"):
        ex.merge_tables("table2", [a, b])
    # a part written before DMNConfig had conv_activation merges with one written after (both
    # ran ReLU convs); a part whose ConvNets ran linear does not
    old_part = _table_part("table2", [6], [50.0], [45.0])
    old_part["config"]["dmn_preset"] = {k: v for k, v in old_part["config"]["dmn_preset"].items()
                                        if k != "conv_activation"}
    assert "conv_activation" in a["config"]["dmn_preset"]
    assert len(ex.merge_tables("table2", [a, old_part], data_dir=tmp_path).rows) > 0
    lin = _table_part("table2", [6], [50.0], [45.0])
    lin["config"]["dmn_preset"] = lin["config"]["dmn_preset"] | {"conv_activation": "linear"}
    with pytest.raises(ValueError, match="dmn_preset"):
        ex.merge_tables("table2", [a, lin], data_dir=tmp_path)


def test_a_table2_without_its_convnets_is_not_paper_scale(tmp_path):
    from layerlab.dmn import experiments as ex

    n = len(ex.table_rows("table3"))
    whole = _table_part("table3", range(1, n + 1), [90.0] * n)
    assert ex.merge_tables("table3", [whole], data_dir=tmp_path).scale == "paper"
    whole["config"]["report"] = "best"  # the paper's protocol reports the final epoch
    assert ex.merge_tables("table3", [whole], data_dir=tmp_path).scale == "reduced"
    t2 = ex.table_rows("table2")
    nocv = _table_part("table2", [6], [50.0])
    nocv["config"]["convnet"] = False
    nocv["rows"] = [r for r in nocv["rows"] if "ConvNet" not in r["name"]]
    rec = ex.merge_tables("table2", [nocv], data_dir=tmp_path)
    assert rec.scale == "reduced" and len(t2) > 1


def test_merging_a_merged_record_keeps_where_each_row_ran(tmp_path):
    from layerlab.dmn import experiments as ex

    a = _table_part("table2", [6], [50.0], [45.0], wall=100.0)
    a["machine"] = {"device_kind": "NVIDIA H100", "cpu_count": 16}
    b = _table_part("table2", [7], [47.0], [49.0], wall=30.0)
    m = ex.merge_tables("table2", [a, b], data_dir=tmp_path)
    m = m.to_dict() | {"machine": {"device_kind": "cpu", "cpu_count": 2}, "versions": {},
                       "git": "y", "command": "merge"}
    c = _table_part("table2", [8], [54.0], [63.0], wall=7.0)
    rec = ex.merge_tables("table2", [m, c], data_dir=tmp_path)
    where = [(p["path"], p["machine"]["device_kind"], p["wall_s"], p["via"])
             for p in rec.extra["parts"]]
    # the merged part's own runs (its parts[0], parts[1]) keep their machines; c is parts[1]
    assert where == [("parts[0]", "NVIDIA H100", 100.0, "parts[0]"),
                     ("parts[1]", "cpu", 30.0, "parts[0]"), ("parts[1]", "cpu", 7.0, None)]
    assert rec.wall_s == 137.0
    runs = {r["row"]: r["command"] for r in rec.extra["runs"] if r["variant"] == "dmn"}
    assert runs == {ex._row_name(ex.table_rows("table2")[k]).split(" ", 1)[1]: f"part [{k + 1}]"
                    for k in (5, 6, 7)}


def _stub_table_runs(monkeypatch, dmn_acc, dmn_s, curves=()):
    """``run_table`` without training: seed ``s``'s DMN run ends at accuracy ``dmn_acc[s]``
    after ``dmn_s[s]`` seconds; its ConvNet follows ``curves[s]`` ((epoch, seconds, accuracy)
    per epoch) and ends at the curve's last point."""
    from layerlab.dmn import experiments as ex

    def fake_one(tcfg, row, variant, seed, data, **kw):
        if variant == "dmn":
            acc, total, curve = dmn_acc[seed], dmn_s[seed], [(1, dmn_s[seed], dmn_acc[seed])]
        else:
            curve = list(curves[seed])
            acc, total = curve[-1][2], curve[-1][1]
        return {"variant": variant, "seed": seed, "spec": row.arch, "widths": [10],
                "val_acc": acc, "best_val_acc": acc, "train_acc": acc, "build_s": 0.0,
                "features_s": 0.0, "train_s": total, "total_s": total, "curve": curve}

    monkeypatch.setattr(ex, "_one", fake_one)
    monkeypatch.setattr(ex, "_load_split", lambda ds, tcfg: (None, None))


def _written(rec, wall, command):
    """A record as a file holds it (JSON round trip, stamped like ``_cli.finish``)."""
    return json.loads(json.dumps(rec.to_dict() | {
        "machine": {"device_kind": "cpu", "cpu_count": 2}, "git": "x", "versions": {},
        "wall_s": wall, "command": command}))


def _row6_full_part(monkeypatch):
    """Table 2 row 6 run with its ConvNet (run_table, training stubbed: DMN 0.5 in 10/14/12 s,
    three ConvNet curves), written as a record: ``(row6, its name, curves, record dict)``."""
    from layerlab.dmn import experiments as ex

    row6 = ex.table_rows("table2")[5]
    r6 = ex._row_name(row6)
    curves = [[(1, 5.0, 0.4375), (2, 20.0, 0.5), (3, 30.0, 0.5625)],
              [(1, 6.0, 0.5), (2, 25.0, 0.5625), (3, 40.0, 0.5)],
              [(1, 7.0, 0.375), (2, 15.0, 0.5), (3, 50.0, 0.5625)]]
    _stub_table_runs(monkeypatch, [0.5, 0.5, 0.5], [10.0, 14.0, 12.0], curves)
    full = _written(ex.run_table(ex.TableConfig.paper("table2", rows=(row6,)),
                                 key=jax.random.key(0), progress=False), 4000.0, "full")
    return row6, r6, curves, full


def test_a_dmn_only_rerun_replaces_the_dmn_halves_and_recomputes_the_cost(monkeypatch, tmp_path):
    # Table 2 row 6 run with its ConvNet (run_table, training stubbed), then rerun DMN-only
    # (--no-convnet): the merge takes the DMN half from the rerun and the ConvNet half from
    # the full run, and recomputes the cost from the new DMN runs on the old ConvNet curves
    from layerlab.dmn import experiments as ex
    from layerlab.record import load_record
    from reproduce import dmn_table2

    row6, r6, curves, full = _row6_full_part(monkeypatch)
    # run_table keeps the ConvNet runs' per-epoch curves (what _cost needs), not the DMN's
    assert [r.get("curve") for r in full["extra"]["runs"]] == [None] * 3 + [
        [list(c) for c in curve] for curve in curves]
    # its own cost: target 0.5, first reached at 20, 6, 15 s -> 41/3 s; DMN 12 s
    (c_full,) = full["extra"]["cost"]
    assert c_full["convnet_s"] == pytest.approx(41 / 3, rel=1e-5) and c_full["dmn_s"] == 12.0
    _stub_table_runs(monkeypatch, [0.5, 0.625, 0.5625], [4.0, 6.0, 5.0])
    dmn = _written(ex.run_table(ex.TableConfig.paper("table2", rows=(row6,), convnet=False),
                                key=jax.random.key(0), progress=False), 16.0, "dmn-only")
    assert dmn["config"]["convnet"] is False and {r["variant"] for r in dmn["extra"]["runs"]} == {
        "dmn"} and not any("curve" in r for r in dmn["extra"]["runs"])
    rec = ex.merge_tables("table2", [full, dmn], data_dir=tmp_path)
    by = {r.name: r.ours for r in rec.rows}
    assert by[f"{r6} val acc"] == pytest.approx(56.25)  # the rerun's DMN (50, 62.5, 56.25)
    assert by[f"{r6} ConvNet val acc"] == pytest.approx(100 * (0.5625 + 0.5 + 0.5625) / 3)
    assert rec.config["convnet"] is True
    runs = rec.extra["runs"]
    assert [r["val_acc"] for r in runs if r["variant"] == "dmn"] == [0.5, 0.625, 0.5625]
    assert [r["command"] for r in runs] == ["dmn-only"] * 3 + ["full"] * 3
    # the cost by hand: target mean(0.5, 0.625, 0.5625) = 0.5625, first reached at 30, 25 and
    # 50 s -> 35 s; DMN mean (4 + 6 + 5) / 3 = 5 s -> 7x; whole ConvNet runs 40 s on average
    (c,) = rec.extra["cost"]
    assert c["row"] == r6 and c["dmn_val_acc"] == pytest.approx(0.5625)
    assert c["dmn_s"] == pytest.approx(5.0) and c["convnet_s"] == pytest.approx(35.0)
    assert c["ratio"] == pytest.approx(7.0) and c["convnet_total_s"] == pytest.approx(40.0)
    assert c["ratio_at_least"] is None
    claims = {cl.claim.split(":")[0].split(" ")[0]: cl for cl in rec.claims}
    # DMN >= ConvNet from the assembled rows: 56.25 vs 54.17 (the full run's 50.00 fails)
    assert claims["DMN"].holds is True and "56.25 vs 54.17" in claims["DMN"].evidence
    assert ex.merge_tables("table2", [full], data_dir=tmp_path).claims[0].holds is False
    assert claims["cost"].holds is True and f"{r6}: DMN 5 s, ConvNet 35 s (7.0x)" in (
        claims["cost"].evidence)
    assert {p["path"]: p["halves"] for p in rec.extra["parts"]} == {
        "parts[0]": {r6: "convnet"}, "parts[1]": {r6: "dmn"}}
    assert {p["path"]: p["rows"] for p in rec.extra["parts"]} == {"parts[0]": [r6],
                                                                  "parts[1]": [r6]}
    assert f"DMN from parts[1], ConvNet from parts[0]: {r6}." in rec.note
    assert f"Cost recomputed for {r6}" in rec.note and "the ConvNet half of 1 row(s)" in rec.note
    assert rec.wall_s == 4016.0
    # later replaces earlier, half by half: a full part after the DMN-only one (also as the
    # reference: the merged record still runs ConvNets) gives both halves, its own cost
    rev = ex.merge_tables("table2", [dmn, full], data_dir=tmp_path)
    assert {r.name: r.ours for r in rev.rows}[f"{r6} val acc"] == pytest.approx(50.0)
    assert rev.config["convnet"] is True and rev.extra["cost"][0]["convnet_s"] == pytest.approx(
        41 / 3, rel=1e-5)
    assert {p["path"]: p["halves"] for p in rev.extra["parts"]} == {"parts[1]": {r6: "both"}}
    assert "Parts whose rows were all replaced: ['parts[0]']" in rev.note
    assert "different runs" not in rev.note
    # the command line merges the same files
    paths = []
    for k, part in enumerate((full, dmn)):
        paths.append(tmp_path / f"p{k}.json")
        paths[-1].write_text(json.dumps(part))
    out = tmp_path / "out" / "table2.json"
    dmn_table2.main(["--merge", *map(str, paths), "--out", str(out), "--data-dir",
                     str(tmp_path)])
    written = load_record(out)
    assert written["extra"]["cost"] == [pytest.approx(c)] and written["config"]["convnet"]
    assert [p["halves"] for p in written["extra"]["parts"]] == [{r6: "convnet"}, {r6: "dmn"}]


def test_cost_bound_from_the_old_entry_both_ways_and_the_claim_over_rows():
    # a split row whose ConvNet runs keep no curve: its cost is bounded from the old entry
    # (the ConvNet's time to the old run's DMN accuracy), by hand
    from layerlab.dmn.experiments import _cost_bound, _cost_claims, _cost_verdict

    old = {"row": "cifar10 d10", "dmn_val_acc": 0.5, "dmn_s": 40.0, "convnet_s": 30.0,
           "ratio": 0.75, "convnet_total_s": 200.0, "ratio_at_least": None}

    def dmn(accs, secs):
        return [{"variant": "dmn", "val_acc": a, "total_s": t} for a, t in zip(accs, secs)]

    # new DMN less accurate (0.49 < 0.5): the ConvNet reaches 0.49 no later than 30 s, so the
    # ratio is at most 30 / mean(30, 40, 50) = 0.75 <= 1: the row fails, decided
    down = _cost_bound("r", dmn([0.48, 0.49, 0.5], [30.0, 40.0, 50.0]), old, "full.json")
    assert down["dmn_val_acc"] == pytest.approx(0.49) and down["dmn_s"] == pytest.approx(40.0)
    assert down["ratio_at_most"] == pytest.approx(0.75) and down["ratio_at_least"] is None
    assert down["ratio"] is None and down["convnet_s"] is None
    assert down["convnet_total_s"] == 200.0  # the same ConvNet runs
    assert down["bound_from"] == {"path": "full.json", "dmn_val_acc": 0.5, "dmn_s": 40.0,
                                  "convnet_s": 30.0, "convnet_total_s": 200.0}
    assert _cost_verdict(down) is False
    # new DMN more accurate (0.51 > 0.5): the ConvNet needs at least 30 s, ratio >= 30 / 12
    up = _cost_bound("r", dmn([0.52, 0.5, 0.51], [10.0, 12.0, 14.0]), old, "full.json")
    assert up["ratio_at_least"] == pytest.approx(2.5) and up["ratio_at_most"] is None
    assert _cost_verdict(up) is True
    # bounds on the side that does not decide: at most 30 / 20 = 1.5, at least 30 / 60 = 0.5
    open_down = _cost_bound("r", dmn([0.49] * 3, [20.0] * 3), old, "full.json")
    open_up = _cost_bound("r", dmn([0.51] * 3, [60.0] * 3), old, "full.json")
    assert open_down["ratio_at_most"] == pytest.approx(1.5)
    assert open_up["ratio_at_least"] == pytest.approx(0.5)
    assert _cost_verdict(open_down) is None and _cost_verdict(open_up) is None
    # the same accuracy (within the records' rounding): exact, 30 / 25 s
    same = _cost_bound("r", dmn([0.5000004] * 3, [25.0] * 3), old, "full.json")
    assert same["ratio"] == pytest.approx(1.2) and same["convnet_s"] == 30.0
    assert same["ratio_at_least"] is None and same["ratio_at_most"] is None
    assert _cost_verdict(same) is True
    # a ConvNet that never reached the old DMN's 0.5 never reaches 0.51 either: at least its
    # whole run, 200 / 250 s, decided as _cost decides it (slower only when above 1)
    never = old | {"convnet_s": None, "ratio": None, "ratio_at_least": 5.0}
    n_up = _cost_bound("r", dmn([0.51] * 3, [250.0] * 3), never, "full.json")
    assert n_up["ratio_at_least"] == pytest.approx(0.8) and _cost_verdict(n_up) is False
    assert _cost_verdict(_cost_bound("r", dmn([0.51] * 3, [100.0] * 3), never, "f")) is True
    # ... but says nothing about a lower accuracy: no entry (the row stays untimed)
    assert _cost_bound("r", dmn([0.49] * 3, [10.0] * 3), never, "full.json") is None
    # an old entry that was itself bounded passes on its own reference (the same ConvNets)
    again = _cost_bound("r", dmn([0.47] * 3, [15.0] * 3), down, "merged.json")
    assert again["bound_from"] == down["bound_from"]
    assert again["ratio_at_most"] == pytest.approx(2.0) and _cost_verdict(again) is None
    assert _cost_bound("r", dmn([0.5] * 3, [1.0] * 3), old | {"dmn_val_acc": None}, "f") is None
    # the claim over rows: every row holds -> holds; one row fails -> fails; else open
    exact = {"row": "e", "dmn_val_acc": 0.5, "dmn_s": 10.0, "convnet_s": 20.0, "ratio": 2.0,
             "convnet_total_s": 90.0, "ratio_at_least": None, "ratio_at_most": None,
             "bound_from": None}

    def claim(*cs, **kw):
        (c,) = _cost_claims([dict(x, row=f"row{k}") for k, x in enumerate(cs)], **kw)
        return c

    assert claim(exact, up).holds is True
    assert claim(exact, up, down).holds is False
    assert claim(open_up, down).holds is False  # a failing row decides, an open one does not
    c = claim(exact, up, open_down)
    assert c.holds is None
    assert "not decided: the bound of ['row2'] is on the side that does not decide" in c.evidence
    assert claim(exact, open_up, no_curve=["x"]).holds is None
    assert claim(exact, dict(exact, ratio=0.9)).holds is False  # exact rows as before
    # the evidence shows each bound and what it comes from
    ev = claim(exact, down, up, same, n_up).evidence
    assert "row0: DMN 10 s, ConvNet 20 s (2.0x)" in ev
    assert ("row1: DMN 49.00 % in 40 s, ConvNet <= 30 s (<= 0.8x; bound from the old run's "
            "time to its DMN's 50.00 %)") in ev
    assert ("row2: DMN 51.00 % in 12 s, ConvNet >= 30 s (>= 2.5x; bound from the old run's "
            "time to its DMN's 50.00 %)") in ev
    assert ("row3: DMN 50.00 % in 25 s, ConvNet 30 s (1.2x; the old run's time to its DMN's "
            "50.00 %, the same accuracy)") in ev
    assert ("row4: DMN 51.00 % in 250 s, ConvNet never reached it in 200 s (>= 0.8x; it "
            "never reached the old run's DMN's 50.00 % either)") in ev
    # a ratio that prints as 1.0 says on which side of 1 it is
    assert "(0.996x)" in claim(dict(exact, ratio=0.9955)).evidence


def test_a_dmn_only_rerun_apart_from_a_curveless_convnet_bounds_the_cost(monkeypatch, tmp_path):
    # as the committed records: a full run (stubbed) whose ConvNet runs kept no curve, then
    # DMN-only reruns; the row's cost is bounded from the full run's own cost entry
    from layerlab.dmn import experiments as ex

    row6, r6, curves, full = _row6_full_part(monkeypatch)
    old = json.loads(json.dumps(full))
    for r in old["extra"]["runs"]:
        r.pop("curve", None)
    # its cost: target 0.5, reached at 20, 6, 15 s -> 41/3 s (written 13.6667); DMN 12 s
    assert old["extra"]["cost"][0]["convnet_s"] == pytest.approx(41 / 3, rel=1e-5)

    def rerun(accs, secs, command):
        _stub_table_runs(monkeypatch, accs, secs)
        return _written(ex.run_table(ex.TableConfig.paper("table2", rows=(row6,), convnet=False),
                                     key=jax.random.key(0), progress=False), 16.0, command)

    def cost_of(*parts):
        rec = ex.merge_tables("table2", list(parts), data_dir=tmp_path)
        return rec, rec.extra["cost"], {cl.claim.split(" ")[0]: cl for cl in rec.claims}["cost:"]

    # more accurate (mean 0.5625 > 0.5) in 5 s: the ConvNet needs >= 41/3 s, >= 2.73x: holds
    better = rerun([0.5, 0.625, 0.5625], [4.0, 6.0, 5.0], "better")
    rec, (c,), claim = cost_of(old, better)
    assert c["row"] == r6 and c["ratio_at_least"] == pytest.approx(41 / 15, rel=1e-5)
    assert c["ratio_at_most"] is None and c["ratio"] is None
    assert c["bound_from"]["path"] == "parts[0]" and c["bound_from"]["dmn_val_acc"] == 0.5
    assert claim.holds is True
    assert f"{r6}: DMN 56.25 % in 5 s, ConvNet >= 14 s (>= 2.7x; bound from the old run's " \
           "time to its DMN's 50.00 %)" in claim.evidence
    assert f"Cost bounded from the earlier run for {r6}:" in rec.note
    assert "Not timed" not in rec.note and "not timed" not in claim.evidence
    # with the curves the cost is exact (35 s, above the bound): the bound is on its side
    (exact,) = ex.merge_tables("table2", [full, better], data_dir=tmp_path).extra["cost"]
    assert exact["ratio"] == pytest.approx(7.0) and exact["ratio"] >= c["ratio_at_least"]
    # less accurate (0.4375) in 20 s: the ConvNet reaches it within 41/3 s, <= 0.68x: fails
    worse = rerun([0.4375] * 3, [18.0, 22.0, 20.0], "worse")
    _, (c,), claim = cost_of(old, worse)
    assert c["ratio_at_most"] == pytest.approx(41 / 60, rel=1e-5) and c["ratio_at_least"] is None
    assert claim.holds is False and "ConvNet <= 14 s (<= 0.7x; bound from" in claim.evidence
    (exact,) = ex.merge_tables("table2", [full, worse], data_dir=tmp_path).extra["cost"]
    assert exact["convnet_s"] == pytest.approx(26 / 3)  # 5, 6 and 15 s: within the bound
    # less accurate but faster (5 s): at most 2.73x decides nothing, the claim is open
    quick = rerun([0.4375, 0.5, 0.4375], [4.0, 6.0, 5.0], "quick")
    _, (c,), claim = cost_of(old, quick)
    assert c["ratio_at_most"] == pytest.approx(41 / 15, rel=1e-5) and claim.holds is None
    assert "on the side that does not decide" in claim.evidence
    # the same accuracy: exact from the old time, 41/3 s over 6 s
    same = rerun([0.5, 0.5, 0.5], [6.0, 6.0, 6.0], "same")
    _, (c,), claim = cost_of(old, same)
    assert c["ratio"] == pytest.approx(41 / 18, rel=1e-5) and claim.holds is True
    assert "the same accuracy" in claim.evidence
    # merged again with a later rerun: the bound still comes from the full run's numbers
    m = _written(cost_of(old, better)[0], None, "merge")
    _, (c,), claim = cost_of(m, worse)
    assert c["bound_from"] == {"path": "parts[0]", "dmn_val_acc": 0.5, "dmn_s": 12.0,
                               "convnet_s": pytest.approx(41 / 3, rel=1e-5),
                               "convnet_total_s": pytest.approx(40.0)}
    assert c["ratio_at_most"] == pytest.approx(41 / 60, rel=1e-5) and claim.holds is False


def test_dmn_only_parts_old_rule_note_and_protocol(tmp_path):
    from layerlab.dmn import experiments as ex

    t2 = ex.table_rows("table2")
    r6, r7 = ex._row_name(t2[5]), ex._row_name(t2[6])
    cost7 = {"row": f"cifar10 {r7.split(' ', 1)[1]}", "dmn_val_acc": 0.47, "dmn_s": 10.0,
             "convnet_s": 40.0, "ratio": 4.0, "convnet_total_s": 90.0, "ratio_at_least": None}
    full = _table_part("table2", [6, 7], [50.0, 47.0], [45.0, 49.0], cost=[cost7], wall=100.0)
    dmn = _table_part("table2", [6], [52.0], dmn_only=True, wall=5.0)
    assert dmn["config"]["convnet"] is False and not any("ConvNet" in r["name"]
                                                         for r in dmn["rows"])
    # the full part under the old rule, the DMN-only rerun under the new one: the note names
    # the full part's row 7 (its DMN half kept), not its row 6 (only the ConvNet half kept)
    old_full = json.loads(json.dumps(full))
    del old_full["config"]["width_rule"]
    rec = ex.merge_tables("table2", [old_full, dmn], data_dir=tmp_path)
    old = rec.note.split("old width rule")[1]
    assert f"the DMN layers of parts[0]: {r7}." in old and r6 not in old
    assert "parts[1]" not in old
    by = {r.name: r.ours for r in rec.rows}
    assert (by[f"{r6} val acc"], by[f"{r6} ConvNet val acc"]) == (52.0, 45.0)
    assert (by[f"{r7} val acc"], by[f"{r7} ConvNet val acc"]) == (47.0, 49.0)
    assert rec.claims[0].evidence.startswith("1/2 rows")  # 52 >= 45, 47 < 49
    # these runs carry no ConvNet curve (as the committed records): row 6 is not timed
    assert [c["row"] for c in rec.extra["cost"]] == [r7]
    assert f"Not timed (left out of the cost claim): {r6}" in rec.note
    assert f"not timed (DMN half rerun apart from a ConvNet run without its per-epoch " \
           f"curve): [{r6!r}]" in rec.claims[1].evidence
    assert {p["path"]: p["halves"] for p in rec.extra["parts"]} == {
        "parts[0]": {r6: "convnet", r7: "both"}, "parts[1]": {r6: "dmn"}}
    # no row timed at all: the cost claim stays open and says why
    bare = _table_part("table2", [6], [50.0], [45.0])
    cost_claim = ex.merge_tables("table2", [bare, dmn], data_dir=tmp_path).claims[1]
    assert cost_claim.holds is None and cost_claim.evidence.startswith("not decided")
    assert r6 in cost_claim.evidence
    # merged again: the halves and the note stay with the runs that made them
    m = rec.to_dict() | {"machine": {}, "versions": {}, "git": "y", "command": "merge"}
    again = ex.merge_tables("table2", [m], data_dir=tmp_path)
    assert [(p["path"], p["via"], p["halves"]) for p in again.extra["parts"]] == [
        ("parts[0]", "parts[0]", {r6: "convnet", r7: "both"}),
        ("parts[1]", "parts[0]", {r6: "dmn"})]
    old = again.note.split("old width rule")[1]
    assert f"parts[0]: {r7}." in old and r6 not in old
    assert {r.name: r.ours for r in again.rows} == by
    # vice versa: an old-rule DMN-only part names its DMN halves, the new full part nothing
    old_dmn = json.loads(json.dumps(dmn))
    del old_dmn["config"]["width_rule"]
    old = ex.merge_tables("table2", [full, old_dmn], data_dir=tmp_path).note.split(
        "old width rule")[1]
    assert f"the DMN layers of parts[1]: {r6}." in old and "parts[0]" not in old
    assert "old width rule" not in ex.merge_tables("table2", [full, dmn],
                                                   data_dir=tmp_path).note
    # any other protocol field still has to agree, whichever part comes first
    short = _table_part("table2", [6], [52.0], dmn_only=True, epochs=10)
    with pytest.raises(ValueError, match="epochs=10"):
        ex.merge_tables("table2", [full, short])
    with pytest.raises(ValueError, match="epochs=50"):
        ex.merge_tables("table2", [short, full])
    # convnet only differs for Table 2 (the tables whose paper protocol has ConvNets)
    t3 = _table_part("table3", [1], [90.0])
    t3c = json.loads(json.dumps(t3))
    t3c["config"]["convnet"] = True
    with pytest.raises(ValueError, match="convnet=True"):
        ex.merge_tables("table3", [t3, t3c])


def test_dmn_only_parts_keep_paper_scale_when_the_full_parts_hold_every_convnet(tmp_path):
    from layerlab.dmn import experiments as ex

    t2 = ex.table_rows("table2")
    n = len(t2)
    every = list(range(1, n + 1))
    full = _table_part("table2", every, [50.0] * n, [45.0] * n)
    dmn = _table_part("table2", range(6, 13), [55.0] * 7, dmn_only=True)
    assert ex.merge_tables("table2", [full], data_dir=tmp_path).scale == "paper"
    for parts in ([full, dmn], [dmn, full]):
        rec = ex.merge_tables("table2", parts, data_dir=tmp_path)
        assert rec.scale == "paper" and all(r.ours is not None for r in rec.rows)
    # DMN-only parts alone: no ConvNets, reduced (as before)
    dmn_all = _table_part("table2", every, [55.0] * n, dmn_only=True)
    alone = ex.merge_tables("table2", [dmn_all], data_dir=tmp_path)
    assert alone.scale == "reduced" and alone.config["convnet"] is False
    assert not any("ConvNet" in r.name for r in alone.rows)
    # a row whose ConvNet half no full part ran is marked not run, so the record is reduced
    most = _table_part("table2", every[:-1], [50.0] * (n - 1), [45.0] * (n - 1))
    rec = ex.merge_tables("table2", [dmn_all, most], data_dir=tmp_path)
    last = ex._row_name(t2[-1])
    by = {r.name: r for r in rec.rows}
    assert by[f"{last} val acc"].ours == 55.0 and by[f"{last} ConvNet val acc"].ours is None
    assert "--no-convnet" in by[f"{last} ConvNet val acc"].note
    assert f"--rows {n}" in by[f"{last} ConvNet val acc"].note
    assert rec.scale == "reduced" and rec.config["convnet"] is True
    # the later full part replaced every other row whole: the DMN-only part gives row n only
    assert {p["path"]: p["halves"] for p in rec.extra["parts"]}["parts[0]"] == {last: "dmn"}


def test_fig10_merge_command(tmp_path):
    from layerlab.dmn import experiments as ex
    from layerlab.record import load_record
    from reproduce import dmn_fig10

    n = len(ex.table_rows("table3"))
    p = tmp_path / "t3.json"
    p.write_text(json.dumps(_table_part("table3", range(1, n + 1), [90.0 + i for i in range(n)])))
    out = tmp_path / "fig10.json"
    dmn_fig10.main(["--merge", str(p), "--out", str(out), "--data-dir", str(tmp_path)])
    rec = load_record(out)
    assert rec["artifact"] == "fig10" and rec["claims"][0]["holds"] is True
    with pytest.raises(SystemExit, match="--paper"):
        dmn_fig10.main(["--merge", str(p), "--paper"])


def test_fig5_cnn_equals_the_flax_conv_and_pool_network():
    # SI Fig. 5's CNN runs on Conv3x3 / max_pool_2x2 (the fast CPU route inside loop.fit's
    # scan); it must be nn.Conv(32, (3, 3)) / nn.max_pool(2x2, stride 2): the same parameter
    # tree and init draws, the same logits, gradients to float32 rounding.
    import flax.linen as nn

    from layerlab.dmn import experiments as ex

    class Reference(nn.Module):
        @nn.compact
        def __call__(self, x):
            he = nn.initializers.variance_scaling(2.0, "fan_in", "normal")
            for name in ("conv1", "conv2"):
                x = nn.max_pool(jax.nn.relu(nn.Conv(32, (3, 3), kernel_init=he, name=name)(x)),
                                (2, 2), strides=(2, 2))
            return nn.Dense(10, kernel_init=he, name="dense")(x.reshape(x.shape[0], -1))

    x = jnp.asarray(np.random.default_rng(0).random((6, 28, 28, 1), dtype=np.float32))
    ref, ours = Reference(), ex.Fig5CNN()
    # everything jitted: eager, each op of init, apply and grad compiles apart
    p_ref = jax.jit(ref.init)(jax.random.key(5), x[:1])["params"]
    p = jax.jit(ours.init)(jax.random.key(5), x[:1])["params"]
    assert jax.tree.structure(p) == jax.tree.structure(p_ref)
    for a, b in zip(jax.tree.leaves(p), jax.tree.leaves(p_ref)):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    np.testing.assert_allclose(jax.jit(ours.apply)({"params": p}, x),
                               jax.jit(ref.apply)({"params": p}, x), rtol=1e-5, atol=1e-5)
    sq = lambda m: jax.jit(jax.grad(  # noqa: E731
        lambda q: jnp.sum(m.apply({"params": q}, x) ** 2)))(p)
    for a, b in zip(jax.tree.leaves(sq(ours)), jax.tree.leaves(sq(ref))):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * float(np.abs(b).max()))


def test_pca_naive_reaches_the_build_caches_apart_and_is_recorded(tmp_path, monkeypatch):
    """TableConfig/Fig6Config(pca="naive") (the paper's "naive DMN" of Figs. 6 and 10): the
    build gets the preset with pca="naive" and nothing else changed, its run is cached apart
    from the class-PCA run of the same row (the tag names it), the record's config and note
    say so, and a bad value is refused naming the field."""
    import dataclasses

    from layerlab.dmn import experiments as ex

    row = ex.ArchRow("mnist", "d4,m,de10", "d4", 1.0, None, 0.9, 90.0, None, None)
    cfg = ex.TableConfig(artifact="table3", rows=(row,), convnet=False, seeds=1, epochs=1,
                         pca="naive")
    want = DMNConfig.authors(var_fraction=None, cutoff=0.9, input_fraction=1.0)
    assert cfg.dmn_config(row) == dataclasses.replace(want, pca="naive")
    assert dataclasses.replace(cfg, pca="class").dmn_config(row) == want
    with pytest.raises(ValueError, match="pca must be one of .*'blind'"):
        ex.TableConfig(pca="blind")
    seen = []

    def fake_train(spec, *a, config, **k):
        seen.append(config.pca)
        return {"widths": [4], "val_acc": 0.5, "best_val_acc": 0.5, "train_acc": 0.5}

    monkeypatch.setattr(ex, "train_and_evaluate", fake_train)
    data = (load("digits", "train"), load("digits", "test"))
    for c in (cfg, dataclasses.replace(cfg, pca="class"), cfg):  # the third: from the cache
        ex._one(c, row, "dmn", 0, data, key=jax.random.key(0), progress=False,
                checkpoint_dir=tmp_path)
    assert seen == ["naive", "class"]
    names = sorted(p.name for p in tmp_path.glob("*.json"))
    assert len(names) == 2 and sum("pcanaive" in n for n in names) == 1
    d = ex._config_dict(cfg)
    assert d["pca"] == "naive" and d["dmn_preset"]["pca"] == "naive"
    assert "pca='naive'" in ex._note(cfg) and "pca=" not in ex._note(
        dataclasses.replace(cfg, pca="class"))
    # Fig. 6 passes it to every run's table config and names it in the note
    got = []

    def fake_one(tcfg, row, variant, seed, data, **kw):
        got.append(tcfg.pca)
        return {"variant": variant, "seed": seed, "widths": [2], "val_acc": 0.5,
                "train_acc": 0.0, "total_s": 0.0}

    monkeypatch.setattr(ex, "_one", fake_one)
    monkeypatch.setattr(ex, "_load_split", lambda ds, tcfg: (None, None))
    monkeypatch.setattr(ex, "_acc", lambda r, tcfg: r["val_acc"])
    rec = ex.run_fig6(ex.Fig6Config.paper(datasets=("mnist",), filters=(2,), seeds=1,
                                          convnet=False, pca="naive"),
                      key=jax.random.key(0), progress=False)
    assert set(got) == {"naive"} and "naive DMN" in rec.note and rec.config["pca"] == "naive"


def test_naive_parts_merge_apart_and_never_overwrite_the_main_record(tmp_path):
    """Records run with pca="naive" merge with each other (the merged config keeps pca) but not
    with class-PCA parts, and the scripts name such a record <artifact>_naive (paper preset:
    _paper_preset) unless --out names a file, so --paper/--record cannot replace the main one."""
    import dataclasses

    from layerlab.dmn import experiments as ex
    from layerlab.record import load_record
    from reproduce import _dmn, dmn_table2

    def naive(part):
        preset = ex._config_dict(ex.TableConfig.paper("table2", pca="naive"))["dmn_preset"]
        return part | {"config": part["config"] | {"pca": "naive", "dmn_preset": preset}}

    a = _table_part("table2", [6], [50.0], [45.0])
    b = _table_part("table2", [7], [47.0], [49.0])
    with pytest.raises(ValueError, match="pca='naive'"):
        ex.merge_tables("table2", [a, naive(b)], data_dir=tmp_path)
    rec = ex.merge_tables("table2", [naive(a), naive(b)], data_dir=tmp_path)
    assert rec.config["pca"] == "naive" and "pca='naive'" in rec.note
    assert _dmn.variant(rec) == "_naive" and _dmn.variant(
        ex.merge_tables("table2", [a, b], data_dir=tmp_path)) == ""
    paper = dataclasses.replace(rec, config=rec.config | {"preset": "paper"})
    assert _dmn.variant(paper) == "_paper_preset_naive"
    paths = []
    for i, part in enumerate((naive(a), naive(b))):
        paths.append(tmp_path / f"p{i}.json")
        paths[-1].write_text(json.dumps(part))
    out = tmp_path / "out"  # a folder: the file is named by the script
    dmn_table2.main(["--merge", *map(str, paths), "--out", str(out), "--data-dir", str(tmp_path)])
    assert sorted(p.name for p in out.iterdir()) == ["table2_naive.json", "table2_naive.png"]
    assert load_record(out / "table2_naive.json")["config"]["pca"] == "naive"
    named = tmp_path / "mine.json"  # an --out file name is kept as given
    dmn_table2.main(["--merge", *map(str, paths), "--out", str(named), "--data-dir",
                     str(tmp_path)])
    assert named.exists()


def _fig6_part(monkeypatch, datasets, acc, **changes):
    """A Fig. 6 record of ``datasets`` from run_fig6 with the per-run trainer stubbed:
    accuracy ``acc[(variant, F)]`` (30 elsewhere), as written to disk."""
    from layerlab.dmn import experiments as ex

    def fake_one(tcfg, row, variant, seed, data, **kw):
        head = row.arch.split(",")[0]
        f = 0 if head.startswith("de") else int(head[1:])
        return {"variant": variant, "seed": seed, "widths": [f], "train_acc": 0.0,
                "total_s": 0.0, "val_acc": acc.get((variant, f), 30.0) + seed}

    monkeypatch.setattr(ex, "_one", fake_one)
    monkeypatch.setattr(ex, "_load_split", lambda ds, tcfg: (None, None))
    monkeypatch.setattr(ex, "_acc", lambda r, tcfg: r["val_acc"])
    cfg = ex.Fig6Config.paper(datasets=datasets, filters=(2, 12, 27), **changes)
    rec = ex.run_fig6(cfg, key=jax.random.key(0), progress=False)
    return json.loads(json.dumps(rec.to_dict() | {
        "machine": {"device_kind": "cpu", "cpu_count": 2}, "git": "x", "versions": {},
        "wall_s": 10.0 * len(datasets), "command": f"part {datasets}"}))


def test_merge_fig6_takes_each_dataset_from_its_last_part(monkeypatch, tmp_path):
    """Fig. 6's datasets run apart (MNIST on a GPU, CIFAR-10 on the CPU) merge into one record:
    each dataset's rows from the last part that ran it, claims recomputed from those rows,
    CIFAR-100 (no files) not run with the loader's message; protocols must agree."""
    import dataclasses
    import pathlib

    from layerlab.dmn import experiments as ex
    from layerlab.record import load_record
    from reproduce import dmn_fig6

    mn = _fig6_part(monkeypatch, ("mnist",), {("dmn", 12): 97.0})        # best F = 12
    c1 = _fig6_part(monkeypatch, ("cifar10",), {("dmn", 12): 55.0, ("convnet", 12): 50.0,
                                                ("dmn", 27): 60.0, ("convnet", 27): 50.0})
    c2 = _fig6_part(monkeypatch, ("cifar10",), {("dmn", 12): 58.0, ("convnet", 2): 40.0})
    empty = tmp_path / "empty"
    empty.mkdir()
    rec = ex.merge_fig6([mn, c1, c2], data_dir=empty)
    by = {r.name: r for r in rec.rows}
    assert by["mnist F=12 DMN val acc"].ours == 98.0          # seeds 0-2: 97, 98, 99
    assert by["cifar10 F=12 DMN val acc"].ours == 59.0 and by["cifar10 F=27 DMN val acc"].ours \
        == 31.0                                               # c2 replaced c1 whole
    assert by["cifar100 baseline de100 val acc"].ours is None
    assert "not found" in by["cifar100 baseline de100 val acc"].note
    assert [r.name.split(" ")[0] for r in rec.rows].count("cifar100") == 1
    claims = {c.claim: (c.holds, c.evidence) for c in rec.claims}
    assert claims["mnist: best one-layer DMN width is F=6"] == (
        False, "ours: best F=12 among [2, 12, 27]")
    assert claims["cifar10: best one-layer DMN width is F=12"][0] is True
    # c2: DMN 31 vs ConvNet 41 at F=2, 59 vs 31 at 12, 31 vs 31 at 27 -> 2 of 3 widths
    assert claims["CIFAR-10: one DMN layer >= one conv layer (most F)"] == (True, "2/3 widths")
    assert rec.scale == "reduced" and rec.wall_s == 20.0
    assert [(p["path"], p["datasets"]) for p in rec.extra["parts"]] == [
        ("parts[0]", ["mnist"]), ("parts[2]", ["cifar10"])]
    assert {r["dataset"] for r in rec.extra["runs"]} == {"mnist", "cifar10"}
    # the same claims as the parts' own
    assert [c.claim for c in rec.claims] == [c["claim"] for c in mn["claims"] + c2["claims"]]
    assert [c.holds for c in rec.claims] == [c["holds"] for c in mn["claims"] + c2["claims"]]
    with pytest.raises(ValueError, match="epochs=10"):
        ex.merge_fig6([mn, _fig6_part(monkeypatch, ("cifar10",), {}, epochs=10)])
    with pytest.raises(ValueError, match="pca='naive'"):
        ex.merge_fig6([mn, _fig6_part(monkeypatch, ("cifar10",), {}, pca="naive")])
    old = mn | {"config": {k: v for k, v in mn["config"].items() if k not in ("pca", "convnet")}}
    assert ex.merge_fig6([old, c2], data_dir=empty).claims == rec.claims  # older: defaults
    with pytest.raises(ValueError, match="not dmn fig6"):
        ex.merge_fig6([mn, mn | {"artifact": "table3"}])
    with pytest.raises(ValueError, match="parts is empty"):
        ex.merge_fig6([])
    nodt = mn | {"config": {k: v for k, v in mn["config"].items() if k != "dtype"}}
    with pytest.raises(ValueError, match=r"parts\[1\] has no field\(s\) \['dtype'\]"):
        ex.merge_fig6([c2, nodt])
    # the command: writes the record and its figure, refuses run flags
    paths = []
    for i, part in enumerate((mn, c2)):
        paths.append(str(tmp_path / f"p{i}.json"))
        pathlib.Path(paths[-1]).write_text(json.dumps(part))
    out = tmp_path / "out" / "fig6.json"
    assert dmn_fig6.main(["--merge", *paths, "--out", str(out), "--data-dir", str(empty)]) == 0
    assert load_record(out)["claims"] == [dataclasses.asdict(c) for c in rec.claims]
    assert (out.parent / "fig6.png").stat().st_size > 1000
    with pytest.raises(SystemExit, match="--filters"):
        dmn_fig6.main(["--merge", *paths, "--filters", "2", "--out", str(out)])


def test_merged_notes_name_the_rows_made_under_the_old_width_rule(tmp_path):
    # parts written before config.width_rule existed used the old class-order width rule
    # (class 0's filters first); a merge names their DMN rows (not their ConvNet-only rows),
    # also through a merge of merges, and says nothing when every part is new
    from layerlab.dmn import experiments as ex

    full = ex.table_rows("table4")
    old = _table_part("table4", [2, 3], [50.0, 60.0])  # d10 (DMN) and c27 (ConvNet only)
    del old["config"]["width_rule"]
    new = _table_part("table4", [4], [61.0])
    assert new["config"]["width_rule"] == ex.WIDTH_RULE
    rec = ex.merge_tables("table4", [old, new], data_dir=tmp_path)
    d10, c27, d15 = (ex._row_name(full[k]) for k in (1, 2, 3))
    assert f"the DMN layers of parts[0]: {d10}." in rec.note
    assert c27 not in rec.note.split("old width rule")[1] and d15 not in rec.note
    m = rec.to_dict() | {"machine": {}, "versions": {}, "git": "y", "command": "merge"}
    again = ex.merge_tables("table4", [m], data_dir=tmp_path)
    assert f": {d10}." in again.note and "old width rule" in again.note
    fresh = ex.merge_tables("table4", [new], data_dir=tmp_path)
    assert "old width rule" not in fresh.note
    # the paper preset visits by eigenvalue: the old rule never applied to it
    p_old = _table_part("table4", [2], [50.0])
    p_old["config"] |= {"preset": "paper",
                        "dmn_preset": ex._config_dict(ex.TableConfig.paper(
                            "table4", preset="paper"))["dmn_preset"]}
    del p_old["config"]["width_rule"]
    assert "old width rule" not in ex.merge_tables("table4", [p_old], data_dir=tmp_path).note


def test_fig6_merge_of_merges_names_old_rule_curves_per_dataset():
    # a merged Fig. 6 part whose datasets came from sub-parts of different width rules: only
    # the old-rule dataset is named (a per-part rule would have named both)
    from layerlab.dmn import experiments as ex

    d = {"config": {"width_rule": ex.WIDTH_RULE}, "extra": {"parts": [
        {"datasets": ["mnist"], "width_rule": None},
        {"datasets": ["cifar10"], "width_rule": ex.WIDTH_RULE}]}}
    assert ex._part_width_rule(d, ["mnist"]) is None
    assert ex._part_width_rule(d, ["cifar10"]) == ex.WIDTH_RULE
    assert ex._part_width_rule(d, ["mnist", "cifar10"]) is None
    # a sub-part that records its rules per dataset (written by merge_fig6 since 2026-11-29)
    d2 = {"extra": {"parts": [{"datasets": ["mnist", "cifar10"], "width_rule": None,
                               "width_rules": {"mnist": None, "cifar10": ex.WIDTH_RULE}}]}}
    assert ex._part_width_rule(d2, ["cifar10"]) == ex.WIDTH_RULE
    assert ex._part_width_rule(d2, ["mnist"]) is None
    # a sub-part that gave only a dataset's ConvNet curve says nothing of its DMN layers
    d3 = {"extra": {"parts": [
        {"datasets": ["cifar10"], "halves": {"cifar10": "convnet"}, "width_rule": None},
        {"datasets": ["cifar10"], "halves": {"cifar10": "dmn"}, "width_rule": ex.WIDTH_RULE}]}}
    assert ex._part_width_rule(d3, ["cifar10"]) == ex.WIDTH_RULE


_F6_CONV = "CIFAR-10: one DMN layer >= one conv layer (most F)"


def test_fig6_dmn_only_rerun_replaces_the_dmn_curves_and_keeps_the_convnets(monkeypatch,
                                                                            tmp_path):
    # Fig. 6 run with its ConvNets (MNIST and CIFAR-10), then CIFAR-10 rerun DMN-only
    # (--no-convnet): the merge takes CIFAR-10's DMN curve and baseline from the rerun and its
    # ConvNet curve from the full run, and recomputes the claims from the assembled curves
    from layerlab.dmn import experiments as ex
    from layerlab.record import load_record
    from reproduce import dmn_fig6

    # _fig6_part: seeds 0-2 score acc + 0, 1, 2 -> mean acc + 1; 30 where acc names nothing
    full = _fig6_part(monkeypatch, ("mnist", "cifar10"), {
        ("dmn", 2): 50.0, ("dmn", 12): 45.0, ("dmn", 27): 40.0,
        ("convnet", 2): 45.0, ("convnet", 12): 50.0})
    dmn = _fig6_part(monkeypatch, ("cifar10",), {
        ("dmn", 0): 33.0, ("dmn", 2): 40.0, ("dmn", 12): 60.0, ("dmn", 27): 25.0},
        convnet=False)
    assert full["config"]["width_rule"] == ex.WIDTH_RULE == dmn["config"]["width_rule"]
    assert dmn["config"]["convnet"] is False and not any("ConvNet" in r["name"]
                                                         for r in dmn["rows"])
    # the full run's own claims: CIFAR-10 DMN 51, 46, 41 vs ConvNet 46, 51, 31 -> best F = 2,
    # DMN >= ConvNet at F = 2 and 27: 2/3 widths
    own = {c["claim"]: (c["holds"], c["evidence"]) for c in full["claims"]}
    assert own["cifar10: best one-layer DMN width is F=12"][0] is False
    assert own[_F6_CONV] == (True, "2/3 widths")
    empty = tmp_path / "empty"
    empty.mkdir()
    rec = ex.merge_fig6([full, dmn], data_dir=empty)
    by = {r.name: r.ours for r in rec.rows}
    assert [by[f"cifar10 F={f} DMN val acc"] for f in (2, 12, 27)] == [41.0, 61.0, 26.0]
    assert [by[f"cifar10 F={f} ConvNet val acc"] for f in (2, 12, 27)] == [46.0, 51.0, 31.0]
    assert by["cifar10 baseline de10 val acc"] == 34.0  # the rerun's (the full run's: 31)
    assert [by[f"mnist F={f} DMN val acc"] for f in (2, 12, 27)] == [51.0, 46.0, 41.0]
    assert [by[f"mnist F={f} ConvNet val acc"] for f in (2, 12, 27)] == [46.0, 51.0, 31.0]
    # run_fig6's order per dataset: baseline, then per F its DMN and ConvNet entries
    assert [r.name for r in rec.rows if r.name.startswith("cifar10 ")] == [
        r["name"] for r in full["rows"] if r["name"].startswith("cifar10 ")]
    # the claims by hand from the assembled curves: CIFAR-10 best F = 12 (61), DMN >= ConvNet
    # only at F = 12 (41 < 46, 61 >= 51, 26 < 31): 1/3 widths; MNIST best F = 2
    claims = {c.claim: (c.holds, c.evidence) for c in rec.claims}
    assert claims == {
        "mnist: best one-layer DMN width is F=6": (False, "ours: best F=2 among [2, 12, 27]"),
        "cifar10: best one-layer DMN width is F=12": (True, "ours: best F=12 among [2, 12, 27]"),
        _F6_CONV: (False, "1/3 widths")}
    assert rec.config["convnet"] is True and rec.scale == "reduced"  # CIFAR-100: no files
    assert rec.wall_s == 30.0  # both runs in full (20 s and 10 s)
    assert [(p["path"], p["via"], p["datasets"], p["halves"]) for p in rec.extra["parts"]] == [
        ("parts[0]", None, ["mnist", "cifar10"], {"mnist": "both", "cifar10": "convnet"}),
        ("parts[1]", None, ["cifar10"], {"cifar10": "dmn"})]
    runs = rec.extra["runs"]
    assert {(r["dataset"], r["variant"], r["command"]) for r in runs} == {
        ("mnist", "dmn", "part ('mnist', 'cifar10')"),
        ("mnist", "convnet", "part ('mnist', 'cifar10')"),
        ("cifar10", "convnet", "part ('mnist', 'cifar10')"),
        ("cifar10", "dmn", "part ('cifar10',)")}
    assert len(runs) == 4 * 3 * 3  # 2 datasets x 2 variants x 3 widths x 3 seeds
    assert sorted(r["val_acc"] for r in runs if r["dataset"] == "cifar10"
                  and r["variant"] == "dmn" and r["filters"] == 12) == [60.0, 61.0, 62.0]
    assert "DMN from parts[1], ConvNet from parts[0]: cifar10." in rec.note
    assert "parts[0]: mnist, the ConvNet curve of cifar10 on cpu" in rec.note
    assert "parts[1]: the DMN curve and baseline of cifar10 on cpu" in rec.note
    assert "old width rule" not in rec.note and "replaced" in rec.note
    # the command line merges the same files and refuses --no-convnet (the records say it)
    paths = []
    for k, part in enumerate((full, dmn)):
        paths.append(tmp_path / f"p{k}.json")
        paths[-1].write_text(json.dumps(part))
    out = tmp_path / "out" / "fig6.json"
    assert dmn_fig6.main(["--merge", *map(str, paths), "--out", str(out), "--data-dir",
                          str(empty)]) == 0
    written = load_record(out)
    assert [(c["holds"], c["evidence"]) for c in written["claims"]] == list(claims.values())
    assert [p["halves"] for p in written["extra"]["parts"]] == [
        {"mnist": "both", "cifar10": "convnet"}, {"cifar10": "dmn"}]
    assert written["config"]["convnet"] is True
    with pytest.raises(SystemExit, match="--no-convnet"):
        dmn_fig6.main(["--merge", *map(str, paths), "--no-convnet", "--out", str(out)])
    # merged again: the halves stay with the runs that made them
    m = json.loads(json.dumps(rec.to_dict() | {"machine": {}, "versions": {}, "git": "y",
                                                "command": "merge"}))
    again = ex.merge_fig6([m], data_dir=empty)
    assert {r.name: r.ours for r in again.rows} == by and again.claims == rec.claims
    assert [(p["path"], p["via"], p["halves"]) for p in again.extra["parts"]] == [
        ("parts[0]", "parts[0]", {"mnist": "both", "cifar10": "convnet"}),
        ("parts[1]", "parts[0]", {"cifar10": "dmn"})]
    assert again.wall_s == 30.0 and "DMN from parts[1], ConvNet from parts[0]" in again.note


def test_fig6_half_merge_order_old_rule_and_protocol(monkeypatch, tmp_path):
    from layerlab.dmn import experiments as ex

    full = _fig6_part(monkeypatch, ("mnist", "cifar10"), {("dmn", 12): 45.0,
                                                           ("convnet", 2): 45.0})
    dmn = _fig6_part(monkeypatch, ("cifar10",), {("dmn", 12): 60.0, ("dmn", 27): 25.0},
                     convnet=False)
    empty = tmp_path / "empty"
    empty.mkdir()
    # later replaces earlier, half by half: a full part after the DMN-only one (also as the
    # reference: the merged record still has ConvNets) gives both halves, its own claims
    rev = ex.merge_fig6([dmn, full], data_dir=empty)
    assert rev.config["convnet"] is True
    assert {r.name: r.ours for r in rev.rows} == {
        r["name"]: r["ours"] for r in full["rows"]} | {"cifar100 baseline de100 val acc": None}
    assert [(c.claim, c.holds, c.evidence) for c in rev.claims] == [
        (c["claim"], c["holds"], c["evidence"]) for c in full["claims"]]
    assert {p["path"]: p["halves"] for p in rev.extra["parts"]} == {
        "parts[1]": {"mnist": "both", "cifar10": "both"}}
    assert "Parts whose datasets were all replaced: ['parts[0]']" in rev.note
    assert "different runs" not in rev.note and rev.wall_s == 20.0
    # the old-rule note judges DMN curves only: the full part under the old rule, the DMN-only
    # rerun under the new one -> the full part's MNIST curve is named, not its CIFAR-10 one
    # (only its ConvNet curve is kept), nor the rerun
    old_full = json.loads(json.dumps(full))
    del old_full["config"]["width_rule"]
    rec = ex.merge_fig6([old_full, dmn], data_dir=empty)
    old = rec.note.split("old width rule")[1]
    assert "the DMN layers of parts[0]: mnist DMN curve." in old
    assert "cifar10" not in old and "parts[1]" not in old
    assert [p["width_rules"] for p in rec.extra["parts"]] == [
        {"mnist": None, "cifar10": None}, {"cifar10": ex.WIDTH_RULE}]
    # ... also when merged again (the sub-parts' halves and rules are kept)
    m = json.loads(json.dumps(rec.to_dict() | {"machine": {}, "versions": {}, "git": "y",
                                                "command": "merge"}))
    old = ex.merge_fig6([m], data_dir=empty).note.split("old width rule")[1]
    assert "parts[0]: mnist DMN curve." in old and "cifar10" not in old
    # vice versa: an old-rule DMN-only part names its curve, the new full part nothing
    old_dmn = json.loads(json.dumps(dmn))
    del old_dmn["config"]["width_rule"]
    old = ex.merge_fig6([full, old_dmn], data_dir=empty).note.split("old width rule")[1]
    assert "the DMN layers of parts[1]: cifar10 DMN curve." in old and "parts[0]" not in old
    assert "old width rule" not in ex.merge_fig6([full, dmn], data_dir=empty).note
    # a later full old-rule part replaces the new DMN curve: named again
    old = ex.merge_fig6([dmn, old_full], data_dir=empty).note.split("old width rule")[1]
    assert "parts[1]: mnist DMN curve, cifar10 DMN curve." in old
    # any other protocol field still has to agree, whichever part comes first
    short = _fig6_part(monkeypatch, ("cifar10",), {}, convnet=False, epochs=10)
    with pytest.raises(ValueError, match="epochs=10"):
        ex.merge_fig6([full, short])
    with pytest.raises(ValueError, match="epochs=50"):
        ex.merge_fig6([short, full])
    one = _fig6_part(monkeypatch, ("cifar10",), {}, convnet=False, seeds=1)
    with pytest.raises(ValueError, match="seeds=1"):
        ex.merge_fig6([full, one])


def test_fig6_half_merge_scale_and_datasets_without_convnets(monkeypatch, tmp_path):
    from layerlab.dmn import experiments as ex

    every = ("mnist", "cifar10", "cifar100")  # _fig6_part stubs the data: CIFAR-100 runs too
    full = _fig6_part(monkeypatch, every, {("dmn", 12): 45.0})
    dmn = _fig6_part(monkeypatch, ("cifar10",), {("dmn", 12): 60.0}, convnet=False)
    assert ex.merge_fig6([full]).scale == "paper"
    for parts in ([full, dmn], [dmn, full]):
        rec = ex.merge_fig6(parts)
        assert rec.scale == "paper" and all(r.ours is not None for r in rec.rows)
    # DMN-only parts alone: no ConvNets, reduced (as run_fig6 has it), the claim open
    dmn_all = _fig6_part(monkeypatch, every, {("dmn", 12): 55.0}, convnet=False)
    alone = ex.merge_fig6([dmn_all])
    assert alone.scale == "reduced" and alone.config["convnet"] is False
    assert not any("ConvNet" in r.name for r in alone.rows) and "ConvNets not run" in alone.note
    assert {c.claim: c.evidence for c in alone.claims}[_F6_CONV] == (
        "ConvNets not run (convnet=False, --no-convnet)")
    # a dataset whose ConvNets no part ran: its ConvNet entries not run, the record reduced
    two = _fig6_part(monkeypatch, ("mnist", "cifar100"), {("convnet", 2): 45.0})
    rec = ex.merge_fig6([dmn_all, two])
    by = {r.name: r for r in rec.rows}
    assert rec.scale == "reduced" and rec.config["convnet"] is True
    assert by["cifar10 F=12 DMN val acc"].ours == 56.0
    assert all(by[f"cifar10 F={f} ConvNet val acc"].ours is None for f in (2, 12, 27))
    assert "--no-convnet" in by["cifar10 F=2 ConvNet val acc"].note
    assert "--datasets cifar10" in by["cifar10 F=2 ConvNet val acc"].note
    assert by["mnist F=2 ConvNet val acc"].ours == 46.0 and by["mnist F=12 DMN val acc"].ours \
        == 31.0  # the later full part gave MNIST whole
    conv = next(c for c in rec.claims if c.claim == _F6_CONV)
    assert conv.holds is None and "no part ran cifar10's ConvNets" in conv.evidence
    assert "ConvNets not run for ['cifar10']" in rec.note
    assert {p["path"]: p["halves"] for p in rec.extra["parts"]} == {
        "parts[0]": {"cifar10": "dmn"}, "parts[1]": {"mnist": "both", "cifar100": "both"}}
    # merged again, the not-run ConvNet entries stay not run (no part ran them)
    m = json.loads(json.dumps(rec.to_dict() | {"machine": {}, "versions": {}, "git": "y",
                                                "command": "merge"}))
    again = ex.merge_fig6([m])
    assert [(r.name, r.ours) for r in again.rows] == [(r.name, r.ours) for r in rec.rows]
    assert {p["path"]: p["halves"] for p in again.extra["parts"]} == {
        "parts[0]": {"cifar10": "dmn"}, "parts[1]": {"mnist": "both", "cifar100": "both"}}
    # ... and a full CIFAR-10 part after it gives them: paper scale
    assert ex.merge_fig6([m, full]).scale == "paper"


@pytest.mark.parametrize("artifact", ["table2", "fig6"])
def test_merging_a_committed_merged_record_again_keeps_its_rows_claims_and_cost(tmp_path,
                                                                                artifact):
    """A merged record whose rows are split between two runs (DMN half rerun apart from the
    ConvNet half) merges again to the same rows, claims and cost entries: the split rows take
    the split path (bounded / untimed), not "one part gave the whole row"."""
    import pathlib

    import layerlab.dmn.experiments as ex

    path = pathlib.Path(__file__).resolve().parents[2] / "results" / "dmn" / f"{artifact}.json"
    d = json.loads(path.read_text())
    merge = ex.merge_tables if artifact == "table2" else ex.merge_fig6
    args = (artifact, [d]) if artifact == "table2" else ([d],)
    again = merge(*args, data_dir=tmp_path).to_dict()
    assert [(r["name"], r["ours"], r["holds"]) for r in again["rows"]] == [
        (r["name"], r["ours"], r["holds"]) for r in d["rows"]]
    assert [(c["claim"], c["holds"], c["evidence"]) for c in again["claims"]] == [
        (c["claim"], c["holds"], c["evidence"]) for c in d["claims"]]
    assert again["extra"].get("cost") == d["extra"].get("cost")


@pytest.mark.parametrize("spec", ["d3,m,de10", "c3,m,de10"])
def test_non_finite_images_are_refused_before_anything_runs(spec):
    """NaN validation images were never checked: the DMN features of a NaN image could come
    out finite (XLA's CPU max-pool drops NaN for batches of 40 and more), so val_acc was a
    finite, wrong number.  Both image arrays are now checked first, by name."""
    tr = load("digits", n=120, seed=0)
    x, y = np.asarray(tr.x), np.asarray(tr.y)
    xv = x[:40].copy()
    xv[:20] = np.nan
    with pytest.raises(ValueError, match=r"train_and_evaluate: x_val has 1280 non-finite "
                                         r"\(NaN/Inf\) entries out of 2560"):
        train_and_evaluate(spec, x, y, xv, y[:40], 10, key=jax.random.key(0), epochs=1,
                           progress=False)
    xt = x.copy()
    xt[5, 1, 1, 0] = np.inf
    with pytest.raises(ValueError, match=r"train_and_evaluate: x_train has 1 non-finite"):
        train_and_evaluate(spec, xt, y, x[:40], y[:40], 10, key=jax.random.key(0), epochs=1,
                           progress=False)


def test_bad_epochs_and_batch_size_are_refused_before_the_build(monkeypatch):
    """batch_size=0 ended in a ZeroDivisionError after the closed-form build, and a negative
    epochs or batch_size in loop.fit's error naming "fit"; now refused first, by name."""
    from layerlab.dmn import experiments as ex

    tr = load("digits", n=60, seed=0)
    x, y = np.asarray(tr.x), np.asarray(tr.y)
    monkeypatch.setattr(ex, "_net_and_step", lambda *a, **k: pytest.fail("built the net"))
    for kw, msg in ((dict(batch_size=0), "batch_size must be >= 1, got 0"),
                    (dict(batch_size=-5), "batch_size must be >= 1, got -5"),
                    (dict(epochs=-1), "epochs must be >= 0, got -1")):
        with pytest.raises(ValueError, match=rf"^train_and_evaluate: {msg}\.$"):
            train_and_evaluate("d3,m,de10", x, y, x[:20], y[:20], 10, key=jax.random.key(0),
                               progress=False, **{"epochs": 1, **kw})
