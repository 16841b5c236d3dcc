"""Compile and run time of layerlab programs under XLA's two CPU loop emitters.

    python -m benchmarks.xla_cpu_emitters              # ~5 min on 2 cores
    python -m benchmarks.xla_cpu_emitters --record     # results/xla_cpu_emitters/

XLA's CPU backend generates the code of fused elementwise/reduction kernels with its MLIR
fusion emitters (the default) or, with ``XLA_FLAGS=--xla_cpu_use_fusion_emitters=false``, with
its older elemental emitter.  The HLO program and its fusions are the same; only the
generated loops differ.  The test suite uses the older emitter (``tests/conftest.py``): it
compiles in about half the time, and the suite is compile-bound.  The suite also compiles at
LLVM optimisation level 0 (``--xla_backend_optimization_level=0``), so four settings are
measured: XLA's defaults, the elemental emitter, level 0, and both (the test session's).  Each
setting runs in fresh subprocesses (the flags are read when the backend starts), interleaved
``--repeats`` times; per program it reports the first-call time minus the steady call time
(compile + first dispatch) and the median steady call time, medians over the repeats, and
each setting's ratios to XLA's defaults (same run).

Programs (all jitted, float32, batch sizes of the papers' runs):
  mlp_fit    ``loop.fit`` of an MLP 784-256-256-10 (SGD, batch 128, one 20-step chunk)
  dgl_layer  value + gradient of a LEGO layer's DGL loss (eq. 5) at a batch of 500
  conv_head  value + gradient of the ConvNet c22,m,c41,m,de10 on 32x32x3 (batch 128, patch
             convolutions, ``layerlab.dmn.Conv3x3``)
  gn_step    one exact Gauss-Newton step of a reversible MLP (784 wide, depth 2, batch 100)
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

from benchmarks._common import add_output_flags, arg_parser

FLAG = "--xla_cpu_use_fusion_emitters=false"
O0 = "--xla_backend_optimization_level=0"
SETTINGS = {"default": "", "elemental": FLAG, "O0": O0, "O0_elemental": f"{O0} {FLAG}"}
PROGRAMS = ("mlp_fit", "dgl_layer", "conv_head", "gn_step")


def build_parser():
    ap = arg_parser(__doc__)
    ap.add_argument("--repeats", type=int, default=2,
                    help="rounds of one fresh subprocess per setting, interleaved")
    ap.add_argument("--calls", type=int, default=7,
                    help="steady calls per program per subprocess (median)")
    ap.add_argument("--worker", default=None,
                    help="internal: run the programs in this process and print JSON "
                         "(the parent passes the setting's name)")
    add_output_flags(ap, "xla_cpu_emitters")
    return ap


def _programs():
    """``name -> (fn, args)``: jitted programs of the toolkit at paper batch sizes."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import optax

    from layerlab import dgl, gnrev, loop, nets
    from layerlab.dmn import Conv3x3, max_pool_2x2

    k = jax.random.key(0)
    out = {}

    # loop.fit: one compiled chunk of 20 SGD steps
    x = jax.random.normal(k, (2560, 784))
    y = jax.random.randint(jax.random.fold_in(k, 1), (2560,), 0, 10)
    p0 = nets.mlp_init(k, [784, 256, 256, 10], init="he")

    def ce(p, b):
        return optax.softmax_cross_entropy_with_integer_labels(nets.mlp_apply(p, b[0]), b[1]).mean()

    ts = loop.optax_step(ce, optax.sgd(0.01))

    def mlp_fit():
        return loop.fit(ts.step, ts.init(p0), (x, y), key=k, steps=20, batch_size=128,
                        chunk_size=20, progress=False, check_finite=False)[0].params

    out["mlp_fit"] = (mlp_fit, ())

    # DGL of one LEGO layer at a batch of 500 (eq. 5 of Ben-David & Ringel)
    h = jax.random.normal(k, (500, 256))
    yy = jax.nn.one_hot(y[:500], 10) - 0.1
    layer = {"w": jax.random.normal(k, (256, 256)) / 16.0, "b": jnp.zeros(256)}
    wv, bv = jnp.asarray([2.0, 1.0]), jnp.asarray([0.1, 0.0])

    def dgl_val(layer):
        hh = jax.nn.relu(h @ layer["w"] + layer["b"])
        K = dgl.top_kernel(hh, w_var=wv, b_var=bv)
        return dgl.dgl_loss(K, yy, eps2=0.05 * jnp.mean(jnp.diagonal(K))) / 500

    out["dgl_layer"] = (jax.jit(jax.value_and_grad(dgl_val)), (layer,))

    # ConvNet value + gradient on the patch route
    class Net(nn.Module):
        @nn.compact
        def __call__(self, z):
            z = max_pool_2x2(nn.relu(Conv3x3(22, padding="VALID")(z)))
            z = max_pool_2x2(nn.relu(Conv3x3(41, padding="VALID")(z)))
            return nn.Dense(10)(z.reshape(z.shape[0], -1))

    net = Net()
    xi = jax.random.normal(k, (128, 32, 32, 3))
    pn = net.init(k, xi[:1])["params"]

    def conv_loss(p):
        return optax.softmax_cross_entropy_with_integer_labels(
            net.apply({"params": p}, xi), y[:128]).mean()

    out["conv_head"] = (jax.jit(jax.value_and_grad(conv_loss)), (pn,))

    # one exact Gauss-Newton step of a reversible MLP
    params, frozen = gnrev.revmlp_init(k, dim=784, depth=2, bottleneck=784)
    P = gnrev.readout_init(jax.random.fold_in(k, 2), 784, 10)
    gn = gnrev.gn_step(frozen, P, learning_rate=0.5, loss="ce")
    st = gn.init(params)
    xb, yb = x[:100], y[:100]
    step = jax.jit(gn.step)
    out["gn_step"] = (lambda s: step(s, (xb, yb), k)[0], (st,))
    return out


