"""Re-decide the Fig. 3 claims of committed records with :func:`fig3_claims` (the paper's
reading, 2026-11-27), from the per-epoch curves each record keeps in ``extra.curves``.

Until 2026-11-27 the rule asked whether GN's *own* per-batch drop weakens; §5.2 says the
*difference* to SGD and Adam weakens and subsists.  The records' curves are seed means, which
is what the rule reads, so no run is repeated; each record's note says it was re-decided.

    python -m reproduce._gnrev_redecide_fig3 results/gnrev/fig3.json results/gnrev/fig3_cifar10.json
"""
from __future__ import annotations

import json
import sys

NOTE = (" Fig. 3 claims re-decided on 2026-11-27 from this record's own extra.curves with "
        "fig3_claims (reproduce/_gnrev_redecide_fig3.py): §5.2's 'this difference gradually "
        "weakens ... it subsists' is GN's advantage over SGD and Adam, not GN's own drop (the "
        "old rule); the run is unchanged.")


def redecide(path: str) -> list[tuple[str, bool]]:
    from layerlab.gnrev.experiments import fig3_claims
    from layerlab.record import to_jsonable

    with open(path) as fh:
        r = json.load(fh)
    per_epoch = {a: c["per_epoch"] for a, c in r["extra"]["curves"].items()}
    new = [to_jsonable(c) for c in fig3_claims(per_epoch)]
    r["claims"] = new
    if NOTE not in (r.get("note") or ""):
        r["note"] = (r.get("note") or "") + NOTE
    with open(path, "w") as fh:
        fh.write(json.dumps(r, indent=2, allow_nan=False) + "\n")
    return [(c["claim"], c["holds"]) for c in new]


def run(redecide_fn, doc: str, argv=None) -> int:
    """Re-decide each record path of ``argv`` with ``redecide_fn`` and print its claims
    (the command line of this script and of ``_gnrev_redecide_fig5``)."""
    paths = sys.argv[1:] if argv is None else argv
    if not paths:
        print(doc)
        return 2
    for p in paths:
        out = redecide_fn(p)
        print(f"{p}: {sum(bool(h) for _, h in out)}/{len(out)}")
        for c, h in out:
            print(f"   {'yes' if h else 'NO '} {c}")
    return 0


def main(argv=None) -> int:
    return run(redecide, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
