"""benchmarks/inspect_overhead.py and the quickstart section: light import contract."""
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_overhead_help_imports_no_jax():
    code = ("import sys, benchmarks.inspect_overhead as m, benchmarks._quickstart_inspect as q; "
            "m.build_parser().parse_args(['--steps', '10']); "
            "print(sorted(k for k in ('jax', 'flax', 'layerlab') if k in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"
