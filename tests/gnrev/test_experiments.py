"""Tests for layerlab.gnrev.experiments: lr-sweep rules, the certificate rows, missing data."""
import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from layerlab import data as lldata
from layerlab.gnrev import experiments as ex


def test_lr_sweep_rules_pick_by_a_brute_force_rerun(key):
    """One vmapped sweep = separate runs per rate; rules pick the documented rate."""
    x = jax.random.normal(key, (32, 8))
    y = jax.random.randint(jax.random.key(1), (32,), 0, 3)
    params, frozen, P = ex.make_model(jax.random.key(2), 8, 1, 3, bottleneck=40,
                                      first_linear=False)
    arm = ex.Arm("sgd", optax.sgd, (1e-3, 0.1, 1e3))  # 1e3 diverges
    sw = ex.lr_sweep(arm, params, frozen, P, (x, y), steps=6, batch_size=None,
                     rule="largest_stable", key=key)
    assert not sw["stable"][2] and sw["stable"][:2].all() and sw["best"] == pytest.approx(0.1)
    # the vmapped run of rate 0.1 equals a separate run
    one = ex.lr_sweep(ex.Arm("sgd", optax.sgd, (0.1,)), params, frozen, P, (x, y), steps=6,
                      batch_size=None, rule="largest_stable", key=key)
    np.testing.assert_allclose(sw["loss"][:, 1], one["loss"][:, 0], rtol=1e-5)
    prog = ex.lr_sweep(arm, params, frozen, P, (x, y), steps=6, batch_size=None,
                       rule="progress", key=key)
    finite = np.where(prog["stable"], prog["final"], np.inf)
    assert prog["best"] == pytest.approx(float(arm.lrs[int(np.argmin(finite))]))
    with pytest.raises(ValueError, match="rule must be"):
        ex.lr_sweep(arm, params, frozen, P, (x, y), steps=2, batch_size=None, rule="best",
                    key=key)


def test_certificate_rows_and_diverged_rows():
    res = np.array([[0.5, 0.1, 0.9], [0.3, 0.2, 0.8]])
    rows = ex._cert_row("gn", res, np.array([[7, 8, 8], [8, 8, 8]]), 8)
    assert rows[0].ours == pytest.approx(0.4)
    assert rows[0].spread == pytest.approx(np.std([0.5, 0.3], ddof=1))
    assert rows[1].ours == pytest.approx(0.4) and rows[2].ours == 7.0
    bad = ex._row("x", [1.0, float("nan")])
    assert bad.ours is None and "1 of 2 seeds" in bad.note


def test_superconductivity_missing_gives_a_clear_error(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="superconductivity.*train.csv") as err:
        ex.load_regression("superconductivity", data_dir=str(tmp_path))
    assert "python -m layerlab.data download superconductivity" in str(err.value)
    # the loader's own error type and message, not a FileNotFoundError repeating its lines
    assert isinstance(err.value, lldata.DatasetNotFoundError)
    assert str(err.value).count("python -m layerlab.data download superconductivity") == 1
    # App. M with it missing stops before training anything (wine comes first in the list)
    trained = []
    monkeypatch.setattr(ex, "lr_sweep", lambda *a, **k: trained.append(1))
    cfg = dataclasses.replace(ex.RegressionConfig(), datasets=("wine", "superconductivity"))
    with pytest.raises(FileNotFoundError, match="superconductivity"):
        ex.run_appM(cfg, key=jax.random.key(0), progress=False, data_dir=str(tmp_path))
    assert trained == []


def test_largest_stable_rejects_a_rate_whose_loss_spikes_then_recovers(key):
    """§5.1 "did not cause the loss to diverge": a transient blow-up counts as divergence.

    Brute force: rerun each rate alone, read its peak/initial loss, apply the rule by hand.
    """
    x = jax.random.normal(key, (32, 8))
    y = jax.random.randint(jax.random.key(1), (32,), 0, 3)
    params, frozen, P = ex.make_model(jax.random.key(2), 8, 1, 3, bottleneck=40,
                                      first_linear=False)
    lrs = (1e-3, 3e-2, 1.0)
    arm = ex.Arm("adam", optax.adam, lrs)
    sw = ex.lr_sweep(arm, params, frozen, P, (x, y), steps=30, batch_size=None,
                     rule="largest_stable", key=key, peak=1.5)
    ratios, ok = [], []
    for lr in lrs:
        one = ex.lr_sweep(ex.Arm("adam", optax.adam, (lr,)), params, frozen, P, (x, y),
                          steps=30, batch_size=None, rule="largest_stable", key=key, peak=1.5)
        lt = one["loss"][:, 0]
        ratios.append(np.max(lt) / lt[0])
        ok.append(bool(np.all(np.isfinite(lt)) and np.max(lt) <= 1.5 * lt[0] and lt[-1] < lt[0]))
    np.testing.assert_allclose(sw["peak_ratio"], ratios, rtol=1e-4)
    assert list(sw["stable"]) == ok
    # the largest rate spikes above the bound yet ends below its initial loss: only the peak
    # bound rejects it
    assert sw["peak_ratio"][-1] > 1.5 and sw["loss"][-1, -1] < sw["loss"][0, -1]
    assert not sw["stable"][-1]
    assert sw["best"] == pytest.approx(max(lr for lr, o in zip(lrs, ok) if o))
    with pytest.raises(ValueError, match="peak must be > 1"):
        ex.lr_sweep(arm, params, frozen, P, (x, y), steps=2, batch_size=None,
                    rule="largest_stable", key=key, peak=1.0)


def test_minibatch_rate_that_diverges_in_the_full_run_is_replaced(tmp_path, monkeypatch):
    """A sweep-selected rate whose full run goes non-finite falls back to the next smaller
    rate of the grid, for every seed; runs are kept per (arm, rate, seed)."""
    calls = []

    def fake_train(cfg, arm, lr, prep, ks, *, progress, checkpoint_dir):
        calls.append((lr, ks))
        return {"loss": np.array([1.0, np.nan if (lr > 0.05 and ks == 1) else 0.5])}

    monkeypatch.setattr(ex, "_train_arm", fake_train)
    cfg = ex.MinibatchConfig.smoke()
    arm = ex.Arm("sgd", optax.sgd, (0.01, 0.1, 0.3))
    lr, runs, dropped = ex._train_stable(cfg, arm, 0.3, None, [0, 1], tmp_path, None, "fp",
                                         False)
    assert (lr, dropped) == (0.01, [0.3, 0.1])
    assert calls == [(0.3, 0), (0.3, 1), (0.1, 0), (0.1, 1), (0.01, 0), (0.01, 1)]
    assert all(np.isfinite(r["loss"]).all() for r in runs)
    # a second call (a resumed run) trains nothing
    assert ex._train_stable(cfg, arm, 0.3, None, [0, 1], tmp_path, None, "fp", False)[0] == 0.01
    assert len(calls) == 6
    # nothing smaller left: the diverged runs are returned as they are
    lr, runs, dropped = ex._train_stable(cfg, ex.Arm("sgd", optax.sgd, (0.3,)), 0.3, None,
                                         [1], tmp_path / "b", None, "fp", False)
    assert lr == 0.3 and dropped == [] and not np.isfinite(runs[0]["loss"]).all()


def test_app_j_decay_grid_keeps_the_step_a_contraction():
    """App. J's GN arms: every decay of APPJ_DECAYS with α·λ < 1 (decoupled decay θ ← θ −
    α(Δ + λθ)), plus Adam; at the authors' CIFAR-10 rate 1.0 the decay 1 is left out."""
    cpu = [a.weight_decay for a in ex.variants_config("appJ", "cpu").arms if a.name != "adam"]
    assert cpu == list(ex.APPJ_DECAYS) and max(cpu) * 0.2 < 1   # CPU GN rate 0.2
    paper = [(a.name, a.weight_decay) for a in ex.variants_config("appJ", "paper").arms]
    assert paper[-1][0] == "adam" and [w for _, w in paper[:-1]] == [
        w for w in ex.APPJ_DECAYS if w < 1.0]
    assert [n for n, _ in paper[:-1]] == [f"gn_wd{w:g}" for w in ex.APPJ_DECAYS if w < 1.0]


def test_paper_scale_variants_augment_cifar10_as_app_l():
    """App. L crops and resizes CIFAR-10's training batches: the paper-scale Fig. 5 / App. E-K
    configs do (as ``MinibatchConfig.paper``), the CPU scale and MNIST do not; their records
    are paper scale (Fig. 5's without the bottleneck)."""
    combos = [(a, sc, ds) for a in ("fig5", "appE", "appJ") for sc in ("paper", "cpu")
              for ds in ("cifar10", "mnist")]
    got = {c: ex.variants_config(*c).augment for c in combos}
    assert got == {c: "random_resized_crop" if c[1:] == ("paper", "cifar10") else None
                   for c in combos}
    # Fig. 5's paper net has no inverted bottleneck: its --paper config is paper scale
    assert ex._record_scale(ex.variants_config("fig5", "paper"), "fig5") == "paper"
    assert ex._record_scale(ex.variants_config("appE", "paper"), "appE") == "paper"
    assert ex._record_scale(ex.variants_config("appE", "paper"), "fig5") == "reduced"
    assert ex._record_scale(ex.variants_config("fig5", "cpu"), "fig5") == "reduced"
    assert ex._record_scale(ex.variants_config("fig5", "paper"), "appE") == "reduced"


