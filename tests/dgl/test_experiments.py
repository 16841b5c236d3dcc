"""Tests for layerlab.dgl.experiments and layerlab.dgl.dgl_protocol: the paper's split sizes
and disjointness, the full-N DGL against the mini-batch estimator, the classifier and the
Table I merge."""
import dataclasses
import itertools
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from layerlab import dgl
from layerlab.dgl import experiments as ex
from layerlab.record import to_jsonable


def _rows_as_set(x):
    x = np.asarray(x).reshape(len(x), -1)
    return {r.tobytes() for r in x}


def test_protocol_sizes_balance_and_disjointness(shared_data):
    sp = dgl.protocol("BMNIST2k", n_train=200, seed=3, data_dir=shared_data)
    assert len(sp.train) == len(sp.val) == 200
    np.testing.assert_array_equal(np.bincount(sp.train.y), [100, 100])
    np.testing.assert_array_equal(np.bincount(sp.val.y), [100, 100])
    # the standard test set's 1s and 7s: 1135 + 1028, not balanced
    np.testing.assert_array_equal(np.bincount(sp.test.y), [1135, 1028])
    tr, va = _rows_as_set(sp.train.x), _rows_as_set(sp.val.x)
    assert len(tr) == 200 and len(va) == 200 and not tr & va
    assert float(sp.train.x.max()) == 1.0 and float(sp.train.x.min()) == 0.0
    sp2 = dgl.dgl_protocol("mnist10k", n_train=100, data_dir=shared_data)
    assert len(sp2.train) == len(sp2.val) == 100 and len(sp2.test) == 10_000
    np.testing.assert_array_equal(np.bincount(sp2.train.y), [10] * 10)
    assert not _rows_as_set(sp2.train.x) & _rows_as_set(sp2.val.x)
    # another seed draws another training set
    sp3 = dgl.protocol("BMNIST2k", n_train=200, seed=4, data_dir=shared_data)
    assert _rows_as_set(sp3.train.x) != tr
    with pytest.raises(ValueError, match="multiple of the 10 classes"):
        dgl.protocol("MNIST10k", n_train=105, data_dir=shared_data)
    with pytest.raises(ValueError, match="must be one of"):
        dgl.protocol("MNIST5k")


def test_protocol_sizes_must_be_integers():
    """``n_train=100.9`` was once truncated to 100 silently (refused before any loading)."""
    for kw, got in ((dict(n_train=100.9), "float 100.9"), (dict(n_train=100, n_val=50.0),
                                                            "float 50.0")):
        with pytest.raises(TypeError, match=rf"dgl_protocol: n_\w+ must be an integer, got "
                                            rf"{got}"):
            dgl.protocol("BMNIST2k", **kw)


def _layer_problem(n=8, d_in=3, d=4, c=2, seed=0):
    rng = np.random.default_rng(seed)
    h = jnp.asarray(rng.normal(size=(n, d_in)))
    y = jnp.asarray(np.eye(c)[np.arange(n) % c] - 1.0 / c)
    layer = {"w": jnp.asarray(rng.normal(size=(d_in, d)) / np.sqrt(d_in)),
             "b": jnp.asarray(0.1 * rng.normal(size=(d,)))}
    return h, y, layer, jnp.asarray([2.0, 1.5]), jnp.asarray([0.1, 0.05])


def _brute_per_sample_dgl(layer, h, y, w_var, b_var, eps_rel):
    """(1/N) sum_n |y_n - GP mean from the other N-1 points|^2, numpy, no Cholesky."""
    r = np.maximum(np.asarray(h) @ np.asarray(layer["w"]) + np.asarray(layer["b"]), 0.0)
    K = np.asarray(dgl.top_kernel(jnp.asarray(r), w_var=w_var, b_var=b_var))
    Y = np.asarray(y)
    eps2 = eps_rel * np.mean(np.diag(K))
    n = len(Y)
    out = 0.0
    for i in range(n):
        m = np.arange(n) != i
        pred = K[i, m] @ np.linalg.solve(K[np.ix_(m, m)] + eps2 * np.eye(n - 1), Y[m])
        out += np.sum((Y[i] - pred) ** 2)
    return out / n


def test_full_n_and_minibatch_dgl_estimators(x64):
    """The LEGO step's loss: full-N (batch None) = the brute-force LOO DGL of all N points;
    mini-batch (batch B) = on average the exact mean over all B-subsets, its value and
    gradient agree with the full-N ones at B = N and approach them as B grows."""
    h, y, layer, wv, bv = _layer_problem()
    eps = 0.05
    f = lambda p, hh, yy: ex._layer_dgl(p, hh, yy, wv, bv, eps)  # noqa: E731
    # value and gradient in one program (op-by-op dispatch of these small float64 graphs cost
    # ~15 s; tracing the DGL once per program, not once for each)
    jvg = jax.jit(jax.value_and_grad(f))
    full, g_full = jvg(layer, h, y)
    full = float(full)
    np.testing.assert_allclose(full, _brute_per_sample_dgl(layer, h, y, wv, bv, eps), rtol=1e-9)
    n = h.shape[0]
    gaps, coss = [], []
    on_subsets = jax.jit(jax.vmap(lambda s: jvg(layer, h[s], y[s])))
    for B in (4, 6, 8):
        subs = np.asarray(list(itertools.combinations(range(n), B)))
        n_subs = len(subs)
        if B == 4:  # what the training loop's random batches average to (Monte Carlo),
            # evaluated with the subsets in one program
            idx = jax.jit(jax.vmap(lambda k: jax.random.permutation(k, n)[:B]))(
                jax.random.split(jax.random.key(0), 3000))
            subs = np.concatenate([subs, np.asarray(idx)])
        vals, grads = jax.device_get(on_subsets(jnp.asarray(subs)))
        vals, mc = vals[:n_subs], vals[n_subs:]
        g_mean = jax.tree_util.tree_map(lambda a: np.mean(a[:n_subs], axis=0), grads)
        flat = lambda t: np.concatenate([np.ravel(a) for a in jax.tree_util.tree_leaves(t)])  # noqa: E731
        a, b = flat(g_mean), flat(g_full)
        coss.append(a @ b / np.linalg.norm(a) / np.linalg.norm(b))
        gaps.append(vals.mean() - full)
        if B == 4:
            assert abs(mc.mean() - vals.mean()) < 4 * vals.std() / np.sqrt(len(mc))
    # B = N: the mini-batch estimator is the full-N DGL, value and gradient
    assert abs(gaps[-1]) < 1e-12 and coss[-1] > 1 - 1e-12
    # fewer points -> worse LOO prediction: the subset DGL is larger, and shrinks towards N
    assert gaps[0] > gaps[1] > 0
    # the expected mini-batch gradient points along the full-N one
    assert 0.8 < coss[0] < coss[1] < coss[2]


