"""Add the second half of §5.3's Fig. 5 sentence to a committed Fig. 5 record, from its own
curves: "GN leads to an early saturation of the loss, which instead does not appear in Adam and
SGD".  Until 2026-11-27 the record tested only GN's half; the contrast is decided by the same
rule (:func:`layerlab.gnrev.experiments.fig5_contrast_claim`) on the seed-mean training-loss
curves the record keeps in ``extra.curves``, so no run is repeated.  Idempotent: a record that
already has the claim gets it recomputed.

    python -m reproduce._gnrev_redecide_fig5 results/gnrev/fig5.json
"""
from __future__ import annotations

import json
import sys

NOTE = (". The contrast claim (early saturation absent in Adam and SGD, §5.3) was added on "
        "2026-11-27 from this record's own extra.curves with fig5_contrast_claim "
        "(reproduce/_gnrev_redecide_fig5.py); the run is unchanged.")


def redecide(path: str) -> list[tuple[str, bool]]:
    from layerlab.gnrev.experiments import fig5_contrast_claim
    from layerlab.record import to_jsonable

    with open(path) as fh:
        r = json.load(fh)
    if r.get("artifact") != "fig5":
        raise SystemExit(f"{path}: a {r.get('artifact')!r} record, not fig5")
    curves = r["extra"]["curves"]
    if not {"adam", "sgd"} & curves.keys():
        raise SystemExit(f"{path}: extra.curves has no Adam or SGD arm to decide the contrast")
    new = to_jsonable(fig5_contrast_claim(
        {a: curves[a]["train_loss"] for a in ("adam", "sgd") if a in curves}))
    stem = new["claim"].split(" (", 1)[0]
    r["claims"] = [c for c in r["claims"] if not c["claim"].startswith(stem)] + [new]
    r["note"] = r.get("note") or ""
    if NOTE not in r["note"]:
        r["note"] += NOTE
    with open(path, "w") as fh:
        fh.write(json.dumps(r, indent=2, allow_nan=False) + "\n")
    return [(c["claim"], c["holds"]) for c in r["claims"]]


def main(argv=None) -> int:
    from reproduce._gnrev_redecide_fig3 import run

    return run(redecide, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
