"""DGL value+gradient speed vs N, against naive autodiff, a Cholesky and a matmul (same run).

Cases per N (float32, K = NNGP of random data, C = 10 targets, eps2 = 0.05 mean diag):

* ``dgl_loss``: ``layerlab.dgl.dgl_loss`` (Cholesky, analytic VJP), value+grad w.r.t. K;
* ``naive_inv``: autodiff through ``B = inv(K + eps2 I)`` (``dgl_loss_reference``);
* ``chol_autodiff``: autodiff through a Cholesky-based forward (no custom VJP);
* ``cholesky`` and ``matmul`` (one N x N factorisation / product) as yardsticks.

Flops per route (nominal, value + gradient): ``dgl_loss`` ``2 N^3`` (LAPACK Cholesky ``N^3/3``,
the recursive blocked triangular inverse ``N^3/3``, the Gram matrix of the triangular inverse
``N^3/3``, the symmetric product ``B diag(w) B`` ``N^3``); ``naive_inv`` ``6 N^3``
(LU + inverse ``2 N^3``, its VJP ``-B^T G B^T`` two products ``4 N^3``).  Achieved FLOP/s are
reported as a fraction of the same-run matmul rate ``2 N^3 / t``.  Also: kernel evaluation time of
the native ``layerlab.kernels.relu_nngp`` vs the neural-tangents ``stax`` ``kernel_fn``
(N = 10 000 by default).  And the composed LEGO step: DGL value + gradient w.r.t. the features
``h [N, 20]`` of a depth-2 ReLU top kernel (the BMNIST 3/20 first layer, ``--lego-n``), with
XLA's ``acos`` or the float32 polynomial, and with the kernel's residuals stored or
recomputed (``jax.checkpoint``, the default of ``fc_kernels``).

    python -m benchmarks.dgl_loss                  # N = 500 .. 4000, pinned to one core
    python -m benchmarks.dgl_loss --max-n 8000     # the full range
    python -m benchmarks.dgl_loss --threads all    # XLA's default threading
    python -m benchmarks.dgl_loss --threads all --compare-rev a22d762   # A/B against a commit

By default the process is pinned to one core with single-threaded Eigen
(``--threads 1``): on the shared, oversubscribed 2-core machine multi-threaded LAPACK/Eigen
calls thrash and the ratios become meaningless; one core gives stable, comparable numbers.
"""
from __future__ import annotations

import os
import sys

from benchmarks._common import add_output_flags, arg_parser


def _pin_one_core() -> None:
    """One core, single-threaded Eigen: must happen before jax starts its CPU backend (its
    thread pools are made then, and inherit this thread's affinity); refused after."""
    if "jax" in sys.modules:
        from jax._src import xla_bridge

        if xla_bridge.backends_are_initialized():
            raise SystemExit("dgl_loss: --threads 1 must be set before JAX starts its backend "
                             "(run `python -m benchmarks.dgl_loss`, or pass --threads all)")
    if not hasattr(os, "sched_setaffinity"):
        raise SystemExit("dgl_loss: --threads 1 pins the process to one core, which needs "
                         "os.sched_setaffinity (Linux); pass --threads all")
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + " --xla_cpu_multi_thread_eigen=false").strip()
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})


def _threading() -> dict:
    """What applies to this process: CPU affinity and ``XLA_FLAGS`` (recorded in the JSON)."""
    flags = os.environ.get("XLA_FLAGS")
    aff = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {"affinity": aff, "xla_flags": flags,
            "multi_thread_eigen": "--xla_cpu_multi_thread_eigen=false" not in (flags or "")}


def _nonneg_int(value: str) -> int:
    """An integer >= 0 (the optional timings' sizes: 0 skips one)."""
    try:
        n = int(value)
    except ValueError:
        n = -1
    if n < 0:
        import argparse

        raise argparse.ArgumentTypeError(f"expected an integer >= 0 (0: skip), got {value!r}")
    return n


def _imports():
    """The heavy imports, after the flags are parsed (``--help`` stays instant)."""
    global jax, jnp, np, solve_triangular, tqdm, out_dir, timeit, timeit_interleaved, write_json
    global dgl
    global relu_nngp, stax
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.scipy.linalg import solve_triangular
    from tqdm import tqdm

    from benchmarks._common import out_dir, timeit, timeit_interleaved, write_json
    from layerlab import dgl
    from layerlab.kernels import relu_nngp, stax


