"""Fig. 3's per-batch loss drop compared at matched training loss instead of matched epoch.

The Fig. 3 claims compare GN's per-batch drop with Adam's and SGD's epoch by epoch.  When one
optimizer fits the training set much faster than another, an epoch-by-epoch comparison also
compares different stages of training; this script puts each arm's per-epoch drop against its
training loss and compares arms at the same loss level.  It reads committed curves only (no
training), so the numbers docs/gnrev.md quotes for the MNIST Fig. 3 misses come from a script:

* ``results/gnrev/fig3.json`` ``extra.curves[arm].per_epoch`` (drops, 3-seed means) with
  ``results/gnrev/fig2.json`` ``extra.curves[arm].train_loss`` (the same run's training loss
  after epochs 0..E) -- GN at the swept rate;
* ``results/gnrev/ablation/fig3_gn_rate_mnist.json`` ``arms[a].batch_loss_change_pct_per_epoch``
  and ``arms[a].train_loss_per_epoch`` -- GN at the authors' 0.1 per block, one seed.

Epoch ``e``'s drop (``e = 1..E``) is tied to a loss level, its *anchor*: the training loss at
its end (``end``), at its start (``start``), or their geometric mean (``middle``).  An arm's
drop at any loss level inside its anchors' range is the linear interpolation in log(loss);
two arms are compared on the overlap of their ranges, on a log grid, and every sign change of
the difference is refined to the crossing level (bisection on the piecewise-linear curves).

    python -m reproduce._gnrev_fig3_matched_loss      # -> scratch/gnrev/fig3_matched_loss.json
    python -m reproduce._gnrev_fig3_matched_loss --out results/gnrev/ablation/fig3_matched_loss.json
"""
from __future__ import annotations

import argparse
import json
import math
import pathlib
import time

from reproduce._cli import REPO

ANCHORS = ("end", "middle", "start")


def anchored(train_loss, drops, anchor: str) -> tuple[list[float], list[float]]:
    """``(levels, drops)`` sorted by increasing loss level.

    ``train_loss``: ``[E + 1]`` training loss after epochs ``0..E``; ``drops``: ``[E]`` the
    per-batch drop (%) of epochs ``1..E``; ``anchor`` in :data:`ANCHORS`.  The points are
    sorted by level, so where the training loss rises between epochs (Adam's last epoch on
    MNIST: 0.0130 -> 0.0136) neighbouring levels may come from non-adjacent epochs."""
    tl, d = [float(v) for v in train_loss], [float(v) for v in drops]
    if len(tl) != len(d) + 1:
        raise ValueError(f"train_loss must have one entry more than drops (epochs 0..E vs "
                         f"1..E); got {len(tl)} and {len(d)}")
    if anchor not in ANCHORS:
        raise ValueError(f"anchor must be one of {ANCHORS}, got {anchor!r}")
    if any(not (v > 0 and math.isfinite(v)) for v in tl):
        raise ValueError(f"train_loss must be positive and finite, got {tl}")
    lv = {"end": tl[1:], "start": tl[:-1],
          "middle": [math.sqrt(a * b) for a, b in zip(tl[:-1], tl[1:])]}[anchor]
    pts = sorted(zip(lv, d))
    return [p[0] for p in pts], [p[1] for p in pts]


def at(levels, drops, x: float) -> float:
    """Drop at loss level ``x`` (linear in log loss; ``levels`` increasing, ``x`` inside)."""
    import numpy as np

    if not levels[0] <= x <= levels[-1]:
        raise ValueError(f"level {x} outside [{levels[0]}, {levels[-1]}]")
    return float(np.interp(math.log(x), np.log(levels), drops))


