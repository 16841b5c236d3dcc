"""Tests for layerlab.loop (fit, optax_step, history, sweeps, early stopping, non-finite)."""
import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from layerlab import loop


def _problem(key, n=48, d=5):
    kx, kw = jax.random.split(key)
    x = jax.random.normal(kx, (n, d))
    y = x @ jax.random.normal(kw, (d,)) + 0.1
    return x, y


def _lsq(params, batch):
    x, y = batch
    return jnp.mean((x @ params["w"] + params["b"] - y) ** 2)


def _params(d=5):
    return {"w": jnp.zeros((d,)), "b": jnp.zeros(())}


def _manual(step, state, data, key, total, batch_size):
    """Independent route: a Python loop building batch t by hand from the documented rule."""
    data_key, step_key = jax.random.split(key)
    n = jax.tree_util.tree_leaves(data)[0].shape[0]
    metrics = []
    jstep = jax.jit(step)
    for t in range(total):
        if batch_size is None:
            batch = data
        else:
            spe = n // batch_size
            e, p = divmod(t, spe)
            perm = np.asarray(jax.random.permutation(jax.random.fold_in(data_key, e), n))
            idx = perm[p * batch_size:(p + 1) * batch_size]
            batch = jax.tree_util.tree_map(lambda a: a[idx], data)
        state, m = jstep(state, batch, jax.random.fold_in(step_key, t))
        metrics.append(float(m["loss"]))
    return state, np.array(metrics)


