"""App. J (Fig. 13) of Buffelli et al. 2024: GN with weight decay.
"""
from __future__ import annotations

from reproduce import _cli, _gnrev


# --help goes on with what each scale runs: _gnrev.variants_doc("appJ")
def build_parser():
    return _gnrev.variants_parser("appJ", __doc__)


def main(argv=None) -> int:
    return _gnrev.variants_main("appJ", __doc__, argv)


if __name__ == "__main__":
    _cli.run(main)