def test_fixed_rate_falls_back_on_its_fallback_rates(tmp_path, monkeypatch):
    """A fixed rate (one ``lrs`` value, no sweep) with ``fallback_lrs``: an unstable full run
    moves every seed to the next smaller fallback (fig5's SGD at 0.01 was NaN in 2 of 3 seeds);
    a plain arm's dict, which names checkpoints and caches, does not change; the CPU Fig. 5 /
    App. E arms carry one-grid-step fallbacks, the other variants none."""
    calls = []

    def fake_train(cfg, arm, lr, prep, ks, *, progress, checkpoint_dir):
        calls.append((lr, ks))
        return {"loss": np.array([1.0, np.nan if (lr > 0.002 and ks == 1) else 0.5])}

    monkeypatch.setattr(ex, "_train_arm", fake_train)
    cfg = ex.MinibatchConfig.smoke()
    arm = ex.Arm("sgd", optax.sgd, (0.01,), fallback_lrs=(0.003, 0.001))
    assert ex._smaller_rates(arm, 0.01) == [0.003, 0.001]
    lr, runs, dropped = ex._train_stable(cfg, arm, 0.01, None, [0, 1], tmp_path, None, "fp",
                                         False)
    assert (lr, dropped) == (0.001, [0.01, 0.003])
    assert calls == [(0.01, 0), (0.01, 1), (0.003, 0), (0.003, 1), (0.001, 0), (0.001, 1)]
    assert ex._arm_dict(arm)["fallback_lrs"] == [0.003, 0.001]
    assert "fallback_lrs" not in ex._arm_dict(ex.Arm("sgd", optax.sgd, (0.01,)))
    fb = {a: {x.name: x.fallback_lrs for x in ex.variants_config(a, "cpu").arms}
          for a in ("fig5", "appE", "appK", "appI")}
    assert fb["fig5"] == fb["appE"] == {"gn": (0.1, 0.05), "adam": (3e-5, 1e-5),
                                        "sgd": (0.003, 0.001)}
    assert not any(v for a in ("appK", "appI") for v in fb[a].values())
    paper = {x.name: x.fallback_lrs for x in ex.variants_config("fig5", "paper").arms}
    assert paper == {"gn": (0.5, 0.25), "adam": (3e-5, 1e-5), "sgd": (0.03, 0.01)}
    # the finished-runs key ignores the fallbacks (they change no run): a rerun reuses runs
    cfg5 = ex.variants_config("fig5", "cpu")
    plain = dataclasses.replace(cfg5, arms=tuple(dataclasses.replace(a, fallback_lrs=())
                                                 for a in cfg5.arms))
    assert ex._fingerprint(cfg5) != ex._fingerprint(plain)
    assert ex._runs_fingerprint(cfg5, "k") == ex._runs_fingerprint(plain, "k")
    assert ex._runs_fingerprint(cfg5, "k") != ex._runs_fingerprint(cfg5, "other key")
    with pytest.raises(ValueError, match="fallback_lrs must be positive and below"):
        ex.Arm("sgd", optax.sgd, (0.01,), fallback_lrs=(0.03,))
    with pytest.raises(ValueError, match="second phase"):
        ex.Arm("a", optax.adam, (1e-4,), then=arm, switch_epoch=1)


def test_loss_climb_and_unstable_rule_against_hand_values():
    """``loss_climb`` = (last epoch mean - lowest epoch mean) / (first loss - lowest epoch
    mean), by hand on a 4-epoch curve; ``run_unstable`` flags it above ``max_climb``."""
    # epochs of 2 steps: means 3.0, 1.5, 2.0, 2.5 (first step 4.0, lowest mean 1.5)
    loss = np.array([4.0, 2.0, 1.0, 2.0, 2.0, 2.0, 2.5, 2.5])
    assert ex.loss_climb(loss, 4) == pytest.approx((2.5 - 1.5) / (4.0 - 1.5))
    assert ex.run_unstable(loss, 4, 0.1) and not ex.run_unstable(loss, 4, 0.5)
    assert not ex.run_unstable(loss, 4, None)
    # a run ending at its lowest epoch: 0; one ending a hair above (MNIST-like tiny losses)
    assert ex.loss_climb(np.array([2.3, 1.0, 0.5, 0.2]), 2) == 0.0
    assert ex.loss_climb(np.array([2.3, 0.0, 1.4e-3, 1.4e-3, 1.6e-3, 1.6e-3]), 3) == (
        pytest.approx(2e-4 / (2.3 - 1.4e-3)))
    # a loss that only rises never went below its start: unstable; constant: stable
    assert ex.loss_climb(np.array([2.3, 5.0, 10.0, 50.0]), 2) == np.inf
    assert ex.loss_climb(np.full(4, 2.3), 2) == 0.0
    with pytest.raises(ValueError, match="at least one entry per epoch"):
        ex.loss_climb(np.array([3.0, 1.0, 2.0]), 10)
    assert ex.loss_climb(np.array([1.0, np.nan]), 1) == np.inf
    assert ex.run_unstable(np.array([1.0, np.inf]), 1, None)
    with pytest.raises(ValueError, match="max_climb must be None or > 0"):
        ex.MinibatchConfig(max_climb=0.0)


def test_minibatch_rate_whose_loss_climbs_back_is_replaced(tmp_path, monkeypatch):
    """§5.2's 'without instabilities' beyond NaN: a finite full run whose training loss climbs
    back (GN 0.1 under augmentation did: epoch means 1.86 -> 2.38) moves the arm to the next
    smaller rate; with ``max_climb=None`` it is kept.  The cached result of a run made before
    the rule is recomputed (``_stale_instability``) while a stable one is reused."""
    calls = []

    def fake_train(cfg, arm, lr, prep, ks, *, progress, checkpoint_dir):
        calls.append((lr, ks))
        climb = [4.0, 2.0, 1.9, 2.5] if lr > 0.05 else [4.0, 2.0, 1.9, 1.8]
        return {"loss": np.array(climb)}

    monkeypatch.setattr(ex, "_train_arm", fake_train)
    cfg = dataclasses.replace(ex.MinibatchConfig.smoke(), epochs=3)  # means 3, 1.9, 2.5
    arm = ex.Arm("gn", optax.sgd, (0.05, 0.1))
    # the sweep hands back a float32 rate: its grid twin 0.1 is not "the next smaller rate"
    lr, runs, dropped = ex._train_stable(cfg, arm, float(np.float32(0.1)), None, [0, 1],
                                         tmp_path / "two", None, "fp", False)
    assert (lr, len(dropped), len(runs)) == (0.05, 1, 2)
    assert dropped[0] == pytest.approx(0.1)
    # seed 0 at 0.1 climbed: seed 1 is not trained at 0.1 at all
    assert [(pytest.approx(r), k) for r, k in calls] == [(0.1, 0), (0.05, 0), (0.05, 1)]
    lr, runs, dropped = ex._train_stable(cfg, arm, 0.1, None, [0], tmp_path, None, "fp", False)
    assert (lr, dropped) == (0.05, [0.1])
    off = dataclasses.replace(cfg, max_climb=None)
    assert ex._train_stable(off, arm, 0.1, None, [0], tmp_path, None, "fp", False)[0] == 0.1
    cfg1 = dataclasses.replace(cfg, arms=(arm,))
    old = {"arms": {"gn": {"lr": 0.1, "seeds": [fake_train(0, 0, 0.1, 0, 0, progress=0,
                                                             checkpoint_dir=0)]}}}
    assert ex._stale_instability(cfg1, old)
    assert not ex._stale_instability(dataclasses.replace(cfg1, max_climb=None), old)
    assert not ex._stale_instability(cfg1, {"arms": {"gn": {"lr": 0.05, "seeds": runs}}})
    # max_climb is not in the default config's fingerprint (run_minibatch keys the runs'
    # folder with it at the default)
    assert "max_climb" not in ex._cfg_dict(ex.MinibatchConfig())
    assert "max_climb" in ex._cfg_dict(off)


