"""Tests for layerlab.dmn._spec: the architecture grammar of the paper's tables."""
import jax
import numpy as np
import pytest

import layerlab.dmn as L


def test_spec_parsing_and_errors():
    lay = L.parse_spec("d15, m, c80, m, de10")
    assert [t.kind for t in lay] == ["dmn_conv", "pool", "conv", "pool", "dense"]
    assert L.format_spec(lay) == "d15,m,c80,m,de10"
    assert L.format_spec(L.convnet_spec("d6,m,dd40,de10")) == "c6,m,de40,de10"
    pre, head = L.split_spec(lay)
    assert L.format_spec(pre) == "d15,m" and L.format_spec(head) == "c80,m,de10"
    pre, head = L.split_spec(L.parse_spec("d6,m,m,de10"))
    assert L.format_spec(pre) == "d6,m,m" and L.format_spec(head) == "de10"
    with pytest.raises(ValueError, match="bad architecture token"):
        L.parse_spec("d6,x3,de10")
    with pytest.raises(ValueError, match="must end with the classifier"):
        L.parse_spec("d6,m")
    with pytest.raises(ValueError, match="before trainable"):
        L.split_spec(L.parse_spec("c6,d4,de10"))
    with pytest.raises(ValueError, match=r"^make_network: the classifier de10 must have "
                                         r"num_classes=3 units; got 10\.$"):
        L.make_network("d6,de10", 3)
    for bad, why in (("d6,x3,de10", "bad architecture token"), ("c6,d4,de10", "before trainable")):
        with pytest.raises(ValueError, match=f"^make_network: spec: .*{why}"):
            L.make_network(bad, 10)
    with pytest.raises(ValueError, match="NaN"):
        L.build_dmn(jax.random.key(0), L.parse_spec("d2,de2")[:1],
                    np.full((2, 4, 4, 1), np.nan), np.array([0, 1]), 2)


@pytest.mark.parametrize("spec,j,tok,i,dense", [
    ("dd5,m,de3", 1, "m", 0, "dd5"),
    ("d3,dd5,m,de3", 2, "m", 1, "dd5"),
    ("dd5,d3,de3", 1, "d3", 0, "dd5"),
    ("de5,m,de3", 1, "m", 0, "de5"),
    ("dd5,bnw,de3", 1, "bnw", 0, "dd5"),
    ("dd5,c3,de3", 1, "c3", 0, "dd5"),
])
def test_no_spatial_layer_after_a_dense_layer(spec, j, tok, i, dense):
    """A dense layer's output is flat [N, F]: a conv, pool or per-column batch-norm after it
    was accepted by the parser and failed later with a shape error (or, for ``dd5,m``, in the
    middle of the build); now the parser refuses it, naming both layers."""
    want = (rf"parse_spec: layer {j} \({tok}\) of '{spec}' needs \[N, H, W, C\] maps but "
            rf"comes after the dense layer {i} \({dense}\)")
    with pytest.raises(ValueError, match=want):
        L.parse_spec(spec)
    with pytest.raises(ValueError, match=want):
        L.make_network(spec, 3)
    # bn (per channel) works on [N, F] and stays allowed after a dense layer
    assert L.format_spec(L.parse_spec("dd5,bn,de3")) == "dd5,bn,de3"


def test_list_specs_are_checked_like_strings():
    """A list of layers went through ``Layer(*t)`` unchecked: an unknown kind or a width of 0
    or -2 failed late without naming the layer.  The same rules now hold for both forms."""
    assert L.parse_spec([("dmn_conv", 3), ("pool",), L.Layer("dense", np.int64(4))]) == \
        L.parse_spec("d3,m,de4")
    bad = [
        ([("foo", 3), ("dense", 3)], ValueError, r"parse_spec: layer 0 of .* unknown kind 'foo'"),
        ([("dmn_conv", 0), ("dense", 3)], ValueError,
         r"parse_spec: layer 0 \('dmn_conv'\) .* must have width >= 1 .*got 0"),
        ([("dmn_conv", 3), ("conv", -2), ("dense", 3)], ValueError,
         r"parse_spec: layer 1 \('conv'\) .* must have width >= 1 .*got -2"),
        ([("pool", 2), ("dense", 3)], ValueError, r"layer 0 \('pool'\) .* takes no width"),
        ([("dmn_conv", 2.5), ("dense", 3)], TypeError, r"layer 0 .* integer width, got 2\.5"),
        ([("dmn_conv", True), ("dense", 3)], TypeError, r"integer width, got True"),
        (["d3", "de3"], TypeError, r"layer 0 of .* must be a Layer\(kind, width\)"),
        ([("dmn_conv", 3)], ValueError, r"must end with the classifier"),
        ([("dmn_dense", 4), ("pool",), ("dense", 3)], ValueError,
         r"layer 1 \(m\) .* after the dense layer 0 \(dd4\)"),
    ]
    for spec, err, match in bad:
        with pytest.raises(err, match=match):
            L.parse_spec(spec)
    with pytest.raises(ValueError, match=r"unknown kind 'foo'"):
        L.make_network([("foo", 3), ("dense", 3)], 3)
    # a prefix given to build_dmn directly is checked too, naming build_dmn
    x = np.zeros((4, 6, 6, 1), np.float32)
    with pytest.raises(ValueError, match=r"build_dmn: layer 0 \('dmn_conv'\) .* width >= 1"):
        L.build_dmn(jax.random.key(0), [("dmn_conv", 0)], x, np.array([0, 1, 0, 1]), 2)


def _specs_in_use() -> set[str]:
    """Every architecture of the committed DMN records (``spec``/``arch`` fields), the paper's
    table rows, and the literal specs of the reproduction and benchmark scripts and of
    layerlab.dmn itself."""
    import json
    import pathlib
    import re

    from layerlab.dmn import experiments as ex

    root = pathlib.Path(__file__).resolve().parents[2]
    specs: set[str] = set()

    def walk(o):
        if isinstance(o, dict):
            for k, v in o.items():
                if k in ("spec", "arch") and isinstance(v, str):
                    specs.add(v)
                walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)

    for p in sorted((root / "results" / "dmn").rglob("*.json")):
        walk(json.loads(p.read_text()))
    for table in ("table2", "table3", "table4", "table5"):
        specs |= {row.arch for row in ex.table_rows(table)}
    lit = re.compile(r"[\"']((?:(?:dd|de|d|c)\d+|m|bn|bnw)(?:\s*,\s*(?:(?:dd|de|d|c)\d+|m|bn|bnw))*"
                     r"\s*,\s*de\d+)[\"']", re.I)
    scripts = [*(root / "reproduce").glob("*.py"), *(root / "benchmarks").glob("dmn*.py"),
               *(root / "layerlab" / "dmn").glob("*.py")]
    for p in scripts:
        specs |= set(lit.findall(p.read_text()))
    return specs


def test_every_spec_in_the_committed_records_and_scripts_still_parses():
    specs = _specs_in_use()
    assert len(specs) > 50 and {"d20,m,d180,m,bnw,de10", "d3,m,de10", "de100"} <= specs
    for spec in sorted(specs):
        layers = L.parse_spec(spec)
        L.split_spec(layers)
        L.convnet_spec(spec)
        assert L.parse_spec(L.format_spec(layers)) == layers