def test_classifier_on_val_is_ridge_least_squares_and_picks_val_mse(x64):
    rng = np.random.default_rng(1)
    h, hv = jnp.asarray(rng.normal(size=(40, 5))), jnp.asarray(rng.normal(size=(30, 5)))
    W = rng.normal(size=(5, 3))
    y, yv = h @ W + 0.3, hv @ W + 0.3 + 0.5 * rng.normal(size=(30, 3))
    head, ridge, vmse = ex.classifier_on_val(h, y, hv, yv, (1e-8, 10.0))
    A = np.c_[np.asarray(h), np.ones(40)]
    sol = np.linalg.lstsq(A, np.asarray(y), rcond=None)[0]
    assert ridge == 1e-8
    np.testing.assert_allclose(np.asarray(head["w"]), sol[:5], atol=1e-6)
    np.testing.assert_allclose(np.asarray(head["b"]), sol[5], atol=1e-6)
    want = np.mean(np.sum((np.asarray(hv) @ sol[:5] + sol[5] - np.asarray(yv)) ** 2, 1))
    np.testing.assert_allclose(vmse, want, rtol=1e-6)


def test_select_rows_and_merge_of_parts(tmp_path):
    assert ex.select_rows("mnist,bmnist-3x20") == ("mnist-2x2000", "mnist-3x1000", "bmnist-3x20")
    with pytest.raises(ValueError, match="matches none"):
        ex.select_rows("svhn")
    cfg = ex.Table1Config.paper()
    for seed, (e, lego, r) in enumerate([(45.0, 47.0, 34.0), (46.0, 48.0, 35.0),
                                         (44.0, 49.0, 33.0)]):
        part = {"row": "cifar-5x2000", "seed": seed, "width": 2000, "n_train": 10000,
                "paper_scale": True, "end_to_end": {"test": e}, "lego": {"test": lego},
                "random": {"test": r}, "wall_s": 1.0, "device": "cpu", "config": {},
                "command": "python -m reproduce.dgl_table1 --rows cifar"}
        (tmp_path / f"cifar-5x2000_seed{seed}.json").write_text(json.dumps(part))
    rec = ex.merge_table1(tmp_path)
    assert rec.scale == "reduced"  # other rows missing
    by = {r.name: r for r in rec.rows}
    lego = by["CIFAR10_10k L=5 d=2000 LEGO test acc"]
    assert lego.ours == pytest.approx(48.0) and lego.spread == pytest.approx(1.0)
    assert lego.seeds == 3 and lego.tol == 2.0 and lego.holds is True
    assert by["MNIST10k L=2 d=2000 LEGO test acc"].ours is None
    claim = next(c for c in rec.claims if c.claim.startswith("CIFAR"))
    assert claim.holds is True
    assert "Ref. [10]" in by["CIFAR10_10k L=5 d=2000 End-to-end test acc"].note
    assert cfg.is_paper_scale("cifar-5x2000") and not ex.Table1Config.smoke().is_paper_scale(
        "bmnist-2x20")
    # a seed run alone (--seeds 1: its part says paper_scale False) at the paper's N and width
    # counts as paper scale once three seeds are merged; a part below the paper's N does not
    for seed in range(3):
        part = {"row": "bmnist-3x20", "seed": seed, "width": 20, "n_train": 2000,
                "paper_scale": seed > 0, "end_to_end": {"test": 99.0}, "lego": {"test": 99.2},
                "random": {"test": 90.0}, "wall_s": 1.0, "device": "cpu", "config": {},
                "command": ""}
        (tmp_path / f"bmnist-3x20_seed{seed}.json").write_text(json.dumps(part))
    by = {r.name: r for r in ex.merge_table1(tmp_path).rows}
    assert by["BMNIST2k L=3 d=20 LEGO test acc"].note == ""
    part["n_train"] = 1000
    (tmp_path / "bmnist-3x20_seed2.json").write_text(json.dumps(part))
    by = {r.name: r for r in ex.merge_table1(tmp_path).rows}
    assert "[ours: N=1000/2000, d=20, 3 seed(s)]" in by["BMNIST2k L=3 d=20 LEGO test acc"].note


def test_merge_counts_a_later_full_n_comparison_on_its_own_machine(tmp_path):
    """A full-N comparison added to a GPU part on a CPU (``add_full_n_comparison``) is counted
    on the CPU in ``extra.device_wall_s`` (the index's per-machine times), the rest of the
    part on the GPU; the per-row wall times stay the parts' sums."""
    base = {"row": "mnist-2x2000", "width": 2000, "n_train": 10000, "paper_scale": True,
            "end_to_end": {"test": 97.0}, "lego": {"test": 97.0}, "random": {"test": 94.0},
            "device": "H100", "config": {}, "command": ""}
    arm = {"test": 97.2, "dgl_wall_s": 1.0, "batch": 1000, "steps": 50}
    cmp = {"minibatch": dict(arm, wall_s=60.0), "full_n": dict(arm, wall_s=4700.0),
           "device": "cpu", "added_after_run": True}
    parts = [dict(base, seed=0, wall_s=5000.0, full_n_vs_minibatch=cmp),  # old: no cmp wall_s
             dict(base, seed=1, wall_s=300.0,
                  full_n_vs_minibatch=dict(cmp, wall_s=250.0)),
             dict(base, seed=2, wall_s=40.0,  # run inside the part: its own machine
                  full_n_vs_minibatch={k: v for k, v in cmp.items() if k != "added_after_run"}),
             dict(base, seed=3, wall_s=70.0,  # added later on the part's own machine
                  full_n_vs_minibatch=dict(cmp, device="H100", wall_s=30.0))]
    for p in parts:
        (tmp_path / f"mnist-2x2000_seed{p['seed']}.json").write_text(json.dumps(p))
    (tmp_path / "bmnist-2x20_seed0.json").write_text(json.dumps(
        dict(base, row="bmnist-2x20", width=20, n_train=2000, seed=0, wall_s=900.0,
             device="cpu")))
    rec = ex.merge_table1(tmp_path)
    names = [r.name for r in rec.rows if "full_n DGL" in r.name]
    assert names == [f"MNIST10k L=2 d=2000 LEGO full_n DGL test acc (seed {k})" for k in range(4)]
    extra = rec.extra
    assert extra["row_wall_s"] == {"mnist-2x2000": 5410.0, "bmnist-2x20": 900.0}
    assert extra["device_wall_s"] == {"H100": pytest.approx(240.0 + 50.0 + 40.0 + 70.0),
                                      "cpu": pytest.approx(4760.0 + 250.0 + 900.0)}
    assert extra["devices"] == {"mnist-2x2000": ["H100", "cpu"], "bmnist-2x20": ["cpu"]}
    from reproduce.make_index import _devices_label
    assert _devices_label({"extra": extra}) == "summed over parts: H100 6.7 min, cpu 98.5 min"
    # parts of one row run with other settings (another grid) are refused, whole grids shown
    p3 = dict(parts[0], seed=3, config={"dgl_lrs": [1e-4, 3e-4, 1e-3, 3e-3]})
    (tmp_path / "mnist-2x2000_seed3.json").write_text(json.dumps(p3))
    with pytest.raises(ValueError, match=r"(?s)row mnist-2x2000 .* different settings \(seed 0 "
                                         r"vs seed 3\).*dgl_lrs: saved \[0\.0001, 0\.0003, "
                                         r"0\.001\], now \[0\.0001, 0\.0003, 0\.001, 0\.003\]"):
        ex.merge_table1(tmp_path)