def test_init_bottleneck_gives_a_reduced_net_the_papers_variance_and_scale(key):
    """``init_w_scale``: a d'=64 net drawn with d'=4000's Xavier variance has that variance
    (closed form 2 g^2 / (d'+d/2), g^2 = 2) and starts at the wide net's output scale; with
    its own variance it starts far larger."""
    d, depth, wide = 200, 4, 4000
    s = ex.init_w_scale(d, 64, wide)
    np.testing.assert_allclose(s, np.sqrt((64 + 100) / (wide + 100)), rtol=1e-12)
    p, _, _ = ex.make_model(key, d, depth, 10, bottleneck=64, first_linear=False, w_scale=s)
    w = np.asarray(p["w1"], np.float64)
    np.testing.assert_allclose(w.var(), 2 * 2.0 / (wide + d // 2), rtol=0.05)

    from layerlab.gnrev import revmlp_apply
    x = jax.random.normal(jax.random.fold_in(key, 7), (256, d))

    def gain(bottleneck, w_scale):
        p, fr, _ = ex.make_model(key, d, depth, 10, bottleneck=bottleneck, first_linear=False,
                                 w_scale=w_scale)
        return float(np.linalg.norm(revmlp_apply(p, fr, x)) / np.linalg.norm(x))

    g_wide, g_scaled, g_own = gain(wide, 1.0), gain(64, s), gain(64, 1.0)
    np.testing.assert_allclose(g_scaled, g_wide, rtol=0.15)
    assert g_own > 1.5 * g_wide
    assert ex.init_w_scale(d, 64, None) == 1.0
    assert ex.init_w_scale(d, None, 100) == 1.0  # no bottleneck: d' = d/2 = 100
    with pytest.raises(ValueError, match="init_bottleneck"):
        ex.init_w_scale(d, 64, 0)


def _synthetic(monkeypatch, seed, n, d, C, *, n_test):
    """Random ``Prepared`` data served by ``load_classification`` for the test's duration."""
    rng = np.random.default_rng(seed)
    prep = ex.Prepared(rng.normal(size=(n, d)).astype(np.float32), rng.integers(0, C, n),
                       rng.normal(size=(n_test, d)).astype(np.float32),
                       rng.integers(0, C, n_test), C, "synthetic")
    monkeypatch.setattr(ex, "load_classification", lambda *a, **k: prep)
    return prep


_FIG1_ARMS = (ex.Arm("adam", optax.adam, (1e-3, 1e-2)), ex.Arm("sgd", optax.sgd, (0.1,)),
              ex.Arm("gn", ex.GaussNewton(pinv=ex.EXACT_PINV, first_linear=False), (0.1, 0.5)))


def test_fig1_init_bottleneck_sets_the_initial_loss(key, monkeypatch):
    """``FullBatchConfig.init_bottleneck``: the full-batch run's loss before any update equals
    the cross-entropy of a model drawn directly with ``init_w_scale``'s factor (and differs
    from the model's own-variance start); the CIFAR-10 CPU preset uses the paper's d'."""
    # the shapes, arms and steps of test_fig1_checkpoint_dir_resumes_per_seed_and_arm below:
    # that test then reuses this run's compiled programs
    d, n, C, depth, bn = 20, 12, 3, 2, 16
    prep = _synthetic(monkeypatch, 0, n, d, C, n_test=6)
    cfg = ex.FullBatchConfig(n_train=n, depth=depth, bottleneck=bn, init_bottleneck=2000,
                             steps=4, arms=_FIG1_ARMS, scale_note="test")
    rec = ex.run_fig1(cfg, key=key, progress=False)
    s = ex.init_w_scale(d, bn, 2000)
    assert s < 0.2

    def loss0(w_scale):
        ks = ex._seed_keys(key, 1)[0]
        p, fr, P = ex.make_model(ks, d, depth, C, bottleneck=bn, first_linear=False,
                                 w_scale=w_scale)
        return float(ex.revmlp_loss(p, fr, P, (prep.x_train, prep.y_train))[0])

    got = rec.extra["curves"]["adam"]["loss_mean"][0]
    np.testing.assert_allclose(got, loss0(s), rtol=1e-4)
    assert abs(loss0(1.0) - got) > 1e-3 * got
    c = ex.FullBatchConfig.cifar_cpu()
    assert (c.dataset, c.depth, c.init_bottleneck) == ("cifar10", 6, 8000)
    assert c.bottleneck + 1 >= c.n_train  # every ReLU block's rank bound reaches n: exact


def test_cifar_cpu_minibatch_config_is_full_data_at_reduced_width():
    """The CPU CIFAR-10 mini-batch preset: the whole training and test sets and the paper's 6
    blocks, reduced in d' and batch so that every block's rank bound d'+1 reaches the batch
    (an exact right inverse is possible), the paper's d'=8000 init variance; not paper scale."""
    m = ex.MinibatchConfig.cifar_cpu()
    assert (m.dataset, m.n_train, m.n_test, m.depth, m.init_bottleneck) == (
        "cifar10", None, None, 6, 8000)
    assert m.bottleneck + 1 >= m.batch_size
    assert not m.is_paper_scale and "full data" in m.scale_note
    # App. L's augmentation by default (the paper's CIFAR-10 protocol); None turns it off
    assert m.augment == "random_resized_crop" and "augmented as App. L" in m.scale_note
    assert ex.MinibatchConfig.cifar_cpu(None).augment is None
    two = ex.MinibatchConfig.cifar_cpu(seeds=2)
    assert two.seeds == 2 and "2 seeds" in two.scale_note and "1 seed" not in two.scale_note


def test_fig1_checkpoint_dir_resumes_per_seed_and_arm(key, monkeypatch, tmp_path):
    """``run_fig1(checkpoint_dir=...)``: every (seed, arm) sweep is kept, so a 2-seed run after
    a 1-seed run trains only seed 1, and its record equals an uninterrupted 2-seed run's."""
    d, n, C = 20, 12, 3
    _synthetic(monkeypatch, 1, n, d, C, n_test=6)
    cfg = ex.FullBatchConfig(n_train=n, depth=2, bottleneck=16, steps=4, arms=_FIG1_ARMS,
                             seeds=2,
                             scale_note="test")
    whole = ex.run_fig1(cfg, key=key, progress=False)
    calls = []
    real = ex._fig1_sweep
    monkeypatch.setattr(ex, "_fig1_sweep", lambda c, arm, ks, *a: (
        calls.append(arm.name), real(c, arm, ks, *a))[1])
    ex.run_fig1(dataclasses.replace(cfg, seeds=1), key=key, progress=False,
                checkpoint_dir=tmp_path)
    assert calls == ["adam", "sgd", "gn"]
    resumed = ex.run_fig1(cfg, key=key, progress=False, checkpoint_dir=tmp_path)
    assert calls == ["adam", "sgd", "gn"] * 2  # seed 1 only
    for a, b in zip(whole.rows, resumed.rows, strict=True):
        assert a.name == b.name
        if a.ours is not None:
            np.testing.assert_allclose(b.ours, a.ours, rtol=1e-5, err_msg=a.name)
    assert [c.holds for c in whole.claims] == [c.holds for c in resumed.claims]
    assert resumed.wall_s > 0
    t = time.perf_counter()
    again = ex.run_fig1(cfg, key=key, progress=False, checkpoint_dir=tmp_path)
    spent = time.perf_counter() - t
    assert calls == ["adam", "sgd", "gn"] * 2  # nothing retrained
    # wall_s = every kept piece's own time + this call's data loading (at most the call)
    kept = list(tmp_path.glob("fig1_*/*.pkl"))
    pieces = sum(ex._load(f)["wall_s"] for f in kept)
    assert len(kept) == 6 and pieces > 0
    assert pieces <= again.wall_s <= pieces + spent


def _fake_variant_result(curves: dict[str, list[float]]) -> dict:
    arms = {}
    for name, c in curves.items():
        c = np.asarray(c, np.float64)
        arms[name] = {"lr": 0.1, "diverged_lrs": [], "sweep": None, "seeds": [{
            "eval_train_loss_full": c, "eval_test_loss": c + 0.5,
            "eval_test_accuracy": np.full_like(c, 0.3)}]}
    return {"arms": arms, "config": {}, "steps_per_epoch": 4, "wall_s": 1.0}


def test_variant_saturation_claim_needs_a_loss_that_falls_first():
    """A diverging GN arm is not 'saturating'; App. I's claim covers the rates that train."""
    cfg = ex.variants_config("appI", "smoke")
    sat = "saturates early"
    res = _fake_variant_result({"gn_lr0.05": [4, 2, 1.9, 1.85], "gn_lr0.1": [4, 2, 1.95, 1.9],
                                "gn_lr0.2": [4, 8, 20, 50], "adam": [4, 3, 2, 1]})
    rec = ex.run_variants(cfg, "appI", key=None, result=res)
    (c,) = [c for c in rec.claims if sat in c.claim]
    assert c.holds is True and "gn_lr0.2" not in c.evidence and "gn_lr0.05" in c.evidence
    res = _fake_variant_result({"gn_lr0.05": [4, 3, 2, 1], "gn_lr0.1": [4, 2, 1.95, 1.9],
                                "adam": [4, 3, 2, 1]})
    (c,) = [c for c in ex.run_variants(cfg, "appI", key=None, result=res).claims
            if sat in c.claim]
    assert c.holds is False  # gn_lr0.05 gains 1 in epoch 1 and 2 afterwards
    cfg5 = ex.variants_config("fig5", "smoke")
    res = _fake_variant_result({"gn": [4, 8, 20, 50], "adam": [4, 3, 2, 1],
                                "sgd": [4, 3.5, 3, 2.5]})
    (c,) = [c for c in ex.run_variants(cfg5, "fig5", key=None, result=res).claims
            if sat in c.claim]
    assert c.holds is False  # diverging, not saturating
    assert rec.artifact == "appI"  # the paper's dataset (CIFAR-10) or a smoke run: no suffix


def test_fig5_decides_both_halves_of_its_sentence():
    """§5.3: "GN leads to an early saturation of the loss, which instead does not appear in Adam
    and SGD" -- GN's half and the contrast, by the same rule (epoch-1 drop vs the rest)."""
    cfg5 = ex.variants_config("fig5", "smoke")
    contrast = "does not appear in Adam and SGD"

    def decide(curves):
        cl = ex.run_variants(cfg5, "fig5", key=None, result=_fake_variant_result(curves)).claims
        return {("gn" if "GN's training" in c.claim else "contrast"): c for c in cl
                if "saturat" in c.claim}

    # GN drops 3 then 0.5 (saturates); Adam 1 then 2, SGD 0.5 then 1.5: the paper's picture
    c = decide({"gn": [4, 1, 0.5], "adam": [4, 3, 1], "sgd": [4, 3.5, 2]})
    assert c["gn"].holds is True and c["contrast"].holds is True
    assert contrast in c["contrast"].claim
    assert c["contrast"].evidence == ("adam training loss drop: epoch 1 1, epochs 2-2 2; sgd "
                                      "training loss drop: epoch 1 0.5, epochs 2-2 1.5")
    # SGD saturating too (drop 2 then 0.5) breaks the contrast, not GN's half
    c = decide({"gn": [4, 1, 0.5], "adam": [4, 3, 1], "sgd": [4, 2, 1.5]})
    assert c["gn"].holds is True and c["contrast"].holds is False
    ok, ev = ex.early_saturation({"a": [3.0, 1.0, 0.5], "b": [3.0, 3.0, 1.0]})
    assert not ok and ev == ("a training loss drop: epoch 1 2, epochs 2-2 0.5; b training loss "
                             "drop: epoch 1 0, epochs 2-2 2")
    assert ex.fig5_contrast_claim({"adam": [4, 3, 1]}).claim.startswith(
        "the early saturation does not appear in Adam (")
    # a diverged arm, or one that rises and never recovers, is not "free of saturation"
    assert ex.fig5_contrast_claim({"adam": [4, 3, 1], "sgd": [4, np.nan, np.nan]}).holds is False
    assert ex.fig5_contrast_claim({"sgd": [4, 8, 50]}).holds is False
    assert ex.fig5_contrast_claim({"sgd": [4, 3, 2]}).holds is False    # equal gains: not less
    with pytest.raises(ValueError, match="curves is empty"):
        ex.fig5_contrast_claim({})


def test_fig5_record_redecided_with_the_contrast_from_its_own_curves(tmp_path):
    """The committed Fig. 5 record carries the contrast decided from its extra.curves, and the
    re-decision is idempotent."""
    import json
    import pathlib
    import shutil

    from reproduce._gnrev_redecide_fig5 import redecide

    src = pathlib.Path(__file__).resolve().parents[2] / "results" / "gnrev" / "fig5.json"
    r = json.loads(src.read_text())
    curves = {a: r["extra"]["curves"][a]["train_loss"] for a in ("adam", "sgd")}
    want = ex.fig5_contrast_claim(curves)
    (got,) = [c for c in r["claims"] if c["claim"] == want.claim]
    assert (got["holds"], got["evidence"]) == (want.holds, want.evidence)
    dst = tmp_path / "fig5.json"
    shutil.copy(src, dst)
    redecide(str(dst))
    assert json.loads(dst.read_text()) == r


def test_appM_minibatch_rate_that_diverges_in_the_full_run_is_replaced(monkeypatch):
    """App. M: a mini-batch rate that passes the one-epoch sweep but whose full run goes
    non-finite is replaced by the next smaller rate of the grid (per seed), and the record
    says which; the kept run is finite."""
    import dataclasses

    real_sweep = ex.lr_sweep

    def sweep(arm, *a, batch_size=None, **kw):
        out = real_sweep(arm, *a, batch_size=batch_size, **kw)
        if batch_size is not None and arm.name == "sgd":
            out = dict(out, best=1e6)  # a rate that cannot survive 2 epochs of SGD on MSE
        return out

    monkeypatch.setattr(ex, "lr_sweep", sweep)
    cfg = dataclasses.replace(ex.RegressionConfig.smoke(), sgd_lrs=(1e-2, 1e6))
    rec = ex.run_appM(cfg, key=jax.random.key(0), progress=False)
    assert rec.extra["mb_rates_replaced"] == {"wine": {"gn": [], "adam": [], "sgd": [(0, 1e6)]}}
    by = {r.name: r for r in rec.rows}
    assert by["wine: sgd learning rates (mini-batch)"].ours == pytest.approx(1e-2)
    assert np.isfinite(by["wine mini-batch: sgd final test MSE"].ours)
    assert "wine sgd seed 0: 1e+06" in rec.note and rec.note.count("seed 0: ") == 1


def test_a_diverged_pick_past_the_grid_falls_back_to_the_next_rate_tried():
    """A sweep pick past the grid's top (an extended rate) whose full run diverges is replaced
    by the next smaller rate the sweep tried, not by the grid's top (App. M's SGD seed 2:
    1.11 fell to 0.1 with 0.333 tried and stable)."""
    import optax

    arm = ex.Arm("sgd", optax.sgd, (0.01, 0.1))
    assert ex._smaller_rates(arm, 1.11111, (0.333333, 1.11111, 3.7037)) == [0.333333, 0.1, 0.01]
    assert ex._smaller_rates(arm, 1.11111) == [0.1, 0.01]
    assert ex._smaller_rates(arm, float(np.float32(0.1))) == [0.01]


def test_appM_diverged_pick_past_the_grid_reruns_at_the_next_rate_tried(monkeypatch):
    """App. M wiring of the rule above: the mini-batch sweep's pick past the grid (stubbed:
    1e6, with 0.03 tried before it) diverges in the full run and is replaced by 0.03, the next
    rate the sweep tried, not by the grid's top 1e-2."""
    import dataclasses

    real_sweep = ex.lr_sweep

    def sweep(arm, *a, batch_size=None, **kw):
        out = real_sweep(arm, *a, batch_size=batch_size, **kw)
        if batch_size is not None and arm.name == "sgd":
            out = dict(out, best=1e6, extended=[0.03, 1e6], at_edge=True)
        return out

    monkeypatch.setattr(ex, "lr_sweep", sweep)
    cfg = dataclasses.replace(ex.RegressionConfig.smoke(), sgd_lrs=(1e-3, 1e-2))
    rec = ex.run_appM(cfg, key=jax.random.key(0), progress=False)
    assert rec.extra["mb_rates_replaced"]["wine"]["sgd"] == [(0, 1e6)]
    by = {r.name: r for r in rec.rows}
    assert by["wine: sgd learning rates (mini-batch)"].ours == pytest.approx(0.03)
    assert np.isfinite(by["wine mini-batch: sgd final test MSE"].ours)


def test_stale_instability_knows_the_rates_tried_past_the_grid():
    """A kept mini-batch result whose runs are unstable at the grid's bottom pick is stale when
    the sweep tried a rate below the grid (a fresh run would fall back to it)."""
    import optax

    arm = ex.Arm("sgd", optax.sgd, (0.01, 0.1))
    cfg = dataclasses.replace(ex.MinibatchConfig.smoke(), arms=(arm,))
    bad = {"loss": np.full(4 * cfg.epochs, np.nan)}  # a non-finite run: unstable
    res = {"arms": {"sgd": {"lr": 0.01, "seeds": [bad], "sweep": {"extended": [0.00333]}}}}
    assert ex._stale_instability(cfg, res)
    res["arms"]["sgd"]["sweep"] = {"extended": []}
    assert not ex._stale_instability(cfg, res)


def test_appM_sweeps_extend_past_a_grid_edge_and_say_so():
    """App. M's rate sweeps go past a grid edge they picked (they stopped there: every
    full-batch pick of the committed 3-seed record was its grid's largest rate), and the rate
    rows name the extra rates and whether the pick is still at the edge."""
    import dataclasses

    cfg = dataclasses.replace(ex.RegressionConfig.smoke(), adam_lrs=(1e-5, 3e-5),
                              sweep_extend=1)
    rec = ex.run_appM(cfg, key=jax.random.key(0), progress=False)
    by = {r.name: r for r in rec.rows}
    fb = by["wine: adam learning rates (full batch)"]
    assert fb.ours == pytest.approx(9e-5)  # 3e-5 * 3 (the grid's ratio), stable in 5 steps
    assert "extended by up to 1 rates" in fb.note and "extra rates tried: 9e-05" in fb.note
    assert "still at the edge of the rates tried in 1 seed(s)" in fb.note
    mb = by["wine: adam learning rates (mini-batch)"]  # tiny rates: the top makes most progress
    assert mb.ours == pytest.approx(9e-5) and "extra rates tried: 9e-05" in mb.note
    gn = by["wine: gn learning rates (full batch)"].note  # one rate: nothing to extend
    assert "extended" not in gn and "extra rates" not in gn and "edge" not in gn


def test_fig4_ntk_change_is_scale_free_and_the_frobenius_rate_is_listed_beside_it():
    """Fig. 4a's per-epoch NTK change is 1 - cos between consecutive kernels (the authors'
    cosine, Fort et al.'s kernel distance): a kernel that only grows scores 0 there and its
    growth shows in the relative Frobenius change and the size row (numpy float64 route)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((6, 4))
    k0 = a @ a.T
    b = a + 0.5 * rng.standard_normal((6, 4))
    k2 = b @ b.T
    grow = {"ntk": np.stack([k0, 3.0 * k0, 3.0 * k0])}       # pure growth, then still
    turn = {"ntk": np.stack([k0, k0, k2])}                    # same size, new shape at e=2
    res = {"arms": {"grow": {"seeds": [grow]}, "turn": {"seeds": [turn]}}}
    al, ch, rel, sc = ex._ntk_series(res, "grow")
    np.testing.assert_allclose(al[0], [1, 1, 1], atol=1e-12)
    np.testing.assert_allclose(ch[0], [0, 0], atol=1e-12)
    np.testing.assert_allclose(rel[0], [2.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(sc[0], [1, 3, 3], atol=1e-12)
    al, ch, rel, sc = ex._ntk_series(res, "turn")
    cos = np.sum(k0 * k2) / (np.linalg.norm(k0) * np.linalg.norm(k2))
    np.testing.assert_allclose(ch[0], [0.0, 1.0 - cos], atol=1e-12)
    np.testing.assert_allclose(al[0, -1], cos, rtol=1e-12)
    np.testing.assert_allclose(rel[0, 1], np.linalg.norm(k2 - k0) / np.linalg.norm(k0),
                               rtol=1e-12)
    assert 1.0 - cos > 1e-3


def test_lr_sweep_extends_past_an_edge_pick(key):
    """extend: a pick at the grid's top is swept past (the grid's step ratio) until it is
    bracketed or ``extend`` rates are added; the extra rates' losses equal their runs inside
    one sweep of the whole extended grid, and the pick is the rule's over all of them."""
    x = jax.random.normal(key, (32, 8))
    y = jax.random.randint(jax.random.key(1), (32,), 0, 3)
    params, frozen, P = ex.make_model(jax.random.key(2), 8, 1, 3, bottleneck=40,
                                      first_linear=False)
    kw = dict(steps=6, batch_size=None, rule="progress", key=key)
    arm = ex.Arm("sgd", optax.sgd, (1e-3, 1e-2))  # both far too small: the top is picked
    plain = ex.lr_sweep(arm, params, frozen, P, (x, y), **kw)
    assert plain["best"] == pytest.approx(1e-2) and plain["at_edge"] and not plain["extended"]
    sw = ex.lr_sweep(arm, params, frozen, P, (x, y), extend=2, **kw)
    assert sw["extended"] == pytest.approx([0.1, 1.0])
    whole = ex.lr_sweep(ex.Arm("sgd", optax.sgd, (1e-3, 1e-2, 0.1, 1.0)), params, frozen, P,
                        (x, y), **kw)
    np.testing.assert_allclose(sw["loss"], whole["loss"], rtol=1e-5)
    assert sw["best"] == whole["best"] and sw["at_edge"] == whole["at_edge"]
    assert jax.tree.leaves(sw["state"].params)[0].shape[0] == 4  # one run per rate swept
    # largest_stable (§5.1): the top rate is stable, so the sweep goes on until a rate
    # diverges; the pick is the largest stable one of the extended grid, as one whole sweep's
    kw["rule"] = "largest_stable"
    st = ex.lr_sweep(ex.Arm("sgd", optax.sgd, (0.1, 1.0)), params, frozen, P, (x, y),
                     extend=4, **kw)
    whole = ex.lr_sweep(ex.Arm("sgd", optax.sgd, (0.1, 1.0, *st["extended"])), params, frozen,
                        P, (x, y), **kw)
    assert st["extended"] and st["extended"][0] == pytest.approx(10.0)
    assert st["best"] == whole["best"] and not st["at_edge"]
    assert not whole["stable"][-1]  # the last rate added diverged: the pick is bracketed
    np.testing.assert_allclose(st["loss"], whole["loss"], rtol=1e-5)
    # a largest-stable pick at the grid's bottom is not swept below (it cannot change)
    low = ex.lr_sweep(ex.Arm("sgd", optax.sgd, (1.0, 10.0)), params, frozen, P, (x, y),
                      extend=2, **kw)
    assert low["best"] == pytest.approx(1.0) and low["stable"][0] and not low["stable"][1]
    assert low["extended"] == []


def test_lr_sweep_stopped_mid_way_resumes_from_its_checkpoint(key, tmp_path, monkeypatch):
    """checkpoint_dir: a sweep stopped after its first checkpoint resumes there (the steps
    before it are not retrained) and gives the uninterrupted sweep's losses and pick."""
    x = jax.random.normal(key, (48, 8))
    y = jax.random.randint(jax.random.key(1), (48,), 0, 3)
    params, frozen, P = ex.make_model(jax.random.key(2), 8, 1, 3, bottleneck=40,
                                      first_linear=False)
    arm = ex.Arm("sgd", optax.sgd, (1e-2, 0.1, 1.0))
    kw = dict(steps=12, batch_size=16, rule="progress", key=key)
    whole = ex.lr_sweep(arm, params, frozen, P, (x, y), **kw)
    real_fit, seen = ex.fit, []

    class Stop(Exception):
        pass

    def stopping_fit(*a, **k):  # the first call stops after its first checkpoint (step 4)
        ck = k["checkpoint"]  # every period here (the default: at most one a minute)
        assert ck is None or ck.min_interval_s == 0

        def cb(t, state, metrics):
            seen.append(t)
            if t >= 4 and len(seen) < 100:
                raise Stop
        return real_fit(*a, **k, callback=cb)

    monkeypatch.setattr(ex, "fit", stopping_fit)
    with pytest.raises(Stop):
        ex.lr_sweep(arm, params, frozen, P, (x, y), checkpoint_dir=tmp_path,
                    checkpoint_every=4, checkpoint_min_interval_s=0, **kw)
    assert (tmp_path / "lrs_0.01_0.1_1").is_dir()
    seen.extend([0] * 100)  # the callback now only records
    first = len(seen)
    sw = ex.lr_sweep(arm, params, frozen, P, (x, y), checkpoint_dir=tmp_path,
                     checkpoint_every=4, checkpoint_min_interval_s=0, **kw)
    assert seen[first:] and min(seen[first:]) > 4  # resumed at step 4, not from 0
    np.testing.assert_allclose(sw["loss"], whole["loss"], rtol=1e-6)
    assert sw["best"] == whole["best"]
    # the folder now holds a finished sweep of other data: it is replaced, not resumed
    other = ex.lr_sweep(arm, params, frozen, P, (2 * x, y), **kw)
    with pytest.warns(RuntimeWarning, match="not this sweep's"):
        again = ex.lr_sweep(arm, params, frozen, P, (2 * x, y), checkpoint_dir=tmp_path,
                            checkpoint_every=4, checkpoint_min_interval_s=0, **kw)
    np.testing.assert_allclose(again["loss"], other["loss"], rtol=1e-6)
    # by default the sweep asks fit for at most one save a minute (the loop's tests check
    # what fit does with it)
    got = []

    def spy_fit(*a, **k):
        got.append(k["checkpoint"])
        return real_fit(*a, **k)

    monkeypatch.setattr(ex, "fit", spy_fit)
    ex.lr_sweep(arm, params, frozen, P, (3 * x, y), checkpoint_dir=tmp_path / "dflt",
                checkpoint_every=4, **kw)
    assert [(c.every, c.max_to_keep, c.min_interval_s) for c in got] == [(4, 1, 60.0)]
    assert ex.SWEEP_CHECKPOINT_MIN_INTERVAL_S == 60.0


def test_arm_run_stopped_while_probing_resumes_from_the_last_probed_epoch(key, tmp_path,
                                                                        monkeypatch):
    """loop.fit saves an epoch before its callback probes it: a stop while the probes of
    epoch 2 are computed leaves a checkpoint at epoch 2 without its probe.  The resumed run
    goes back to epoch 1, so every epoch is probed once and the run equals an uninterrupted
    one."""
    rng = np.random.default_rng(0)
    prep = ex.Prepared(rng.normal(size=(64, 8)).astype(np.float32),
                       np.eye(3)[rng.integers(0, 3, 64)].astype(np.float32),
                       rng.normal(size=(16, 8)).astype(np.float32),
                       np.eye(3)[rng.integers(0, 3, 16)].astype(np.float32),
                       num_outputs=3, name="toy")
    cfg = dataclasses.replace(ex.MinibatchConfig.smoke(), batch_size=16, epochs=3, depth=1,
                              bottleneck=12, probe_n=8, ntk_n=4, n_eval_train=16)
    arm = ex.Arm("adam", optax.adam, (1e-2,))
    whole = ex._train_arm(cfg, arm, 1e-2, prep, key, progress=False, checkpoint_dir=None)
    real, calls = ex._probe_fns, []

    class Stop(Exception):
        pass

    def stopping_probe_fns(*a):
        probe = real(*a)

        def p(params):
            calls.append(1)
            if len(calls) == 3:  # epoch 0, epoch 1, then stop inside epoch 2's probe
                raise Stop
            return probe(params)
        return p

    monkeypatch.setattr(ex, "_probe_fns", stopping_probe_fns)
    with pytest.raises(Stop):
        ex._train_arm(cfg, arm, 1e-2, prep, key, progress=False, checkpoint_dir=tmp_path)
    assert (tmp_path / "phase0" / "8").is_dir()  # epoch 2 was saved, its probe was not
    res = ex._train_arm(cfg, arm, 1e-2, prep, key, progress=False, checkpoint_dir=tmp_path)
    spe = 64 // 16
    np.testing.assert_array_equal(res["probe_step"], [0, spe, 2 * spe, 3 * spe])
    np.testing.assert_array_equal(res["probe_step"], whole["probe_step"])
    for k in ("loss", "grams", "ntk", "w_cos", "eval_test_accuracy"):
        np.testing.assert_allclose(res[k], whole[k], rtol=1e-5, atol=1e-7, err_msg=k)


def test_minibatch_run_with_more_seeds_reuses_the_finished_seeds(tmp_path, monkeypatch):
    """Sweeps and (arm, seed) runs are kept in a folder keyed without the seed count, so a
    3-seed run after a 1-seed run trains only seeds 1 and 2 and returns seed 0's run as it
    was; seed keys are fold_in(key, s), the same whatever the count."""
    calls, sweeps = [], []
    rng = np.random.default_rng(0)
    prep = ex.Prepared(rng.normal(size=(64, 4)).astype(np.float32),
                       np.eye(2)[rng.integers(0, 2, 64)],
                       rng.normal(size=(8, 4)).astype(np.float32),
                       np.eye(2)[rng.integers(0, 2, 8)], num_outputs=2, name="toy")
    monkeypatch.setattr(ex, "load_classification", lambda *a, **k: prep)

    sweep_keys = []

    def fake_sweep(arm, *a, **k):
        sweeps.append(arm.name)
        sweep_keys.append(np.asarray(jax.random.key_data(k["key"])))
        k["checkpoint_dir"].mkdir(parents=True)  # as fit's mid-sweep checkpoints would
        (k["checkpoint_dir"] / "step").write_text("x")
        return {"best": float(arm.lrs[0]), "state": None}

    def fake_train(cfg, arm, lr, prep, ks, *, progress, checkpoint_dir):
        calls.append((arm.name, tuple(np.asarray(jax.random.key_data(ks)).tolist())))
        return {"loss": np.asarray(jax.random.key_data(ks), np.float64)}

    monkeypatch.setattr(ex, "lr_sweep", fake_sweep)
    monkeypatch.setattr(ex, "_train_arm", fake_train)
    arms = (ex.Arm("adam", optax.adam, (1e-3, 1e-2)), ex.Arm("sgd", optax.sgd, (0.1,)))
    cfg1 = ex.MinibatchConfig.smoke()
    cfg1 = ex.dataclasses.replace(cfg1, arms=arms, seeds=1, scale_note="one seed")
    key = jax.random.key(3)
    r1 = ex.run_minibatch(cfg1, key=key, progress=False, checkpoint_dir=tmp_path)
    assert sweeps == ["adam"] and len(calls) == 2
    assert not list(tmp_path.glob("*_sweep"))  # its mid-sweep checkpoints went once it was kept
    assert len(list(tmp_path.glob("done_*/adam_sweep.pkl"))) == 1
    cfg3 = ex.dataclasses.replace(cfg1, seeds=3, scale_note="three seeds")
    r3 = ex.run_minibatch(cfg3, key=key, progress=False, checkpoint_dir=tmp_path)
    assert sweeps == ["adam"]                        # the sweep was reused
    assert len(calls) == 2 + 2 * 2                  # seeds 1, 2 of both arms, not seed 0
    for arm in ("adam", "sgd"):
        assert len(r3["arms"][arm]["seeds"]) == 3
        np.testing.assert_array_equal(r3["arms"][arm]["seeds"][0]["loss"],
                                      r1["arms"][arm]["seeds"][0]["loss"])
        for s in range(3):   # each seed's run is the one of its own key
            np.testing.assert_array_equal(
                r3["arms"][arm]["seeds"][s]["loss"],
                np.asarray(jax.random.key_data(jax.random.fold_in(key, s)), np.float64))
    # a different setting (batch size) does not reuse them
    cfg_b = ex.dataclasses.replace(cfg3, batch_size=16)
    ex.run_minibatch(cfg_b, key=key, progress=False, checkpoint_dir=tmp_path)
    assert sweeps == ["adam", "adam"] and len(calls) == 6 + 6
    # first_seed: seeds 1 and 2 alone are the 3-seed run's (kept by seed index: reloaded, not
    # retrained); in a fresh folder they train at their own keys and sweep at seed 0's
    cfg2 = ex.dataclasses.replace(cfg1, seeds=2, scale_note="seeds 1, 2")
    r12 = ex.run_minibatch(cfg2, key=key, progress=False, checkpoint_dir=tmp_path,
                           first_seed=1)
    assert r12["seed_indices"] == [1, 2] and len(calls) == 12
    for arm in ("adam", "sgd"):
        for s in (1, 2):
            np.testing.assert_array_equal(r12["arms"][arm]["seeds"][s - 1]["loss"],
                                          r3["arms"][arm]["seeds"][s]["loss"])
    sweep_keys.clear()
    fresh = ex.run_minibatch(cfg2, key=key, progress=False,
                             checkpoint_dir=tmp_path / "fresh", first_seed=1)
    assert len(calls) == 12 + 4 and fresh["seed_indices"] == [1, 2]
    np.testing.assert_array_equal(sweep_keys, [np.asarray(jax.random.key_data(
        jax.random.fold_in(jax.random.fold_in(key, 0), 3)))])
    for arm in ("adam", "sgd"):
        np.testing.assert_array_equal(fresh["arms"][arm]["seeds"][1]["loss"],
                                      r3["arms"][arm]["seeds"][2]["loss"])
    for bad in (-1, 1.0, True):
        with pytest.raises(ValueError, match="first_seed: expected an int >= 0"):
            ex.run_minibatch(cfg2, key=key, first_seed=bad)


def test_fingerprint_tells_apart_arms_that_differ_only_in_switch_or_init_scale():
    # run_minibatch names its kept runs "{arm}_lr{lr}_s{seed}" inside a folder keyed by the
    # config's fingerprint: a switch epoch or init factor missing from it would reload a
    # different run.  A plain arm's fingerprint must not move (existing checkpoints).
    import dataclasses as dc

    import optax

    from layerlab.gnrev import experiments as ex
    gn = ex.GaussNewton(pinv=ex.EXACT_PINV, first_linear=False)
    a = ex.Arm("adam_then_gn", optax.adam, (1e-4,), then=ex.Arm("gn", gn, (0.2,)),
               switch_epoch=5)
    cfg = ex.MinibatchConfig.smoke()
    cfg = dc.replace(cfg, arms=(a,))
    fps = {ex._fingerprint(cfg),
           ex._fingerprint(dc.replace(cfg, arms=(dc.replace(a, switch_epoch=6),))),
           ex._fingerprint(dc.replace(cfg, arms=(dc.replace(a, w_scale=0.5),))),
           ex._fingerprint(dc.replace(cfg, arms=(dc.replace(a, then=ex.Arm("gn", gn, (0.4,))),)))}
    assert len(fps) == 4
    plain = ex.Arm("adam", optax.adam, (1e-4,))
    assert ex._arm_dict(plain) == {"name": "adam", "optimizer": "adam", "lrs": [1e-4],
                                   "weight_decay": 0.0}


def test_augment_step_trains_on_the_augmented_batch(key):
    """``augment_step``: the wrapped step equals the plain step fed the batch that
    ``random_resized_crop`` makes from ``fold_in(key, 0x5A)`` and stays a traced Partial (one
    compiled program per arm); configs with ``augment=None`` keep the fingerprints they had
    before the field existed (their checkpoints and caches stay valid); a bad name is
    refused."""
    from layerlab import data as D
    from layerlab.loop._chunks import is_traced_partial
    H, W, C = 4, 4, 2
    x = jax.random.normal(key, (6, H * W * C))
    y = jax.random.randint(jax.random.key(1), (6,), 0, 3)
    params, frozen, P = ex.make_model(jax.random.key(2), H * W * C, 1, 3, bottleneck=40,
                                      first_linear=False)
    arm = ex.Arm("sgd", optax.sgd, (0.1,))
    ts = ex._make_step(arm, frozen, P, loss="ce", loss_after=False)
    aug = ex.augment_step(ts, "random_resized_crop", (H, W, C))
    assert ex.augment_step(ts, None, None) is ts
    st = ex._init_state(arm, ts, params, 0.1)
    k = jax.random.key(5)
    got, m_got = jax.jit(aug.step)(st, (x, y), k)
    crop = jax.jit(lambda kk, xx: D.random_resized_crop(  # jitted: op by op ~40 compiles
        kk, xx, image_shape=(H, W, C), scale=(0.08, 1.0), ratio=(0.75, 1.33)))
    xa = crop(jax.random.fold_in(k, 0x5A), x)
    assert not np.allclose(np.asarray(xa), np.asarray(x))
    want, m_want = jax.jit(ts.step)(st, (xa, y), k)
    np.testing.assert_allclose(m_got["loss"], m_want["loss"], rtol=1e-6)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7),
                 got.params, want.params)
    # the same wrapped function for every call (one compiled program per arm and shape)
    again = ex.augment_step(ts, "random_resized_crop", (H, W, C)).step
    assert jax.tree.structure(again) == jax.tree.structure(aug.step)
    assert is_traced_partial(aug.step)
    with pytest.raises(ValueError, match="needs the data's image_shape"):
        ex.augment_step(ts, "random_resized_crop", None)
    with pytest.raises(ValueError, match="augment must be one of"):
        ex.MinibatchConfig(augment="flip")
    base = ex.MinibatchConfig()
    assert "augment" not in ex._cfg_dict(base)
    # the fingerprints as of c1c37cd, before ``augment`` existed
    assert ex._fingerprint(base) == "6eeff3c812e8d3db"
    assert ex._fingerprint(ex.MinibatchConfig.cifar_cpu(None)) == "1b30f8ca6aaf9e04"
    assert ex.MinibatchConfig.cifar_cpu("random_resized_crop").augment == "random_resized_crop"
    assert "no crop/resize" not in ex.MinibatchConfig.cifar_cpu("random_resized_crop").scale_note
    assert ex.MinibatchConfig.paper("cifar10").augment == "random_resized_crop"
    assert ex.MinibatchConfig.paper("mnist").augment is None
    assert ex._fingerprint(base) != ex._fingerprint(
        dataclasses.replace(base, augment="random_resized_crop"))


