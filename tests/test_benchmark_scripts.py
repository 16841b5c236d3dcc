"""Speed benchmarks and the quickstart explain themselves: ``--help`` imports no JAX (flags
are parsed first), every flag has help text and shows its default, and the default output
folder is ``scratch/`` (only ``--record`` writes the committed ``results/``).  ``benchmarks/``
holds only speed measurements: reproductions of a paper's figures live in ``reproduce/``."""

import argparse
import importlib
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
SPEED = ["dgl_loss", "dgl_cholesky_variants", "gnrev_step", "loop_overhead", "kernels_eval",
         "probes_cka", "dmn_fit", "bottleneck_sweep", "xla_cpu_emitters", "fit_partial_step",
         "fit_checkpoint", "bottleneck_ntk_trace"]
SCRIPTS = SPEED + ["quickstart"]
OTHER = ["inspect_overhead"]  # a speed measurement with its own tests (tests/inspect)


def test_benchmarks_holds_only_the_listed_speed_measurements():
    found = sorted(p.stem for p in (REPO / "benchmarks").glob("*.py")
                   if not p.name.startswith("_"))
    assert found == sorted(SCRIPTS + OTHER), (
        "benchmarks/ changed: a speed measurement goes into SPEED here; a reproduction of a "
        "paper's figure or table goes into reproduce/ (reproduce/_cli.py, a record and a PNG)")