def test_classifier_iterative_converges_to_least_squares_and_picks_val_mse(x64):
    """Step 5 with readout="iterative": vanilla SGD on the head alone, from its initial
    weights, on well-conditioned features reaches the least-squares solution (numpy lstsq with
    an intercept); the kept run is the grid point with the smallest validation MSE."""
    rng = np.random.default_rng(2)
    h, hv = rng.normal(size=(64, 4)), rng.normal(size=(32, 4))
    W = rng.normal(size=(4, 2))
    y, yv = h @ W - 0.2 + 0.1 * rng.normal(size=(64, 2)), hv @ W - 0.2
    head0 = {"w": jnp.zeros((4, 2)), "b": jnp.zeros(2)}
    head, info = ex.classifier_iterative(
        jnp.asarray(h), jnp.asarray(y), jnp.asarray(hv), jnp.asarray(yv), head0, kind="sgd",
        lrs=(1e-4, 0.1), wds=(0.0,), epochs=400, batch=64, key=jax.random.key(0))
    sol = np.linalg.lstsq(np.c_[h, np.ones(64)], y, rcond=None)[0]
    assert info["lr"] == 0.1  # 1e-4 has barely moved from zero: larger validation MSE
    np.testing.assert_allclose(np.asarray(head["w"]), sol[:4], atol=1e-5)
    np.testing.assert_allclose(np.asarray(head["b"]), sol[4], atol=1e-5)
    want = np.mean(np.sum((hv @ np.asarray(head["w"]) + np.asarray(head["b"]) - yv) ** 2, 1))
    np.testing.assert_allclose(info["val_mse"], want, rtol=1e-6)
    assert info["val_mse"] == min(info["grid_val_mse"])


@pytest.mark.datasets("mnist")
def test_iterative_readout_row_and_protocols_do_not_mix(tmp_path, shared_data):
    cfg = ex.Table1Config.smoke(readout="iterative", init="torch", data_dir=str(shared_data))
    # under run_table1's matmul precision, as run_table1 runs its rows: the later tests' rows
    # then reuse this one's compiled end-to-end and LEGO programs
    with jax.default_matmul_precision("highest"):
        out = ex.run_table1_row(cfg, "bmnist-2x20", 0, key=jax.random.key(0), progress=False)
    for col in ("lego", "random"):
        assert out[col]["lr"] in cfg.e2e_sgd_lrs and out[col]["wd"] in cfg.e2e_wds
        assert "ridge" not in out[col] and 0.0 <= out[col]["test"] <= 100.0
    with pytest.raises(ValueError, match="readout"):
        ex.Table1Config(readout="lstsq")
    with pytest.raises(ValueError, match="init"):
        ex.Table1Config(init="xavier")
    for seed, readout in enumerate(("ridge", "iterative")):
        part = {"row": "bmnist-2x20", "seed": seed, "width": 20, "n_train": 2000,
                "paper_scale": False, "end_to_end": {"test": 99.0}, "lego": {"test": 99.0},
                "random": {"test": 90.0}, "wall_s": 1.0, "device": "cpu",
                "config": {"readout": readout, "init": "he"}, "command": ""}
        (tmp_path / f"bmnist-2x20_seed{seed}.json").write_text(json.dumps(part))
    with pytest.raises(ValueError, match="different protocols"):
        ex.merge_table1(tmp_path)
    (tmp_path / "bmnist-2x20_seed0.json").unlink()
    rec = ex.merge_table1(tmp_path)
    assert "readout iterative, init he" in next(
        r for r in rec.rows if r.name.startswith("BMNIST2k L=2") and r.ours is not None).note


@pytest.mark.datasets("mnist")
def test_full_n_comparison_added_to_a_part_equals_the_in_run_one(tmp_path, shared_data):
    # A part written without the full-N comparison (``--full-n none``) gets it on a later run
    # with the row in ``full_n_rows``, rebuilt from the part (keys, init, MF variances,
    # selected lr/wd), without rerunning steps 1-5; it equals the in-run comparison up to
    # the 6-digit rounding of the stored MF variances.
    key = jax.random.key(0)
    cfg_in = ex.Table1Config.smoke(data_dir=str(shared_data), full_n_rows=("bmnist-2x20",))
    # under run_table1's matmul precision, as run_table1 runs its rows (the same context
    # also lets the later comparison reuse this run's compiled programs)
    with jax.default_matmul_precision("highest"):
        out = ex.run_table1_row(cfg_in, "bmnist-2x20", 0, key=jax.random.fold_in(key, 0),
                                progress=False)
    # step 5's diagnostic scan over a wider ridge grid: each entry is that ridge's closed-form
    # head (the protocol's pick equals the scan at its ridge); nothing else changes
    for col in ("lego", "random"):
        sc = out[col]["ridge_scan"]
        assert sc["ridges"] == list(ex.RIDGE_SCAN) and len(sc["test"]) == len(sc["val_mse"]) == 11
        i = sc["ridges"].index(out[col]["ridge"])
        np.testing.assert_allclose(sc["val_mse"][i], out[col]["val_mse"], rtol=1e-5)
        # the scan's test accuracy at the protocol's ridge is the column's own (the right net:
        # LEGO's layers for "lego", the random init's for "random"; the scan applies the head
        # to test features computed once, another XLA program: one test sample may flip
        # where two logits tie to float32 rounding)
        np.testing.assert_allclose(sc["test"][i], out[col]["test"],
                                   atol=100.0 / out["n_test"] + 1e-9)
        assert sc["best_ridge"] in sc["ridges"]
    assert out["lego"]["ridge_scan"]["test"] != out["random"]["ridge_scan"]["test"]
    want = out.pop("full_n_vs_minibatch")
    path = tmp_path / "bmnist-2x20_seed0.json"
    path.write_text(json.dumps(to_jsonable(out)))  # as run_table1 writes a part
    before = json.loads(path.read_text())
    rec = ex.run_table1(cfg_in, key=key, progress=False, parts_dir=tmp_path)
    after = json.loads(path.read_text())
    got = after["full_n_vs_minibatch"]
    assert got["added_after_run"] is True
    assert after["lego"] == before["lego"] and after["end_to_end"] == before["end_to_end"]
    for name, batch in (("minibatch", cfg_in.dgl_batch), ("full_n", None)):
        assert got[name]["batch"] == batch
        np.testing.assert_allclose(got[name]["val_dgl_first_best"],
                                   want[name]["val_dgl_first_best"], rtol=1e-4)
        assert abs(got[name]["test"] - want[name]["test"]) <= 0.5
    # the full-N and the mini-batch runs differ (the estimators are not the same loss)
    assert got["full_n"]["val_dgl_first_best"] != got["minibatch"]["val_dgl_first_best"]
    names = [r.name for r in rec.rows]
    assert "BMNIST2k L=2 d=20 LEGO full_n DGL test acc (seed 0)" in names
    note = next(r.note for r in rec.rows if r.name.endswith("full_n DGL test acc (seed 0)"))
    assert "added to the part after its run" in note
    # a part whose config does not match its sizes is refused with the argument named
    bad = dict(before, width=7)
    with pytest.raises(ValueError, match="width/n_train"):
        ex.add_full_n_comparison(bad, key=jax.random.fold_in(key, 0), data_dir=str(shared_data),
                                 progress=False)


