"""App. F (Figs. 7, 8) of Buffelli et al. 2024: Adam->GN and GN->Adam switches at half
time, and GN from different initial weight variances.
"""
from __future__ import annotations

from reproduce import _cli, _gnrev


# --help goes on with what each scale runs: _gnrev.variants_doc("appF")
def build_parser():
    return _gnrev.variants_parser("appF", __doc__)


def main(argv=None) -> int:
    return _gnrev.variants_main("appF", __doc__, argv)


if __name__ == "__main__":
    _cli.run(main)
