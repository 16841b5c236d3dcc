"""Cost and lag of ``loop.fit``'s checkpoints (same run, same batches).

    python -m benchmarks.fit_checkpoint [--steps 2000] [--periods 50,500] [--repeats 7]
    python -m benchmarks.fit_checkpoint --compare-rev 469f4fa   # A/B of fit's main loop

A ReLU MLP (64-``--hidden``-10, Adam) on scikit-learn's digits, ``--steps`` mini-batch steps
of ``--batch``, evaluated (training loss on all 1438 images) every ``P`` steps for each
period ``P`` of ``--periods``, three ways:

* ``eval_only``: ``fit`` with the evaluations and no checkpoints (the reference);
* ``ckpt``: the same with a checkpoint every ``P`` steps into a fresh folder;
* ``ckpt@REV`` (with ``--compare-rev REV``): the same through ``layerlab/loop/_fit.py`` as of
  git revision REV (the rest of ``layerlab.loop`` as now), i.e. a same-run A/B of a change
  to the main loop -- e.g. 469f4fa, before ``fit`` stopped dispatching a look-ahead chunk
  past a checkpoint.

Steady state is the median of ``--repeats`` interleaved rounds (each round calls every case
once, the order rotated); each call's checkpoint folder is deleted after it, outside the
timer.  Separately, untimed, the **lag**: for each saved step ``t``, how
many steps past ``t`` had already run when the save returned (counted by a host callback in
the step) -- what a stop right after that save would have to redo beyond the last checkpoint.
Writes ``fit_checkpoint.json`` and a bar chart to ``scratch/fit_checkpoint/``
(``results/fit_checkpoint/`` with ``--record``).
"""
from __future__ import annotations

import importlib
import shutil
import tempfile

from benchmarks._common import add_output_flags, arg_parser, csv_list


def build_parser():
    ap = arg_parser(__doc__)
    ap.add_argument("--steps", type=int, default=2000, help="training steps per fit call")
    ap.add_argument("--batch", type=int, default=64, help="mini-batch size")
    ap.add_argument("--hidden", type=int, default=1024, help="hidden width of the MLP")
    ap.add_argument("--periods", default="50,500",
                    help="evaluation / checkpoint periods P (comma-separated steps)")
    ap.add_argument("--repeats", type=int, default=7, help="interleaved timing rounds")
    ap.add_argument("--compare-rev", default=None, metavar="REV",
                    help="also time fit's main loop (layerlab/loop/_fit.py) as of git "
                    "revision REV, same rounds")
    add_output_flags(ap, "fit_checkpoint")
    return ap


