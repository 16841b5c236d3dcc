"""The main entry points' ``Examples:`` sections run as doctests (issue 9, item 7).

Only the objects listed in ``ENTRY_POINTS`` are collected (``--doctest-modules`` stays off:
most docstrings show maths, not runnable code).  Each example is tiny (a handful of samples,
a few steps) and prints only shapes, booleans or rounded numbers, so it holds on any x86-64
CPU.  An entry point whose docstring lost its examples fails here rather than passing empty.
"""
import doctest
import importlib
import io

import pytest

ENTRY_POINTS = (
    "layerlab.loop:fit",
    "layerlab.gnrev:gn_direction",
    "layerlab.gnrev:gn_step",
    "layerlab.dgl:dgl_loss",
    "layerlab.dgl:lego",
    "layerlab.dmn:make_network",
    "layerlab.dmn:build_dmn",
    "layerlab.inspect:layer_report",
    "layerlab.kernels:fc_kernels",
    "layerlab.data:load",
    "layerlab.probes:accuracy",
)


def _doctests(path: str) -> list[doctest.DocTest]:
    module, name = path.split(":")
    obj = getattr(importlib.import_module(module), name)
    finder = doctest.DocTestFinder(recurse=False)
    return [t for t in finder.find(obj, name=f"{module}.{name}", globs={}) if t.examples]


@pytest.mark.parametrize("path", ENTRY_POINTS)
def test_entry_point_examples_run(path, monkeypatch):
    monkeypatch.setenv("TQDM_DISABLE", "1")
    tests = _doctests(path)
    assert tests, f"{path}: its docstring has no Examples: section with >>> lines"
    assert "Examples:" in tests[0].docstring, f"{path}: examples outside an Examples: section"
    out = io.StringIO()
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    for t in tests:
        runner.run(t, out=out.write)
    assert runner.failures == 0, out.getvalue()
    assert runner.tries >= 3
