"""Importing layerlab's packages must not import neural-tangents (issue 9, item 5)."""
import subprocess
import sys


def test_paper_packages_do_not_import_neural_tangents():
    code = ("import sys\n"
            "import layerlab, layerlab.dgl, layerlab.gnrev, layerlab.dmn, layerlab.bottleneck\n"
            "import layerlab.kernels, layerlab.probes, layerlab.loop, layerlab.data\n"
            "assert 'neural_tangents' not in sys.modules, 'neural_tangents imported eagerly'\n"
            "from layerlab.kernels import stax\n"
            "assert 'neural_tangents' in sys.modules and callable(stax.Dense)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
