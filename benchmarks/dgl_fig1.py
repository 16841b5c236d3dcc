"""Fig. 1 of Ben-David & Ringel (2019), small setting: sampled vs MF vs FIT covariances.

Finite-width random ReLU nets (``--depth`` hidden layers of width d, linear output, prior
variances ``w_var``/``b_var`` in the fan-in convention) are sampled on ``--n`` digits
images.  Two independent Monte-Carlo covariances ``K_A``, ``K_B`` (``--samples`` nets each)
are compared with

* MF: the infinite-width NNGP with the same variances (``layerlab.dgl.top_kernel``);
* FIT: the NNGP with variances renormalised by least squares against ``K_A``
  (``layerlab.dgl.fit_variances``), evaluated against the independent ``K_B``;
* sampled: ``K_A`` itself against ``K_B``.

Error in units of sampling noise: ``z = ||K - K_B||_F / sqrt(sum_ij se_ij^2)`` with ``se``
the per-entry standard error of ``K_B`` (the denominator is the expected Frobenius error of
a Monte-Carlo estimate), root-mean-square over ``--repeats`` independent ``K_B``.  z ~ 1 is
"as good as sampling allows"; ``K_A`` vs ``K_B`` gives ~sqrt(2).  The kernel entries are
strongly correlated (a common scale fluctuation), so z from one sample is itself noisy.

    python -m benchmarks.dgl_fig1
    python -m benchmarks.dgl_fig1 --widths 10 20 50 100 500 2000 --samples 20000 --n 100
"""
from __future__ import annotations

import argparse
import json

import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

from benchmarks._common import results_dir, write_json
from layerlab import data, dgl


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--widths", type=int, nargs="+", default=[5, 10, 20, 50, 200])
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--samples", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--w-var", type=float, default=2.0)
    ap.add_argument("--b-var", type=float, default=0.1)
    ap.add_argument("--out", default=None)
    ap.add_argument("--plot-only", action="store_true", help="re-plot the existing JSON")
    args = ap.parse_args(argv)
    out = results_dir("dgl_fig1", args.out)
    if args.plot_only:
        rec = json.loads((out / "dgl_fig1.json").read_text())
        _plot(rec["records"], rec["settings"], out / "dgl_fig1.png")
        return
    ds = data.load("digits", "train")
    x = jnp.asarray(data.flatten(ds.x)[: args.n], jnp.float32)
    w = jnp.full((args.depth + 1,), args.w_var)
    b = jnp.full((args.depth + 1,), args.b_var)
    mf = dgl.LayerVariances(w, b)
    K_mf = dgl.top_kernel(x, w_var=w, b_var=b)
    fit = jax.jit(lambda K: dgl.fit_variances(x, K, mf, steps=500, lr=0.05, ridge=1e-4))

    def z(K, KBs):
        return float(np.sqrt(np.mean([
            float(jnp.sum((K - KB) ** 2) / jnp.sum(se**2)) for KB, se in KBs])))

    recs = []
    for i, width in enumerate(tqdm(args.widths, desc="width")):
        kA, *kBs = jax.random.split(jax.random.fold_in(jax.random.key(0), i), 1 + args.repeats)
        sample = jax.jit(lambda k: dgl.sample_relu_outputs(
            k, x, widths=[width] * args.depth, w_var=w, b_var=b, num_samples=args.samples))
        KA, _ = dgl.mc_covariance(sample(kA))
        KBs = [dgl.mc_covariance(sample(k)) for k in kBs]
        KB = KBs[0][0]
        fv = fit(KA)
        K_fit = dgl.top_kernel(x, w_var=fv.w_var, b_var=fv.b_var)
        rec = {"width": width, "z_mf": z(K_mf, KBs), "z_fit": z(K_fit, KBs),
               "z_sampled": z(KA, KBs),
               "fit_w_var": np.asarray(fv.w_var), "fit_b_var": np.asarray(fv.b_var),
               "rel_frob_mf": float(jnp.linalg.norm(K_mf - KB) / jnp.linalg.norm(KB)),
               "rel_frob_fit": float(jnp.linalg.norm(K_fit - KB) / jnp.linalg.norm(KB))}
        recs.append(rec)
        tqdm.write(f"d={width}: z MF {rec['z_mf']:.2f}  FIT {rec['z_fit']:.2f}  "
                   f"sampled {rec['z_sampled']:.2f}")
    write_json(out / "dgl_fig1.json", {
        "what": "covariance error of MF / FIT NNGP vs sampled finite-width nets, in units of "
                "sampling noise", "settings": vars(args), "records": recs})
    _plot(recs, vars(args), out / "dgl_fig1.png")
    print(f"wrote {out}")


def _plot(recs, settings, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4))
    ws = [r["width"] for r in recs]
    ax.loglog(ws, [r["z_mf"] for r in recs], "o-", label="MF (infinite-width NNGP)")
    ax.loglog(ws, [r["z_fit"] for r in recs], "s-", label="FIT (renormalised variances)")
    ax.loglog(ws, [r["z_sampled"] for r in recs], "^--", label="independent sample")
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xlabel("hidden width d")
    ax.set_ylabel("RMS error / sampling std")
    ax.set_title(f"Fig. 1 (small): depth {settings['depth']}, {settings['samples']} nets, "
                 f"{settings['n']} digits")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