def _chol_autodiff(K, Y, eps2):
    n = K.shape[0]
    L = jnp.linalg.cholesky(K + eps2 * jnp.eye(n, dtype=K.dtype))
    Li = solve_triangular(L, jnp.eye(n, dtype=K.dtype), lower=True)
    b = jnp.sum(Li * Li, axis=0)
    R = (Li.T @ (Li @ Y)) / b[:, None]
    return jnp.sum(R * R)


def build_parser():
    ap = arg_parser(__doc__)
    ap.add_argument("--ns", type=int, nargs="+", default=[500, 1000, 2000, 4000, 8000],
                    help="kernel sizes N to time (those <= --max-n are run)")
    ap.add_argument("--max-n", type=int, default=4000, help="largest N run (8000 = full)")
    ap.add_argument("--repeats", type=int, default=7,
                    help="timed rounds per N (each round calls every case once, so drifts of "
                    "a shared machine hit all cases alike; median reported)")
    ap.add_argument("--kernel-n", type=_nonneg_int, default=10000,
                    help="samples for the native vs neural-tangents NNGP kernel timing (0: "
                    "skip)")
    ap.add_argument("--threads", default="1", choices=["1", "all"],
                    help="'1': pin to one core with single-threaded Eigen (stable ratios on a "
                    "shared machine); 'all': XLA's default threading")
    ap.add_argument("--lego-n", type=_nonneg_int, default=1000,
                    help="points of the composed LEGO-step timing (kernel + DGL, 0: skip)")
    ap.add_argument("--vmap-n", type=_nonneg_int, default=1000,
                    help="N of the vmapped timing (value+grad of 4 kernels under one vmap, the "
                    "form of the vmapped LEGO/monitor sweeps; 0: skip)")
    ap.add_argument("--compare-rev", default=None, metavar="REV",
                    help="also time `dgl_loss` from layerlab/dgl/_loss.py as of git revision "
                    "REV (case 'dgl_loss@REV', same rounds): a same-run A/B of a change")
    add_output_flags(ap, "dgl_loss")
    return ap


def _loss_at(rev):
    """``layerlab/dgl/_loss.py`` as of git revision ``rev``, imported as its own module
    (:func:`benchmarks._common.module_at`: what it imports comes from the working tree)."""
    import re

    from benchmarks._common import module_at

    return module_at(rev, "layerlab/dgl/_loss.py", "_loss_" + re.sub(r"\W", "_", rev))


def _composed(n, repeats):
    """DGL value+grad w.r.t. features through a depth-2 ReLU top kernel, four variants."""
    import functools

    from layerlab.kernels import _closed_form as cf

    k1, k2 = jax.random.split(jax.random.key(n))
    h = jax.nn.relu(jax.random.normal(k1, (n, 20)))
    Y = jax.nn.one_hot(jax.random.randint(k2, (n,), 0, 10), 10)
    w = jnp.full((3,), 2.0)
    b = jnp.full((3,), 0.1)

    def kernel(h, remat):
        rec = functools.partial(cf._fc_recursion, mode="sym", depth=2, step_fn=cf._relu_step,
                                with_ntk=False, return_all_layers=False)
        rec = jax.checkpoint(rec) if remat else rec
        return rec(h, None, w, b)[0].nngp

    def loss(h, remat):
        K = kernel(h, remat)
        return dgl.dgl_loss(K, Y, eps2=0.01 * jnp.mean(jnp.diagonal(K)))

    out, fast = {}, cf._arccos
    try:
        for acos in ("xla", "poly"):
            cf._arccos = jnp.arccos if acos == "xla" else fast  # read when tracing
            for remat in (False, True):
                f = jax.jit(jax.value_and_grad(functools.partial(loss, remat=remat)))
                out[f"{acos}_acos_{'recompute' if remat else 'store'}"] = timeit(
                    f, h, repeats=repeats)
    finally:
        cf._arccos = fast
    med = {k: v["median_s"] for k, v in out.items()}
    return {"what": "DGL value+grad wrt features h through a depth-2 ReLU top kernel",
            "N": n, "d": 20, "C": 10, "timings": out, "median_s": med,
            "speedup_poly_recompute_vs_xla_store": med["xla_acos_store"]
            / med["poly_acos_recompute"]}


