"""Cholesky factor and inverse for `dgl_loss`: LAPACK against recursions in XLA ops (same run).

`dgl_loss` factors ``A = K + eps2 I`` with LAPACK's ``potrf`` and inverts the factor with the
recursive triangular inverse ``_tril_inv``.  Where ``potrf`` runs far below the matmul rate
(an AVX-512 machine: 0.23 of it), building the factor from matrix products might pay.  Cases
at ``--n`` (float32, ``A`` = a rank-64 Gram + 0.05 I), timed in interleaved rounds:

* ``potrf``: ``jnp.linalg.cholesky``;  ``potrf+trtri``: the route of ``dgl_loss`` (``L^{-1}``);
* ``rchol_<leaf>``: recursive 2x2 Cholesky, ``L21 = A21 L11^{-T}`` by a triangular solve,
  Schur complement by a product, leaves ``<= leaf`` in ``potrf``;  ``rchol_512+trtri``: with
  ``_tril_inv`` after it;
* ``joint_<leaf>``: one recursion carrying ``(L, L^{-1})``: ``L21 = A21 L11^{-T}`` as a product
  with the inverse, ``(L^{-1})_21 = -L22^{-1} L21 L11^{-1}`` (no triangular solve);
* ``split_<levels>``: that joint split for 1 or 2 levels above ``potrf`` + ``_tril_inv``;
* ``matmul``: one ``n x n`` product (the yardstick).

Also the isolated rates of ``potrf``, a triangular solve and a product at ``--sizes``, and
each inverse's max error against float64 (relative to ``max |L^{-1}|``).

    python -m benchmarks.dgl_cholesky_variants                 # n = 4000, XLA's threads

Writes ``cholesky_variants.json`` to ``scratch/dgl_cholesky_variants/``
(``results/dgl_cholesky_variants/`` with ``--record``; the 2026-11-27 record, written when the
script still used dgl_loss's folder, stays in ``results/dgl_loss/avx512_2026-11-27/``).
"""
from __future__ import annotations

from benchmarks._common import add_output_flags, arg_parser


def build_parser():
    ap = arg_parser(__doc__)
    ap.add_argument("--n", type=int, default=4000, help="matrix size of the variants")
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 2000, 4000],
                    help="sizes of the isolated potrf / triangular-solve / matmul rates")
    ap.add_argument("--repeats", type=int, default=5, help="interleaved rounds (medians)")
    add_output_flags(ap, "dgl_cholesky_variants")
    return ap