@pytest.mark.parametrize("name", SCRIPTS)
def test_help_imports_no_jax(name):
    code = (
        "import runpy, sys\n"
        f"sys.argv = ['{name}', '--help']\n"
        "try:\n"
        f"    runpy.run_module('benchmarks.{name}', run_name='__main__')\n"
        "except SystemExit as e:\n"
        "    assert e.code in (0, None), e.code\n"
        "heavy = [m for m in ('jax', 'flax', 'optax', 'matplotlib') if m in sys.modules]\n"
        "print('HEAVY=' + ','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "usage:" in out.stdout
    assert out.stdout.rstrip().endswith("HEAVY="), (
        f"{name} --help imported {out.stdout.rsplit('HEAVY=', 1)[-1].strip()}")


@pytest.mark.parametrize("name", SCRIPTS + OTHER)  # inspect_overhead hid its defaults
def test_every_flag_has_help_and_shows_its_default(name):
    mod = importlib.import_module(f"benchmarks.{name}")
    ap = mod.build_parser()
    assert isinstance(ap.formatter_class, type) and issubclass(
        ap.formatter_class, argparse.ArgumentDefaultsHelpFormatter)
    flags = [a for a in ap._actions if a.option_strings and a.dest != "help"]
    assert flags
    missing = [a.option_strings[0] for a in flags if not (a.help or "").strip()]
    assert not missing, f"{name}: flags without help: {missing}"
    assert {"--out", "--record"} <= {s for a in flags for s in a.option_strings}


@pytest.mark.parametrize("name", SPEED)
def test_default_output_is_scratch(name, tmp_path):
    """...under the script's own name: the names each script passes to ``out_dir`` and
    ``add_output_flags`` are read from its source (dgl_cholesky_variants wrote under
    "dgl_loss", next to dgl_loss's record, while this test checked a name it never used)."""
    import ast

    from benchmarks import _common

    args = importlib.import_module(f"benchmarks.{name}").build_parser().parse_args([])
    assert args.out is None and args.record is False
    tree = ast.parse((REPO / "benchmarks" / f"{name}.py").read_text())
    used = {(node.func.id, node.args[i].value) for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            for fn, i in (("out_dir", 0), ("add_output_flags", 1)) if node.func.id == fn
            and len(node.args) > i and isinstance(node.args[i], ast.Constant)}
    assert {fn for fn, _ in used} == {"out_dir", "add_output_flags"}, used
    assert {n for _, n in used} == {name}, f"{name} writes under {used}"
    assert _common.out_dir(name, None, False) == _common.SCRATCH / name
    assert _common.out_dir(name, None, True) == _common.RESULTS / name
    assert _common.out_dir(name, str(tmp_path), True) == tmp_path


def test_timeit_interleaved_calls_every_case_once_per_round():
    """Warm-up calls of each case first, then ``repeats`` rounds in which every case is
    called once, the order rotated each round (so a drift of the machine's speed hits all
    cases alike and no case always runs first); the stats are over that case's own timed
    calls.  ``--compare-rev`` loads a commit's ``_loss.py`` as its own module."""
    import numpy as np

    from benchmarks._common import timeit_interleaved

    calls = []

    def make(name):
        def f(x):
            calls.append(name)
            return np.asarray(x)
        return f

    out = timeit_interleaved({"a": (make("a"), (1,)), "b": (make("b"), (2,))}, repeats=3,
                             warmup=2)
    assert calls == ["a", "a", "b", "b"] + ["a", "b", "b", "a", "a", "b"]
    for name in "ab":
        r = out[name]
        assert r["repeats"] == 3 and r["interleaved"] and len(r["times_s"]) == 3
        assert r["min_s"] <= r["median_s"] <= r["max_s"] and r["compile_s"] > 0
    from benchmarks import dgl_loss

    mod = dgl_loss._loss_at("HEAD")
    assert mod.__name__ == "_loss_HEAD" and callable(mod.dgl_loss)
    with pytest.raises(SystemExit, match="--compare-rev"):
        dgl_loss._loss_at("no-such-revision-xyz")


def test_fit_checkpoint_counts_the_steps_run_past_a_save(tmp_path):
    """The lag the benchmark reports: 0 steps past t when save(t) returns, both through the
    current fit and through ``--compare-rev HEAD``'s (``_fit.py`` loaded from git as its own
    module beside the current siblings; HEAD, so that a shallow clone has it)."""
    import json

    from benchmarks import fit_checkpoint

    assert fit_checkpoint.main(["--steps", "40", "--batch", "64", "--hidden", "16",
                                "--periods", "10", "--repeats", "1", "--compare-rev", "HEAD",
                                "--out", str(tmp_path)]) == 0
    rec = json.loads((tmp_path / "fit_checkpoint.json").read_text())["records"][0]
    for case in ("ckpt", "ckpt@HEAD"):
        assert rec["lag"][case] == {"max_steps_past_save": 0, "mean_steps_past_save": 0.0,
                                    "saves": 4}
    assert set(rec["times"]) == {"eval_only", "ckpt", "ckpt@HEAD"}
    assert rec["ckpt_over_ckpt@HEAD"] > 0
    assert (tmp_path / "fit_checkpoint.png").is_file()
    with pytest.raises(SystemExit, match="--compare-rev"):
        fit_checkpoint._fit_at("no-such-revision-xyz")


def _run_py(code, env=None, timeout=180):
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, timeout=timeout, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_dgl_loss_threads_flag_is_parsed_by_argparse_and_what_applied_is_recorded(tmp_path):
    """``--threads`` was read from raw ``sys.argv``: ``--threads=all`` and the prefix
    ``--thr all`` still pinned the process to one core (with single-threaded Eigen) while the
    JSON said "all"; ``main()`` called in-process with the default only warned.  Now argparse
    reads it, ``--threads 1`` pins only in ``main`` and is refused once JAX's backend runs,
    and the JSON records the affinity and ``XLA_FLAGS`` that applied."""
    code = (
        "import os, runpy, sys\n"
        "before, flags = sorted(os.sched_getaffinity(0)), os.environ.get('XLA_FLAGS', '')\n"
        "sys.argv = ['dgl_loss', '--threads=all', '--help']\n"
        "try:\n"
        "    runpy.run_module('benchmarks.dgl_loss', run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "assert sorted(os.sched_getaffinity(0)) == before\n"
        "assert 'multi_thread_eigen' not in os.environ.get('XLA_FLAGS', ''), 'pinned'\n"
        "from benchmarks import dgl_loss as m\n"
        "class Stop(Exception): pass\n"
        "def stop(): raise Stop\n"
        "m._imports = stop\n"
        "for argv in (['--threads=all'], ['--thr', 'all']):\n"
        "    try:\n"
        "        m.main(argv)\n"
        "    except Stop:\n"
        "        pass\n"
        "    assert sorted(os.sched_getaffinity(0)) == before, argv\n"
        "    assert os.environ.get('XLA_FLAGS', '') == flags, argv\n"
        "try:\n"
        "    m.main(['--thr', '1'])\n"
        "except Stop:\n"
        "    pass\n"
        "assert sorted(os.sched_getaffinity(0)) == before[:1]\n"
        "assert '--xla_cpu_multi_thread_eigen=false' in os.environ['XLA_FLAGS']\n"
        "import jax\n"
        "jax.devices()\n"
        "try:\n"
        "    m.main([])\n"
        "except SystemExit as e:\n"
        "    assert 'before JAX starts' in str(e), e\n"
        "else:\n"
        "    raise AssertionError('--threads 1 after JAX started was not refused')\n"
        "print('OK')\n"
    )
    assert _run_py(code).strip().endswith("OK")
    import json

    from benchmarks import dgl_loss

    dgl_loss.main(["--threads", "all", "--ns", "8", "--max-n", "8", "--repeats", "1",
                   "--kernel-n", "8", "--lego-n", "0", "--vmap-n", "0", "--out", str(tmp_path)])
    rec = json.loads((tmp_path / "dgl_loss.json").read_text())
    assert rec["threads"] == "all" and rec["pinned"] is False
    assert rec["kernel"]["N"] == 8
    # --kernel-n 0 skips the kernel timing, as 0 does for --lego-n / --vmap-n (it crashed on
    # an empty array after the main timings); a negative size is refused when parsing
    dgl_loss.main(["--threads", "all", "--ns", "8", "--max-n", "8", "--repeats", "1",
                   "--kernel-n", "0", "--lego-n", "0", "--vmap-n", "0", "--out",
                   str(tmp_path / "k0")])
    assert json.loads((tmp_path / "k0" / "dgl_loss.json").read_text())["kernel"] is None
    with pytest.raises(SystemExit):
        dgl_loss.build_parser().parse_args(["--kernel-n", "-1"])
    assert rec["affinity"] == sorted(__import__("os").sched_getaffinity(0))
    assert rec["xla_flags"] == __import__("os").environ.get("XLA_FLAGS")


class _Stop(Exception):
    """Ends a benchmark's ``main`` once the mechanics under test have run."""


def test_loop_overhead_rotates_the_order_of_methods_between_rounds():
    """Each timed round called ``fit`` first and the hand-written loops after it, always in
    the same order; now the order rotates (no method always runs first)."""
    import jax.numpy as jnp

    from benchmarks import loop_overhead

    loop_overhead._imports()
    calls = []

    def make(name):
        def f():
            calls.append(name)
            return jnp.zeros(1)
        return f

    loop_overhead.measure({"a": make("a"), "b": make("b"), "c": make("c")}, 3)
    assert calls[:3] == ["a", "b", "c"]  # the warm-up (compile) calls
    rounds = [calls[3 + 3 * r: 6 + 3 * r] for r in range(3)]
    assert rounds == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"]]


def test_inspect_overhead_rotates_plain_and_monitored_between_rounds(monkeypatch, tmp_path):
    """``plain`` ran before ``monitored`` in every timed round; now the order rotates."""
    from benchmarks import _common, inspect_overhead
    from layerlab import loop

    calls = []

    def fit(step, state, data, **kw):
        calls.append("monitored" if kw.get("eval_fn") is not None else "plain")
        return state, {"eval_step": []}

    def stop(*a, **k):
        raise _Stop

    monkeypatch.setattr(loop, "fit", fit)
    monkeypatch.setattr(_common, "timeit", stop)  # the per-diagnostic timings come after
    with pytest.raises(_Stop):
        inspect_overhead.main(["--steps", "4", "--eval-every", "2", "--repeats", "4",
                               "--n-probe", "8", "--out", str(tmp_path)])
    timed = calls[2:]
    assert len(timed) == 8
    firsts = [timed[2 * r] for r in range(4)]
    assert set(firsts) == {"plain", "monitored"}, calls


def test_fit_checkpoint_deletes_checkpoints_outside_the_timer(monkeypatch, tmp_path):
    """Each timed ``ckpt`` call deleted its checkpoint folder (``shutil.rmtree``) inside the
    timer, so ``ckpt_over_eval_only`` included deleting every checkpoint; now the folders
    are deleted after each call, outside it (``timeit_interleaved(after=...)``)."""
    from benchmarks import _common, fit_checkpoint

    log, real, real_rmtree = [], _common.timeit_interleaved, fit_checkpoint.shutil.rmtree

    def rmtree(path, ignore_errors=False):
        log.append(("rmtree", str(path)))
        real_rmtree(path, ignore_errors=ignore_errors)

    def interleaved(cases, **kw):
        def wrap(name, fn):
            def call(*a):
                log.append(("call", name))
                out = fn(*a)
                log.append(("return", name))
                return out
            return call
        return real({k: (wrap(k, f), a) for k, (f, a) in cases.items()}, **kw)

    monkeypatch.setattr(fit_checkpoint.shutil, "rmtree", rmtree)
    monkeypatch.setattr(_common, "timeit_interleaved", interleaved)
    monkeypatch.setattr(_common, "write_json", lambda *a, **k: (_ for _ in ()).throw(_Stop()))
    with pytest.raises(_Stop):
        fit_checkpoint.main(["--steps", "20", "--batch", "64", "--hidden", "8",
                             "--periods", "10", "--repeats", "2", "--out", str(tmp_path)])
    inside, deleted = None, []
    for what, arg in log:
        if what == "call":
            inside = arg
        elif what == "return":
            inside = None
        elif what == "rmtree" and inside is not None:
            raise AssertionError(f"checkpoint folder deleted inside the timed call of {inside}")
        else:
            deleted.append(arg)
    assert len(deleted) >= 3  # the ckpt case's warm-up and two timed calls, each its folder


@pytest.mark.parametrize("name", ["xla_cpu_emitters", "fit_partial_step"])
def test_compile_time_workers_run_without_the_persistent_compilation_cache(
        name, monkeypatch, tmp_path):
    """The fresh subprocesses that measure compile time inherited ``JAX_COMPILATION_CACHE_DIR``
    (set by a user, or by this test session's conftest), so from the second repeat on a
    "compile" could be a cache load.  Now the cache is off in the workers, and the record
    says so."""
    import json
    import types

    mod = importlib.import_module(f"benchmarks.{name}")
    if name == "xla_cpu_emitters":
        result = {p: {"compile_s": 1.0, "run_s": 0.1} for p in mod.PROGRAMS}
    else:
        result = {"gn": [1.0, 0.5], "adam": [1.0, 0.5]}
    envs = []

    real_run = mod.subprocess.run

    def run(cmd, env=None, **kw):
        if cmd[0] != sys.executable:  # platform.processor() runs uname
            return real_run(cmd, env=env, **kw)
        envs.append(env)
        return types.SimpleNamespace(returncode=0, stdout="RESULT " + json.dumps(result),
                                     stderr="")

    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    monkeypatch.setattr(mod.subprocess, "run", run)
    assert mod.main(["--repeats", "1", "--out", str(tmp_path)]) == 0
    assert envs and all(e is not None for e in envs)
    for env in envs:
        assert "JAX_COMPILATION_CACHE_DIR" not in env
        assert "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in env
        assert env["JAX_ENABLE_COMPILATION_CACHE"] == "false"
    rec = json.loads((tmp_path / f"{name}.json").read_text())
    assert "JAX_ENABLE_COMPILATION_CACHE=false" in rec["compilation_cache"]
    assert rec["cache_env_dropped"]["JAX_COMPILATION_CACHE_DIR"] == str(tmp_path / "cache")


def test_machine_info_records_versions_thread_settings_and_affinity():
    """Records carried only the jax version: not jaxlib / numpy / neural-tangents, nor the
    settings that change timings (XLA_FLAGS, BLAS threads, CPU affinity)."""
    import os

    from benchmarks._common import machine_info

    info = machine_info()
    assert {"jaxlib", "numpy", "neural_tangents", "env", "affinity"} <= set(info)
    assert info["jaxlib"] and info["numpy"]
    assert info["env"]["XLA_FLAGS"] == os.environ.get("XLA_FLAGS")
    assert info["env"]["OPENBLAS_NUM_THREADS"] == os.environ.get("OPENBLAS_NUM_THREADS")
    assert "OMP_NUM_THREADS" in info["env"]
    assert info["affinity"] == sorted(os.sched_getaffinity(0))


def test_gnrev_step_sets_blas_threads_in_main_not_at_import():
    """Importing benchmarks.gnrev_step set OPENBLAS_NUM_THREADS / OMP_NUM_THREADS in the
    importing process; now ``main`` sets them (before JAX is imported)."""
    import os

    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    code = (
        "import os\n"
        "import benchmarks.gnrev_step as m\n"
        "assert 'OPENBLAS_NUM_THREADS' not in os.environ, 'set at import'\n"
        "assert 'OMP_NUM_THREADS' not in os.environ, 'set at import'\n"
        "class Stop(Exception): pass\n"
        "def stop(): raise Stop\n"
        "m._imports = stop\n"
        "try:\n"
        "    m.main([])\n"
        "except Stop:\n"
        "    pass\n"
        "assert os.environ['OPENBLAS_NUM_THREADS'] == os.environ['OMP_NUM_THREADS'] == '1'\n"
        "print('OK')\n"
    )
    assert _run_py(code, env=env).strip().endswith("OK")


def test_bottleneck_sweep_interleaves_the_vectorised_and_sequential_rounds(monkeypatch, tmp_path):
    """The vectorised route ran all its timed calls, then the sequential route all of its
    (3 each): a drift of the machine's speed landed on one route.  Now the rounds alternate,
    the order rotated, 7 by default, and the per-round ratios are kept."""
    import json

    from benchmarks import bottleneck_sweep
    from layerlab import loop

    assert bottleneck_sweep.build_parser().parse_args([]).repeats >= 7
    calls = []

    def fit(step, state, data, runs=False, **kw):
        calls.append("V" if runs else "S")
        return state, {}

    monkeypatch.setattr(loop, "fit", fit)
    bottleneck_sweep.main(["--n", "20", "--widths", "2", "4", "--seeds", "1", "--steps", "2",
                           "--repeats", "3", "--out", str(tmp_path)])
    # each call of the sequential route is R = 2 fits; collapse them into one route call
    assert calls.count("V") == 4 and calls.count("S") == 8
    routes, i = [], 0
    while i < len(calls):
        routes.append(calls[i])
        i += 1 if calls[i] == "V" else 2
    assert routes == ["V", "S", "V", "S", "S", "V", "V", "S"], calls
    rec = json.loads((tmp_path / "sweep.json").read_text())["width_seed_sweep"]
    assert rec["interleaved"] and len(rec["vectorised_all_s"]) == 3
    assert "speedup_paired_median" in rec


def _record_timings(monkeypatch):
    """Replace ``_common.timeit_interleaved`` and ``_common.timeit`` by recorders that time
    nothing: the interleaved one calls each case once (so the cases are real calls) and
    returns fixed stats with ``times_s``; ``timeit`` (the case-after-case helper) only notes
    its call.  Returns (interleaved calls: lists of case names, block-ordered calls)."""
    from benchmarks import _common

    inter, blocks = [], []

    def interleaved(cases, *, repeats=7, warmup=1, after=None):
        inter.append(list(cases))
        out = {}
        for i, (name, (fn, args)) in enumerate(cases.items()):
            _common._block(fn(*args))
            ts = [1.0 + i + 0.1 * r for r in range(repeats)]
            out[name] = {"compile_s": 0.0, "median_s": ts[len(ts) // 2], "min_s": ts[0],
                         "max_s": ts[-1], "iqr_s": 0.0, "repeats": repeats,
                         "interleaved": True, "times_s": ts}
        return out

    def timeit(fn, *args, repeats=7, warmup=1, **kw):
        blocks.append(fn)
        return {"compile_s": 0.0, "median_s": 1.0, "min_s": 1.0, "max_s": 1.0, "iqr_s": 0.0,
                "repeats": repeats}

    monkeypatch.setattr(_common, "timeit_interleaved", interleaved)
    monkeypatch.setattr(_common, "timeit", timeit)
    return inter, blocks


def test_gnrev_step_times_the_steps_and_the_matmul_in_one_interleaved_call(monkeypatch,
                                                                          tmp_path):
    """GN, Adam, SGD (and the matmul) were each timed in their own block, so GN/Adam mixed
    different moments of a noisy machine.  Now one interleaved call per grid case holds every
    step and the matmul; dense GN has its own rounds together with a GN step."""
    import json

    from benchmarks import gnrev_step

    for k in gnrev_step.BLAS_ENV:  # main sets them; restored after the test
        monkeypatch.delenv(k, raising=False)
    inter, blocks = _record_timings(monkeypatch)
    gnrev_step.main(["--grid", "4x16x16x2", "--repeats", "3", "--out", str(tmp_path)])
    assert not blocks
    assert sorted(inter[0]) == ["adam", "gn", "gn_cert", "gn_rsvd", "matmul", "sgd"], inter
    assert sorted(inter[1]) == ["dense_gn", "gn"] and len(inter) == 2, inter
    rec = json.loads((tmp_path / "step.json").read_text())["cases"][0]
    assert rec["interleaved"] and len(rec["gn"]["times_s"]) == 3
    for k in ("gn_over_adam", "gn_cert_over_adam", "gn_over_sgd", "rsvd_over_gram",
              "dense_over_gn", "gn_over_adam_paired_median", "rsvd_rel_diff"):
        assert k in rec, k


def test_kernels_eval_times_native_and_neural_tangents_in_interleaved_rounds(monkeypatch,
                                                                             tmp_path):
    """Native and neural-tangents kernels (and the four empirical-NTK routes) were each timed
    in their own block; now each compared set goes through one interleaved call, and the
    value checks between routes stay."""
    import json

    from benchmarks import kernels_eval

    inter, blocks = _record_timings(monkeypatch)
    kernels_eval.main(["--sizes", "6", "--d", "5", "--repeats", "3", "--emp-n", "4",
                       "--emp-width", "8", "--out", str(tmp_path)])
    assert not blocks
    assert inter[:2] == [["native", "neural_tangents"]] * 2, inter
    assert sorted(inter[2]) == sorted(["layerlab ntk_vp", "layerlab jacobian",
                                       "nt implementation 1", "nt implementation 2"])
    assert len(inter) == 3
    rec = json.loads((tmp_path / "kernels_eval.json").read_text())
    for r in rec["closed_forms"]:
        assert r["interleaved"] and len(r["native"]["times_s"]) == 3
        assert {"speedup_native_over_nt", "speedup_paired_median", "max_abs_diff"} <= set(r)
    assert all(r["interleaved"] and "max_abs_diff_vs_jacobian" in r
               for r in rec["empirical_ntk"])
    assert set(rec["summary"]) == {"speedup_nngp_N6", "speedup_ntk_N6"}


def test_probes_cka_times_the_compared_forms_in_interleaved_rounds(monkeypatch, tmp_path):
    """The feature and Gram forms of linear CKA (and full / minibatch / RBF CKA) were each
    timed in their own block; now each compared set goes through one interleaved call, and
    the value checks between the forms stay."""
    import json

    from benchmarks import probes_cka

    inter, blocks = _record_timings(monkeypatch)
    probes_cka.main(["--p", "8", "--ns", "8", "16", "--mb-n", "64", "--mb-batches", "4",
                     "--repeats", "3", "--no-data", "--out", str(tmp_path)])
    assert not blocks
    assert inter == [["features", "gram"]] * 2 + [["full", "minibatch", "rbf_1024"]], inter
    rec = json.loads((tmp_path / "probes_cka.json").read_text())
    for r in rec["crossover"]:
        assert r["interleaved"] and len(r["features"]["times_s"]) == 3
        assert {"ratio_features_over_gram", "ratio_paired_median", "value_abs_diff",
                "auto_choice"} <= set(r)
    mb = rec["minibatch"]
    assert mb["interleaved"] and {"cka_full", "cka_minibatch", "cka_rbf_1024"} <= set(mb)


def test_dmn_fit_conv_step_times_lax_and_patch_routes_in_interleaved_rounds(monkeypatch,
                                                                            tmp_path):
    """The ConvNet step's lax.conv route and the patch route were each timed in their own
    block; now both go through one interleaved call per ConvNet, and the gradient check
    between the routes stays."""
    import json

    from benchmarks import dmn_fit

    inter, blocks = _record_timings(monkeypatch)
    dmn_fit.main(["--only", "conv-step", "--conv-specs", "c2,m,de10", "--conv-batch", "2",
                  "--repeats", "3", "--out", str(tmp_path)])
    assert not blocks
    assert inter == [["lax", "patch"]], inter
    rec = json.loads((tmp_path / "conv_step.json").read_text())["conv_step"][0]
    assert rec["interleaved"] and len(rec["lax"]["times_s"]) == 3
    assert {"ratio_lax_over_patch", "ratio_paired_median", "max_rel_grad_diff",
            "loss_diff"} <= set(rec)
    assert rec["max_rel_grad_diff"] < 1e-4


def test_dmn_fit_throughput_times_matmul_and_densities_in_interleaved_rounds(monkeypatch):
    """Part 2's matmul and the three density accumulations (whose fractions of the matmul
    rate are the result) were each timed in their own block; now one interleaved call."""
    from benchmarks import dmn_fit

    inter, blocks = _record_timings(monkeypatch)
    dmn_fit._imports()
    tp = dmn_fit.throughput(400, 3, 4, 3)
    assert not blocks
    assert inter == [["matmul", "one_shot", "streaming", "grouped"]], inter
    assert tp["interleaved"] and len(tp["matmul"]["times_s"]) == 3
    for k in ("one_shot", "streaming", "grouped"):
        assert f"density_{k}_fraction_of_matmul" in tp


def test_scripts_that_set_blas_threads_or_pin_in_main_do_not_load_numpy_at_import():
    """gnrev_step sets OPENBLAS_NUM_THREADS and dgl_loss pins the CPU in main(): numpy's
    OpenBLAS must not have started its threads when the module is imported (benchmarks._common
    imported numpy at module level, so numpy kept 2 BLAS threads and an unpinned worker)."""
    import subprocess
    import sys

    code = ("import sys, benchmarks._common, benchmarks.gnrev_step, benchmarks.dgl_loss; "
            "print('numpy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=str(REPO), check=True).stdout.strip()
    assert out == "False"


def test_xla_cpu_emitters_refuses_zero_rounds(capsys):
    from benchmarks import xla_cpu_emitters

    for flag in ("--repeats", "--calls"):
        with pytest.raises(SystemExit) as e:
            xla_cpu_emitters.main([flag, "0"])
        assert e.value.code == 2
        assert f"argument {flag}: expected an integer >= 1, got 0" in capsys.readouterr().err