def main(argv=None):
    args = build_parser().parse_args(argv)  # argparse's own forms: --threads=all, --thr all
    if args.threads == "1":
        _pin_one_core()
    applied = _threading()
    _imports()
    out = out_dir("dgl_loss", args.out, args.record)
    ns = [n for n in args.ns if n <= args.max_n]
    records = []
    ref = _loss_at(args.compare_rev) if args.compare_rev else None
    for n in tqdm(ns, desc="N"):
        k1, k2 = jax.random.split(jax.random.fold_in(jax.random.key(0), n))
        x = jax.random.normal(k1, (n, 64))
        Y = jax.random.normal(k2, (n, 10))
        K = jax.jit(lambda x: relu_nngp(x, depth=2, w_var=2.0, b_var=0.1))(x)
        eps2 = float(0.05 * jnp.mean(jnp.diagonal(K)))
        fns = {
            "dgl_loss": jax.jit(jax.value_and_grad(lambda K: dgl.dgl_loss(K, Y, eps2=eps2))),
            "naive_inv": jax.jit(jax.value_and_grad(
                lambda K: dgl.dgl_loss_reference(K, Y, eps2=eps2))),
            "chol_autodiff": jax.jit(jax.value_and_grad(lambda K: _chol_autodiff(K, Y, eps2))),
            "cholesky": jax.jit(jnp.linalg.cholesky),
            "matmul": jax.jit(lambda K: K @ K),
        }
        if ref is not None:
            fns[f"dgl_loss@{args.compare_rev}"] = jax.jit(jax.value_and_grad(
                lambda K: ref.dgl_loss(K, Y, eps2=eps2)))
        t = timeit_interleaved({name: (f, (K,)) for name, f in fns.items()},
                               repeats=args.repeats)
        med = {name: v["median_s"] for name, v in t.items()}
        v1, g1 = fns["dgl_loss"](K)
        v2, g2 = fns["naive_inv"](K)
        flops = 2.0 * n**3  # Cholesky + triangular inverse + Gram + symmetric product
        flops_naive = 6.0 * n**3  # LU + inverse, and the two products of its VJP
        mm_rate = 2 * n**3 / med["matmul"]
        rec = {
            "what": "DGL value+grad wrt K", "N": n, "C": 10, "dtype": "float32",
            "timings": t, "median_s": med,
            "speedup_vs_naive_inv": med["naive_inv"] / med["dgl_loss"],
            "speedup_vs_chol_autodiff": med["chol_autodiff"] / med["dgl_loss"],
            "dgl_over_cholesky": med["dgl_loss"] / med["cholesky"],
            "dgl_over_matmul": med["dgl_loss"] / med["matmul"],
            "dgl_flop_rate": flops / med["dgl_loss"], "matmul_flop_rate": mm_rate,
            "dgl_flop_fraction_of_matmul": flops / med["dgl_loss"] / mm_rate,
            "nominal_flops": {"dgl_loss": flops, "naive_inv": flops_naive},
            "naive_flop_rate": flops_naive / med["naive_inv"],
            "naive_flop_fraction_of_matmul": flops_naive / med["naive_inv"] / mm_rate,
            "value_rel_diff_vs_naive": float(abs(v1 - v2) / abs(v2)),
            # autodiff through inv returns a non-symmetric dL/dK with the same action on
            # symmetric perturbations; compare with its symmetric part
            **({f"speedup_vs_{args.compare_rev}": med[f"dgl_loss@{args.compare_rev}"]
                / med["dgl_loss"]} if ref is not None else {}),
            "grad_rel_diff_vs_naive_sym": float(
                jnp.linalg.norm(g1 - (g2 + g2.T) / 2) / jnp.linalg.norm(g2)),
        }
        records.append(rec)
        tqdm.write(f"N={n}: dgl {med['dgl_loss']:.3f}s naive {med['naive_inv']:.3f}s "
                   f"(x{rec['speedup_vs_naive_inv']:.2f}) chol-AD {med['chol_autodiff']:.3f}s "
                   f"chol {med['cholesky']:.3f}s matmul {med['matmul']:.3f}s; "
                   f"{rec['dgl_flop_fraction_of_matmul']:.2f} of matmul FLOP/s "
                   f"(naive {rec['naive_flop_fraction_of_matmul']:.2f})"
                   + (f"; x{rec[f'speedup_vs_{args.compare_rev}']:.2f} vs {args.compare_rev}"
                      if ref is not None else ""))
    # ---- vmapped value+grad over a batch of 4 kernels (the vmapped sweeps' form)
    vrec = None
    if args.vmap_n:
        n = args.vmap_n
        x = jax.random.normal(jax.random.key(2), (n, 64))
        Y = jax.random.normal(jax.random.key(3), (n, 10))
        K = jax.jit(lambda x: relu_nngp(x, depth=2, w_var=2.0, b_var=0.1))(x)
        Ks = jnp.stack([K * (1.0 + 0.1 * i) for i in range(4)])
        eps2 = float(0.05 * jnp.mean(jnp.diagonal(K)))
        vf = {"dgl_loss": jax.jit(jax.vmap(jax.value_and_grad(
            lambda K: dgl.dgl_loss(K, Y, eps2=eps2))))}
        if ref is not None:
            vf[f"dgl_loss@{args.compare_rev}"] = jax.jit(jax.vmap(jax.value_and_grad(
                lambda K: ref.dgl_loss(K, Y, eps2=eps2))))
        tv = timeit_interleaved({k: (f, (Ks,)) for k, f in vf.items()}, repeats=args.repeats)
        vrec = {"what": "vmapped DGL value+grad wrt K, batch of 4", "N": n, "batch": 4,
                "timings": tv, "median_s": {k: v["median_s"] for k, v in tv.items()}}
        if ref is not None:
            vrec[f"speedup_vs_{args.compare_rev}"] = (
                tv[f"dgl_loss@{args.compare_rev}"]["median_s"] / tv["dgl_loss"]["median_s"])
        print(f"vmapped 4 x N={n}: " + ", ".join(f"{k} {v['median_s']:.3f}s"
                                                 for k, v in tv.items()))
    # ---- kernel evaluation: native vs neural-tangents (--kernel-n 0: skipped)
    krec = None
    if args.kernel_n:
        nk = args.kernel_n
        x = jax.random.normal(jax.random.key(1), (nk, 64))
        layers = []
        for i in range(3):
            layers.append(stax.Dense(1, W_std=np.sqrt(2.0), b_std=np.sqrt(0.1)))
            if i < 2:
                layers.append(stax.Relu())
        kfn = stax.serial(*layers)[2]
        native = jax.jit(lambda x: relu_nngp(x, depth=2, w_var=2.0, b_var=0.1))
        ntk = jax.jit(lambda x: kfn(x, None, "nngp"))
        tk = {"native_relu_nngp": timeit(native, x, repeats=args.repeats),
              "neural_tangents_stax": timeit(ntk, x, repeats=args.repeats)}
        diff = float(jnp.max(jnp.abs(native(x) - ntk(x))) / jnp.max(jnp.abs(ntk(x))))
        krec = {"what": "NNGP kernel evaluation, depth-2 ReLU top net", "N": nk, "d": 64,
                "timings": tk,
                "speedup_native_vs_nt": tk["neural_tangents_stax"]["median_s"]
                / tk["native_relu_nngp"]["median_s"], "max_rel_diff": diff}
        print(f"kernel N={nk}: native {tk['native_relu_nngp']['median_s']:.3f}s, "
              f"nt {tk['neural_tangents_stax']['median_s']:.3f}s")
    comp = _composed(args.lego_n, max(args.repeats, 5)) if args.lego_n else None
    if comp:
        print(f"composed LEGO step N={args.lego_n}: " + ", ".join(
            f"{k} {v:.3f}s" for k, v in comp["median_s"].items()))
    write_json(out / "dgl_loss.json", {"records": records, "kernel": krec,
                                       "composed": comp, "vmapped": vrec,
                                       "threads": args.threads,
                                       "pinned": args.threads == "1", **applied,
                                       "compare_rev": args.compare_rev})
    _plot(records, out / "dgl_loss.png")
    print(f"wrote {out}")


def _plot(records, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = [r["N"] for r in records]
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for name, st in (("dgl_loss", "o-"), ("naive_inv", "s--"), ("chol_autodiff", "^--"),
                     ("cholesky", ":"), ("matmul", ":")):
        ax.loglog(ns, [r["median_s"][name] for r in records], st, label=name)
    ax.set_xlabel("N")
    ax.set_ylabel("median seconds (value+grad for losses)")
    ax.legend(fontsize=8)
    ax.set_title("DGL value+gradient vs N (CPU, float32)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