def main(argv=None):
    args = build_parser().parse_args(argv)
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax

    from benchmarks._common import out_dir, timeit_interleaved, write_json
    from layerlab.dgl import _loss as L

    def rchol(A, leaf):
        n = A.shape[0]
        if n <= leaf:
            return L._cholesky(A)
        h = n // 2
        L11 = rchol(A[:h, :h], leaf)
        L21 = lax.linalg.triangular_solve(L11, A[h:, :h], left_side=False, lower=True,
                                          transpose_a=True)
        L22 = rchol(A[h:, h:] - L21 @ L21.T, leaf)
        z = jnp.zeros((h, n - h), A.dtype)
        return jnp.concatenate([jnp.concatenate([L11, z], 1),
                                jnp.concatenate([L21, L22], 1)], 0)

    def joint(A, leaf):
        n = A.shape[0]
        if n <= leaf:
            Lf = L._cholesky(A)
            return Lf, L._leaf_tril_inv(Lf)
        h = n // 2
        L11, Li11 = joint(A[:h, :h], leaf)
        L21 = A[h:, :h] @ Li11.T
        L22, Li22 = joint(A[h:, h:] - L21 @ L21.T, leaf)
        Li21 = -(Li22 @ (L21 @ Li11))
        z = jnp.zeros((h, n - h), A.dtype)
        Lf = jnp.concatenate([jnp.concatenate([L11, z], 1), jnp.concatenate([L21, L22], 1)], 0)
        Li = jnp.concatenate([jnp.concatenate([Li11, z], 1),
                              jnp.concatenate([Li21, Li22], 1)], 0)
        return Lf, Li

    def split(A, levels, nb=4):
        if levels == 0:
            return L._tril_inv(L._cholesky(A))
        n = A.shape[0]
        h = n // 2
        Li11 = split(A[:h, :h], levels - 1, nb)
        L21 = A[h:, :h] @ Li11.T
        Li22 = split(A[h:, h:] - L._sym_outer(L21, 8), levels - 1, nb)
        Li21 = -L._mul_left_lower(Li22, L._mul_right_lower(L21, Li11, nb), nb)
        z = jnp.zeros((h, n - h), A.dtype)
        return jnp.concatenate([jnp.concatenate([Li11, z], 1),
                                jnp.concatenate([Li21, Li22], 1)], 0)

    rng = np.random.default_rng(0)

    def spd(n):
        X = rng.normal(size=(n, 64)).astype(np.float32)
        return X @ X.T / 64 + 0.05 * np.eye(n, dtype=np.float32)

    n = args.n
    K = spd(n)
    A = jnp.asarray(K)
    inv_cases = {
        "potrf+trtri": jax.jit(lambda A: L._tril_inv(jnp.linalg.cholesky(A))),
        "rchol_512+trtri": jax.jit(lambda A: L._tril_inv(rchol(A, 512))),
        "joint_512": jax.jit(lambda A: joint(A, 512)[1]),
        "joint_1000": jax.jit(lambda A: joint(A, 1000)[1]),
        "split_1": jax.jit(lambda A: split(A, 1)),
        "split_2": jax.jit(lambda A: split(A, 2)),
    }
    cases = {"potrf": jax.jit(jnp.linalg.cholesky),
             "rchol_512": jax.jit(lambda A: rchol(A, 512)),
             "rchol_1000": jax.jit(lambda A: rchol(A, 1000)),
             **inv_cases, "matmul": jax.jit(lambda A: A @ A)}
    t = timeit_interleaved({k: (f, (A,)) for k, f in cases.items()}, repeats=args.repeats)
    med = {k: v["median_s"] for k, v in t.items()}
    Lix = np.linalg.inv(np.linalg.cholesky(np.asarray(K, np.float64)))
    err = {k: float(np.abs(np.asarray(f(A), np.float64) - Lix).max() / np.abs(Lix).max())
           for k, f in inv_cases.items()}
    for k in med:
        print(f"n={n} {k:18s} {med[k]:.3f} s" + (f"  L^-1 err {err[k]:.2e}" if k in err else ""))
    rates = []
    for m in args.sizes:
        Am = jnp.asarray(spd(m))
        Lm = jnp.linalg.cholesky(Am)
        B = jnp.asarray(rng.normal(size=(m, m)).astype(np.float32))
        tm = timeit_interleaved({
            "potrf": (jax.jit(jnp.linalg.cholesky), (Am,)),
            "triangular_solve": (jax.jit(lambda Lm, B: lax.linalg.triangular_solve(
                Lm, B, left_side=False, lower=True, transpose_a=True)), (Lm, B)),
            "matmul": (jax.jit(lambda B: B @ B.T), (B,))}, repeats=args.repeats)
        fl = {"potrf": m**3 / 3, "triangular_solve": m**3, "matmul": 2 * m**3}
        r = {k: fl[k] / v["median_s"] / 1e9 for k, v in tm.items()}
        rates.append({"n": m, "median_s": {k: v["median_s"] for k, v in tm.items()},
                      "gflops": r})
        print(f"n={m} GFlop/s: " + ", ".join(f"{k} {v:.0f}" for k, v in r.items()))
    out = out_dir("dgl_cholesky_variants", args.out, args.record)
    path = write_json(out / "cholesky_variants.json", {
        "what": "Cholesky factor / inverse of the factor: LAPACK potrf vs recursions in XLA ops",
        "n": n, "timings": t, "median_s": med, "inverse_rel_err_vs_float64": err,
        "isolated_rates": rates,
        "matmul_gflops": 2 * n**3 / med["matmul"] / 1e9})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
