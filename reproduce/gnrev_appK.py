"""App. K (Fig. 14) of Buffelli et al. 2024: pseudo-inverse regularisation of GN
(truncation, damping, noise).
"""
from __future__ import annotations

from reproduce import _cli, _gnrev


# --help goes on with what each scale runs: _gnrev.variants_doc("appK")
def build_parser():
    return _gnrev.variants_parser("appK", __doc__)


def main(argv=None) -> int:
    return _gnrev.variants_main("appK", __doc__, argv)


if __name__ == "__main__":
    _cli.run(main)