@pytest.mark.parametrize("batch_size", [None, 10])
def test_fit_matches_python_loop(key, batch_size):
    data = _problem(key)
    ts = loop.optax_step(_lsq, optax.sgd(0.05))
    st, hist = loop.fit(ts.step, ts.init(_params()), data, steps=13, batch_size=batch_size,
                        key=key, progress=False, chunk_size=5)
    ref, ref_loss = _manual(ts.step, ts.init(_params()), data, key, 13, batch_size)
    np.testing.assert_allclose(st.params["w"], ref.params["w"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(hist["train"]["loss"], ref_loss, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(hist["step"], np.arange(13))
    assert int(st.step) == 13


def test_optax_step_is_gradient_descent(key):
    """One sgd step equals theta - lr * grad computed with jax.grad; loss is pre-update."""
    data = _problem(key)
    p0 = {"w": jnp.ones((5,)), "b": jnp.zeros(())}
    ts = loop.optax_step(_lsq, optax.sgd(0.1))
    st, m = ts.step(ts.init(p0), data, key)
    g = jax.grad(_lsq)(p0, data)
    np.testing.assert_allclose(st.params["w"], p0["w"] - 0.1 * g["w"], rtol=1e-6)
    np.testing.assert_allclose(m["loss"], _lsq(p0, data), rtol=1e-6)


def test_optax_step_aux_key_hparams(key):
    data = _problem(key)

    def loss(p, b, *, key, hparams):
        noise = jax.random.normal(key, ())
        base = _lsq(p, b)
        return base + hparams["l2"] * jnp.sum(p["w"] ** 2), {"noise": noise, "base": base}

    ts = loop.optax_step(loss, optax.sgd(0.1), has_aux=True, with_key=True, with_hparams=True,
                         grad_norm=True)
    p0 = {"w": jnp.ones((5,)), "b": jnp.zeros(())}
    st, m = ts.step(ts.init(p0, {"l2": jnp.asarray(0.5)}), data, key)
    assert set(m) == {"loss", "noise", "base", "grad_norm"}
    np.testing.assert_allclose(m["noise"], jax.random.normal(key, ()))
    np.testing.assert_allclose(m["loss"], m["base"] + 0.5 * 5.0, rtol=1e-6)
    g = jax.grad(lambda p: _lsq(p, data) + 0.5 * jnp.sum(p["w"] ** 2))(p0)
    np.testing.assert_allclose(m["grad_norm"], optax.tree.norm(g), rtol=1e-5)


def test_each_sample_once_per_epoch_and_remainder_dropped(key):
    """State counts how often each sample index was drawn: each epoch is a permutation."""
    n, bs = 10, 3  # 3 steps per epoch, 1 sample dropped per epoch (a different one each time)

    def count_step(counts, batch, key):
        s = jnp.sum(batch).astype(jnp.float32)
        return counts + jnp.zeros((n,)).at[batch].add(1.0), {"s": s}

    counts, hist = loop.fit(count_step, jnp.zeros((n,)), jnp.arange(n), epochs=1, batch_size=bs,
                            key=key, progress=False)
    assert hist["step"].shape == (3,)
    np.testing.assert_array_equal(np.sort(np.asarray(counts)), [0.0] + [1.0] * 9)
    counts, _ = loop.fit(count_step, jnp.zeros((n,)), jnp.arange(n), epochs=4, batch_size=bs,
                         key=key, progress=False, chunk_size=5)
    assert float(counts.sum()) == 36.0 and float(counts.max()) <= 4.0
    # the dropped sample differs between epochs (with probability ~1 - 10**-3 for this key)
    assert len(set(np.asarray(counts).tolist())) > 1


def test_chunking_does_not_change_results_and_no_retrace(key):
    data = _problem(key)
    traces = []

    def step(state, batch, k):
        traces.append(1)
        return loop.optax_step(_lsq, optax.adam(0.05)).step(state, batch, k)

    init = loop.optax_step(_lsq, optax.adam(0.05)).init(_params())
    s1, h1 = loop.fit(step, init, data, steps=20, batch_size=8, key=key, progress=False,
                      chunk_size=20)
    s2, h2 = loop.fit(step, init, data, steps=20, batch_size=8, key=key, progress=False,
                      chunk_size=4)
    np.testing.assert_allclose(s1.params["w"], s2.params["w"], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(h1["train"]["loss"], h2["train"]["loss"], rtol=1e-6)
    assert len(traces) == 2  # one trace per distinct chunk length (20 and 4), not per chunk
    loop.fit(step, init, data, steps=12, batch_size=8, key=jax.random.key(3), progress=False,
             chunk_size=4)
    assert len(traces) == 2  # new key/length of run/start step are arrays: no retrace


def test_history_eval_and_json(key, tmp_path):
    data = _problem(key)
    ts = loop.optax_step(_lsq, optax.sgd(0.05))
    x, y = data

    def ev(s):
        return {"mse": _lsq(s.params, data)}

    st, h = loop.fit(ts.step, ts.init(_params()), data, steps=25, batch_size=16, key=key,
                     eval_fn=ev, eval_every=10, eval_at_start=True, progress=True)
    np.testing.assert_array_equal(h["eval_step"], [0, 10, 20, 25])
    assert h["train"]["loss"].shape == (25,)
    np.testing.assert_allclose(h["eval"]["mse"][-1], _lsq(st.params, data), rtol=1e-6)
    np.testing.assert_allclose(h["eval"]["mse"][0], _lsq(_params(), data), rtol=1e-6)
    assert h["eval"]["mse"][-1] < h["eval"]["mse"][0]
    js = json.loads(json.dumps(loop.history_to_jsonable(h)))
    back = loop.history_from_jsonable(js)
    np.testing.assert_allclose(back["train"]["loss"], h["train"]["loss"], rtol=1e-7)
    np.testing.assert_array_equal(back["eval_step"], h["eval_step"])


def _val_mse(x, y, state):
    return {"mse": _lsq(state.params, (x, y))}


def _head_mse(x, y, m, state):  # m: a Python int used as a slice bound (must stay static)
    return {"mse": _lsq(state.params, (x[:m], y[:m]))}


def test_progress_bar_honours_tqdm_disable():
    """fit passed tqdm disable=False explicitly, which overrides tqdm's TQDM_DISABLE=1 (read
    from the environment when tqdm is imported: hence a fresh process)."""
    import os
    import subprocess
    import sys

    code = ("import jax, jax.numpy as jnp; from layerlab import loop\n"
            "step = lambda s, b, k: (s + b.mean(), {'loss': s})\n"
            "loop.fit(step, jnp.zeros(()), jnp.ones((8, 1)), steps=3, batch_size=4,\n"
            "         key=jax.random.key(0), progress=True, desc='bar-under-test')\n")
    base = {k: v for k, v in os.environ.items() if k != "TQDM_DISABLE"}
    for env, shown in (("1", False), (None, True)):  # (tqdm reads "0" as bool("0"): True)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=base if env is None else {**base, "TQDM_DISABLE": env},
                             timeout=300)
        assert out.returncode == 0, out.stderr
        assert ("bar-under-test" in out.stderr) == shown, (env, out.stderr[-500:])


def test_partial_eval_fn_binds_data_as_inputs_and_compiles_once(key):
    """``eval_fn=jax.tree_util.Partial(fn, x_val, y_val)``: the bound data are traced inputs,
    so a second fit with other data of the same shapes reuses the compiled evaluation; the
    values equal the closure route's and a direct evaluation, with and without runs."""
    from layerlab.loop import _chunks

    data = _problem(key)
    ts = loop.optax_step(_lsq, optax.sgd(0.05))
    vals = [_problem(jax.random.fold_in(key, i), n=20) for i in (1, 2)]
    sizes = [_chunks._run_eval_partial._cache_size()]
    for xv, yv in vals:
        ev = jax.tree_util.Partial(_val_mse, xv, yv)
        st, h = loop.fit(ts.step, ts.init(_params()), data, steps=12, batch_size=16, key=key,
                         eval_fn=ev, eval_every=6, progress=False)
        _, hc = loop.fit(ts.step, ts.init(_params()), data, steps=12, batch_size=16, key=key,
                         eval_fn=lambda s, xv=xv, yv=yv: _val_mse(xv, yv, s),
                         eval_every=6, progress=False)
        np.testing.assert_allclose(h["eval"]["mse"], hc["eval"]["mse"], rtol=1e-6)
        np.testing.assert_allclose(h["eval"]["mse"][-1], _lsq(st.params, (xv, yv)), rtol=1e-6)
        sizes.append(_chunks._run_eval_partial._cache_size())
    assert sizes[1] - sizes[0] <= 1 and sizes[2] == sizes[1]  # the second data: no compile
    # a Partial binding a Python value stays a static callable (the value may steer tracing)
    assert _chunks.is_traced_partial(jax.tree_util.Partial(_val_mse, *vals[0]))
    assert not _chunks.is_traced_partial(jax.tree_util.Partial(_val_mse, vals[0][0], 3))
    x, y = data
    st, h = loop.fit(ts.step, ts.init(_params()), data, steps=4, batch_size=16, key=key,
                     eval_fn=jax.tree_util.Partial(_head_mse, x, y, 10), progress=False)
    np.testing.assert_allclose(h["eval"]["mse"][-1], _lsq(st.params, (x[:10], y[:10])),
                               rtol=1e-6)
    # with runs: the bound data are shared by every run, the state is vmapped
    states = jax.vmap(lambda _: ts.init(_params()))(jnp.arange(2))
    xv, yv = vals[0]
    st, h = loop.fit(ts.step, states, data, steps=6, batch_size=16, key=key, runs=True,
                     eval_fn=jax.tree_util.Partial(_val_mse, xv, yv), progress=False)
    want = [_lsq(jax.tree.map(lambda a: a[r], st.params), (xv, yv)) for r in range(2)]
    np.testing.assert_allclose(h["eval"]["mse"][-1], want, rtol=1e-6)


def _proj_step(M, state, batch, key):  # SGD on ((x M) w + b - y)^2 with M fixed
    x, y = batch

    def loss(p):
        return jnp.mean(((x @ M) @ p["w"] + p["b"] - y) ** 2)

    val, g = jax.value_and_grad(loss)(state.params)
    new = jax.tree.map(lambda p, d: p - 0.05 * d, state.params, g)
    return state._replace(params=new, step=state.step + 1), {"loss": val}


def test_partial_step_binds_arrays_as_inputs_and_compiles_once(key):
    """``step=jax.tree_util.Partial(fn, M)``: the bound array is a traced input of the compiled
    chunk, so a fit with another ``M`` of the same shape reuses the program; every run equals
    the closure route's, with and without runs."""
    from layerlab.loop import _chunks

    data = _problem(key)
    ts = loop.optax_step(_lsq, optax.sgd(0.05))  # only for its init (TrainState)
    Ms = [jax.random.normal(jax.random.fold_in(key, i), (5, 5)) / 3 for i in (1, 2)]
    kw = dict(steps=10, batch_size=16, key=key, progress=False, chunk_size=10)
    # (the static and traced jits wrap one function and share its cache: count Partials only)
    sizes, runs = [_chunks._run_chunk_traced._cache_size()], []
    for M in Ms:
        runs.append(loop.fit(jax.tree_util.Partial(_proj_step, M), ts.init(_params()), data,
                             **kw))
        sizes.append(_chunks._run_chunk_traced._cache_size())
    assert sizes[1] - sizes[0] == 1 and sizes[2] == sizes[1]  # the second M: no compile
    for M, (st, h) in zip(Ms, runs, strict=True):
        sc, hc = loop.fit(lambda s, b, k, M=M: _proj_step(M, s, b, k), ts.init(_params()),
                          data, **kw)
        # rtol 1e-5: a constant M and an input M may be folded into different dot layouts
        np.testing.assert_allclose(h["train"]["loss"], hc["train"]["loss"], rtol=1e-5)
        np.testing.assert_allclose(st.params["w"], sc.params["w"], rtol=1e-5)
    states = jax.vmap(lambda _: ts.init(_params()))(jnp.arange(2))
    st, h = loop.fit(jax.tree_util.Partial(_proj_step, Ms[0]), states, data, steps=6,
                     batch_size=16, key=key, runs=True, progress=False)
    one, _ = loop.fit(jax.tree_util.Partial(_proj_step, Ms[0]), ts.init(_params()), data,
                      steps=6, batch_size=16, key=key, progress=False)
    np.testing.assert_allclose(st.params["w"][1], one.params["w"], rtol=1e-5)


def test_runs_sweep_equals_separate_runs(key):
    """A learning-rate sweep on the runs axis equals separate single runs."""
    data = _problem(key)
    lrs = jnp.array([0.01, 0.05, 0.1])
    opt = optax.inject_hyperparams(optax.sgd)(learning_rate=0.0)
    ts = loop.optax_step(_lsq, opt)

    def init_run(lr):
        s = ts.init(_params())
        hp = dict(s.opt_state.hyperparams, learning_rate=lr)
        return s._replace(opt_state=s.opt_state._replace(hyperparams=hp))

    states = jax.vmap(init_run)(lrs)
    st, h = loop.fit(ts.step, states, data, steps=9, batch_size=12, key=key, runs=True,
                     progress=False, eval_fn=lambda s: {"mse": _lsq(s.params, data)})
    assert h["train"]["loss"].shape == (9, 3) and h["eval"]["mse"].shape == (1, 3)
    ts_sgd = loop.optax_step(_lsq, optax.sgd(0.05))
    for r, lr in enumerate([0.01, 0.05, 0.1]):
        # separate single runs (the same step, so one compilation): inject_hyperparams(sgd)
        # with this rate; the middle one also against plain optax.sgd(0.05)
        s1, h1 = loop.fit(ts.step, init_run(jnp.asarray(lr)), data, steps=9, batch_size=12,
                          key=key, progress=False)
        if r == 1:
            s2, _ = loop.fit(ts_sgd.step, ts_sgd.init(_params()), data, steps=9, batch_size=12,
                             key=key, progress=False)
            np.testing.assert_allclose(s1.params["w"], s2.params["w"], rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(st.params["w"][r], s1.params["w"], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(h["train"]["loss"][:, r], h1["train"]["loss"], rtol=1e-5)


def test_runs_per_run_keys_and_data(key):
    """Each run gets its own key stream; data_runs_axis gives each run its own data."""
    def step(s, batch, k):
        return s + jnp.sum(batch) + jax.random.uniform(k), {"u": jax.random.uniform(k)}

    data = jnp.stack([jnp.ones((4,)), 2 * jnp.ones((4,))])  # [R=2, n=4]
    s, h = loop.fit(step, jnp.zeros((2,)), data, steps=3, key=key, runs=True,
                    data_runs_axis=True, progress=False)
    _, step_key = jax.random.split(key)
    rk = jax.random.split(step_key, 2)
    u = np.array([[float(jax.random.uniform(jax.random.fold_in(rk[r], t))) for r in range(2)]
                  for t in range(3)])
    np.testing.assert_allclose(h["train"]["u"], u, rtol=1e-6)
    np.testing.assert_allclose(s, [3 * 4.0 + u[:, 0].sum(), 3 * 8.0 + u[:, 1].sum()], rtol=1e-5)


def test_nonfinite_raises_with_step_and_metric(key):
    def step(s, batch, k):
        s = s + 1.0
        return s, {"loss": jnp.where(s >= 7, jnp.nan, 1.0 / s), "ok": s}

    with pytest.raises(loop.NonFiniteError, match=r"'loss'.*step 6") as err:
        loop.fit(step, jnp.zeros(()), jnp.zeros((3, 1)), steps=20, key=key, progress=False,
                 chunk_size=4)
    assert err.value.step == 6 and err.value.metric == "loss"
    assert err.value.last_good_step == 4 and float(err.value.state) == 4.0
    assert isinstance(err.value, FloatingPointError)
    # check_finite=False lets it run
    s, h = loop.fit(step, jnp.zeros(()), jnp.zeros((3, 1)), steps=8, key=key, progress=False,
                    check_finite=False)
    assert np.isnan(h["train"]["loss"][-1]) and float(s) == 8.0


def test_nonfinite_bfloat16_metric_raises(key):
    """A bfloat16 metric is checked too (no numpy inexact: its NaN used to pass silently)."""
    def step(s, batch, k):
        s = s + 1.0
        return s, {"loss": jnp.where(s >= 3, jnp.nan, 1.0 / s).astype(jnp.bfloat16)}

    with pytest.raises(loop.NonFiniteError, match=r"'loss'.*step 2"):
        loop.fit(step, jnp.zeros(()), jnp.zeros((3, 1)), steps=5, key=key, progress=False)


def test_nonfinite_metrics_survive_json_and_a_resume(key, tmp_path):
    """+inf, -inf and NaN metrics round-trip through the JSON history (strict JSON: None and
    the strings "inf" / "-inf"), so a resumed run's history equals an uninterrupted one's."""
    def step(s, batch, k):
        s = s + 1.0
        loss = jnp.where(s == 2, jnp.inf, jnp.where(s == 3, -jnp.inf,
                                                    jnp.where(s == 4, jnp.nan, 1.0 / s)))
        return s, {"loss": loss}

    kw = dict(steps=8, key=key, progress=False, check_finite=False, chunk_size=2)
    _, whole = loop.fit(step, jnp.zeros(()), jnp.zeros((3, 1)), **kw)
    js = json.loads(json.dumps(loop.history_to_jsonable(whole), allow_nan=False))
    assert js["train"]["loss"][1:4] == ["inf", "-inf", None]
    back = loop.history_from_jsonable(js)
    np.testing.assert_array_equal(back["train"]["loss"], whole["train"]["loss"])  # NaN == NaN

    def stop_at_6(t, state, metrics):  # after fit saved step 6
        if t == 6:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        loop.fit(step, jnp.zeros(()), jnp.zeros((3, 1)), checkpoint_dir=tmp_path,
                 checkpoint_every=2, callback=stop_at_6, **kw)
    _, resumed = loop.fit(step, jnp.zeros(()), jnp.zeros((3, 1)), checkpoint_dir=tmp_path,
                          checkpoint_every=2, **kw)
    assert np.isposinf(resumed["train"]["loss"][1]) and np.isneginf(resumed["train"]["loss"][2])
    np.testing.assert_array_equal(resumed["train"]["loss"], whole["train"]["loss"])


def test_early_stopping_restore_best(key):
    # state counts updates; eval metric (t - target)^2 is minimal at t = target
    def step(s, batch, k):
        return dict(s, t=s["t"] + 1), {"loss": jnp.zeros(())}

    def ev(s):
        return {"d": ((s["t"] - s["target"]) ** 2).astype(jnp.float32)}

    def state(t):
        return {"t": jnp.zeros_like(t), "target": t}

    es = loop.EarlyStopping("d", mode="min", patience=2)
    s, h = loop.fit(step, state(jnp.asarray(30)), jnp.zeros((4, 1)), steps=200, key=key,
                    eval_fn=ev, eval_every=10, early_stopping=es, progress=False)
    np.testing.assert_array_equal(h["eval_step"], [10, 20, 30, 40, 50])
    assert int(s["t"]) == 50 and h["early_stopping"]["stopped"]
    assert int(h["early_stopping"]["best_step"]) == 30
    # per-run bookkeeping on a runs axis, each run restored to its own best state
    es = es._replace(restore_best=True)
    s, h = loop.fit(step, state(jnp.array([30, 50])), jnp.zeros((4, 1)), steps=200, key=key,
                    eval_fn=ev, eval_every=10, early_stopping=es, progress=False, runs=True)
    assert h["eval_step"][-1] == 70 and h["eval"]["d"].shape == (7, 2)
    np.testing.assert_array_equal(s["t"], [30, 50])
    np.testing.assert_array_equal(h["early_stopping"]["best_step"], [30, 50])


def test_clear_errors(key):
    data = _problem(key)
    ts = loop.optax_step(_lsq, optax.sgd(0.1))
    st = ts.init(_params())
    with pytest.raises(ValueError, match="exactly one"):
        loop.fit(ts.step, st, data, steps=3, epochs=1, key=key)
    with pytest.raises(ValueError, match="batch_size"):
        loop.fit(ts.step, st, data, steps=3, batch_size=1000, key=key)
    with pytest.raises(ValueError, match="disagree"):
        loop.fit(ts.step, st, (data[0], data[1][:5]), steps=3, key=key)
    with pytest.raises(ValueError, match="NaN"):
        loop.fit(ts.step, st, (data[0].at[0, 0].set(jnp.nan), data[1]), steps=3, key=key)
    with pytest.raises(ValueError, match="not a scalar"):
        loop.fit(lambda s, b, k: (s, {"v": b[0][:2, 0]}), st, data, steps=2, key=key,
                 progress=False)
    with pytest.raises(ValueError, match="runs axis"):
        loop.fit(ts.step, st, data, steps=2, key=key, runs=True)
    with pytest.raises(ValueError, match="key="):
        loop.fit(ts.step, st, data, steps=2, key=None)


# ----------------------------------------------------------------------------- checkpoints

def _load_worker():
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parent / "_loop_worker.py"
    spec = importlib.util.spec_from_file_location("_loop_worker", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_killed_run_resumes_to_the_same_final_state(tmp_path):
    """SIGKILL a subprocess right after its step-4 checkpoint, rerun: same end state."""
    import os
    import subprocess
    import sys

    w = _load_worker()
    ck = tmp_path / "ck"
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, w.__file__, "ckpt", str(ck), str(tmp_path / "a.json"),
                           "4"], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr[-3000:]  # it really was killed
    assert (ck / "4").is_dir() and not (ck / "8").exists()
    # rerun with the same arguments (in this process): resumes after step 4; the killed
    # process's lock is recognised as stale and taken over
    with pytest.warns(RuntimeWarning, match="stale lock"):
        s_resumed, h_resumed, calls = w.run_ckpt(str(ck))
    assert calls[0] == 5
    s_full, h_full, calls_full = w.run_ckpt(str(tmp_path / "fresh"))
    assert calls_full[0] == 1
    for a, b in zip(jax.tree_util.tree_leaves(s_full["train"]),
                    jax.tree_util.tree_leaves(s_resumed["train"])):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(jax.random.key_data(s_full["noise_key"]),
                                  jax.random.key_data(s_resumed["noise_key"]))
    np.testing.assert_array_equal(h_full["step"], h_resumed["step"])
    np.testing.assert_allclose(h_full["train"]["loss"], h_resumed["train"]["loss"], rtol=0)
    # a finished run restarted again returns at once with the same result
    s_again, h_again, calls_again = w.run_ckpt(str(ck))
    assert calls_again == []
    np.testing.assert_array_equal(np.asarray(s_again["train"].params[0]["w"]),
                                  np.asarray(s_full["train"].params[0]["w"]))
    # different arguments on the same directory: a clear error, not a silent mix
    with pytest.raises(ValueError, match="different run"):
        loop.fit(w.ckpt_step, w.ckpt_state(), w.problem(), steps=9, batch_size=w.BATCH,
                 key=jax.random.key(3), checkpoint_dir=str(ck), progress=False)


def test_nonfinite_keeps_last_good_checkpoint(key, tmp_path):
    import orbax.checkpoint as ocp

    def step(s, batch, k):
        s = s + 1.0
        return s, {"loss": jnp.where(s >= 8, jnp.inf, 1.0)}

    with pytest.raises(loop.NonFiniteError, match="step 7") as err:
        loop.fit(step, jnp.zeros(()), jnp.zeros((3, 1)), steps=20, key=key, progress=False,
                 checkpoint_dir=str(tmp_path), checkpoint_every=2)
    assert err.value.last_good_step == 6
    mngr = ocp.CheckpointManager(str(tmp_path))
    assert mngr.latest_step() == 6
    restored = mngr.restore(6, args=ocp.args.Composite(
        arrays=ocp.args.StandardRestore({"state": jnp.zeros(()), "best": None})))
    assert float(restored["arrays"]["state"]) == 6.0
    mngr.close()


def test_permutation_fallback_path_gives_same_batches(key, monkeypatch):
    """Chunks touching too many epochs redraw permutations with lax.cond: same run."""
    import layerlab.loop._chunks as fit_mod

    data = _problem(key)
    ts = loop.optax_step(_lsq, optax.sgd(0.05))
    ref, _ = _manual(ts.step, ts.init(_params()), data, key, 11, 10)
    monkeypatch.setattr(fit_mod, "_MAX_PERM_ENTRIES", 0)

    def fresh_step(s, b, k):  # a new function: traced (and compiled) under the patched limit
        return ts.step(s, b, k)

    st, _ = loop.fit(fresh_step, ts.init(_params()), data, steps=11, batch_size=10, key=key,
                     progress=False, chunk_size=6)
    np.testing.assert_allclose(st.params["w"], ref.params["w"], rtol=1e-5, atol=1e-6)


def test_augment_inputs_equals_fitting_the_augmented_batches_by_hand():
    """``augment_inputs``: a ``fit`` of the wrapped step equals a Python loop that applies the
    plain step to batches it augments itself, with ``fold_in(key_t, 0x5A)`` of the documented
    step keys ``key_t = fold_in(k_step, t)``, ``(k_data, k_step) = split(key)``."""
    def loss_fn(p, batch):
        x, y = batch
        return jnp.mean((x @ p - y) ** 2)

    def aug(k, x):  # a random per-row scale
        return x * (1.0 + jax.random.uniform(k, (x.shape[0], 1)))

    ts = loop.optax_step(loss_fn, optax.sgd(0.05))
    wrapped = loop.augment_inputs(ts, aug)
    x = jax.random.normal(jax.random.key(0), (8, 3))
    y = x @ jnp.array([1.0, -2.0, 0.5])
    key = jax.random.key(7)
    st, _ = loop.fit(wrapped.step, ts.init(jnp.zeros(3)), (x, y), key=key, steps=3,
                     batch_size=None, progress=False)
    k_step = jax.random.split(key)[1]
    manual = ts.init(jnp.zeros(3))
    for t in range(3):
        k = jax.random.fold_in(k_step, t)
        manual, _ = ts.step(manual, (aug(jax.random.fold_in(k, 0x5A), x), y), k)
    np.testing.assert_allclose(st.params, manual.params, rtol=1e-5)
    plain, _ = loop.fit(ts.step, ts.init(jnp.zeros(3)), (x, y), key=key, steps=3,
                        batch_size=None, progress=False)
    assert not np.allclose(st.params, plain.params, rtol=1e-3)


def test_checkpoint_is_saved_before_the_next_chunk_runs(key, tmp_path, monkeypatch):
    """The state after t updates is saved before step t+1 executes (no look-ahead chunk
    past a checkpoint), so a stop loses at most one checkpoint interval; results unchanged."""
    from layerlab.loop import _run

    events = []
    saved = _run.FitRun.save

    def save(self):
        saved(self)
        events.append(("save", int(self.t)))  # its blocking part has returned

    monkeypatch.setattr(_run.FitRun, "save", save)

    def step(s, batch, k):
        jax.debug.callback(lambda t: events.append(("step", int(t))), s)  # t = updates so far
        return s + 1.0, {"loss": s + jnp.sum(batch)}

    data = jnp.ones((4, 1))
    kw = dict(steps=12, key=key, progress=False, chunk_size=2, eval_every=2,
              eval_fn=lambda s: {"v": s * 2.0})
    s_ck, h_ck = loop.fit(step, jnp.zeros(()), data, checkpoint_dir=str(tmp_path),
                          checkpoint_every=4,
                          callback=lambda t, s, m: events.append(("callback", int(t))), **kw)
    jax.effects_barrier()
    steps = [t for kind, t in events if kind == "step"]
    assert sorted(steps) == list(range(12))
    saves = [t for kind, t in events if kind == "save"]
    assert saves == [4, 8, 12]
    for t in (4, 8):  # saved and called back before the first step after it ran
        assert events.index(("save", t)) < events.index(("callback", t)), events
        assert events.index(("callback", t)) < events.index(("step", t)), events
    events.clear()
    s_plain, h_plain = loop.fit(step, jnp.zeros(()), data, **kw)
    jax.effects_barrier()
    assert float(s_ck) == float(s_plain) == 12.0
    np.testing.assert_array_equal(h_ck["train"]["loss"], h_plain["train"]["loss"])
    np.testing.assert_array_equal(h_ck["eval"]["v"], h_plain["eval"]["v"])


def test_zero_steps_still_evaluates_at_start(key):
    """steps=0 with eval_at_start=True: the initial state is evaluated (it returned an empty
    evaluation history), and nothing is trained."""
    st, h = loop.fit(lambda s, b, k: (s + 1.0, {"loss": s}), jnp.zeros(()), jnp.ones((4, 1)),
                     key=key, steps=0, eval_fn=lambda s: {"v": s * 2.0 + 3.0},
                     eval_at_start=True, progress=False)
    assert float(st) == 0.0 and h["step"].shape == (0,)
    np.testing.assert_array_equal(h["eval_step"], [0])
    np.testing.assert_allclose(h["eval"]["v"], [3.0])


def test_discard_checkpoints_after_resumes_from_an_earlier_step(key, tmp_path):
    """A finished run's checkpoints past step 4 discarded: the next call resumes at 4, calls
    back for steps 6 and 8 again and ends with the uninterrupted run's state and history."""
    def step(s, batch, k):
        return s + jnp.sum(batch) + jax.random.uniform(k), {"loss": s}

    data = jnp.arange(8.0)[:, None]
    kw = dict(steps=8, batch_size=4, key=key, progress=False, chunk_size=2,
              checkpoint_dir=tmp_path, checkpoint_every=2, max_to_keep=4)
    s_full, h_full = loop.fit(step, jnp.zeros(()), data, **kw)
    assert loop.discard_checkpoints_after(tmp_path, 4) == [6, 8]
    assert loop.discard_checkpoints_after(tmp_path / "absent", 0) == []
    seen = []
    s_again, h_again = loop.fit(step, jnp.zeros(()), data,
                                callback=lambda t, st, m: seen.append(t), **kw)
    assert seen == [6, 8]
    assert float(s_again) == float(s_full)
    np.testing.assert_array_equal(h_again["train"]["loss"], h_full["train"]["loss"])


def test_bad_step_metrics_are_refused_before_any_step_runs(key):
    """A non-scalar, nested or non-string-named metric, or a ``check_finite`` name the step
    does not return, is found by tracing the step before the first chunk runs (it used to
    surface after the first chunk, a tenth of the run, or -- for ``{0: loss}`` -- as a
    KeyError after a resume)."""
    ran = []

    def make(metrics):
        def step(s, batch, k):
            jax.debug.callback(lambda t: ran.append(int(t)), s)
            return s + 1.0, metrics(s, batch)
        return step

    kw = dict(key=key, steps=40, batch_size=2, progress=False)
    data = jnp.ones((4, 1))
    cases = [
        (make(lambda s, b: {"v": b[:, 0]}), {}, ValueError, r"'v' from step is not a scalar"),
        (make(lambda s, b: {"a": {"b": s}}), {}, TypeError, r"'a' is a dict"),
        (make(lambda s, b: {0: s}), {}, TypeError, r"metric name 0 \(int\).*strings"),
        (make(lambda s, b: (s,)), {}, TypeError, "dict of scalars, got tuple"),
        (make(lambda s, b: {"l": s}), dict(check_finite=["loss"]), KeyError,
         r"check_finite names 'loss', not a metric of step: \['l'\]"),
    ]
    for step, extra, err, match in cases:
        with pytest.raises(err, match=match):
            loop.fit(step, jnp.zeros(()), data, **kw, **extra)
        jax.effects_barrier()
        assert ran == [], (match, ran)
    with pytest.raises(TypeError, match=r"eval_fn returned the metric name 0"):
        loop.fit(make(lambda s, b: {"l": s}), jnp.zeros(()), data, **kw,
                 eval_fn=lambda s: {0: s})
    jax.effects_barrier()
    assert ran == []


def test_coprime_eval_and_checkpoint_periods_keep_long_chunks(key, tmp_path):
    """eval_every=7, checkpoint_every=10: the periods' gcd is 1, which made the default chunk
    one step (a host round trip per step).  Chunks stay about a tenth of the run, cut at
    every multiple of both periods, with the remainders run as powers of two (a bounded
    number of compiled lengths); the result equals one-step chunks, and a run resumed from
    a checkpoint equals the uninterrupted one bit for bit."""
    from layerlab.loop._chunks import default_chunking

    assert default_chunking(20000, [100, 2001]) == (100, True)
    assert default_chunking(20000, [100, 2000]) == (100, False)
    assert default_chunking(25, [10]) == (2, False)  # a common divisor: unchanged
    data = _problem(key, n=8)
    ts = loop.optax_step(_lsq, optax.sgd(0.05))
    lengths = []

    def cb(t, s, m):
        lengths.append(len(m["loss"]))

    kw = dict(steps=42, batch_size=None, key=key, progress=False, eval_every=7,
              eval_fn=lambda s: {"mse": _lsq(s.params, data)})
    s1, h1 = loop.fit(ts.step, ts.init(_params()), data, callback=cb, **kw,
                      checkpoint_dir=str(tmp_path / "a"), checkpoint_every=10)
    chunk, ragged = default_chunking(42, [7, 10])
    assert ragged and chunk == 5 and sum(lengths) == 42 and len(lengths) <= 42 // 2, lengths
    assert set(lengths) <= {5, 4, 2, 1}, lengths
    s_one, h_one = loop.fit(ts.step, ts.init(_params()), data, chunk_size=1, **kw)
    np.testing.assert_allclose(s1.params["w"], s_one.params["w"], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(h1["train"]["loss"], h_one["train"]["loss"], rtol=1e-6)
    np.testing.assert_allclose(h1["eval"]["mse"], h_one["eval"]["mse"], rtol=1e-6)

    def stop(t, s, m):
        if t == 20:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        loop.fit(ts.step, ts.init(_params()), data, callback=stop, **kw,
                 checkpoint_dir=str(tmp_path / "b"), checkpoint_every=10)
    s2, h2 = loop.fit(ts.step, ts.init(_params()), data, **kw,
                      checkpoint_dir=str(tmp_path / "b"), checkpoint_every=10)
    for a, b in zip(jax.tree_util.tree_leaves(s1), jax.tree_util.tree_leaves(s2), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(h1["train"]["loss"], h2["train"]["loss"])
    np.testing.assert_array_equal(h1["eval"]["mse"], h2["eval"]["mse"])


def test_a_fresh_closure_and_its_arrays_are_freed_after_fit(key):
    """A step or eval_fn closure is a static argument: it used to stay in a module-level
    compile cache (with its captured arrays and the program holding them as constants) for
    the life of the process -- each fit with a fresh lambda over validation data kept them.
    Now its compiled programs go with it; the same function reused still compiles once."""
    import gc
    import weakref

    from layerlab.loop import _chunks

    data = _problem(key)
    ts = loop.optax_step(_lsq, optax.sgd(0.05))

    def fit_fresh(i):
        xv = np.asarray(data[0]) + i  # captured by both closures (a numpy array: weakref-able)
        step = lambda s, b, k: ts.step(s, (b[0] + 0 * xv[0, 0], b[1]), k)  # noqa: E731
        ev = lambda s: {"mse": _lsq(s.params, (xv, data[1]))}  # noqa: E731
        loop.fit(step, ts.init(_params()), data, steps=3, batch_size=16, key=key,
                 progress=False, eval_fn=ev)
        return weakref.ref(xv), weakref.ref(step), weakref.ref(ev)

    gc.collect()
    n_chunk, n_eval = len(_chunks._chunk_jits), len(_chunks._eval_jits)
    refs = [fit_fresh(i) for i in range(2)]
    gc.collect()
    assert all(r() is None for rs in refs for r in rs), refs
    assert len(_chunks._chunk_jits) <= n_chunk and len(_chunks._eval_jits) <= n_eval
    # a function that stays alive keeps its program: a second fit does not retrace
    traces = []

    def step(s, b, k):
        traces.append(1)
        return ts.step(s, b, k)

    for _ in range(2):
        loop.fit(step, ts.init(_params()), data, steps=3, batch_size=16, key=key,
                 progress=False)
    assert len(traces) == 1


def test_argument_errors_name_the_data_leaf_and_refuse_eval_at_start_alone(key):
    """Data leaves of different lengths are named by their path; ``eval_at_start=True``
    without ``eval_fn`` is refused (it was ignored)."""
    st = jnp.zeros(())

    def step(s, b, k):
        return s, {"l": s}

    with pytest.raises(ValueError, match=r"data\['x'\] has 5 .*data\['y'\] \(4,\)"):
        loop.fit(step, st, {"x": jnp.ones((5, 2)), "y": jnp.ones((4,))}, key=key, steps=2)
    with pytest.raises(ValueError, match=r"data\[1\] \(\) has none"):
        loop.fit(step, st, (jnp.ones((5, 2)), jnp.ones(())), key=key, steps=2)
    with pytest.raises(ValueError, match="eval_at_start=True given without eval_fn"):
        loop.fit(step, st, jnp.ones((4, 1)), key=key, steps=2, eval_at_start=True)


def test_max_to_keep_without_checkpoint_dir_is_refused(key, tmp_path):
    """max_to_keep given without checkpoint_dir was accepted and unused (a typo'd or missing
    directory trained without checkpoints silently); now a ValueError naming both, before
    tracing.  Left out or None it stays fine; a Checkpointing needs a directory."""
    def step(s, b, k):
        return s + 1.0, {"loss": s}

    data = jnp.ones((4, 1))
    for keep in (1, 2, 5):  # 2 is the default's value: given, it is still refused
        with pytest.raises(ValueError, match=rf"^fit: max_to_keep={keep} given without "
                                             r"checkpoint_dir"):
            loop.fit(step, jnp.zeros(()), data, key=key, steps=1, progress=False,
                     max_to_keep=keep)
    with pytest.raises(ValueError, match=r"^fit: checkpoint\.directory must be a directory "
                                         r"path, got None"):
        loop.fit(step, jnp.zeros(()), data, key=key, steps=1, progress=False,
                 checkpoint=loop.Checkpointing(None))
    for kw in ({}, {"max_to_keep": None}):
        st, _ = loop.fit(step, jnp.zeros(()), data, key=key, steps=2, progress=False, **kw)
        assert float(st) == 2.0


def test_an_unhashable_step_or_eval_fn_is_refused_naming_it(key):
    """A dataclass with ``__call__`` (``eq=True``: no hash) or a frozen one with an array
    field gave jax's "Non-hashable static arguments are not supported" from inside the
    compiled chunk; now a TypeError naming the argument and what to pass instead.  The
    suggested ``functools.partial`` of the same object trains."""
    import dataclasses
    import functools

    @dataclasses.dataclass
    class Step:
        lr: float

        def __call__(self, w, b, k):
            loss, g = jax.value_and_grad(lambda w: jnp.mean((b[0] * w - b[1]) ** 2))(w)
            return w - self.lr * g, {"loss": loss}

    @dataclasses.dataclass(frozen=True)
    class ArrayStep:
        lr: jax.Array
        __call__ = Step.__call__

    @dataclasses.dataclass
    class Eval:
        def __call__(self, w):
            return {"w": w}

    x = jnp.linspace(-1, 1, 8)[:, None]
    data = (x, 3 * x)
    kw = dict(key=key, steps=4, batch_size=4, progress=False)
    hint = r"Pass a function or a functools\.partial of one .* or a jax\.tree_util\.Partial"
    for bad in (Step(0.1), ArrayStep(jnp.float32(0.1))):
        with pytest.raises(TypeError, match=rf"^fit: step must be hashable .*got a "
                                            rf"{type(bad).__name__} that is not .*{hint}"):
            loop.fit(bad, jnp.zeros(()), data, **kw)
    with pytest.raises(TypeError, match=rf"^fit: eval_fn must be hashable .*got a Eval .*{hint}"):
        loop.fit(functools.partial(Step.__call__, Step(0.1)), jnp.zeros(()), data,
                 eval_fn=Eval(), eval_every=2, **kw)
    w, hist = loop.fit(functools.partial(Step.__call__, Step(0.1)), jnp.zeros(()), data,
                       eval_fn=functools.partial(Eval.__call__, Eval()), eval_every=2, **kw)
    assert 0.0 < float(w) < 3.0 and hist["eval_step"].tolist() == [2, 4]

_HALF_HINT = (r"The state holds float16 leaves: a likely cause is the optimiser's eps \(optax's "
              r"Adam default 1e-8 rounds to 0 in float16, so the first update divides by "
              r"zero\): pass eps >= ~1e-4")


def test_nonfinite_float16_state_names_the_optimisers_eps(key):
    """float16 params with Adam's eps = 1e-8 (0 in float16): the first update divides by zero;
    the message said only 'Lower the learning rate'."""
    x, y = _problem(key)
    p16 = jax.tree_util.tree_map(lambda a: a.astype(jnp.float16), _params())

    def loss(p, batch):  # small gradients: (1 - b2) g^2 underflows to 0 in float16
        return 1e-4 * _lsq(jax.tree_util.tree_map(lambda a: a.astype(jnp.float32), p), batch)

    ts = loop.optax_step(loss, optax.adam(1e-3))
    with pytest.raises(loop.NonFiniteError, match=r"Lower the learning rate.*" + _HALF_HINT):
        loop.fit(ts.step, ts.init(p16), (x, y), steps=3, key=key, progress=False)
    ts = loop.optax_step(loss, optax.adam(1e-3, eps=1e-4))  # the hint's fix
    state, hist = loop.fit(ts.step, ts.init(p16), (x, y), steps=3, key=key, progress=False)
    assert np.isfinite(hist["train"]["loss"]).all()
    assert all(bool(jnp.isfinite(a).all()) for a in jax.tree_util.tree_leaves(state.params))


def test_nonfinite_hint_for_a_half_precision_metric_failure_only(key):
    def step(s, batch, k):
        return s + 1.0, {"loss": jnp.where(s >= 2, jnp.nan, 1.0).astype(s.dtype)}

    with pytest.raises(loop.NonFiniteError, match=r"'loss'.*step 2.*" + _HALF_HINT):
        loop.fit(step, jnp.zeros((), jnp.float16), jnp.zeros((3, 1)), steps=5, key=key,
                 progress=False)
    with pytest.raises(loop.NonFiniteError) as err:  # float32: the message as before
        loop.fit(step, jnp.zeros(()), jnp.zeros((3, 1)), steps=5, key=key, progress=False)
    assert "leaves: a likely cause" not in str(err.value)