def test_fig3_claims_follow_the_papers_difference_reading():
    """§5.2: GN's extra per-batch drop over SGD and Adam is largest early, 'gradually weakens'
    and 'subsists': judged on adv_X = pe_X - pe_GN (hand values), not on GN's own drop."""
    def verdicts(gn, adam, sgd):
        cl = ex.fig3_claims({"gn": gn, "adam": adam, "sgd": sgd})
        assert len(cl) == 3 and all("(gn)" in c.claim for c in cl)
        return [c.holds for c in cl]

    # advantages 18 / 15 -> 2 / 4: largest, weakens, subsists
    assert verdicts([-20, -10], [-2, -8], [-5, -6]) == [True, True, True]
    # GN's own drop deepens (-11 -> -12.5) but its advantage shrinks (11 / 7 -> 6 / 2.5): the
    # augmented CIFAR-10 record, which the old 'own drop weakens' rule failed
    assert verdicts([-11.1, -12.5], [0.1, -6.4], [-4.3, -10.0]) == [True, True, True]
    # Adam overtakes GN by the last epoch (MNIST at the swept rate): weakens, does not subsist
    assert verdicts([-72.4, -5.0], [-6.3, -17.1], [-7.0, -7.4]) == [True, True, False]
    # the advantage over SGD grows: does not weaken
    assert verdicts([-10, -12], [-2, -8], [-5, -4]) == [True, False, True]
    # Adam's drop is larger in epoch 1: not largest
    assert verdicts([-10, -12], [-11, -3], [-5, -4])[0] is False
    # a gn_first_linear arm gets its own three claims
    two = ex.fig3_claims({"gn": [-2, -1], "gn_first_linear": [-3, -1], "adam": [0, 0],
                          "sgd": [0, 0]})
    assert [c.holds for c in two] == [True, True, True, True, True, True]