@pytest.mark.datasets("mnist")
def test_a_stopped_table1_seed_resumes_after_its_last_finished_step(tmp_path, shared_data,
                                                                    monkeypatch):
    # Stop a seed inside LEGO layer 2 (after the end-to-end run and layer 1 finished), rerun:
    # the finished steps are not recomputed and the part equals an uninterrupted run's.
    cfg = ex.Table1Config.smoke(data_dir=str(shared_data))
    key = jax.random.key(0)
    ex.run_table1(cfg, key=key, progress=False, parts_dir=tmp_path / "whole")
    want = json.loads((tmp_path / "whole" / "bmnist-2x20_seed0.json").read_text())
    assert not (tmp_path / "whole" / "bmnist-2x20_seed0.steps").exists()  # removed when done

    real_grid = ex._dgl_layer_grid
    calls = []

    def stop_at_layer_2(*a, **k):
        calls.append(k["desc"])
        if k["desc"].endswith("layer 2/2"):
            raise KeyboardInterrupt
        return real_grid(*a, **k)

    monkeypatch.setattr(ex, "_dgl_layer_grid", stop_at_layer_2)
    parts, ck = tmp_path / "parts", tmp_path / "ck"
    with pytest.raises(KeyboardInterrupt):
        ex.run_table1(cfg, key=key, progress=False, parts_dir=parts, checkpoint_dir=ck)
    steps = ck / "bmnist-2x20_seed0"
    assert sorted(p.name for p in steps.iterdir()) == [
        "end_to_end.json", "end_to_end.npz", "lego_layer1.json", "lego_layer1.npz"]
    assert not (parts / "bmnist-2x20_seed0.json").exists()

    def no_end_to_end(*a, **k):
        raise AssertionError("the finished end-to-end step was recomputed")

    monkeypatch.setattr(ex, "_end_to_end", no_end_to_end)
    monkeypatch.setattr(ex, "_dgl_layer_grid", real_grid)
    calls.clear()
    real_grid2 = ex._dgl_layer_grid
    monkeypatch.setattr(ex, "_dgl_layer_grid",
                        lambda *a, **k: calls.append(k["desc"]) or real_grid2(*a, **k))
    ex.run_table1(cfg, key=key, progress=False, parts_dir=parts, checkpoint_dir=ck)
    assert calls == ["bmnist-2x20 s0 LEGO layer 2/2"]  # only the unfinished layer ran
    got = json.loads((parts / "bmnist-2x20_seed0.json").read_text())
    assert not steps.exists()
    for col in ("end_to_end", "lego", "random"):
        assert got[col]["test"] == want[col]["test"]
    assert got["mf_variances"] == want["mf_variances"]
    strip = lambda layers: [{k: v for k, v in li.items() if k != "wall_s"} for li in layers]  # noqa: E731
    assert strip(got["lego"]["layers"]) == strip(want["lego"]["layers"])
    # the part's wall time counts the steps the first process finished (their recorded times,
    # each rounded to 6 digits in the part)
    loaded = got["end_to_end"]["wall_s"] + got["lego"]["layers"][0]["wall_s"]
    assert got["wall_s_loaded_steps"] == pytest.approx(loaded, rel=1e-4, abs=1e-4)
    assert got["wall_s"] == pytest.approx(got["wall_s_this_call"] + loaded, rel=1e-4, abs=1e-4)
    assert "wall_s_this_call" not in want


def test_fig1_centred_inputs_and_bad_option():
    """``Fig1Config.inputs``: 'centred' subtracts the training set's mean image and scales each
    image to unit mean-square pixel (the record's input cosines equal numpy's on those
    inputs, and are far below the raw pixels'); the scale stays 'paper'-comparable (the
    inputs are not a reduction); an unknown value is refused naming the option."""
    from layerlab import data

    with pytest.raises(ValueError, match="inputs"):
        ex.Fig1Config(inputs="whitened")
    X = np.asarray(data.flatten(data.load("digits", "train").x), np.float64)
    cos = {}
    for inputs in ("raw", "centred"):
        cfg = ex.Fig1Config.smoke(inputs=inputs, num_nets=200, fit_steps=5)
        rec = ex.run_fig1(cfg, key=jax.random.key(0), progress=False)
        x = X[: cfg.n_points]
        if inputs == "centred":
            x = x - X.mean(0)
            x = x / np.sqrt(np.mean(x * x, 1, keepdims=True))
        g = x @ x.T
        c = (g / np.sqrt(np.outer(np.diag(g), np.diag(g))))[~np.eye(len(x), dtype=bool)]
        got = rec.extra["input_cosine"]
        np.testing.assert_allclose([got["mean"], got["min"], got["max"]],
                                   [c.mean(), c.min(), c.max()], rtol=1e-4, atol=1e-5)
        assert rec.extra["inputs"] == inputs and inputs in rec.note
        cos[inputs] = got["mean_abs"]
    assert cos["centred"] < 0.5 * cos["raw"]
    assert ex._fig1_scale(ex.Fig1Config.paper(inputs="centred")) == "paper"
    assert ex._fig1_scale(ex.Fig1Config.paper(inputs="centred", num_nets=4000)) == "reduced"


