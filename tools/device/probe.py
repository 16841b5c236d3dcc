"""Time one GN step (with its certificate, as the runs log it) and one Adam / SGD step at the
paper's CIFAR-10 shape (batch 1024, d 3072, d' 8000, 6 blocks), compile times too.

    python3 tools/device/probe.py NxDxBOTTLENECKxDEPTH      # e.g. 1024x3072x8000x6

writes /root/probe/step.json (read by ``choose.py``).
"""

import json
import os
import sys
import time

import jax
import optax

import layerlab.gnrev as g

n, d, dp, L = (int(v) for v in sys.argv[1].split("x"))
params, frozen = g.revmlp_init(jax.random.key(0), d, L, bottleneck=dp, first_linear=False)
P = g.readout_init(jax.random.key(1), d, 10)
x = jax.random.normal(jax.random.key(2), (n, d))
y = jax.random.randint(jax.random.key(3), (n,), 0, 10)
key = jax.random.key(0)

rec = {
    "n": n,
    "d": d,
    "bottleneck": dp,
    "depth": L,
    "device": str(jax.devices()[0].device_kind),
    "jax": jax.__version__,
}
steps = (
    ("gn", g.gn_step(frozen, P, residual=True)),
    ("adam", g.revmlp_optax_step(frozen, P, optax.adam(1e-4))),
    ("sgd", g.revmlp_optax_step(frozen, P, optax.sgd(0.1))),
)
for name, ts in steps:
    st = ts.init(params)
    t = time.perf_counter()
    c = jax.jit(ts.step).lower(st, (x, y), key).compile()
    tc = time.perf_counter() - t

    out = c(st, (x, y), key)  # warm-up, untimed
    jax.block_until_ready(out)
    times = []
    for _ in range(5):
        t = time.perf_counter()
        out = c(st, (x, y), key)
        jax.block_until_ready(out)
        times.append(time.perf_counter() - t)
    times.sort()

    rec[name] = {"median_s": times[2], "times_s": times, "compile_s": tc}
    print(name, rec[name], flush=True)

os.makedirs("/root/probe", exist_ok=True)
with open("/root/probe/step.json", "w") as fh:
    json.dump({"cases": [rec]}, fh, indent=1)