def _fake_minibatch_result(depth, *, seeds=1, epochs=3, steps_per_epoch=4, seed=0):
    """A hand-made ``run_minibatch`` result: each arm's kernels, block Grams, weight cosines
    and (GN) certificates, so that the views can be checked without training."""
    rng = np.random.default_rng(seed)
    res = {"arms": {}, "steps_per_epoch": steps_per_epoch, "config": {"depth": depth},
           "wall_s": 1.0}
    drift = {"gn": 0.05, "adam": 0.5, "sgd": 0.2}
    for a, s in drift.items():
        runs = []
        for _ in range(seeds):
            base = rng.standard_normal((5, 3))
            feats = [rng.standard_normal((6, 4)) for _ in range(depth)]
            ntk, grams, wcos = [], [], []
            for e in range(epochs + 1):
                b = base + s * e * rng.standard_normal((5, 3))
                ntk.append(b @ b.T)
                g = []
                for f in feats:
                    h = f + s * e * rng.standard_normal(f.shape)
                    g.append(h @ h.T)
                grams.append(g)
                wcos.append(np.full((depth, 2), 1.0 - s * e / 10))
            r = {"ntk": np.asarray(ntk), "grams": np.asarray(grams), "w_cos": np.asarray(wcos),
                 "w_rel": s,
                 "loss_change_pct": -s * 10 * rng.uniform(0.5, 1.0, epochs * steps_per_epoch)}
            if a == "gn":
                r["residual"] = rng.uniform(0.0, 0.01, epochs * steps_per_epoch)
                r["min_rank"] = np.full(epochs * steps_per_epoch, 7.0)
            runs.append(r)
        res["arms"][a] = {"seeds": runs, "lr": 0.1, "diverged_lrs": [], "sweep": {}}
    return res


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_views_carry_the_certificate_and_fig4_makes_no_repeated_middle_claim(depth, key):
    """Every mini-batch view lists GN's residual certificate (numpy median over steps and
    seeds); with 2 blocks Fig. 4's "middle" block is the first one, so its claim is not made
    twice; a run at the paper's MNIST shape is ``scale: paper`` though Fig. 4 shows CIFAR-10."""
    res = _fake_minibatch_result(depth, seeds=2)
    cfg = dataclasses.replace(ex.MinibatchConfig.smoke(), depth=depth, batch_size=8, epochs=3)
    want = float(np.median(np.stack([r["residual"] for r in res["arms"]["gn"]["seeds"]])))
    for a, end in (("gn", 1.0), ("adam", 1.5), ("sgd", 1.7)):  # Fig. 2 reads the loss curves
        for k, r in enumerate(res["arms"][a]["seeds"]):
            for m in ("eval_test_loss", "eval_test_accuracy", "eval_train_loss_full"):
                r[m] = np.linspace(2.0, end, 4) + 0.1 * k
            r["loss"] = np.linspace(2.0, end, 12)
    for run in (ex.run_fig2, ex.run_fig3, ex.run_fig4, ex.run_appG, ex.run_appH):
        rec = run(cfg, key=key, result=res)
        cert = [r for r in rec.rows if r.name == "gn: median residual ‖JΔθ−ε‖/‖ε‖"]
        assert len(cert) == 1, (run.__name__, [r.name for r in rec.rows])
        np.testing.assert_allclose(cert[0].ours, want, rtol=1e-12)
        rank = [r for r in rec.rows if r.name.startswith("gn: smallest kept")]
        assert rank[0].ours == 7.0 and "batch 8" in rank[0].name
        assert rec.scale == "reduced"
    fig4 = ex.run_fig4(cfg, key=key, result=res)
    cka = [c.claim for c in fig4.claims if c.claim.startswith("CKA of GN (gn)")]
    blocks = {1: ["first"], 2: ["first", "last"], 3: ["first", "middle", "last"]}[depth]
    assert cka == [f"CKA of GN (gn) stays closer to init than Adam's ({b} block)" for b in blocks]
    # GN's kernel drifts least in this hand-made run, so every GN-vs-Adam NTK claim holds
    assert all(c.holds for c in fig4.claims if c.claim.startswith("NTK of GN"))
    paper = dataclasses.replace(cfg, n_train=None, bottleneck=8000, batch_size=1024, seeds=3,
                                depth=2, dataset="mnist", epochs=10)
    if depth == 2:
        assert ex.run_fig4(paper, key=key, result=res).scale == "paper"
        # a --paper run with fewer epochs, or other augmentation, is not the paper's scale
        for other in ({"epochs": 1}, {"augment": "random_resized_crop"}):
            short = dataclasses.replace(paper, **other)
            assert ex.run_fig4(short, key=key, result=res).scale == "reduced", other