@pytest.mark.datasets("mnist")
def test_a_lego_layer_stopped_mid_layer_resumes_from_its_fit_checkpoint(tmp_path, shared_data,
                                                                       monkeypatch):
    # Stop inside LEGO layer 2 after its step-4 checkpoint (8 steps, one checkpoint per
    # evaluation, every 2 steps), rerun: layer 2 continues from step 4 and the part equals an
    # uninterrupted run's; its wall time is the sum of one pass of chunks; the finished
    # layers' fit checkpoints are removed.  A folder from another configuration is not reused.
    cfg = ex.Table1Config.smoke(data_dir=str(shared_data), dgl_steps=8, dgl_evals=4)
    key = jax.random.key(0)
    ex.run_table1(cfg, key=key, progress=False, parts_dir=tmp_path / "whole")
    want = json.loads((tmp_path / "whole" / "bmnist-2x20_seed0.json").read_text())

    real_fit = ex.fit
    starts = []

    def stop_in_layer_2(*a, **k):
        if k.get("desc", "").endswith("layer 2/2"):
            assert k["checkpoint_dir"].name.startswith("lego_layer2-")
            assert k["checkpoint_every"] == 2 and k["max_to_keep"] == 1
            inner = k["callback"]

            def cb(t, state, metrics):
                starts.append(t)
                inner(t, state, metrics)
                if t >= 5:
                    raise KeyboardInterrupt
            k = dict(k, callback=cb)
        return real_fit(*a, **k)

    monkeypatch.setattr(ex, "fit", stop_in_layer_2)
    parts, ck = tmp_path / "parts", tmp_path / "ck"
    with pytest.raises(KeyboardInterrupt):
        ex.run_table1(cfg, key=key, progress=False, parts_dir=parts, checkpoint_dir=ck)
    steps = ck / "bmnist-2x20_seed0"
    left = sorted(p.name for p in steps.iterdir())
    assert [n.split("-")[0] for n in left if ".fit" in n] == ["lego_layer2", "lego_layer2"]
    fit_dir = steps / next(n for n in left if n.endswith(".fit"))
    walls = json.loads((steps / (fit_dir.name + ".wall.json")).read_text())
    assert sorted(int(t) for t in walls) == sorted(set(starts)) and max(starts) >= 5

    seen = []
    monkeypatch.setattr(ex, "fit", lambda *a, **k: seen.append(k.get("desc")) or real_fit(*a, **k))
    ex.run_table1(cfg, key=key, progress=False, parts_dir=parts, checkpoint_dir=ck)
    assert seen == ["bmnist-2x20 s0 LEGO layer 2/2"]  # only the unfinished layer trained
    got = json.loads((parts / "bmnist-2x20_seed0.json").read_text())
    assert not steps.exists()
    l2 = got["lego"]["layers"][1]
    assert l2["resumed"] is True and 0 < l2["wall_s_this_call"]
    assert l2["wall_s"] >= sum(w for t, w in walls.items() if int(t) <= 4) > 0
    # the part's time counts what the first process ran: the cached steps (end-to-end, layer
    # 1) and layer 2's chunks before the stop
    earlier = (got["end_to_end"]["wall_s"] + got["lego"]["layers"][0]["wall_s"]
               + l2["wall_s"] - l2["wall_s_this_call"])
    assert got["wall_s_loaded_steps"] == pytest.approx(earlier, rel=1e-4, abs=1e-4)
    for col in ("end_to_end", "lego", "random"):
        assert got[col]["test"] == want[col]["test"]
    drop = ("wall_s", "wall_s_this_call", "resumed")
    strip = lambda layers: [{k: v for k, v in li.items() if k not in drop} for li in layers]  # noqa: E731
    assert strip(got["lego"]["layers"]) == strip(want["lego"]["layers"])


def test_a_mismatched_mid_layer_checkpoint_is_dropped_with_a_warning(tmp_path):
    """A ``.fit`` folder whose run fingerprint differs (here: other layer input data) is
    removed with a warning and the layer trains from its start; the result equals a fresh
    run's."""
    rng = np.random.default_rng(0)
    h, y = rng.standard_normal((40, 6)).astype(np.float32), np.eye(2, dtype=np.float32)[
        rng.integers(0, 2, 40)]
    layer0 = {"w": jnp.asarray(rng.standard_normal((6, 5)).astype(np.float32) * 0.5),
              "b": jnp.zeros(5)}
    cfg = ex.Table1Config.smoke(dgl_steps=4, dgl_evals=2)
    kw = dict(cfg=cfg, batch=None, lrs=(1e-3,), wds=(0.0,), steps=4, evals=2, progress=False,
              desc="t", w_var=jnp.asarray([2.0]), b_var=jnp.asarray([0.0]))
    key = jax.random.key(3)
    ck = tmp_path / "x.fit"
    ex._dgl_layer_grid(key, layer0, h + 1, y, h, y, checkpoint_dir=ck, **kw)  # other data
    assert ck.exists()
    with pytest.warns(RuntimeWarning, match=r"t: the mid-layer checkpoint in .*x\.fit does "
                      r"not match this layer.*CheckpointMismatchError"):
        p1, info1 = ex._dgl_layer_grid(key, layer0, h, y, h, y, checkpoint_dir=ck, **kw)
    p0, info0 = ex._dgl_layer_grid(key, layer0, h, y, h, y, **kw)
    np.testing.assert_array_equal(np.asarray(p1["w"]), np.asarray(p0["w"]))
    assert "resumed" not in info1 and info1["val_dgl_best"] == info0["val_dgl_best"]


def _row_cache(tmp_path, shared_data, **over):
    """A finished smoke (row, seed) and its step cache (``run_table1_row`` keeps it)."""
    cfg = ex.Table1Config.smoke(data_dir=str(shared_data), **over)
    ck = tmp_path / "steps"
    out = ex.run_table1_row(cfg, "bmnist-2x20", 0, key=jax.random.key(3), progress=False,
                            cache_dir=ck, mid_layer=False)
    return cfg, ck, out


def _no_training(monkeypatch):
    def fail(*a, **k):
        raise AssertionError("a cached step was recomputed")

    monkeypatch.setattr(ex, "_end_to_end", fail)
    monkeypatch.setattr(ex, "_dgl_layer_grid", fail)


@pytest.mark.datasets("mnist")
def test_a_step_cache_written_by_another_process_resumes_untrained(tmp_path, shared_data,
                                                                   monkeypatch):
    # The fingerprint is the same in every process (no id()/hash(), deterministic floats):
    # a cache written by a subprocess is reused here with nothing trained, to the same part.
    import subprocess
    import sys

    ck, want = tmp_path / "steps", tmp_path / "want.json"
    code = (
        "import json, jax\n"
        "from layerlab.dgl import experiments as ex\n"
        "from layerlab.record import to_jsonable\n"
        f"cfg = ex.Table1Config.smoke(data_dir={str(shared_data)!r})\n"
        "out = ex.run_table1_row(cfg, 'bmnist-2x20', 0, key=jax.random.key(3), "
        f"progress=False, cache_dir={str(ck)!r}, mid_layer=False)\n"
        f"open({str(want)!r}, 'w').write(json.dumps(to_jsonable(out)))\n")
    subprocess.run([sys.executable, "-c", code], check=True)
    saved = json.loads((ck / "lego_layer1.json").read_text())
    assert saved["fingerprint"]["step"] == "lego_layer1" and "info" in saved
    _no_training(monkeypatch)
    cfg = ex.Table1Config.smoke(data_dir=str(shared_data))
    got = ex.run_table1_row(cfg, "bmnist-2x20", 0, key=jax.random.key(3), progress=False,
                            cache_dir=ck, mid_layer=False)
    want = json.loads(want.read_text())
    for col in ("end_to_end", "lego", "random"):
        assert to_jsonable(got[col]["test"]) == want[col]["test"]
    assert to_jsonable(got["mf_variances"]) == want["mf_variances"]


