"""App. E (Fig. 6) of Buffelli et al. 2024: longer mini-batch training; GN saturates
while even SGD reaches a lower training loss.
"""
from __future__ import annotations

from reproduce import _cli, _gnrev


# --help goes on with what each scale runs: _gnrev.variants_doc("appE")
def build_parser():
    return _gnrev.variants_parser("appE", __doc__)


def main(argv=None) -> int:
    return _gnrev.variants_main("appE", __doc__, argv)


if __name__ == "__main__":
    _cli.run(main)
