"""Tests for layerlab.bottleneck.experiments (record building and merging, the training helper's
setup; no real training)."""
import dataclasses
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from layerlab import bottleneck as bn
from layerlab.bottleneck import experiments as ex
from layerlab.record import load_record, write_record

REPO = pathlib.Path(__file__).resolve().parents[2]
A_FIG2 = REPO / "results" / "bottleneck" / "a_fig2.json"


def test_a_fig2_teacher_test_set_is_not_the_training_set(key):
    cfg = ex.AFig2Config.smoke()
    tr, te = ex._a_fig2_teacher_data(cfg, key)
    assert tr.x.shape == te.x.shape == (40, 50)
    # no training input among the test inputs (same teacher, independent inputs)
    d = np.abs(tr.x[:, None, :] - te.x[None, :, :]).max(-1)
    assert d.min() > 1e-3


def _kept_wall(old: dict, part: str = "mnist") -> float:
    """Wall time of the runs whose ``part`` a merge keeps (the committed record may itself be
    a merged one: then only the run that produced ``part`` counts)."""
    runs = old["extra"].get("runs")
    if not runs:
        return old["wall_s"]
    return sum(r["wall_s"] for r in runs if part in r["parts_kept"])


def _new_teacher(old: dict) -> dict:
    """A made-up teacher summary: the old one with test losses halved, gradients tiny."""
    t = {k: (np.asarray(v, float) if isinstance(v, list) else v)
         for k, v in old["extra"]["sweeps"]["teacher"].items()}
    t["test"], t["test_best"] = t["loss"] / 2, t["best"] / 2
    t["grad_norm"], t["grad_norm_best"] = t["grad_norm"] * 1e-4, t["grad_norm_best"] * 1e-4
    return t


@pytest.mark.skipif(not A_FIG2.is_file(), reason="no committed a_fig2 record")
def test_merge_a_fig2_into_the_gpu_record(tmp_path):
    old = load_record(A_FIG2)
    cfg = dataclasses.replace(ex.AFig2Config.paper(), parts=("teacher",))
    rec = ex.merge_a_fig2(A_FIG2, {"teacher": _new_teacher(old)}, cfg, wall_s=100.0)
    path = write_record(rec, tmp_path)
    d = load_record(path)
    assert d["scale"] == "paper"  # MNIST from the GPU run, teacher from this one: both paper
    for k, v in old["extra"]["sweeps"].items():
        if k.startswith("mnist"):
            assert json.dumps(d["extra"]["sweeps"][k]) == json.dumps(v)
    t = d["extra"]["sweeps"]["teacher"]
    assert t["test_best"] != old["extra"]["sweeps"]["teacher"]["test_best"]
    # rows and claims recomputed from the merged sweeps
    below = [r for r in d["rows"] if r["name"].startswith("teacher: widths whose test loss")]
    assert len(below) == 1 and below[0]["ours"] == len(t["widths"])
    claim = [c for c in d["claims"] if c["claim"].startswith("teacher: test loss")]
    assert claim[0]["holds"] is True
    g = [r for r in d["rows"] if r["name"] == "teacher: max final gradient norm over widths "
         "(best seeds)"]
    assert g[0]["ours"] == pytest.approx(max(t["grad_norm_best"]), rel=1e-5)
    assert d["wall_s"] == pytest.approx(_kept_wall(old) + 100.0, abs=0.1)
    # which part ran where, with which settings
    assert "NVIDIA H100" in d["note"] and "teacher: this run on" in d["note"]
    assert "lambda=1e-06" in d["note"] and "2000 L-BFGS" in d["note"]
    assert d["config"]["parts"] == ["mnist", "teacher"]
    assert "polish_steps" not in d["config"]["per_part"]["mnist"]
    assert [r["parts_kept"] for r in d["extra"]["runs"]] == [["mnist"], ["teacher"]]
    # a teacher run off the paper's configuration makes the merged record reduced
    small = dataclasses.replace(cfg, teacher_seeds=2)
    assert ex.merge_a_fig2(A_FIG2, {"teacher": _new_teacher(old)}, small,
                           wall_s=1.0).scale == "reduced"
    with pytest.raises(ValueError, match="plateau_rel_tol"):
        ex.merge_a_fig2(A_FIG2, {"teacher": _new_teacher(old)},
                        dataclasses.replace(cfg, plateau_rel_tol=0.1), wall_s=1.0)
    with pytest.raises(ValueError, match="not the parts"):
        ex.merge_a_fig2(A_FIG2, {"teacher": _new_teacher(old)},
                        dataclasses.replace(cfg, parts=("mnist",)), wall_s=1.0)


def test_train_runs_integer_inputs_keep_a_float_lambda(key):
    # regression: _train_runs built its per-run lambda in x.dtype: 0 for integer x
    xi = np.array([[1, 2, 0], [0, 1, 3], [2, 2, 1], [1, 0, 0]], np.int32)
    y = jnp.eye(2)[jnp.array([0, 1, 1, 0])]
    params, _, gn, hp = ex._train_runs(xi, y, [3, 4, 2], 0.1, [key], progress=False)
    assert jnp.issubdtype(hp["lam"].dtype, jnp.floating)
    np.testing.assert_allclose(np.asarray(hp["lam"]), [0.1], rtol=1e-7)
    # the reported gradient norm includes the penalty: 2 lam W for the weights, by hand
    p = jax.tree.map(lambda a: a[0], params)
    xf = jnp.asarray(xi, jnp.float32)
    g = jax.jit(jax.grad(lambda q: bn.mse_cost(bn.network_fn(q, xf), y) + 0.1 * sum(
        jnp.sum(a["w"] ** 2) + jnp.sum(a["b"] ** 2) for a in q)))(p)
    np.testing.assert_allclose(gn[0], float(jnp.sqrt(sum(jnp.sum(a ** 2) for a in
                                                         jax.tree.leaves(g)))), rtol=1e-5)


def test_a_diverged_run_stops_the_experiment_with_its_index():
    """The experiments' vmapped diagnostics of a sweep (``_diag_runs``, ``_centred_runs``):
    the finite runs' counts are integers equal to the one-run diagnostics; a run with
    non-finite weights (NaN counts since its diagnostics refuse to guess) stops the
    experiment naming that run — it used to count as a rank-0 bottleneck, then crashed on
    ``int(nan)`` in run_b_minima."""
    from layerlab import nets

    x = jax.random.normal(jax.random.key(0), (12, 4))
    good = [nets.mlp_init(jax.random.key(s), [4, 6, 6, 2]) for s in (1, 2, 3)]
    stack = jax.tree.map(lambda *a: jnp.stack(a), *good)
    d = ex._diag_runs(stack, x, 12, 0.1, 1e-3)
    assert d["count_near_one"].dtype == np.int64
    for r, p in enumerate(good):
        one = bn.bottleneck_diagnostics(p, x, tol=0.1, rel_tol=1e-3)
        np.testing.assert_array_equal(d["count_near_one"][r], np.asarray(one["count_near_one"]))
        np.testing.assert_array_equal(d["numerical_rank"][r], np.asarray(one["numerical_rank"]))
    bad = jax.tree.map(lambda a: a.at[2].set(jnp.nan) if a.ndim == 3 else a, stack)
    with pytest.raises(ValueError, match=r"run\(s\) \[2\] of 3 are not finite"):
        ex._diag_runs(bad, x, 12, 0.1, 1e-3)
    with pytest.raises(ValueError, match=r"run\(s\) \[2\] of 3"):
        ex._centred_runs(bad, x, 12, 0.1)