@pytest.mark.datasets("mnist")
def test_a_step_cache_of_another_configuration_is_refused_naming_the_field(
        tmp_path, shared_data, monkeypatch):
    from layerlab.loop import CheckpointMismatchError

    cfg, ck, _ = _row_cache(tmp_path, shared_data)
    _no_training(monkeypatch)
    # each change reaches a cached step before any training, and is named
    for over, row_seed, step, field in [
            ({"dgl_lrs": (3e-4,)}, ("bmnist-2x20", 0), "lego_layer1", "lrs"),
            ({"e2e_wds": (0.0,)}, ("bmnist-2x20", 0), "end_to_end", "wds"),
            ({"e2e_epochs_sgd": 3}, ("bmnist-2x20", 0), "end_to_end", "epochs"),
            ({"eps_rel": 0.02}, ("bmnist-2x20", 0), "end_to_end", "eps_rel"),
            ({"n_bmnist": 120}, ("bmnist-2x20", 0), "end_to_end", "data_digest"),
            ({"max_width": 8}, ("bmnist-2x20", 0), "end_to_end", "init_params"),
            ({"init": "torch"}, ("bmnist-2x20", 0), "end_to_end", "init_params"),
            ({}, ("bmnist-2x20", 1), "end_to_end", "seed"),
            ({}, ("bmnist-3x20", 0), "end_to_end", "row")]:
        c = dataclasses.replace(cfg, **over)
        with pytest.raises(CheckpointMismatchError) as e:
            ex.run_table1_row(c, *row_seed, key=jax.random.key(3), progress=False,
                              cache_dir=ck, mid_layer=False)
        msg = str(e.value)
        assert str(ck) in msg and f"step {step!r}" in msg and f"\n  {field}: saved" in msg, msg
        assert "use a new cache folder" in msg
    with pytest.raises(CheckpointMismatchError, match="\n  key: saved"):  # another key
        ex.run_table1_row(cfg, "bmnist-2x20", 0, key=jax.random.key(4), progress=False,
                          cache_dir=ck, mid_layer=False)


@pytest.mark.datasets("mnist")
def test_a_step_cache_without_fingerprint_is_refused(tmp_path, shared_data, monkeypatch):
    # a cache written before fingerprints: its .json is the step's info alone
    from layerlab.loop import CheckpointMismatchError

    cfg, ck, _ = _row_cache(tmp_path, shared_data)
    _no_training(monkeypatch)
    f = ck / "end_to_end.json"
    saved = json.loads(f.read_text())
    f.write_text(json.dumps(saved.get("info", saved)))
    with pytest.raises(CheckpointMismatchError, match="'end_to_end' has no fingerprint"):
        ex.run_table1_row(cfg, "bmnist-2x20", 0, key=jax.random.key(3), progress=False,
                          cache_dir=ck, mid_layer=False)


@pytest.mark.datasets("mnist")
def test_lego_ablation_state_of_another_run_or_variant_is_refused(tmp_path, shared_data):
    from layerlab.loop import CheckpointMismatchError

    cfg = ex.Table1Config.smoke(data_dir=str(shared_data))
    state = tmp_path / "abl.json"
    kw = dict(key=jax.random.key(0), state_file=state, progress=False)
    res = ex.run_lego_ablation(cfg, "bmnist-2x20", {"base": {}}, **kw)
    again = ex.run_lego_ablation(cfg, "bmnist-2x20", {"base": {}}, **kw)  # nothing to run
    assert to_jsonable(again) == to_jsonable(res)
    with pytest.raises(CheckpointMismatchError, match="(?s)variant 'base'.*\n  eps_rel: saved"):
        ex.run_lego_ablation(cfg, "bmnist-2x20", {"base": {"eps_rel": 0.1}}, **kw)
    with pytest.raises(CheckpointMismatchError, match="(?s)state file.*\n  e2e_wds: saved"):
        ex.run_lego_ablation(dataclasses.replace(cfg, e2e_wds=(0.0,)), "bmnist-2x20",
                             {"base": {}}, **kw)
    state.unlink()  # a stop after the end-to-end net's file, before the state file's:
    e2e = ex.run_lego_ablation(cfg, "bmnist-2x20", {}, **kw)  # its summary is filled in
    assert to_jsonable(e2e["_e2e"]) == to_jsonable(res["_e2e"])  # (was left out)
    state.unlink()  # the end-to-end net alone, kept beside it, is checked too
    with pytest.raises(CheckpointMismatchError, match="(?s)end-to-end net.*\n  seed: saved"):
        ex.run_lego_ablation(cfg, "bmnist-2x20", {}, seed=1, **kw)
    state.with_suffix(".e2e.npz").write_bytes(b"")
    np.savez(state.with_suffix(".e2e.npz"), w0=np.zeros(1))  # written before fingerprints
    with pytest.raises(CheckpointMismatchError, match="no fingerprint"):
        ex.run_lego_ablation(cfg, "bmnist-2x20", {}, **kw)


def test_seed_list_runs_a_later_seed_alone_with_its_full_run_key(tmp_path, monkeypatch):
    # --seed-list 1: only seed 1's part, made with the key a full run gives seed 1
    # (fold_in(key, 1)); the row runner is stubbed (what it does with a key is tested above)
    from layerlab.loop import CheckpointMismatchError

    cfg = ex.Table1Config.smoke(seeds=2)
    calls = []

    reuse = []

    def fake_row(c, row, seed, *, key, progress, cache_dir, mid_layer, reuse_dirs):
        calls.append((row, seed))
        reuse.append(list(reuse_dirs))
        return {"row": row, "seed": seed, "width": c.width(row), "n_train": c.n_bmnist,
                "paper_scale": False, "end_to_end": {"test": 99.0}, "lego": {"test": 99.0},
                "random": {"test": 90.0}, "wall_s": 1.0, "device": "cpu",
                "config": dataclasses.asdict(c), "key": ex._digest(key)}

    monkeypatch.setattr(ex, "run_table1_row", fake_row)
    key = jax.random.key(0)
    rec = ex.run_table1(cfg, key=key, progress=False, parts_dir=tmp_path, seed_list=[1])
    assert calls == [("bmnist-2x20", 1)]
    assert sorted(p.name for p in tmp_path.glob("*.json")) == ["bmnist-2x20_seed1.json"]
    part = json.loads((tmp_path / "bmnist-2x20_seed1.json").read_text())
    assert part["seed"] == 1 and part["key"] == ex._digest(jax.random.fold_in(key, 1))
    assert next(r for r in rec.rows if r.name.startswith("BMNIST2k L=2")).seeds == 1
    for bad in ([], [-1], [True], [0.5]):
        with pytest.raises(ValueError, match="seed_list must be non-empty integers"):
            ex.run_table1(cfg, key=key, progress=False, parts_dir=tmp_path, seed_list=bad)
    # another seed under another grid into the same folder: refused before it trains (the
    # seed-1 part is checked though this run would not skip it), with the grids shown whole
    with pytest.raises(CheckpointMismatchError, match=r"(?s)bmnist-2x20_seed1\.json.*dgl_lrs: "
                                                      r"saved \[0\.001\], now \[0\.001, "
                                                      r"0\.003\]"):
        ex.run_table1(dataclasses.replace(cfg, dgl_lrs=(1e-3, 3e-3)), key=key, progress=False,
                      parts_dir=tmp_path, seed_list=[0])
    assert calls == [("bmnist-2x20", 1)]
    # the same grid: seed 0 runs, seed 1 is kept; --reuse-steps folders reach the row runner
    # as that (row, seed)'s step folder in each
    ex.run_table1(cfg, key=key, progress=False, parts_dir=tmp_path, seed_list=[0, 1],
                  reuse_steps=[tmp_path / "a", "b"])
    assert calls == [("bmnist-2x20", 1), ("bmnist-2x20", 0)]
    assert reuse == [[], [tmp_path / "a" / "bmnist-2x20_seed0",
                          pathlib.Path("b") / "bmnist-2x20_seed0"]]