def test_appM_checkpoint_dir_resumes_per_dataset_seed_and_arm(tmp_path, monkeypatch):
    """App. M keeps each finished (dataset, seed, arm) piece and each mini-batch run's fit
    checkpoints: a second call trains nothing and gives the same record; with one arm's piece
    removed only that arm runs again (its mini-batch run restored from its checkpoints), and
    ``wall_s`` counts every piece's own time once."""
    cfg = ex.RegressionConfig.smoke()
    first = ex.run_appM(cfg, key=jax.random.key(0), progress=False, checkpoint_dir=tmp_path)
    (done,) = tmp_path.glob("appM_*")
    pieces = sorted(p.name for p in done.glob("*.pkl"))
    assert pieces == ["wine_s0_adam.pkl", "wine_s0_gn.pkl", "wine_s0_sgd.pkl"]
    assert any((done / "wine_s0_sgd").glob("lr*/*"))  # the mini-batch run's fit checkpoints

    def no_training(*a, **k):
        raise AssertionError("a kept piece was trained again")

    with monkeypatch.context() as m:
        m.setattr(ex, "lr_sweep", no_training)
        m.setattr(ex, "fit", no_training)
        t = time.perf_counter()
        again = ex.run_appM(cfg, key=jax.random.key(0), progress=False, checkpoint_dir=tmp_path)
        spent = time.perf_counter() - t
    assert [(r.name, r.ours) for r in again.rows] == [(r.name, r.ours) for r in first.rows]
    assert [c.holds for c in again.claims] == [c.holds for c in first.claims]
    # wall_s = every kept piece's own time + this call's loading (at most the call itself)
    kept = sum(ex._load(done / p)["wall_s"] for p in pieces)
    assert kept <= again.wall_s <= kept + spent

    (done / "wine_s0_sgd.pkl").unlink()
    calls = []
    real_sweep = ex.lr_sweep

    def counting(arm, *a, **k):
        calls.append(arm.name)
        return real_sweep(arm, *a, **k)

    monkeypatch.setattr(ex, "lr_sweep", counting)
    third = ex.run_appM(cfg, key=jax.random.key(0), progress=False, checkpoint_dir=tmp_path)
    assert set(calls) == {"sgd"}
    np.testing.assert_allclose([r.ours for r in third.rows], [r.ours for r in first.rows],
                               rtol=1e-6)


