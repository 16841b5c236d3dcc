"""The CIFAR-10 mini-batch claims of Figs. 2-4 and Apps. G, H, evaluated on an ntk_rate ablation
(``reproduce/_gnrev_ntk_rate.py``: one GN arm, several Adam rates, one SGD arm) per Adam rate
with the committed records' rules (``run_fig2`` ... ``run_appH`` in layerlab.gnrev.experiments),
and written into the ablation's JSON under ``claims_by_adam_rate``.

    python -m reproduce._gnrev_ntk_rate_claims results/gnrev/ablation/ntk_rate_cifar10.json
"""
import json
import sys


def claims(gn: dict, sgd: dict, ad: dict, s_name: str, ad_name: str) -> dict[str, bool]:
    """The records' rules for GN arm ``gn`` against Adam arm ``ad`` (``ad_name``), SGD arm
    ``sgd`` (``s_name``), from the ablation's per-arm summaries."""
    import numpy as np

    from layerlab.gnrev.experiments import fig3_claims

    L = len(gn["cka_init_end_per_block"])
    mid = (L - 1) // 2  # run_fig4's "middle" block
    gd, adm = gn["ntk_distance_per_epoch_curve"], ad["ntk_distance_per_epoch_curve"]
    gc, ac, sc = (x["cka_init_end_per_block"] for x in (gn, ad, sgd))
    gt, at = gn["test_loss_per_epoch"], ad["test_loss_per_epoch"]
    pair = gn["cka_with_end_per_block"]
    drop = gn["batch_loss_change_pct_per_epoch"]
    return {
        "fig4: NTK of GN closer to init than Adam's": gn["ntk_align_end"] > ad["ntk_align_end"],
        "fig4: NTK of GN changes less per epoch": np.mean(gd) < np.mean(adm),
        "fig4: ... after the first epoch": np.mean(gd[1:]) < np.mean(adm[1:]),
        "fig4: CKA of GN closer to init, first block": gc[0] > ac[0],
        "fig4: CKA of GN closer to init, middle block": gc[mid] > ac[mid],
        "fig4: CKA of GN closer to init, last block": gc[-1] > ac[-1],
        "fig4: SGD's NTK, like GN's, closer to init than Adam's":
            sgd["ntk_align_end"] > ad["ntk_align_end"],
        "appG: SGD's weights change least":
            sgd["w_one_minus_cos_end"] < min(gn["w_one_minus_cos_end"],
                                             ad["w_one_minus_cos_end"]),
        "appG: GN's weight change within 3x of Adam's":
            gn["w_one_minus_cos_end"] / ad["w_one_minus_cos_end"] <= 3.0,
        "appH: GN's CKA with init above Adam's in every block":
            all(g > a for g, a in zip(gc, ac)),
        "appH: GN and SGD both above Adam in every block":
            all(g > a and s > a for g, s, a in zip(gc, sc, ac)),
        "appH: Adam changes later blocks more": ac[-1] < ac[0],
        "appH: CKA(GN, SGD) > CKA(GN, Adam) in every block":
            all(s > a for s, a in zip(pair[s_name], pair[ad_name])),
        **dict(zip(("fig3: GN's per-batch drop largest in epoch 1",
                    "fig3: GN's per-batch advantage over SGD and Adam weakens",
                    "fig3: GN's per-batch advantage subsists to the end of the run"),
                   (c.holds for c in fig3_claims(
                       {"gn": drop, "adam": ad["batch_loss_change_pct_per_epoch"],
                        "sgd": sgd["batch_loss_change_pct_per_epoch"]})), strict=True)),
        "fig2: GN makes good initial progress":
            gn["train_loss_per_epoch"][1] <= min(ad["train_loss_per_epoch"][1],
                                                 sgd["train_loss_per_epoch"][1]),
        "fig2: GN's test loss saturates and Adam's ends lower":
            gt[0] - gt[1] > gt[1] - min(gt[1:]) and at[-1] < gt[-1],
        "fig2: Adam reaches a lower training loss": ad["train_loss_end"] < gn["train_loss_end"],
    }


def main(argv: list[str] | None = None) -> int:
    """Decide the claims per Adam rate and write them into the ablation's JSON."""
    import numpy as np

    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        # the script edits the JSON it is given in place: the path is never implied, so a bare
        # run cannot rewrite a committed record (results/gnrev/ablation/ntk_rate_cifar10.json)
        print("usage: python -m reproduce._gnrev_ntk_rate_claims PATH/TO/ntk_rate_<dataset>.json\n"
              "  (writes claims_by_adam_rate into that file, in place)", file=sys.stderr)
        return 2
    path = argv[0]
    with open(path) as f:
        d = json.load(f)
    A = d["arms"]
    g_name = next(k for k in A if k.startswith("gn"))
    s_name = next(k for k in A if k.startswith("sgd"))
    gn, sgd = A[g_name], A[s_name]
    out = {}
    for name, ad in A.items():
        if not name.startswith("adam"):
            continue
        out[name] = {k: bool(v) for k, v in claims(gn, sgd, ad, s_name, name).items()}
        print(f"== {g_name} vs {name}: {sum(out[name].values())}/{len(out[name])} hold")
        for k, v in out[name].items():
            print(f"   {'yes' if v else 'NO '} {k}")
    for k, v in A.items():
        c = v["ntk_distance_per_epoch_curve"]
        print(f"{k:10s} align {v['ntk_align_end']:.5f} 1-cos/epoch {np.mean(c):.2e} "
              f"(after epoch 1 {np.mean(c[1:]):.2e}) CKA {np.round(v['cka_init_end_per_block'], 4)}"
              f" 1-cos(W,W0) {v['w_one_minus_cos_end']:.2e} train {v['train_loss_end']:.3f} "
              f"test {v['test_loss_end']:.3f} acc {v['test_acc_end']:.4f}")
    d["claims_by_adam_rate"] = {
        "_note": f"Figs. 2-4 / Apps. G, H claims with the records' rules: {g_name} against each "
                 f"Adam arm, SGD = {s_name} (reproduce/_gnrev_ntk_rate_claims.py)",
        **out}
    with open(path, "w") as f:
        json.dump(d, f, indent=1)
    print(f"wrote claims_by_adam_rate into {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
