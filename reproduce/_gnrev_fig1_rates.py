"""Where §5.1's "largest learning rate that did not cause the loss to diverge" lies for GN.

Fig. 1's GN grid (0.1 ... 1 per block, extended x2 up to 8 by ``--paper``) never diverged, so
its pick is the largest rate *tried*.  This probe trains seed 0 of the Fig. 1 configuration
(``FullBatchConfig.paper()`` or the reduced default) for both GN arms at larger rates in one
vmapped sweep per arm and records, per rate, the peak / initial loss, whether the §5.1 rule
(finite, peak <= 10x the initial loss, final below the initial) calls it stable, the loss after
10 steps and at the end.  Result: ``results/gnrev/ablation/fig1_gn_rates.json`` (the paper's
MNIST shape: 16 stable, 32 diverging for both arms; a GPU job, ~70 s on an H200).

    python -m reproduce._gnrev_fig1_rates --paper --out results/gnrev/ablation/fig1_gn_rates.json
    python -m reproduce._gnrev_fig1_rates --rates 1,2,4 --out scratch/fig1_rates.json  # CPU size
"""
import argparse
import json
import pathlib
import time


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--paper", action="store_true", help="n=1024, d'=8000, 100 steps (GPU)")
    p.add_argument("--rates", default="8,16,32,64,128,256", help="per-block GN rates")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--out", type=pathlib.Path, required=True)
    args = p.parse_args(argv)
    import jax

    from layerlab.gnrev import experiments as ex

    cfg = ex.FullBatchConfig.paper("mnist") if args.paper else ex.FullBatchConfig()
    rates = tuple(float(r) for r in args.rates.split(","))
    prep = ex.load_classification(cfg.dataset, cfg.n_train, cfg.n_test, data_dir=args.data_dir)
    dim = prep.x_train.shape[1]
    ks = ex._seed_keys(jax.random.key(0), 1)[0]  # seed 0 of run_fig1
    out = {}
    for arm in [a for a in cfg.arms if a.is_gn]:
        arm = ex.Arm(arm.name, arm.optimizer, rates, arm.weight_decay)
        params, frozen, P = ex.make_model(
            ks, dim, cfg.depth, prep.num_outputs, bottleneck=cfg.bottleneck,
            first_linear=ex._first_linear(arm, cfg.first_linear), init=cfg.init,
            w_scale=ex._arm_w_scale(cfg, arm, dim))
        t = time.perf_counter()
        sw = ex.lr_sweep(arm, params, frozen, P, (prep.x_train, prep.y_train), steps=cfg.steps,
                         batch_size=None, rule="largest_stable", key=jax.random.fold_in(ks, 1))
        loss = sw["loss"]
        out[arm.name] = {"lrs": sw["lrs"].tolist(), "peak_ratio": sw["peak_ratio"].tolist(),
                         "stable": sw["stable"].tolist(), "final": loss[-1].tolist(),
                         "loss_step9": loss[min(9, len(loss) - 1)].tolist(),
                         "best": sw["best"], "wall_s": time.perf_counter() - t}
        print(arm.name, json.dumps(out[arm.name]), flush=True)
    rec = {"_note": "Exact GN, seed 0 of reproduce.gnrev_fig1 " + ("--paper" if args.paper else
           "(reduced)") + f", {cfg.steps} full-batch steps per rate, rule largest_stable.",
           "machine": {"device_kind": jax.devices()[0].device_kind,
                       "platform": jax.devices()[0].platform}, "arms": out}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rec, indent=1) + "\n")
    print("wrote", args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