def compare(a, b, *, grid: int = 400) -> dict:
    """Arm ``a`` against arm ``b`` (each ``(levels, drops)`` from :func:`anchored`): the overlap
    of their loss ranges, ``a − b`` (percentage points; negative = ``a`` drops more) at a few
    levels, where ``a`` leads, and the crossing levels."""
    lo, hi = max(a[0][0], b[0][0]), min(a[0][-1], b[0][-1])
    if not lo < hi:
        return {"overlap": None, "crossings": [], "a_leads_fraction": None}

    def diff(x):
        return at(*a, x) - at(*b, x)

    xs = [math.exp(math.log(lo) + (math.log(hi) - math.log(lo)) * i / grid)
          for i in range(grid + 1)]
    xs[0], xs[-1] = lo, hi
    ds = [diff(x) for x in xs]
    cross = []
    for i in range(grid):
        if ds[i] == 0.0:  # a crossing only where the sign differs on the two sides
            if 0 < i and ds[i - 1] * ds[i + 1] < 0:
                cross.append(xs[i])
        elif ds[i] * ds[i + 1] < 0:
            u, v = xs[i], xs[i + 1]
            for _ in range(60):
                m = math.sqrt(u * v)
                if diff(u) * diff(m) <= 0:
                    v = m
                else:
                    u = m
            cross.append(math.sqrt(u * v))
    lead = sum(d < 0 for d in ds) / len(ds)
    return {"overlap": [lo, hi], "crossings": cross, "a_leads_fraction": lead,
            "diff_at": {f"{x:.4g}": diff(x) for x in
                        sorted({lo, math.sqrt(lo * hi), hi})}}


def _rel(path) -> str:
    """``path`` relative to the repository when it lies inside it (as records name files)."""
    p = pathlib.Path(path).resolve()
    return str(p.relative_to(REPO)) if p.is_relative_to(REPO) else str(p)


def _curves_record(fig3_path, fig2_path) -> dict[str, tuple[list, list]]:
    f3 = json.loads(pathlib.Path(fig3_path).read_text())["extra"]["curves"]
    f2 = json.loads(pathlib.Path(fig2_path).read_text())["extra"]["curves"]
    return {a: (f2[a]["train_loss"], f3[a]["per_epoch"]) for a in f3}


def _curves_ablation(path) -> dict[str, tuple[list, list]]:
    arms = json.loads(pathlib.Path(path).read_text())["arms"]
    return {a: (v["train_loss_per_epoch"], v["batch_loss_change_pct_per_epoch"])
            for a, v in arms.items()}


def analyse(curves: dict[str, tuple[list, list]]) -> dict:
    """Every GN arm against every baseline arm, under each anchor."""
    gns = [a for a in curves if a.startswith("gn")]
    base = [a for a in curves if not a.startswith("gn")]
    out = {}
    for anchor in ANCHORS:
        arms = {a: anchored(*curves[a], anchor) for a in curves}
        out[anchor] = {f"{g} vs {b}": compare(arms[g], arms[b]) for g in gns for b in base}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    res_dir = REPO / "results" / "gnrev"
    p.add_argument("--fig3", default=str(res_dir / "fig3.json"))
    p.add_argument("--fig2", default=str(res_dir / "fig2.json"))
    p.add_argument("--ablation", default=str(res_dir / "ablation" / "fig3_gn_rate_mnist.json"))
    p.add_argument("--out", default=str(REPO / "scratch" / "gnrev" / "fig3_matched_loss.json"))
    args = p.parse_args(argv)
    t0 = time.time()
    res = {
        "_note": ("Fig. 3 per-batch loss drop (%, negative = the loss falls) compared at "
                  "matched training loss (reproduce/_gnrev_fig3_matched_loss.py: each epoch's "
                  "drop tied to the training loss at its end / start / geometric middle, "
                  "linear in log loss between epochs; 'a vs b' diff = a − b in points, "
                  "negative where a drops more; crossings = loss levels where the sign "
                  "changes). No training: read from the committed curves named in 'sources'."),
        "sources": {"record": [_rel(args.fig3), _rel(args.fig2)],
                    "authors_rate": _rel(args.ablation)},
        "record": analyse(_curves_record(args.fig3, args.fig2)),
        "authors_rate": analyse(_curves_ablation(args.ablation)),
    }
    res["wall_s"] = time.time() - t0
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2, allow_nan=False) + "\n")
    for src in ("record", "authors_rate"):
        for anchor in ANCHORS:
            for k, v in res[src][anchor].items():
                c = ", ".join(f"{x:.3g}" for x in v["crossings"]) or "none"
                o = v["overlap"]
                ov = "none" if o is None else f"{o[0]:.3g}–{o[1]:.3g}"
                print(f"{src:12s} {anchor:6s} {k:32s} overlap {ov:16s} crossings {c}")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
