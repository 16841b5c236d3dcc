"""Regression: vmapped GN steps must not deadlock XLA:CPU's intra-op pool on a 2-core machine.

Two independent batched LAPACK calls (the two ``eigh`` of a block, batched by ``vmap``) ran
concurrently on the 2-thread pool; each blocked its thread waiting for its batch's tasks on
that pool (jaxlib 0.10.2 ``ParallelBatchMap``), so ``gnrev_fig1 --dataset cifar10
--no-bottleneck`` hung. ``gn_direction``'s factorisations now come from ``layerlab._linalg``,
which under ``vmap`` on CPU maps over the batch one matrix at a time (no nested pool tasks).
Before the fix this script hung every time (3/3, killed at 30-60 s); after it takes ~3 s.
"""
import os
import subprocess
import sys
import textwrap

import pytest

_SCRIPT = textwrap.dedent("""
    import os
    if hasattr(os, "sched_setaffinity"):   # a 2-thread XLA pool on any machine
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2])
    import jax, jax.numpy as jnp
    from jax import lax
    from layerlab import gnrev
    n, dim = 256, 512
    params, frozen = gnrev.revmlp_init(jax.random.key(0), dim=dim, depth=3, bottleneck=None)
    x = jax.random.normal(jax.random.key(1), (n, dim))
    eps = jax.random.normal(jax.random.key(2), (n, dim))

    def run(lr):   # fit(runs=True)'s shape: a scan of steps, vmapped over learning rates
        def step(p, _):
            d = gnrev.gn_direction(p, frozen, x, eps)
            return jax.tree.map(lambda a, b: a - lr * b, p, d), None
        return lax.scan(step, params, None, length=4)[0]

    out = jax.jit(jax.vmap(run))(jnp.array([0.1, 0.2, 0.3, 0.4]))
    print("finite", bool(jnp.all(jnp.isfinite(out["w1"]))))
""")


@pytest.mark.skipif(sys.platform != "linux", reason="pins the process to 2 cores (Linux)")
def test_vmapped_gn_steps_finish_on_two_threads():
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    try:
        out = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True,
                             text=True, timeout=180)
    except subprocess.TimeoutExpired:
        pytest.fail("vmapped gn_direction steps did not finish in 180 s: XLA:CPU pool deadlock")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "finite True" in out.stdout
