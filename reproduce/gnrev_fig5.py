"""Fig. 5 of Buffelli et al. 2024: GN vs Adam vs SGD on a RevMLP WITHOUT inverted
bottleneck (V = I), mini-batch (the paper's full-batch panel is Fig. 1's run with
`reproduce.gnrev_fig1 --no-bottleneck`).
"""
from __future__ import annotations

from reproduce import _cli, _gnrev


# --help goes on with what each scale runs: _gnrev.variants_doc("fig5")
def build_parser():
    return _gnrev.variants_parser("fig5", __doc__)


def main(argv=None) -> int:
    return _gnrev.variants_main("fig5", __doc__, argv)


if __name__ == "__main__":
    _cli.run(main)
