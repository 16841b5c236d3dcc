"""Cost of a DMN pipeline vs training the same ConvNet end to end (eqs. 25-26).

    python -m benchmarks.dmn_fit                       # MNIST 10k/2k, CPU minutes
    python -m benchmarks.dmn_fit --spec d6,m,d40,m,de10 --n-train 60000 --max-epochs 30

Part 1 (time to accuracy, same run): the DMN pipeline (PCA build + frozen features +
classifier training) for ``--epochs`` epochs reaches validation accuracy A; the ConvNet of the
same architecture (``d -> c``) is trained end to end with validation after every epoch until
it reaches A (or ``--max-epochs``).  Ratio = ConvNet seconds to A / DMN seconds.  If the
ConvNet never reaches A, the accuracy gap at equal wall-clock is reported instead.

Part 2 (throughput): jitted class density accumulation ``rho_c`` (one-shot and streaming with
per-sample labels; grouped = per-image labels shared by that image's patches, what conv DMN
layers use) against a same-shape matmul ``h^T h``, all timed here in interleaved rounds (as
Part 3); the fraction is matmul time / density time (useful FLOPs ``2 N d^2`` for all).

Part 3 (ConvNet training step, same run): value + gradient of the softmax cross-entropy of a
trained ConvNet (``--conv-specs``, CIFAR-10 shapes 32x32x3, batch 128, VALID 3x3 convolutions
as Table 2's) with the same parameters computed two ways: ``lax.conv_general_dilated`` +
``flax.linen.max_pool`` (``reduce_window``, what ``nn.Conv`` gives) and the toolkit's CPU route
(``layerlab.dmn.conv3x3``: one patch matrix product; 2x2 pooling by reshape + max).  Both are
compiled first, then timed in ``--repeats`` interleaved rounds
(``benchmarks._common.timeit_interleaved``: each round calls both, the order rotated, so a drift
of the shared machine's speed hits both alike).  Ratio = lax time / patch time (medians; the
median of the per-round ratios is kept too).  ``--only conv-step`` runs this part alone (no
data needed).

Part 4 (the same steps inside a loop, ``--only conv-scan``): ``--scan-steps`` SGD steps of each
ConvNet, both routes, compiled three ways in the same run -- one ``lax.scan`` (what
``layerlab.loop.fit`` runs per chunk), the scan fully unrolled (straight-line code), and a
Python loop over one jitted step.  On XLA's CPU backend ``lax.conv``'s gradients ran ~10x
slower inside the scan than unrolled; the patch route does not (docs/loop.md).

    python -m benchmarks.dmn_fit --only conv-step --record
    python -m benchmarks.dmn_fit --only conv-scan --record
"""
from __future__ import annotations

from benchmarks._common import add_output_flags, arg_parser


def _imports():
    """The heavy imports, after the flags are parsed (``--help`` stays instant)."""
    global jax, matplotlib, plt, out_dir, timeit, timeit_interleaved, write_json, load
    global DMNConfig, class_density_matrices, convnet_spec, density_init
    global density_update_grouped, format_spec, streaming_class_density_matrices
    global train_and_evaluate
    import jax
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from benchmarks._common import out_dir, timeit, timeit_interleaved, write_json
    from layerlab.data import load
    from layerlab.dmn import (
        DMNConfig,
        class_density_matrices,
        convnet_spec,
        density_init,
        density_update_grouped,
        format_spec,
        streaming_class_density_matrices,
    )
    from layerlab.dmn.experiments import train_and_evaluate


def time_to_accuracy(curve, target):
    """First (seconds, accuracy) of an epoch curve reaching ``target``, or None."""
    for _, s, a in curve:
        if a >= target:
            return s, a
    return None


def acc_at_time(curve, t):
    """Validation accuracy of the last epoch finished by time ``t`` (0 if none)."""
    done = [a for _, s, a in curve if s <= t]
    return done[-1] if done else 0.0


def compare(dmn, conv):
    """Time-to-accuracy comparison of one DMN run and one ConvNet run."""
    target = dmn["val_acc"]
    hit = time_to_accuracy(conv["curve"], target)
    rec = {"dmn": dmn, "convnet": conv, "target_val_acc": target}
    rec["convnet_seconds_to_target"] = hit[0] if hit else None
    rec["ratio_convnet_over_dmn"] = hit[0] / dmn["total_s"] if hit else None
    at_equal = acc_at_time(conv["curve"], dmn["total_s"])
    rec["convnet_acc_at_dmn_cost"] = at_equal
    rec["accuracy_gap_at_equal_cost"] = target - at_equal
    if hit:
        msg = (f"ConvNet {conv['spec']} needs {hit[0]:.2f}s to reach the DMN's val acc "
               f"{target:.4f}; DMN pipeline {dmn['total_s']:.2f}s -> ratio "
               f"{rec['ratio_convnet_over_dmn']:.2f}x")
    else:
        msg = (f"ConvNet {conv['spec']} did not reach {target:.4f} "
               f"(best {max(c[2] for c in conv['curve']):.4f})")
    rec["summary"] = msg + (f"; at equal cost ({dmn['total_s']:.2f}s) the ConvNet has "
                            f"{at_equal:.4f}")
    return rec


