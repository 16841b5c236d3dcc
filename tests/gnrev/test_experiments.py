"""Tests for layerlab.gnrev.experiments: lr-sweep rules, the certificate rows, missing data."""
import jax
import numpy as np
import optax
import pytest

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


def test_superconductivity_missing_gives_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="superconductivity.*train.csv"):
        ex.load_regression("superconductivity", data_dir=str(tmp_path))