def _toy_prep(n=96, c=3, d=6, seed=0):
    rng = np.random.default_rng(seed)
    return ex.Prepared(rng.normal(size=(n, d)).astype(np.float32),
                       (np.arange(n) % c).astype(np.int32),
                       rng.normal(size=(12, d)).astype(np.float32),
                       (np.arange(12) % c).astype(np.int32), num_outputs=c, name="toy")


def test_split_validation_is_balanced_disjoint_and_complete():
    prep = _toy_prep()
    out = ex.split_validation(prep, 10, seed=1)
    assert out.x_val.shape == (10, 6) and out.x_train.shape == (86, 6)
    assert np.bincount(out.y_val, minlength=3).tolist() == [4, 3, 3]  # remainder to class 0
    rows = {r.tobytes() for r in prep.x_train}
    tr, va = {r.tobytes() for r in out.x_train}, {r.tobytes() for r in out.x_val}
    assert not tr & va and tr | va == rows                   # disjoint, nothing lost
    for x, y in ((out.x_train, out.y_train), (out.x_val, out.y_val)):  # labels travel along
        idx = [np.flatnonzero((prep.x_train == r).all(1))[0] for r in x]
        np.testing.assert_array_equal(prep.y_train[idx], y)
    with pytest.raises(ValueError, match="n_val must be in"):
        ex.split_validation(prep, 96)
    with pytest.raises(ValueError, match="already has a validation split"):
        ex.split_validation(out, 3)
    with pytest.raises(ValueError, match="n_val must be an int >= 0"):
        ex.MinibatchConfig(n_val=-1)
    # n_val=0 leaves the fingerprint (checkpoint and cache names) as it was before the field
    assert "n_val" not in ex._cfg_dict(ex.MinibatchConfig.smoke())
    assert ex._cfg_dict(dataclasses.replace(ex.MinibatchConfig.smoke(), n_val=8))["n_val"] == 8