def _work(calls: int) -> dict:
    import time

    import jax

    res = {}
    for name, (fn, args) in _programs().items():
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        first = time.perf_counter() - t0
        times = []
        for _ in range(calls):
            t0 = time.perf_counter()
            jax.block_until_ready(fn(*args))
            times.append(time.perf_counter() - t0)
        steady = statistics.median(times)
        res[name] = {"compile_s": first - steady, "run_s": steady}
    return res


def main(argv=None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    for flag in ("repeats", "calls"):
        if getattr(args, flag) < 1:
            ap.error(f"argument --{flag}: expected an integer >= 1, got {getattr(args, flag)}")
    if args.worker is not None:
        print("RESULT " + json.dumps(_work(args.calls)), flush=True)
        return 0
    from benchmarks._common import out_dir, uncached_env, write_json

    runs = {s: [] for s in SETTINGS}
    for r in range(args.repeats):
        for setting, flag in SETTINGS.items():
            env, cache = uncached_env()  # a compile is never a load from a persistent cache
            base = " ".join(f for f in env.get("XLA_FLAGS", "").split()
                            if "xla_cpu_use_fusion_emitters" not in f
                            and "xla_backend_optimization_level" not in f)
            env["XLA_FLAGS"] = f"{base} {flag}".strip()
            proc = subprocess.run(
                [sys.executable, "-m", "benchmarks.xla_cpu_emitters", "--worker", setting,
                 "--calls", str(args.calls)], env=env, capture_output=True, text=True)
            if proc.returncode != 0:
                raise RuntimeError(f"worker {setting} failed:\n{proc.stderr[-3000:]}")
            line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
            runs[setting].append(json.loads(line[len("RESULT "):]))
            print(f"repeat {r + 1}/{args.repeats} {setting}: "
                  + ", ".join(f"{p} {v['compile_s']:.2f}/{v['run_s'] * 1e3:.1f}ms"
                              for p, v in runs[setting][-1].items()), flush=True)
    table = {}
    for p in PROGRAMS:
        row = {}
        for st in SETTINGS:
            for m in ("compile_s", "run_s"):
                row[f"{st}_{m}"] = statistics.median([rr[p][m] for rr in runs[st]])
        for st in list(SETTINGS)[1:]:  # > 1: this setting is faster than XLA's defaults
            row[f"compile_speedup_{st}"] = row["default_compile_s"] / row[f"{st}_compile_s"]
            row[f"run_speedup_{st}"] = row["default_run_s"] / row[f"{st}_run_s"]
        table[p] = row
    for p, row in table.items():
        print(f"{p:10s} default compile {row['default_compile_s']:.2f} s, run "
              f"{row['default_run_s'] * 1e3:.1f} ms; speed-ups (compile / run): " + ", ".join(
                  f"{st} {row[f'compile_speedup_{st}']:.2f}x / {row[f'run_speedup_{st}']:.2f}x"
                  for st in list(SETTINGS)[1:]))
    path = write_json(out_dir("xla_cpu_emitters", args.out, args.record) / "xla_cpu_emitters.json",
                      {"settings": SETTINGS, "repeats": args.repeats, "calls": args.calls,
                       "xla_flags_inherited": os.environ.get("XLA_FLAGS", ""), **cache,
                       "programs": table, "runs": runs,
                       "how": "fresh subprocess per setting, A/B interleaved; compile_s = first "
                              "call - median steady call; medians over repeats"})
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
