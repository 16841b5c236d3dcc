"""Shared pytest fixtures.

* ``key``: a fresh typed PRNG key per test.
* ``shared_data``: a data directory holding the datasets a test needs (declared with
  ``@pytest.mark.datasets("mnist", ...)``; the folders ``mnist/``, ``cifar10/``,
  ``wine_quality/`` ... as ``python -m layerlab.data download`` writes them): the first
  such entry of ``$LAYERLAB_DATA`` (as set when pytest started), else ``../shared/data``
  (the project's verified copies); a skip with the reason when none has them.
  ``LAYERLAB_DATA`` is pointed at ``../shared/data`` for the whole session when the
  variable is unset, so ``layerlab.data.load`` finds it.
* float64 is *not* enabled globally; tests that cross-check closed forms use the
  ``x64`` fixture (``jax.enable_x64`` context).
* XLA's CPU backend compiles at LLVM optimisation level 0 in the test session
  (``XLA_FLAGS=--xla_backend_optimization_level=0``, added unless ``XLA_FLAGS`` already sets
  it; subprocesses inherit it). The suite is compile-bound: three reproduction smoke runs took
  58 s / 48 s at the default level and 32 s at level 0 on the 2-core CI-class machine. The
  HLO-level program (fusion, algebra) is unchanged; only the generated machine code is less
  optimised, and the tests' tolerances hold for any x86-64 code generation anyway. Set
  ``XLA_FLAGS`` yourself to test at another level.
* Likewise ``--xla_cpu_use_fusion_emitters=false`` (unless ``XLA_FLAGS`` names it): XLA's
  CPU backend then emits fused loops with its older elemental emitter instead of the MLIR
  fusion emitters. Same HLO, same fusions; compiling is about half the time (a bottleneck
  A-rank smoke run: 144 programs, 10.6 s of compiling -> 4.8 s; run 18 s -> 12 s).
* BLAS runs single-threaded in the test session (``OPENBLAS_NUM_THREADS`` / ``OMP_NUM_THREADS``
  / ``MKL_NUM_THREADS`` = 1 unless set): the workers already use every core.
* Unless ``LAYERLAB_TEST_XLA_CACHE=0`` (a rare segfault inside jaxlib's executable
  serialisation, which every cache write does, has failed CI runs; see below), each pytest
  process (each xdist worker) keeps a persistent XLA compilation cache in a fresh
  temporary folder, removed when the session ends (``JAX_COMPILATION_CACHE_DIR``, inherited by
  the tests' subprocesses): a program compiled twice in one session -- the same HLO from
  another test, another sweep of a smoke run, a README block's subprocess -- is compiled once.
  Nothing persists between sessions, so every run of the suite costs what CI's clean run costs.
  The folder is per process because JAX writes cache entries without a lock. Set
  ``JAX_COMPILATION_CACHE_DIR`` yourself to use another folder (kept) or ``""`` to switch it off.
"""
import atexit
import os
import pathlib
import shutil
import tempfile

for _flag, _value in (("xla_backend_optimization_level", "0"),
                      ("xla_cpu_use_fusion_emitters", "false")):
    if _flag not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   f" --{_flag}={_value}").strip()

# One BLAS thread per process: the suite runs one xdist worker per core, and each worker's
# threaded OpenBLAS (numpy/scipy eigh, solve) then oversubscribes the cores -- a bottleneck
# a_fig1 smoke run (numpy eigh in its Newton polish) took 24-40 s with the default threads
# beside one other busy process, 22-23 s with one. Set before numpy loads OpenBLAS.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

_CACHE = None
_PARENT = os.environ.get("_LAYERLAB_TEST_XLA_CACHE")  # set by a parent pytest process (xdist)
# Writing a cache entry serialises the executable, and in 4 of ~12 clean-clone CI runs of
# 2026-11-29/30 a worker died with a segfault inside jaxlib's executable.serialize() (jax
# compilation_cache.put_executable_and_time), on different programs each time (loop.fit chunks,
# bottleneck _train_runs), also with CPU async dispatch off: a native crash that fails CI while
# every test passes.  Without the cache the suite took 626 s of pytest (657 s for .ci/run), over
# the 10-minute budget; so it stays on (LAYERLAB_TEST_XLA_CACHE=0 turns it off) but caches only
# compiles of 0.3 s or more (was 0.1 s): fewer writes, fewer chances of the crash.
_WANT_CACHE = os.environ.get("LAYERLAB_TEST_XLA_CACHE", "1") != "0"
if _WANT_CACHE and os.environ.get("JAX_COMPILATION_CACHE_DIR", _PARENT) == _PARENT:
    _CACHE = tempfile.mkdtemp(prefix="layerlab-tests-xla-cache-")
    atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
    os.environ["JAX_COMPILATION_CACHE_DIR"] = os.environ["_LAYERLAB_TEST_XLA_CACHE"] = _CACHE
    # cache the compiles of 0.3 s or more, not only the >= 1 s ones (most here take 0.1-1 s at
    # level 0); 0.1 s until 2026-11-30 (see the segfault above)
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.3")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")

import jax  # noqa: E402  (after XLA_FLAGS: the CPU backend reads it when it starts)
import pytest  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
_USER_DATA = [pathlib.Path(p).expanduser()
              for p in os.environ.get("LAYERLAB_DATA", "").split(os.pathsep) if p]
_FOLDERS = {"mnist": "mnist", "cifar10": "cifar10", "cifar100": "cifar100",
            "winequality": "wine_quality", "superconductivity": "superconductivity"}

if SHARED_DATA.is_dir():
    os.environ.setdefault("LAYERLAB_DATA", str(SHARED_DATA))

jax.config.update("jax_numpy_rank_promotion", "raise")


def pytest_unconfigure(config):
    if _CACHE is not None:  # atexit may not run in an xdist worker
        shutil.rmtree(_CACHE, ignore_errors=True)


@pytest.fixture
def key():
    return jax.random.key(0)


@pytest.fixture
def x64():
    with jax.enable_x64(True):
        yield


@pytest.fixture
def shared_data(request):
    marker = request.node.get_closest_marker("datasets")
    need = [_FOLDERS.get(n, n) for n in (marker.args if marker else ())]
    roots = [*_USER_DATA, SHARED_DATA]
    for root in roots:
        if root.is_dir() and all((root / f).is_dir() for f in need):
            return root
    pytest.skip(f"no data directory with {need or 'datasets'} among $LAYERLAB_DATA and "
                f"{SHARED_DATA} (python -m layerlab.data download NAME); real-data test skipped")
