"""The ```python blocks of ``docs/*.md`` and the README name only layerlab functions that exist,
with keywords they accept and no more positional arguments than they take.

Most docs blocks are API sketches (``...`` for arguments, names defined elsewhere), so they are
not run (the README's runnable tour is, in ``test_readme.py``); this checks them statically
instead: every call ``alias.name(...)`` where ``alias`` is bound by a ``from layerlab… import``
(or ``import layerlab…``) line of the same block, or is the page's own module (``loop`` on
``docs/loop.md``, bare public names on ``docs/kernels.md``), is resolved and checked against
``inspect.signature``.  A renamed function or keyword fails here rather than in a user's session.
"""
import ast
import importlib
import inspect
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
FILES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]


def _blocks(path: pathlib.Path) -> list[str]:
    return re.findall(r"```python\n(.*?)\n```", path.read_text(), flags=re.S)


def _parse(block: str) -> list[ast.AST]:
    """The block's nodes; a block that is not valid Python as a whole (sketch lines such as
    ``{"step": [T], ...}`` comments or a trailing ``...``) is parsed line by line."""
    src = block.replace("...", "None")
    try:
        return list(ast.walk(ast.parse(src)))
    except SyntaxError:
        nodes = []
        for line in src.splitlines():
            try:
                nodes += list(ast.walk(ast.parse(line.strip())))
            except SyntaxError:
                pass
        return nodes


def _resolve(module: str, name: str):
    try:
        return importlib.import_module(f"{module}.{name}")
    except ImportError:
        return getattr(importlib.import_module(module), name)


PAGE_MODULES = {"bottleneck": ("bottleneck", "bn")}


def _page_bindings(path: pathlib.Path) -> dict:
    """A docs page's blocks may use its own module without importing it (``loop.fit(...)`` in
    ``docs/loop.md``, bare ``relu_nngp(...)`` in ``docs/kernels.md``): its name, alias and
    public functions are bound first."""
    name = path.stem
    if path.parent.name != "docs":
        return {}
    mod = importlib.import_module(f"layerlab.{name}")
    out = {n: getattr(mod, n) for n in getattr(mod, "__all__", ()) if hasattr(mod, n)}
    for alias in PAGE_MODULES.get(name, (name,)):
        out[alias] = mod
    return out


def _bindings(nodes, path: pathlib.Path | None = None) -> dict:
    """alias -> the layerlab object it names in this block."""
    out = _page_bindings(path) if path is not None else {}
    for n in nodes:
        if isinstance(n, ast.ImportFrom) and n.module and n.module.split(".")[0] == "layerlab":
            for a in n.names:
                out[a.asname or a.name] = _resolve(n.module, a.name)
        elif isinstance(n, ast.Import):
            for a in n.names:
                if a.name.split(".")[0] == "layerlab" and a.asname:
                    out[a.asname] = importlib.import_module(a.name)
    return out


def _problems(block: str, path: pathlib.Path | None = None) -> list[str]:
    nodes = _parse(block)
    bound = _bindings(nodes, path)
    out = []
    for n in nodes:
        if not isinstance(n, ast.Call):
            continue
        f = n.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in bound:
            owner = bound[f.value.id]
            label = f"{f.value.id}.{f.attr}"
            if not inspect.ismodule(owner):
                continue                      # a method of a class or object: not checked
            if not hasattr(owner, f.attr):
                try:
                    importlib.import_module(f"{owner.__name__}.{f.attr}")
                    continue
                except ImportError:
                    out.append(f"{label}: {owner.__name__} has no {f.attr!r}")
                    continue
            fn = getattr(owner, f.attr)
        elif isinstance(f, ast.Name) and f.id in bound:
            fn, label = bound[f.id], f.id
        else:
            continue
        if not callable(fn) or inspect.ismodule(fn):
            continue
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):
            continue
        params = sig.parameters.values()
        if not any(p.kind == p.VAR_KEYWORD for p in params):
            for k in n.keywords:
                if k.arg is not None and k.arg not in sig.parameters:
                    out.append(f"{label}: no keyword {k.arg!r} (takes {list(sig.parameters)})")
        if not any(p.kind == p.VAR_POSITIONAL for p in params) \
                and not any(isinstance(a, ast.Starred) for a in n.args):
            npos = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
            if len(n.args) > npos:
                out.append(f"{label}: {len(n.args)} positional arguments, takes at most {npos}")
    return out


CASES = [(p, i) for p in FILES for i in range(len(_blocks(p)))]


def test_docs_have_python_blocks():
    assert len(CASES) >= 20, f"found only {len(CASES)} ```python blocks in docs/ and the README"


@pytest.mark.parametrize("path,i", CASES, ids=[f"{p.name}:{i + 1}" for p, i in CASES])
def test_docs_block_calls_existing_api(path, i):
    problems = _problems(_blocks(path)[i], path)
    assert not problems, f"{path.name} python block {i + 1}:\n" + "\n".join(problems)


def test_checker_catches_a_stale_call():
    """The checker itself: a renamed keyword, a missing function and one positional argument
    too many are each reported (so the tests above can fail)."""
    block = ("from layerlab import dgl, loop\n"
             "dgl.dgl_loss(K, Y, epsx=1e-2)\n"
             "loop.no_such_function(1)\n"
             "from layerlab.probes import linear_cka\n"
             "linear_cka(h1, h2, h3, h4, h5, h6, h7, h8)\n")
    problems = _problems(block)
    assert any("epsx" in p for p in problems), problems
    assert any("no_such_function" in p for p in problems), problems
    assert any("linear_cka: 8 positional" in p for p in problems), problems
    assert not _problems("from layerlab import dgl\ndgl.dgl_loss(K, Y, eps2=1e-2)\n")