def test_minibatch_run_evaluates_the_validation_split_every_epoch(monkeypatch):
    """n_val rows are drawn beside n_train, held out of training, and their loss is logged
    each epoch: at epoch 0 it is the initial net's loss on exactly those rows."""
    prep = _toy_prep(n=80)
    asked = []

    def fake_load(name, n_train, n_test, **kw):
        asked.append(n_train)
        return prep

    monkeypatch.setattr(ex, "load_classification", fake_load)
    arm = ex.Arm("sgd", optax.sgd, (0.05,))
    cfg = dataclasses.replace(ex.MinibatchConfig.smoke(), n_train=64, n_val=16, batch_size=16,
                              epochs=2, probe=False, arms=(arm,), bottleneck=None, depth=2)
    key = jax.random.key(5)
    res = ex.run_minibatch(cfg, key=key, progress=False)
    assert asked == [80] and res["n_train"] == 64
    run = res["arms"]["sgd"]["seeds"][0]
    assert run["eval_val_loss"].shape == (3,) and run["eval_val_accuracy"].shape == (3,)
    split = ex.split_validation(prep, 16)
    params, frozen, P = ex.make_model(jax.random.fold_in(key, 0), 6, 2, 3, bottleneck=None,
                                      first_linear=False, init=cfg.init,
                                      w_scale=ex._arm_w_scale(cfg, arm, 6))
    want = ex.revmlp_loss(params, frozen, P, (jnp.asarray(split.x_val),
                                              jnp.asarray(split.y_val)))[0]
    np.testing.assert_allclose(run["eval_val_loss"][0], float(want), rtol=1e-5)
    assert run["eval_val_loss"][-1] != run["eval_val_loss"][0]


def test_appJ_selects_the_decay_on_validation_and_compares_it_with_none():
    cfg = ex.variants_config("appJ", "smoke")
    res = _fake_variant_result({"gn_wd0": [4, 2, 2.2, 2.5], "gn_wd0.001": [4, 2, 2.1, 2.3],
                                "gn_wd0.01": [4, 2, 2.0, 2.0], "adam": [4, 3, 2, 1.8]})
    for name, v, acc in (("gn_wd0", 3.0, 0.36), ("gn_wd0.001", 2.5, 0.365),
                         ("gn_wd0.01", 2.8, 0.39)):
        run = res["arms"][name]["seeds"][0]
        run["eval_val_loss"] = np.array([4.0, 2.2, 2.4, v])
        run["eval_test_accuracy"] = np.full(4, acc)
    rec = ex.run_variants(cfg, "appJ", key=None, result=res)
    (sel,) = [r for r in rec.rows if r.name == "weight decay selected on the validation set"]
    assert sel.ours == 0.001                        # lowest final validation loss, 2.5
    acc_c, loss_c = [c for c in rec.claims if "tuned on the validation set" in c.claim]
    assert acc_c.holds is True                      # 36.5 vs 36.0 %: within 1 point
    assert loss_c.holds is True                     # test 2.8 vs 3.0: within 10 %
    assert "across strengths" not in " ".join(c.claim for c in rec.claims)
    res["arms"]["gn_wd0.01"]["seeds"][0]["eval_val_loss"][-1] = 2.0   # now 1e-2 is selected
    rec = ex.run_variants(cfg, "appJ", key=None, result=res)
    acc_c, loss_c = [c for c in rec.claims if "tuned on the validation set" in c.claim]
    assert acc_c.holds is False and loss_c.holds is False  # 39 vs 36 %; 2.5 vs 3.0 (-17 %)
    res["arms"]["gn_wd0"]["seeds"][0]["eval_val_loss"][-1] = np.nan  # diverged, listed first
    rec = ex.run_variants(cfg, "appJ", key=None, result=res)
    (sel,) = [r for r in rec.rows if r.name == "weight decay selected on the validation set"]
    assert sel.ours == 0.01
    for run in (r for a in res["arms"].values() for r in a["seeds"]):
        run.pop("eval_val_loss", None)             # a record without a validation split
    rec = ex.run_variants(cfg, "appJ", key=None, result=res)
    assert [c for c in rec.claims if "across strengths" in c.claim]


def test_experiment_entry_points_name_a_bad_key(tmp_path):
    """key=3 gave JAX's raw "invalid PRNG key data" error, in run_fig1 / run_appM only after
    the data were loaded (or, with no data, a missing-data error hid it); the key is now
    checked first and named.  A legacy uint32[2] key builds the typed key's model."""
    msg = r"key must be a PRNG key \(jax.random.key\(seed\)\), got int 3\.$"
    with pytest.raises(TypeError, match="^make_model: " + msg):
        ex.make_model(3, 8, 1, 3, bottleneck=8, first_linear=False)
    raw = jax.random.PRNGKey(2)
    jax.tree.map(np.testing.assert_array_equal,
                 jax.tree.leaves(ex.make_model(raw, 8, 1, 3, bottleneck=8, first_linear=False)),
                 jax.tree.leaves(ex.make_model(jax.random.wrap_key_data(raw), 8, 1, 3,
                                               bottleneck=8, first_linear=False)))
    params, frozen, P = ex.make_model(raw, 8, 1, 3, bottleneck=8, first_linear=False)
    data = (jnp.ones((4, 8)), jnp.arange(4) % 3)
    with pytest.raises(TypeError, match="^lr_sweep: " + msg):
        ex.lr_sweep(ex.Arm("sgd", optax.sgd, (0.1,)), params, frozen, P, data, steps=1,
                    batch_size=None, rule="progress", key=3)
    empty = str(tmp_path)  # no data sets here: the key must be refused before loading them
    with pytest.raises(TypeError, match="^run_fig1: " + msg):
        ex.run_fig1(ex.FullBatchConfig(), key=3, data_dir=empty)
    with pytest.raises(TypeError, match="^run_minibatch: " + msg):
        ex.run_minibatch(ex.MinibatchConfig(), key=3, data_dir=empty, cache_dir=empty)
    # the views that run run_minibatch name themselves (they said run_minibatch)
    for view in ("run_fig2", "run_fig3", "run_fig4", "run_appG", "run_appH"):
        with pytest.raises(TypeError, match=f"^{view}: " + msg):
            getattr(ex, view)(ex.MinibatchConfig(), key=3, data_dir=empty)
    with pytest.raises(TypeError, match="^run_variants: " + msg):
        ex.run_variants(ex.MinibatchConfig(), "appJ", key=3, data_dir=empty)
    with pytest.raises(TypeError, match="^run_appM: " + msg):
        ex.run_appM(ex.RegressionConfig(), key=3, data_dir=empty)