@pytest.mark.datasets("mnist")
def test_a_part_of_another_configuration_or_key_is_refused(tmp_path, shared_data):
    # run_table1 skips a (row, seed) whose part exists: only if that part was run with this
    # configuration and key (else the old number would be merged into the new table)
    from layerlab.loop import CheckpointMismatchError

    cfg = ex.Table1Config.smoke(data_dir=str(shared_data))
    key = jax.random.key(0)
    ex.run_table1(cfg, key=key, progress=False, parts_dir=tmp_path)
    rec = ex.run_table1(dataclasses.replace(cfg, data_dir=str(shared_data) + "/", seeds=1),
                        key=key, progress=False, parts_dir=tmp_path)  # resumed: nothing run
    assert next(r for r in rec.rows if r.name.startswith("BMNIST2k L=2")).seeds == 1
    for c, k, field in [(dataclasses.replace(cfg, dgl_steps=5), key, "dgl_steps"),
                        (dataclasses.replace(cfg, n_bmnist=120), key, "n_train"),
                        (cfg, jax.random.key(1), "key")]:
        with pytest.raises(CheckpointMismatchError, match=f"(?s)bmnist-2x20_seed0.json.*\n  "
                                                          f"{field}: saved"):
            ex.run_table1(c, key=k, progress=False, parts_dir=tmp_path)


def test_next_lr_and_the_extension_rule():
    """``_extend_lr`` adds the top rate x the grid's top ratio while the pick is the top rate
    tried, at most ``n`` times; the selection runs over every rate tried (a tie keeps the
    base); a non-finite (or cached ``None``) loss never wins."""
    assert ex._next_lr((1e-4, 3e-4, 1e-3)) == 3.33333e-3 and ex._next_lr((1e-6, 1e-5)) == 1e-4
    assert ex._next_lr((0.1,)) == pytest.approx(0.1 * 10 ** 0.5)
    assert ex._next_lr((0.3, 0.1, 0.03)) == pytest.approx(0.9)  # order-free
    # a loss that falls until lr 8, then rises: scores of lr as (lr - 8)^2
    calls = []

    def train(k, lr):
        calls.append((k, lr))
        return f"p{lr:g}", {"grid": [[lr, 0.0]], "val": [(lr - 8.0) ** 2], "lr": lr, "wd": 0.0,
                            "wall_s": 1.0}

    base = {"grid": [[1.0, 0.0], [2.0, 0.0]], "val": [49.0, 36.0], "lr": 2.0, "wd": 0.0,
            "wall_s": 5.0}
    p, info = ex._extend_lr(5, (1.0, 2.0), "p2", base, "val", train)
    assert calls == [(1, 4.0), (2, 8.0), (3, 16.0)]  # 16 loses: the pick is inside again
    assert p == "p8" and info["lr"] == 8.0 and info["lr_extended"] == [4.0, 8.0, 16.0]
    assert info["grid"] == [[1.0, 0.0], [2.0, 0.0], [4.0, 0.0], [8.0, 0.0], [16.0, 0.0]]
    assert info["val"] == [49.0, 36.0, 16.0, 0.0, 64.0] and info["wall_s"] == 8.0
    calls.clear()
    p, info = ex._extend_lr(1, (1.0, 2.0), "p2", base, "val", train)  # the budget binds
    assert calls == [(1, 4.0)] and p == "p4" and info["lr_extended"] == [4.0]
    calls.clear()
    inner = dict(base, lr=1.0)
    assert ex._extend_lr(3, (1.0, 2.0), "p1", inner, "val", train) == ("p1", inner)
    assert calls == []  # an interior pick: nothing added
    tie, won = ex._merge_extension(base, {"grid": [[4.0, 0.0]], "val": [36.0], "lr": 4.0},
                                   "val")
    assert not won and tie["lr"] == 2.0
    nan, won = ex._merge_extension(base, {"grid": [[4.0, 0.0]], "val": [None], "lr": 4.0},
                                   "val")
    assert not won and nan["lr"] == 2.0 and nan["val"][-1] is None
    # a diverged grid, fresh (inf, NaN) or cached (1e308 for inf, None for NaN): a diverged
    # extension never wins against it, whichever of the two is cached
    for b_val, e_val in ((np.inf, 1e308), (1e308, np.inf), (np.nan, None), (None, 1e308)):
        _, won = ex._merge_extension(dict(base, val=[b_val]),
                                     {"grid": [[4.0, 0.0]], "val": [e_val], "lr": 4.0}, "val")
        assert not won, (b_val, e_val)
    # losses are compared at the 6 digits a cached step keeps: a resumed run (base cached,
    # rounded) picks what the uninterrupted one (both fresh) picks
    fresh = dict(base, val=[0.6951234])
    cached = dict(base, val=[0.695123])
    ext = {"grid": [[4.0, 0.0]], "val": [0.6951232], "lr": 4.0}
    assert ex._merge_extension(fresh, ext, "val")[1] is ex._merge_extension(cached, ext, "val")[1]
    assert ex._next_lr((1e-3, 1e-3, 3e-4)) == 3.33333e-3  # a repeated rate counts once
    with pytest.raises(ValueError, match=r"Table1Config: dgl_lr_extend must be >= 0, got -1"):
        ex.Table1Config.smoke(dgl_lr_extend=-1)
    with pytest.raises(TypeError, match=r"Table1Config: e2e_lr_extend must be an integer"):
        ex.Table1Config.smoke(e2e_lr_extend=1.5)


