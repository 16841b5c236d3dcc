"""Cost of one exact Gauss–Newton step on a RevMLP vs Adam, SGD and dense Moore–Penrose GN.

    python -m benchmarks.gnrev_step                      # CPU default grid (minutes)
    python -m benchmarks.gnrev_step --dense-max-gb 8     # the issue's dense-GN memory budget
    python -m benchmarks.gnrev_step --grid 1024x784x8000x2,1024x3072x8000x6

All steps are full training steps on the same RevMLP + readout and the same batch (CE loss,
``jit``-compiled, median of ``--repeats`` calls after compilation):

* ``gn``: :func:`layerlab.gnrev.gn_step` without the residual certificate, and ``gn_cert``
  with it (one extra jvp);
* ``gn_rsvd``: the same step with the randomized-SVD pseudo-inverse
  (``PinvConfig(solver="rsvd", rank=--rsvd-rank)``, as the authors' code offers), and its
  accuracy: ``‖Δ_rsvd − Δ_gram‖/‖Δ_gram‖`` of the two GN directions on one target;
* ``adam`` / ``sgd``: :func:`layerlab.gnrev.revmlp_optax_step`;
* ``dense_gn`` (small shapes only): the dense body Jacobian ``J`` (``[n d, P]``, ``jacrev``)
  and ``Δθ = Jᵀ (J Jᵀ)⁺ ε`` (Eq. 5), skipped when ``J`` needs more than ``--dense-max-gb``.

The five steps and the reference matmul are compiled first, then timed in ``--repeats``
interleaved rounds (``benchmarks._common.timeit_interleaved``: each round calls every case once,
the order rotated, so a drift of the shared machine's speed hits all alike); ``times_s`` per
case and ``gn_over_adam_paired_median`` (median of the per-round ratios) are recorded.
``dense_gn`` runs its own ``max(2, --repeats // 2)`` rounds, each with a ``gn`` step, and
``dense_over_gn`` is the ratio of those rounds' medians.

Memory is XLA's compiled ``memory_analysis()`` (temporaries + arguments + outputs, bytes):
the peak working set of the step as compiled, not a process RSS.  FLOP/s of the GN step is
``cost_analysis()["flops"]`` / median time, next to a same-run ``[n, d'] x [d', d/2]`` matmul.
Writes ``step.json`` and ``step.png`` to ``scratch/gnrev_step/`` (``results/gnrev_step/``
with ``--record``).
"""
from __future__ import annotations

import os

from benchmarks._common import add_output_flags, arg_parser

#: One BLAS / OpenMP thread unless set: applied by ``main`` before JAX is imported (not at
#: import of this module), recorded in ``step.json`` (``blas_env``).
BLAS_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}


def _imports():
    """The heavy imports, after the flags are parsed (``--help`` stays instant)."""
    global jax, jnp, matplotlib, np, optax, ravel_pytree, tqdm, plt, g
    global out_dir, timeit_interleaved, write_json
    import jax
    import jax.numpy as jnp
    import matplotlib
    import numpy as np
    import optax
    from jax.flatten_util import ravel_pytree
    from tqdm import tqdm

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import layerlab.gnrev as g
    from benchmarks._common import out_dir, timeit_interleaved, write_json


C = 10


def _compiled(fn, *args):
    c = jax.jit(fn).lower(*args).compile()
    mem = c.memory_analysis()
    mem_b = None
    if mem is not None:
        mem_b = int(mem.temp_size_in_bytes + mem.argument_size_in_bytes
                    + mem.output_size_in_bytes)
    cost = c.cost_analysis()
    if isinstance(cost, list):
        cost = cost[0] if cost else {}
    flops = float(cost.get("flops", float("nan"))) if cost else float("nan")
    return c, mem_b, flops


def _problem(n, d, dp, depth):
    params, frozen = g.revmlp_init(jax.random.key(0), d, depth, bottleneck=dp, first_linear=True)
    P = g.readout_init(jax.random.key(1), d, C)
    x = jax.random.normal(jax.random.key(2), (n, d))
    y = jax.random.randint(jax.random.key(3), (n,), 0, C)
    return params, frozen, P, x, y


