"""App. I (Fig. 12) of Buffelli et al. 2024: GN with different learning rates.
"""
from __future__ import annotations

from reproduce import _cli, _gnrev


# --help goes on with what each scale runs: _gnrev.variants_doc("appI")
def build_parser():
    return _gnrev.variants_parser("appI", __doc__)


def main(argv=None) -> int:
    return _gnrev.variants_main("appI", __doc__, argv)


if __name__ == "__main__":
    _cli.run(main)