@pytest.mark.datasets("mnist")
def test_a_grid_extended_past_its_top_equals_the_wider_grid(tmp_path, shared_data):
    """``dgl_lr_extend`` / ``e2e_lr_extend`` on grids whose top is picked (rates far too small
    for 4 DGL steps / 2 SGD epochs) select what the grid with the added rate selects, with the
    same losses: the added runs use the same key, data order and validation data; a resumed
    run reuses the cached base and extension steps."""
    small = dict(data_dir=str(shared_data), dgl_lrs=(1e-6, 1e-5), e2e_sgd_lrs=(1e-3, 3e-3))
    cfg_x = ex.Table1Config.smoke(dgl_lr_extend=1, e2e_lr_extend=1, **small)
    cfg_w = ex.Table1Config.smoke(**{**small, "dgl_lrs": (1e-6, 1e-5, 1e-4),
                                     "e2e_sgd_lrs": (1e-3, 3e-3, 9e-3)})
    key = jax.random.key(3)
    ck = tmp_path / "steps"
    got = ex.run_table1_row(cfg_x, "bmnist-2x20", 0, key=key, progress=False, cache_dir=ck,
                            mid_layer=False)
    want = ex.run_table1_row(cfg_w, "bmnist-2x20", 0, key=key, progress=False)
    ge, we = got["end_to_end"], want["end_to_end"]
    assert ge["lr_extended"] == pytest.approx([9e-3])
    np.testing.assert_allclose(np.asarray(ge["grid"]), np.asarray(we["grid"]), rtol=1e-6)
    np.testing.assert_allclose(ge["val_mse"], we["val_mse"], rtol=1e-4)
    assert ge["lr"] == pytest.approx(we["lr"]) and ge["wd"] == we["wd"]
    assert abs(ge["test"] - we["test"]) <= 0.1
    for gl, wl in zip(got["lego"]["layers"], want["lego"]["layers"], strict=True):
        assert gl["lr_extended"] == pytest.approx([1e-4])
        np.testing.assert_allclose(np.asarray(gl["grid"]), np.asarray(wl["grid"]), rtol=1e-6)
        np.testing.assert_allclose(gl["val_dgl_best"], wl["val_dgl_best"], rtol=1e-4)
        assert gl["lr"] == pytest.approx(wl["lr"]) == pytest.approx(1e-4)
    assert abs(got["lego"]["test"] - want["lego"]["test"]) <= 0.1
    assert got["config"]["dgl_lr_extend"] == 1 and "dgl_lr_extend" in want["config"]
    names = sorted(p.stem for p in ck.glob("*.json"))
    assert names == ["end_to_end", "end_to_end_ext1", "lego_layer1", "lego_layer1_ext1",
                     "lego_layer2", "lego_layer2_ext1"], names
    # the same run again: every step (base grids and extensions) comes from the cache
    import layerlab.dgl.experiments as mod

    def fail(*a, **k):
        raise AssertionError("a cached step was recomputed")

    orig = mod._end_to_end, mod._dgl_layer_grid
    mod._end_to_end = mod._dgl_layer_grid = fail
    try:
        again = ex.run_table1_row(cfg_x, "bmnist-2x20", 0, key=key, progress=False,
                                  cache_dir=ck, mid_layer=False)
    finally:
        mod._end_to_end, mod._dgl_layer_grid = orig
    assert again["lego"]["test"] == got["lego"]["test"]
    assert again["end_to_end"]["test"] == got["end_to_end"]["test"]


@pytest.mark.datasets("mnist")
def test_an_ablation_reuses_the_protocols_steps_whose_inputs_it_did_not_change(
        tmp_path, shared_data, monkeypatch):
    """``reuse_dirs``: a run with the LEGO grid extended reuses the protocol's end-to-end run
    and layer 1's grid (same fingerprint), trains layer 1's added rate, and, because that
    rate wins (rates far too small for 4 steps), trains layer 2 afresh (its layers below
    changed): the part equals a fresh extended run's; a step of another fingerprint in the
    reuse folder is trained, not refused."""
    small = dict(data_dir=str(shared_data), dgl_lrs=(1e-6, 1e-5))
    key = jax.random.key(3)
    proto = tmp_path / "proto"
    ex.run_table1_row(ex.Table1Config.smoke(**small), "bmnist-2x20", 0, key=key,
                      progress=False, cache_dir=proto, mid_layer=False)
    cfg_x = ex.Table1Config.smoke(dgl_lr_extend=1, **small)
    want = ex.run_table1_row(cfg_x, "bmnist-2x20", 0, key=key, progress=False)
    trained = []
    grid, e2e = ex._dgl_layer_grid, ex._end_to_end

    def count(kind, fn):
        def f(*a, **k):
            trained.append((kind, tuple(k["lrs"]) if kind == "lego" else tuple(a[4])))
            return fn(*a, **k)
        return f

    monkeypatch.setattr(ex, "_dgl_layer_grid", count("lego", grid))
    monkeypatch.setattr(ex, "_end_to_end", count("e2e", e2e))
    got = ex.run_table1_row(cfg_x, "bmnist-2x20", 0, key=key, progress=False,
                            cache_dir=tmp_path / "abl", mid_layer=False, reuse_dirs=[proto])
    assert trained == [("lego", (1e-4,)), ("lego", (1e-6, 1e-5)), ("lego", (1e-4,))], trained
    assert got["end_to_end"]["reused_from"] == str(proto)
    # another run's steps are this part's but not this run's time: reported apart
    reused = got["end_to_end"]["wall_s"] + json.loads((proto / "lego_layer1.json").read_text())[
        "info"]["wall_s"]
    assert got["wall_s_reused_steps"] == pytest.approx(reused, rel=1e-4, abs=1e-4)
    assert "wall_s_loaded_steps" not in got
    l1, l2 = got["lego"]["layers"]
    assert l1["reused_from"] == str(proto) and l1["lr"] == pytest.approx(1e-4)
    assert "reused_from" not in l2
    for col in ("end_to_end", "lego", "random"):
        assert got[col]["test"] == want[col]["test"]
    for gl, wl in zip(got["lego"]["layers"], want["lego"]["layers"], strict=True):
        # a reused step's info is the cache's, rounded to 6 digits as a part stores it
        np.testing.assert_allclose(gl["val_dgl_best"], wl["val_dgl_best"], rtol=2e-6)
        np.testing.assert_allclose(np.asarray(gl["grid"]), np.asarray(wl["grid"]), rtol=1e-6)
    assert (tmp_path / "abl" / "end_to_end.npz").exists()  # copied in: a rerun needs no proto
    # a reuse folder that is not there (a typo, or the protocol's, removed with its part):
    # said, not silently hours of training; reuse without a cache folder: refused
    with pytest.warns(RuntimeWarning, match=r"the step folder .*nowhere to reuse does not exist"):
        ex._StepCache(tmp_path / "c", reuse=[tmp_path / "nowhere"])
    with pytest.raises(ValueError, match=r"reuse_dirs needs a cache_dir"):
        ex.run_table1_row(cfg_x, "bmnist-2x20", 0, key=key, progress=False,
                          reuse_dirs=[proto])