def bench_case(n, d, dp, depth, *, repeats, dense_max_gb, rsvd_rank=0):
    params, frozen, P, x, y = _problem(n, d, dp, depth)
    key = jax.random.key(0)
    rec = {"n": n, "d": d, "bottleneck": dp, "depth": depth,
           "num_params": int(sum(a.size for a in jax.tree.leaves(params)))}
    steps = {
        "gn": g.gn_step(frozen, P, residual=False),
        "gn_cert": g.gn_step(frozen, P, residual=True),
        "gn_rsvd": g.gn_step(frozen, P, residual=False,
                             pinv=g.PinvConfig(solver="rsvd", rank=rsvd_rank)),
        "adam": g.revmlp_optax_step(frozen, P, optax.adam(1e-3)),
        "sgd": g.revmlp_optax_step(frozen, P, optax.sgd(0.1)),
    }
    cases, compiled = {}, {}
    for name, ts in steps.items():  # compiled here, outside the timed rounds
        st = ts.init(params)
        c, mem, flops = _compiled(ts.step, st, (x, y), key)
        cases[name] = (c, (st, (x, y), key))
        compiled[name] = (mem, flops)
    # reference matmul of the dominant shape, timed in the same rounds
    a = jax.random.normal(key, (n, dp))
    b = jax.random.normal(key, (dp, d // 2))
    cases["matmul"] = (jax.jit(lambda a, b: a @ b), (a, b))
    t = timeit_interleaved(cases, repeats=repeats)
    for name, (mem, flops) in compiled.items():
        rec[name] = {"median_s": t[name]["median_s"], "iqr_s": t[name]["iqr_s"],
                     "times_s": t[name]["times_s"], "memory_bytes": mem, "flops": flops,
                     "gflops_per_s": flops / t[name]["median_s"] / 1e9}
    rec["interleaved"] = True
    rec["gn_over_adam_paired_median"] = float(np.median(
        np.asarray(t["gn"]["times_s"]) / np.asarray(t["adam"]["times_s"])))
    rec["matmul"] = {"shape": [n, dp, d // 2], "median_s": t["matmul"]["median_s"],
                     "times_s": t["matmul"]["times_s"],
                     "gflops_per_s": 2 * n * dp * (d // 2) / t["matmul"]["median_s"] / 1e9}
    # accuracy of the randomized SVD against the Gram solver on one body target
    eps0 = jax.random.normal(jax.random.key(5), (n, d))
    dg = jax.jit(lambda e: g.gn_direction(params, frozen, x, e))(eps0)
    dr = jax.jit(lambda e: g.gn_direction(
        params, frozen, x, e, pinv=g.PinvConfig(solver="rsvd", rank=rsvd_rank),
        key=jax.random.key(6)))(eps0)
    diff = ravel_pytree(jax.tree.map(lambda a, b: a - b, dr, dg))[0]
    rec["rsvd_rel_diff"] = float(jnp.linalg.norm(diff) / jnp.linalg.norm(ravel_pytree(dg)[0]))
    rec["rsvd_over_gram"] = rec["gn_rsvd"]["median_s"] / rec["gn"]["median_s"]
    # dense Moore–Penrose GN on the same body target
    P_ = rec["num_params"]
    j_gb = n * d * P_ * 4 / 1e9
    rec["dense_jacobian_gb"] = j_gb
    if j_gb <= dense_max_gb:
        th0, unravel = ravel_pytree(params)
        eps = jax.random.normal(jax.random.key(4), (n, d))

        def dense(th, eps):
            J = jax.jacrev(lambda t: g.revmlp_apply(unravel(t), frozen, x).ravel())(th)
            lam, u = jnp.linalg.eigh(J @ J.T)
            keep = lam > 1e-4 * lam[-1]
            coef = jnp.where(keep, 1 / jnp.where(keep, lam, 1.0), 0.0)
            return th - 0.1 * J.T @ (u @ (coef * (u.T @ eps.ravel())))

        c, mem, flops = _compiled(dense, th0, eps)
        # its own (fewer, slow) rounds, each with a GN step: the ratio is of the same rounds
        td = timeit_interleaved({"dense_gn": (c, (th0, eps)), "gn": cases["gn"]},
                                repeats=max(2, repeats // 2))
        rec["dense_gn"] = {"median_s": td["dense_gn"]["median_s"],
                           "times_s": td["dense_gn"]["times_s"], "memory_bytes": mem,
                           "flops": flops, "gn_times_s": td["gn"]["times_s"]}
        rec["dense_over_gn"] = td["dense_gn"]["median_s"] / td["gn"]["median_s"]
    rec["gn_over_adam"] = rec["gn"]["median_s"] / rec["adam"]["median_s"]
    rec["gn_cert_over_adam"] = rec["gn_cert"]["median_s"] / rec["adam"]["median_s"]
    rec["gn_over_sgd"] = rec["gn"]["median_s"] / rec["sgd"]["median_s"]
    if rec["gn"]["memory_bytes"] and rec["adam"]["memory_bytes"]:
        rec["gn_memory_over_adam"] = rec["gn"]["memory_bytes"] / rec["adam"]["memory_bytes"]
    rec["gn_flops_over_matmul"] = rec["gn"]["gflops_per_s"] / rec["matmul"]["gflops_per_s"]
    return rec


def _grid(s):
    return [tuple(int(v) for v in c.split("x")) for c in s.split(",") if c]


DEFAULT_GRID = ("8x16x32x2,16x32x64x2,32x64x128x2,64x64x256x2,"
                "256x784x1024x2,1024x784x8000x2")


def build_parser():
    ap = arg_parser(__doc__)
    ap.add_argument("--grid", default=DEFAULT_GRID, help="comma list of n x d x d' x depth")
    ap.add_argument("--repeats", type=int, default=3,
                    help="interleaved timed rounds, each calling every step once (median)")
    ap.add_argument("--dense-max-gb", type=float, default=0.3,
                    help="largest dense Jacobian (GB) built for the dense-pinv comparison")
    ap.add_argument("--rsvd-rank", type=int, default=0,
                    help="target rank of the randomized SVD (0: full, min(n, d'+1))")
    add_output_flags(ap, "gnrev_step")
    return ap


def main(argv=None):
    args = build_parser().parse_args(argv)
    for k, v in BLAS_ENV.items():  # before numpy/jaxlib load their BLAS
        os.environ.setdefault(k, v)
    blas_env = {k: os.environ[k] for k in BLAS_ENV}
    _imports()
    out = out_dir("gnrev_step", args.out, args.record)
    recs = []
    for case in tqdm(_grid(args.grid), desc="gnrev_step"):
        r = bench_case(*case, repeats=args.repeats, dense_max_gb=args.dense_max_gb,
                       rsvd_rank=args.rsvd_rank)
        recs.append(r)
        tqdm.write(f"{case}: gn {r['gn']['median_s']:.4f}s  adam {r['adam']['median_s']:.4f}s  "
                   f"gn/adam {r['gn_over_adam']:.2f}  mem gn/adam "
                   f"{r.get('gn_memory_over_adam', float('nan')):.2f}  dense/gn "
                   f"{r.get('dense_over_gn', float('nan')):.1f}  rsvd/gram "
                   f"{r['rsvd_over_gram']:.2f} (rel. diff {r['rsvd_rel_diff']:.1e})")
    dense = [r for r in recs if "dense_over_gn" in r]
    paper = [r for r in recs
             if (r["n"], r["d"], r["bottleneck"], r["depth"]) == (1024, 784, 8000, 2)]
    summary = {
        "gn_over_adam_paper_mnist_shape": paper[0]["gn_over_adam"] if paper else None,
        "gn_memory_over_adam_paper_mnist_shape":
            paper[0].get("gn_memory_over_adam") if paper else None,
        "largest_dense_case": (max(dense, key=lambda r: r["dense_jacobian_gb"])
                               if dense else None),
        "targets": {"gn_over_adam": "<= 3 at (1024, 784, 8000, 2)",
                    "dense_over_gn": ">= 100 at the largest dense size",
                    "gn_memory_over_adam": "<= 2"},
    }
    if summary["largest_dense_case"] is not None:
        ld = summary["largest_dense_case"]
        summary["dense_over_gn_at_largest"] = ld["dense_over_gn"]
        summary["largest_dense_case"] = {k: ld[k] for k in ("n", "d", "bottleneck", "depth",
                                                           "dense_jacobian_gb")}
    print(summary)
    labels = [f"{r['n']}x{r['d']}x{r['bottleneck']}x{r['depth']}" for r in recs]
    xs = np.arange(len(recs))
    fig, ax = plt.subplots(1, 2, figsize=(12, 4))
    for name, c in (("gn", "C3"), ("gn_cert", "C1"), ("adam", "C0"), ("sgd", "C2")):
        ax[0].semilogy(xs, [r[name]["median_s"] for r in recs], "o-", color=c, label=name)
    ax[0].semilogy([i for i, r in enumerate(recs) if "dense_gn" in r],
                   [r["dense_gn"]["median_s"] for r in recs if "dense_gn" in r], "s-",
                   color="k", label="dense MP GN")
    ax[0].set_xticks(xs, labels, rotation=45, ha="right", fontsize=7)
    ax[0].set(ylabel="median step time (s)", title="time per step (n x d x d' x blocks)")
    ax[0].legend()
    ax[1].bar(xs - 0.2, [r["gn_over_adam"] for r in recs], 0.4, label="time GN / Adam")
    ax[1].bar(xs + 0.2, [r.get("gn_memory_over_adam", np.nan) for r in recs], 0.4,
              label="memory GN / Adam")
    ax[1].axhline(3, color="C0", ls="--", lw=0.8)
    ax[1].axhline(2, color="C1", ls="--", lw=0.8)
    ax[1].set_xticks(xs, labels, rotation=45, ha="right", fontsize=7)
    ax[1].set(title="ratios (targets: time <= 3, memory <= 2)")
    ax[1].legend()
    fig.tight_layout()
    fig.savefig(out / "step.png", dpi=110)
    write_json(out / "step.json", {
        "what": "time/memory/FLOP-rate of one exact GN step vs Adam, SGD, dense MP GN",
        "config": vars(args), "blas_env": blas_env, "summary": summary, "cases": recs})
    print(f"written {out}")
    return summary


if __name__ == "__main__":
    main()