def throughput(n, d, num_classes, repeats):
    key = jax.random.key(0)
    h = jax.random.uniform(key, (n, d))
    y = jax.random.randint(jax.random.key(1), (n,), 0, num_classes)
    one = jax.jit(class_density_matrices, static_argnums=2)
    stream = jax.jit(streaming_class_density_matrices, static_argnums=2,
                     static_argnames="chunk_size")
    mm = jax.jit(lambda a: a.T @ a)
    p = 200  # grouped: n / p images of p patches each, one label per image (conv DMN case)
    yg = jax.random.randint(jax.random.key(2), (n // p,), 0, num_classes)
    grouped = jax.jit(lambda a, b: density_update_grouped(
        density_init(num_classes, d), a.reshape(n // p, p, d), b).outer)
    t = timeit_interleaved({
        "matmul": (mm, (h,)), "one_shot": (one, (h, y, num_classes)),
        "streaming": (lambda a, b: stream(a, b, num_classes, chunk_size=8192), (h, y)),
        "grouped": (grouped, (h, yg))}, repeats=repeats)
    t_mm, t_one, t_st, t_gr = (t[k] for k in ("matmul", "one_shot", "streaming", "grouped"))
    flops = 2.0 * n * d * d
    return {
        "n": n, "d": d, "num_classes": num_classes, "interleaved": True,
        "matmul": t_mm, "density_one_shot": t_one, "density_streaming": t_st,
        "matmul_gflops": flops / t_mm["median_s"] / 1e9,
        "density_one_shot_fraction_of_matmul": t_mm["median_s"] / t_one["median_s"],
        "density_streaming_fraction_of_matmul": t_mm["median_s"] / t_st["median_s"],
        "density_grouped": t_gr,
        "density_grouped_fraction_of_matmul": t_mm["median_s"] / t_gr["median_s"],
    }


def conv_step(specs, batch, repeats):
    """Part 3: ConvNet value+grad per step, lax.conv + reduce_window vs the patch route."""
    import jax.numpy as jnp
    import optax

    from layerlab.dmn import DMNConfig as _Cfg
    from layerlab.dmn import make_network

    x = jax.random.uniform(jax.random.key(0), (batch, 32, 32, 3))
    y = jax.random.randint(jax.random.key(1), (batch,), 0, 10)
    out = []
    for spec in specs:
        net = make_network(spec, 10, _Cfg.paper())  # VALID padding, as the ConvNets run
        params = net.init_head(jax.random.key(2), x)["params"]
        # the network's own head, and the same head on lax.conv + reduce_window (Head.lax_ops)
        heads = {"patch": net.head, "lax": net.head.clone(lax_ops=True)}

        def logits(p, x, route, heads=heads):
            return heads[route].apply({"params": p}, x, train=True)

        rec = {"spec": spec, "batch": batch}
        vg = {}
        for route in ("lax", "patch"):
            vg[route] = jax.jit(jax.value_and_grad(
                lambda p, x, y, route=route: optax.softmax_cross_entropy_with_integer_labels(
                    logits(p, x, route), y).mean()))
        t = timeit_interleaved({r: (vg[r], (params, x, y)) for r in ("lax", "patch")},
                               repeats=repeats)
        rec["lax"], rec["patch"] = t["lax"], t["patch"]
        rec["interleaved"] = True
        (vl, gl), (vp, gp) = vg["lax"](params, x, y), vg["patch"](params, x, y)
        rec["max_rel_grad_diff"] = max(
            float(jnp.max(jnp.abs(a - b)) / (jnp.max(jnp.abs(a)) + 1e-30))
            for a, b in zip(jax.tree_util.tree_leaves(gl), jax.tree_util.tree_leaves(gp)))
        rec["loss_diff"] = abs(float(vl) - float(vp))
        rec["ratio_lax_over_patch"] = rec["lax"]["median_s"] / rec["patch"]["median_s"]
        rec["ratio_paired_median"] = float(jnp.median(
            jnp.asarray(t["lax"]["times_s"]) / jnp.asarray(t["patch"]["times_s"])))
        print(f"{spec}: lax.conv + reduce_window {1e3 * rec['lax']['median_s']:.1f} ms, "
              f"patch route {1e3 * rec['patch']['median_s']:.1f} ms per step "
              f"({rec['ratio_lax_over_patch']:.2f}x; grads agree to "
              f"{rec['max_rel_grad_diff']:.1e})", flush=True)
        out.append(rec)
    return out


def conv_scan(specs, batch, n_steps, repeats):
    """Part 4: ``n_steps`` SGD steps per route, as a scan, unrolled, and a loop of jit calls."""
    import jax.numpy as jnp
    import optax
    from jax import lax

    from layerlab.dmn import DMNConfig as _Cfg
    from layerlab.dmn import make_network

    xs = jax.random.uniform(jax.random.key(0), (4 * batch, 32, 32, 3))
    ys = jax.random.randint(jax.random.key(1), (4 * batch,), 0, 10)
    out = []
    for spec in specs:
        net = make_network(spec, 10, _Cfg.paper())
        params = net.init_head(jax.random.key(2), xs[:batch])["params"]
        rec = {"spec": spec, "batch": batch, "steps": n_steps}
        finals = {}
        for route, head in (("lax", net.head.clone(lax_ops=True)), ("patch", net.head)):
            def step(p, t, head=head):
                x = lax.dynamic_slice_in_dim(xs, (t % 4) * batch, batch)
                y = lax.dynamic_slice_in_dim(ys, (t % 4) * batch, batch)
                g = jax.grad(lambda q: optax.softmax_cross_entropy_with_integer_labels(
                    head.apply({"params": q}, x, train=True), y).mean())(p)
                return jax.tree_util.tree_map(lambda a, b: a - 0.01 * b, p, g), None

            ts = jnp.arange(n_steps)
            scan = jax.jit(lambda p, step=step: lax.scan(step, p, ts)[0])
            unrolled = jax.jit(lambda p, step=step: lax.scan(step, p, ts, unroll=True)[0])
            one = jax.jit(step)

            def loop(p, one=one):
                for t in range(n_steps):
                    p = one(p, jnp.int32(t))[0]
                return p

            for how, fn in (("scan", scan), ("unrolled", unrolled), ("jit_loop", loop)):
                rec[f"{route}_{how}"] = timeit(fn, params, repeats=repeats)
                finals[(route, how)] = fn(params)
        ref = jax.tree_util.tree_leaves(finals[("lax", "scan")])
        rec["max_rel_param_diff"] = max(
            float(jnp.max(jnp.abs(a - b)) / (jnp.max(jnp.abs(a)) + 1e-30))
            for f in finals.values() for a, b in zip(ref, jax.tree_util.tree_leaves(f)))
        med = {k: v["median_s"] for k, v in rec.items() if isinstance(v, dict)}
        rec["lax_scan_over_unrolled"] = med["lax_scan"] / med["lax_unrolled"]
        rec["lax_scan_over_patch_scan"] = med["lax_scan"] / med["patch_scan"]
        rec["patch_scan_over_unrolled"] = med["patch_scan"] / med["patch_unrolled"]
        print(f"{spec}, {n_steps} steps: " + ", ".join(
            f"{k} {v:.2f} s" for k, v in med.items()) +
            f"; lax scan/unrolled {rec['lax_scan_over_unrolled']:.1f}x, lax/patch in the scan "
            f"{rec['lax_scan_over_patch_scan']:.1f}x", flush=True)
        out.append(rec)
    return out


def build_parser():
    p = arg_parser(__doc__)
    p.add_argument("--spec", default="d6,m,de10",
                   help="DMN architecture (the ConvNet replaces each d by c)")
    p.add_argument("--pca", default="class", choices=["class", "naive"],
                   help="how DMN filters are chosen: class-wise or naive PCA")
    p.add_argument("--n-train", type=int, default=10000, help="MNIST training samples")
    p.add_argument("--n-val", type=int, default=2000, help="MNIST validation samples")
    p.add_argument("--epochs", type=int, default=8, help="DMN classifier epochs")
    p.add_argument("--max-epochs", type=int, default=12, help="ConvNet epoch budget")
    p.add_argument("--lr", type=float, default=3e-3, help="Adam learning rate (both models)")
    p.add_argument("--tp-n", type=int, default=200000, help="samples in the throughput test")
    p.add_argument("--tp-d", type=int, default=54, help="dims (3x3 patches of 6 channels)")
    p.add_argument("--repeats", type=int, default=5, help="timed calls per case (median)")
    p.add_argument("--only", default="all", choices=["all", "conv-step", "conv-scan"],
                   help="'conv-step': Part 3 alone (ConvNet step cost, no data needed); "
                   "'conv-scan': Part 4 alone (the steps inside a scan, unrolled, a jit loop)")
    p.add_argument("--scan-steps", type=int, default=8, help="SGD steps per Part 4 program")
    p.add_argument("--scan-specs", default="c10,m,de10;c22,m,c41,m,de10",
                   help="';'-separated ConvNets timed in Part 4")
    p.add_argument("--conv-specs", default="c10,m,de10;c22,m,de10;c22,m,c41,m,de10;"
                   "c22,m,c305,m,de10", help="';'-separated ConvNets timed in Part 3")
    p.add_argument("--conv-batch", type=int, default=128, help="batch of the Part 3 step")
    add_output_flags(p, "dmn_fit")
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    _imports()
    specs = [t for t in args.conv_specs.split(";") if t.strip()]
    if args.only == "conv-scan":
        out = out_dir("dmn_fit", args.out, args.record)
        runs = conv_scan([t for t in args.scan_specs.split(";") if t.strip()],
                         args.conv_batch, args.scan_steps, args.repeats)
        write_json(out / "conv_scan.json", {
            "what": "SGD steps of ConvNets (CIFAR-10 shapes) inside lax.scan vs unrolled vs a "
                    "Python loop of jitted steps, lax.conv + reduce_window vs the patch route",
            "settings": vars(args), "conv_scan": runs})
        return
    if args.only == "conv-step":
        out = out_dir("dmn_fit", args.out, args.record)
        steps = conv_step(specs, args.conv_batch, args.repeats)
        write_json(out / "conv_step.json", {
            "what": "ConvNet training step (value + grad, CIFAR-10 shapes): lax.conv + "
                    "reduce_window vs layerlab.dmn.conv3x3 patches + reshape max-pool",
            "settings": vars(args), "conv_step": steps})
        return
    tr = load("mnist", "train", n=args.n_train, balanced=True)
    te = load("mnist", "test", n=args.n_val, balanced=True)
    key = jax.random.key(0)
    common = dict(key=key, lr=args.lr, eval_every_epoch=True, progress=True)
    cspec = format_spec(convnet_spec(args.spec))
    passes, msgs = {}, []
    # "cold": first run in the process, wall-clock includes every jit compilation;
    # "warm": the identical run again, compilations cached (steady-state cost).
    for name in ("cold", "warm"):
        dmn = train_and_evaluate(args.spec, tr.x, tr.y, te.x, te.y, 10,
                                 config=DMNConfig(pca=args.pca), epochs=args.epochs, **common)
        conv = train_and_evaluate(cspec, tr.x, tr.y, te.x, te.y, 10, epochs=args.max_epochs,
                                  **common)
        passes[name] = rec = compare(dmn, conv)
        msgs.append(f"[{name}] {rec['summary']}")
        print(msgs[-1], flush=True)
    rec = passes
    msg = " | ".join(msgs)
    tp = throughput(args.tp_n, args.tp_d, 10, args.repeats)
    print(f"density accumulation: one-shot {tp['density_one_shot_fraction_of_matmul']:.2f}, "
          f"streaming {tp['density_streaming_fraction_of_matmul']:.2f}, grouped by image "
          f"{tp['density_grouped_fraction_of_matmul']:.2f} of the matmul rate "
          f"({tp['matmul_gflops']:.1f} GFLOP/s)", flush=True)
    steps = conv_step(specs, args.conv_batch, args.repeats)
    out = out_dir("dmn_fit", args.out, args.record)
    write_json(out / "fit.json", {"what": "DMN pipeline vs ConvNet end to end; density "
                                  "throughput; ConvNet step cost", "settings": vars(args),
                                  "time_to_accuracy": rec, "throughput": tp,
                                  "conv_step": steps, "summary": msg})
    fig, ax = plt.subplots(figsize=(5, 3.6))
    for pname, ls in (("cold", "o-"), ("warm", "s--")):
        for name, r in (("DMN " + args.spec, passes[pname]["dmn"]),
                        ("ConvNet " + cspec, passes[pname]["convnet"])):
            ax.plot([c[1] for c in r["curve"]], [100 * c[2] for c in r["curve"]], ls,
                    label=f"{name} ({pname})")
    ax.axhline(100 * passes["cold"]["target_val_acc"], color="k", lw=0.5)
    ax.set_xscale("log")
    ax.set_xlabel("wall-clock s (PCA build included; cold = with compilation)")
    ax.set_ylabel("validation accuracy %")
    ax.set_title("time to accuracy, MNIST subset")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "fit.png", dpi=120)


if __name__ == "__main__":
    main()