def _fit_at(rev: str):
    """``fit`` from ``layerlab/loop/_fit.py`` at ``rev``, importing the current siblings."""
    import re

    from benchmarks._common import module_at

    return module_at(rev, "layerlab/loop/_fit.py",
                     "layerlab.loop._fit_at_" + re.sub(r"\W", "_", rev),
                     package="layerlab.loop").fit


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    from benchmarks._common import out_dir, timeit_interleaved, write_json
    from layerlab import data, loop, nets

    _run = importlib.import_module("layerlab.loop._run")
    periods = csv_list(args.periods, int)
    ds = data.load("digits", "train")
    x, _, _ = data.standardize(data.flatten(ds.x))
    x, y = jnp.asarray(x), jnp.asarray(ds.y)

    def loss_fn(params, batch):
        xb, yb = batch
        return optax.softmax_cross_entropy_with_integer_labels(
            nets.mlp_apply(params, xb), yb).mean()

    ts = loop.optax_step(loss_fn, optax.adam(1e-3))
    state0 = ts.init(nets.mlp_init(jax.random.key(1), [64, args.hidden, 10], init="he"))
    eval_fn = jax.jit(lambda s: {"loss": loss_fn(s.params, (x, y))})
    fits = {"": loop.fit}
    if args.compare_rev:
        fits[f"@{args.compare_rev}"] = _fit_at(args.compare_rev)
    tmp = tempfile.mkdtemp(prefix="fit_checkpoint_")
    counter, written = [0], []

    def clean(_name=None):
        """Delete the checkpoint folders written so far (outside the timed calls)."""
        while written:
            shutil.rmtree(written.pop(), ignore_errors=True)

    def runner(fit, P, ckpt, step=ts.step):
        def run():
            kw = {}
            if ckpt:
                counter[0] += 1
                kw = dict(checkpoint_dir=f"{tmp}/{counter[0]}", checkpoint_every=P)
                written.append(kw["checkpoint_dir"])  # deleted by clean(), not in the timer
            s, _ = fit(step, state0, (x, y), key=jax.random.key(0), steps=args.steps,
                       batch_size=args.batch, eval_fn=eval_fn, eval_every=P, progress=False,
                       **kw)
            return s
        return run

    records = []
    try:
        for P in periods:
            cases = {"eval_only": (runner(loop.fit, P, False), ())}
            for tag, fit in fits.items():
                cases[f"ckpt{tag}"] = (runner(fit, P, True), ())
            t = timeit_interleaved(cases, repeats=args.repeats, after=clean)
            # the lag, untimed: steps run past t when the save of t returned
            lag = {}
            for tag, fit in fits.items():
                ran, lags = [0], []

                def step(s, b, k):
                    jax.debug.callback(lambda: ran.__setitem__(0, ran[0] + 1))
                    return ts.step(s, b, k)

                real_save = _run.FitRun.save

                def save(self, real_save=real_save, lags=lags, ran=ran):
                    real_save(self)
                    lags.append(ran[0] - int(self.t))

                _run.FitRun.save = save
                try:
                    runner(fit, P, True, step=step)()
                finally:
                    _run.FitRun.save = real_save
                    clean()
                lag[f"ckpt{tag}"] = {"max_steps_past_save": int(max(lags)),
                                     "mean_steps_past_save": float(np.mean(lags)),
                                     "saves": len(lags)}
            med = {k: v["median_s"] for k, v in t.items()}
            rec = {"period": P, "steps": args.steps, "batch": args.batch, "hidden": args.hidden,
                   "times": t, "lag": lag,
                   "ckpt_over_eval_only": med["ckpt"] / med["eval_only"]}
            if args.compare_rev:
                rec[f"ckpt_over_ckpt@{args.compare_rev}"] = (
                    med["ckpt"] / med[f"ckpt@{args.compare_rev}"])
            records.append(rec)
            print(f"P={P}: " + ", ".join(f"{k} {v:.3f}s" for k, v in med.items())
                  + "; lag " + ", ".join(f"{k} max {v['max_steps_past_save']}"
                                         for k, v in lag.items()))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out = out_dir("fit_checkpoint", args.out, args.record)
    write_json(out / "fit_checkpoint.json",
               {"what": "loop.fit with checkpoints: median seconds per fit call (interleaved "
                "rounds) and the steps already run past each save when it returned",
                "args": vars(args), "records": records})
    _plot(records, out / "fit_checkpoint.png")
    print(f"wrote {out}")
    return 0


def _plot(records, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    names = list(records[0]["times"])
    w = 0.8 / len(names)
    for i, name in enumerate(names):
        xs = [j + i * w for j in range(len(records))]
        axes[0].bar(xs, [r["times"][name]["median_s"] for r in records], w, label=name)
    axes[0].set_xticks([j + 0.4 - w / 2 for j in range(len(records))],
                       [f"P={r['period']}" for r in records])
    axes[0].set_ylabel("seconds per fit call (median)")
    axes[0].legend(fontsize=8)
    lags = list(records[0]["lag"])
    w2 = 0.8 / len(lags)
    for i, name in enumerate(lags):
        xs = [j + i * w2 for j in range(len(records))]
        axes[1].bar(xs, [r["lag"][name]["max_steps_past_save"] for r in records], w2,
                    label=name)
    axes[1].set_xticks([j + 0.4 - w2 / 2 for j in range(len(records))],
                       [f"P={r['period']}" for r in records])
    axes[1].set_ylabel("steps run past t when save(t) returned (max)")
    axes[1].legend(fontsize=8)
    fig.suptitle("loop.fit checkpoints: cost and lag")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
