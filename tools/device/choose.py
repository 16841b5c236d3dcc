"""Pick (arms, epochs) for the paper-scale CIFAR-10 run that fit the deadline, from the probe.

    python3 tools/device/choose.py DEADLINE_SECONDS

reads /root/probe/step.json (from ``probe.py``), prints ``ARMS EPOCHS`` on stdout and the
reasoning on stderr.
"""

import json
import sys

STEPS_PER_EPOCH = 48

deadline = float(sys.argv[1])
try:
    with open("/root/probe/step.json") as fh:
        c = json.load(fh)["cases"][-1]
    t_gn = c["gn"]["median_s"]
    t_opt = max(c["adam"]["median_s"], c["sgd"]["median_s"])
except Exception as e:  # no probe: assume slow
    print(f"choose: no probe ({e!r})", file=sys.stderr)
    t_gn, t_opt = 0.3, 0.05


def est(fl, E):
    """Estimated seconds of the run for E epochs, with the gn_first_linear arm too if fl."""
    spe = STEPS_PER_EPOCH
    gn = 60 + (8 * spe + E * spe) * t_gn + 4 * E
    opt = 40 + (5 * spe + E * spe) * t_opt + 4 * E
    return (2 if fl else 1) * gn + 2 * opt


# From the largest run down; if none fits, the last (smallest) one is taken.
for fl, E in ((True, 10), (False, 10), (False, 8), (False, 6), (False, 4), (False, 2)):
    if 1.3 * est(fl, E) <= deadline:
        break

arms = "gn,gn_first_linear,adam,sgd" if fl else "gn,adam,sgd"
print(
    f"choose: t_gn {t_gn:.4f} s, t_opt {t_opt:.4f} s, deadline {deadline:.0f} s -> arms {arms}, "
    f"epochs {E}, estimate {est(fl, E):.0f} s",
    file=sys.stderr,
)
print(arms, E)
