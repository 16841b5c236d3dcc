"""Scale-out tests for layerlab.loop: 8 simulated devices, two joined processes.

Each test runs ``tests/loop/_loop_worker.py`` in fresh subprocesses so the simulated
device counts (XLA_FLAGS) never leak into the other tests, which keep one CPU device.
"""
import json
import os
import pathlib
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest

from layerlab import loop

HERE = pathlib.Path(__file__).resolve().parent
WORKER = HERE / "_loop_worker.py"
REPO = HERE.parents[1]
TIMEOUT = 300  # seconds; the shared 2-core machine can be slow, the work itself is tiny


def _env(devices):
    env = dict(os.environ)
    # the session's compile flags (tests/conftest.py) plus the simulated device count
    env["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                        f" --xla_force_host_platform_device_count={devices}").strip()
    env["JAX_PLATFORMS"] = "cpu"
    for k in ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID"):
        env.pop(k, None)
    return env


def _load_worker():
    import importlib.util

    spec = importlib.util.spec_from_file_location("_loop_worker", WORKER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.multidevice
def test_sharded_fit_equals_single_device(tmp_path):
    out = tmp_path / "mesh.json"
    proc = subprocess.run([sys.executable, str(WORKER), "mesh", str(out)], env=_env(8), cwd=REPO,
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["state_replicated"] and res["n_devices_state"] == 8
    for case in ("minibatch", "minibatch_loss", "fullbatch_sharded_data", "runs",
                 "eval_partial", "eval_partial_matches_direct"):
        assert res[case] < 1e-5, (case, res)


@pytest.mark.multidevice
def test_two_processes_match_single_process(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [
        subprocess.Popen([sys.executable, str(WORKER), "dist", str(r), str(port),
                          str(tmp_path / f"rank{r}.npz")], env=_env(4), cwd=REPO,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for r in (0, 1)
    ]
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=TIMEOUT)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, log in zip(procs, logs):
        assert p.returncode == 0, log[-3000:]
    w = _load_worker()
    ts = w.train_step()
    x, y = w.problem()
    ref, hist = loop.fit(ts.step, w.init_state(), (x, y), steps=w.STEPS, batch_size=w.BATCH,
                         key=jax.random.key(0), progress=False)
    for r in (0, 1):
        with np.load(tmp_path / f"rank{r}.npz") as got:
            np.testing.assert_allclose(got["params"], w.flat(ref.params), atol=1e-5, rtol=1e-5)
            np.testing.assert_allclose(got["loss"], hist["train"]["loss"], atol=1e-5, rtol=1e-5)


def test_initialize_distributed_without_cluster_raises(monkeypatch):
    for k in list(os.environ):
        if k.startswith(("JAX_COORDINATOR", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID", "SLURM_",
                         "OMPI_", "TPU_WORKER")) or k in ("KUBERNETES_SERVICE_HOST",):
            monkeypatch.delenv(k, raising=False)
    with pytest.raises(RuntimeError, match="JAX_COORDINATOR_ADDRESS"):
        loop.initialize_distributed()
