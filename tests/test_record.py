"""The record schema (``layerlab.record``): what validate_record / load_record refuse, what
Row / Claim / Record refuse at construction, and the edge cases they accept."""
from __future__ import annotations

import json
import re

import ml_dtypes
import numpy as np
import pytest

from layerlab.record import Claim, Record, Row, load_record, validate_record, write_record

NAN, INF = float("nan"), float("inf")


def _record() -> Record:
    return Record("dgl", "x", "t", "reduced", {"lr": 0.1},
                  rows=[Row("ran", 2.0, paper=1.0, tol=1.5, seeds=3, spread=0.1),
                        Row("not run", None, seeds=0, note="not run: no data")],
                  claims=[Claim("c", True, "e"), Claim("open", None)], wall_s=12.5,
                  note="n", extra={"curves": [1.0, 2.0]})


def _dict() -> dict:
    d = _record().to_dict()
    d.update(machine={"cpu_count": 2}, versions={"jax": "0"}, git="abc123")
    validate_record(d)  # the base is valid
    return d


def _set(d: dict, path: tuple, value) -> dict:
    *head, last = path
    for k in head:
        d = d[k]
    d[last] = value


# (path into the record dict, bad value, what the message says)
REFUSED = [
    (("rows", 0, "ours"), NAN, r"rows\[0\] \('ran'\): ours must be a finite number"),
    (("rows", 0, "ours"), INF, "ours must be a finite number"),
    (("rows", 0, "ours"), -INF, "ours must be a finite number"),
    (("rows", 0, "paper"), NAN, "paper must be a finite number"),
    (("rows", 0, "tol"), INF, "tol must be a finite number"),
    (("rows", 0, "spread"), NAN, "spread must be a finite number"),
    (("rows", 0, "ours"), 10 ** 400, "ours must be a finite number"),  # overflows a float
    (("rows", 0, "ours"), "2", "ours must be a number or null"),
    (("rows", 0, "tol"), True, "tol must be a number or null"),
    (("wall_s",), INF, "'wall_s' must be a finite number >= 0 or null"),
    (("wall_s",), NAN, "'wall_s' must be a finite number"),
    (("wall_s",), -1.0, "'wall_s' must be a finite number >= 0"),
    (("wall_s",), True, "'wall_s' must be a finite number"),
    (("wall_s",), "12", "'wall_s' must be a finite number"),
    (("rows", 0, "seeds"), -1, "seeds must be an integer >= 1 for a row that ran"),
    (("rows", 0, "seeds"), 0, "seeds must be an integer >= 1 for a row that ran"),
    (("rows", 0, "seeds"), "3", "seeds must be an integer >= 1"),
    (("rows", 0, "seeds"), 3.0, "seeds must be an integer >= 1"),
    (("rows", 0, "seeds"), True, "seeds must be an integer >= 1"),
    (("rows", 0, "seeds"), None, "seeds must be an integer >= 1"),
    (("rows", 1, "seeds"), -1, r"rows\[1\] \('not run'\): seeds must be an integer >= 0"),
    (("rows", 0, "name"), 7, r"rows\[0\] \(7\): name must be a string"),
    (("rows", 0, "unit"), None, "unit must be a string"),
    (("rows", 0, "note"), ["x"], "note must be a string"),
    (("rows", 0, "holds"), 1, "holds must be true, false or null"),
    (("claims", 0, "claim"), 5, r"claims\[0\]: claim must be a string"),
    (("claims", 0, "evidence"), None, r"claims\[0\]: evidence must be a string"),
    (("claims", 0, "holds"), 0, "holds must be true, false or null"),
    (("git",), 123, "'git' must be a string or null"),
    (("git",), ["abc"], "'git' must be a string or null"),
    (("artifact",), "", "'artifact' must be a plain name"),
    (("artifact",), "../x", "'artifact' must be a plain name"),
    (("artifact",), "a/b", "'artifact' must be a plain name"),
    (("artifact",), "..", "'artifact' must be a plain name"),
    (("artifact",), ".", "'artifact' must be a plain name"),
    (("artifact",), "a\\b", "'artifact' must be a plain name"),
    (("artifact",), "a\0b", "'artifact' must be a plain name"),
    # NaN / Infinity anywhere, not only in the listed fields
    (("rows", 0, "extra_value"), NAN, r"'rows\[0\]\.extra_value' must be finite"),
    (("claims", 0, "ratio"), INF, r"'claims\[0\]\.ratio' must be finite"),
    (("unknown_field",), [1.0, NAN], r"'unknown_field\[1\]' must be finite"),
    (("note",), 3, "'note' must be str"),
    (("extra",), [1], "'extra' must be dict"),
    (("config", "lr"), NAN, r"'config\.lr' must be finite"),
    (("extra", "curves", 1), INF, r"'extra\.curves\[1\]' must be finite"),
    (("rows", 0), "ran", r"rows\[0\] must be an object, got str"),
    (("rows", 1), None, r"rows\[1\] must be an object, got NoneType"),
    (("claims", 0), "c", r"claims\[0\] must be an object, got str"),
    (("claims", 1), None, r"claims\[1\] must be an object, got NoneType"),
]


@pytest.mark.parametrize(("path", "bad", "msg"), REFUSED,
                         ids=[f"{'.'.join(map(str, p))}={b!r:.12}" for p, b, _ in REFUSED])
def test_validate_record_refuses(path, bad, msg):
    d = _dict()
    _set(d, path, bad)
    with pytest.raises(ValueError, match=msg):
        validate_record(d)


@pytest.mark.parametrize(("path", "bad", "msg"), [
    (("rows", 0, "ours"), NAN, "ours must be a finite number"),
    (("wall_s",), INF, "'wall_s' must be a finite number"),
    (("rows", 0), "ran", r"rows\[0\] must be an object"),
    (("claims", 0, "ratio"), NAN, r"'claims\[0\]\.ratio' must be finite"),
])
def test_load_record_refuses_what_json_loads_parses(tmp_path, path, bad, msg):
    """json.loads reads NaN / Infinity (non-standard JSON): load_record must still refuse."""
    d = _dict()
    _set(d, path, bad)
    p = tmp_path / "r.json"
    p.write_text(json.dumps(d))  # allow_nan: writes NaN / Infinity
    with pytest.raises(ValueError, match=msg):
        load_record(p)


@pytest.mark.parametrize(("path", "value"), [
    (("wall_s",), None),
    (("wall_s",), 0),
    (("git",), None),
    (("rows", 0, "tol"), 2),  # an integer tol (three committed records have one)
    (("rows", 0, "spread"), None),
    (("rows", 1, "seeds"), 2),  # a row that was not run may say how many seeds were meant
    (("claims", 0, "holds"), None),
    (("claims", 0, "holds"), False),
    (("artifact",), "table2_rows9_10"),
])
def test_validate_record_accepts(path, value):
    d = _dict()
    _set(d, path, value)
    validate_record(d)


def test_a_row_that_was_not_run_has_only_nulls_and_zero_seeds():
    d = _dict()
    r = d["rows"][1]
    assert (r["ours"], r["paper"], r["tol"], r["spread"], r["holds"], r["seeds"]) == \
        (None, None, None, None, None, 0)
    d.pop("note"), d.pop("extra")  # optional fields
    validate_record(d)


@pytest.mark.parametrize("holds", [np.bool_(True), np.float64(1.0) < 2.0, np.array(True)])
def test_numpy_bools_are_accepted_and_converted(tmp_path, holds):
    r, c = Row("r", 1.0, holds=holds), Claim("c", holds)
    assert r.holds is True and c.holds is True
    assert Claim("c", np.bool_(False)).holds is False
    rec = Record("dgl", "x", "t", "reduced", {}, rows=[r], claims=[c], wall_s=None)
    d = load_record(write_record(rec, tmp_path))
    assert d["rows"][0]["holds"] is True and d["claims"][0]["holds"] is True
    assert d["wall_s"] is None


@pytest.mark.parametrize("holds", [1, 0, np.int64(1), np.array(0), np.float64(1.0), "True"])
def test_row_and_claim_refuse_non_bool_holds(holds):
    with pytest.raises(TypeError, match=r"Row 'r': holds must be True, False or None"):
        Row("r", 1.0, holds=holds)
    with pytest.raises(TypeError, match=r"Claim 'c': holds must be True, False or None"):
        Claim("c", holds)


@pytest.mark.parametrize("wall_s", [NAN, INF, -INF, -1.0])
def test_record_refuses_a_non_finite_or_negative_wall_s(tmp_path, wall_s):
    with pytest.raises(ValueError, match=r"Record 'x': wall_s must be a finite number >= 0"):
        Record("dgl", "x", "t", "reduced", {}, wall_s=wall_s)
    rec = Record("dgl", "x", "t", "reduced", {})
    rec.wall_s = wall_s  # how the scripts set it, after the run
    with pytest.raises(ValueError, match="wall_s must be a finite number >= 0"):
        write_record(rec, tmp_path)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(("field", "bad"), [("ours", NAN), ("ours", INF), ("tol", INF),
                                            ("spread", INF), ("paper", -INF)])
def test_rows_refuse_non_finite_numbers_at_construction_and_when_written(tmp_path, field,
                                                                          bad):
    with pytest.raises(ValueError, match=f"Row 'r': {field} must be a finite number"):
        Row("r", **{"ours": 1.0, field: bad})
    row = Row("r", 1.0)
    setattr(row, field, bad)  # reassigned after construction: to_jsonable would hide it
    with pytest.raises(ValueError, match=f"Row 'r': {field} must be a finite number"):
        write_record(Record("dgl", "x", "t", "reduced", {}, rows=[row]), tmp_path)


def test_row_nan_paper_or_spread_means_no_number():
    r = Row("r", 1.0, paper=NAN, tol=1.0, spread=NAN)
    assert r.paper is None and r.spread is None and r.holds is None


def test_holds_on_the_tolerance_boundary_does_not_depend_on_binary_rounding():
    """|ours - paper| == tol in decimal holds whichever way its float rounding falls (1.1 vs
    1.0 at 0.1 and 90.2 vs 90.0 at 0.2 failed while 0.9 vs 0.8 at 0.1 held); a difference
    one unit in the last printed digit past tol still fails."""
    rng = np.random.default_rng(0)
    for _ in range(2000):  # two-decimal percentages, tolerances of 0.01 .. 2.00
        paper = round(float(rng.uniform(0, 100)), 2)
        tol = round(float(rng.integers(1, 201)) / 100, 2)
        sign = rng.choice([-1, 1])
        on = round(paper + sign * tol, 2)
        assert Row("r", on, paper, tol=tol).holds, (on, paper, tol)
        off = round(paper + sign * (tol + 0.01), 2)
        assert not Row("r", off, paper, tol=tol).holds, (off, paper, tol)
    assert Row("r", 1.1, 1.0, tol=0.1).holds and Row("r", 90.2, 90.0, tol=0.2).holds
    assert Row("r", 0.0, 0.0, tol=0.0).holds and not Row("r", 1e-300, 0.0, tol=0.0).holds


def test_row_seeds_accept_every_integer_type_and_refuse_bools():
    for s in (np.uint8(2), np.int16(2), np.uint64(2), 2):
        r = Row("r", 1.0, seeds=s)
        assert r.seeds == 2 and type(r.seeds) is int
    for s in (True, np.bool_(True), 1.5, "2", np.float32(2)):
        with pytest.raises(ValueError, match="seeds must be an integer >= 1"):
            Row("r", 1.0, seeds=s)


def test_row_from_values_marks_a_diverged_seed_and_refuses_strings():
    """A NaN / inf seed (a diverged run) gives a row that did not run, with every seed's value
    in the note (it raised AttributeError from statistics.stdev after the whole run); a string
    is not a sequence of seeds ("12" was the seeds [1, 2])."""
    from layerlab.record import row_from_values

    r = row_from_values("acc", [97.0, float("nan"), 96.0], paper=97.1, tol=1.0)
    assert r.ours is None and r.holds is None and r.seeds == 3 and r.spread is None
    assert r.note.startswith("non-finite (diverged) in 1 of 3 seeds: [97.0, 'nan', 96.0]")
    assert row_from_values("acc", [float("inf")]).ours is None
    ok = row_from_values("acc", np.array([97.0, 96.0]), paper=97.1, tol=1.0)
    assert ok.ours == 96.5 and ok.seeds == 2 and abs(ok.spread - 0.7071067811865476) < 1e-12
    for bad, exc in (("12", TypeError), (b"12", TypeError), (5.0, TypeError),
                     ([1.0, "2"], TypeError), ([], ValueError)):
        with pytest.raises(exc, match=r"row_from_values\('acc'\)"):
            row_from_values("acc", bad)


@pytest.mark.parametrize("artifact", ["", "../x", "a/b", None, 3, "..", ".", "a\\b"])
def test_record_refuses_an_artifact_that_is_not_a_plain_name(artifact):
    with pytest.raises(ValueError, match="Record.artifact must be a plain name"):
        Record("dgl", artifact, "t", "reduced", {})


def test_a_written_record_is_strict_json(tmp_path):
    rec = _record()
    rec.extra["curves"] = [1.0, 1e300, -0.0]
    p = write_record(rec, tmp_path)
    text = p.read_text()
    assert "NaN" not in text and "Infinity" not in text
    d = load_record(p)
    assert d["extra"]["curves"] == [1.0, 1e300, -0.0]
    assert d == json.loads(text)


@pytest.mark.parametrize(("where", "value", "path"), [
    ("config", {"lr": NAN}, "config.lr"),
    ("config", {"clip": INF}, "config.clip"),
    ("config", {"arr": np.array([1.0, np.nan], np.float32)}, r"config.arr\[1\]"),
    ("config", {"grid": [[0.1, 0.0], [0.3, -INF]]}, r"config.grid\[1\]\[1\]"),
    ("extra", {"final_loss": np.float32("inf")}, "extra.final_loss"),
    ("extra", {"curves": {"gn": {"loss": np.array([[1.0, 2.0], [np.nan, 3.0]])}}},
     r"extra.curves.gn.loss\[1\]\[0\]"),
    ("extra", {"z": complex(1.0, INF)}, "extra.z"),
    ("extra", {"c": np.array([1.0, np.nan], ml_dtypes.bfloat16)}, r"extra.c\[1\]"),
    ("extra", {"c": np.array([INF], ml_dtypes.float8_e5m2)}, r"extra.c\[0\]"),
])
def test_non_finite_config_and_extra_values_are_refused_naming_the_field(tmp_path, where,
                                                                         value, path):
    """A NaN or infinity in ``config`` / ``extra`` is refused naming its path (as ``wall_s``
    and rows are); it was written as null / 1e308, a diverged value read back as a number."""
    rec = Record("dgl", "x", "t", "reduced", **{"config": {}, where: value})
    with pytest.raises(ValueError, match=rf"Record 'x': {path} must be finite, got "
                                         r"[-a-z0-9+()j.]*(nan|inf)"):
        write_record(rec, tmp_path)
    assert not list(tmp_path.iterdir())
    ok = Record("dgl", "x", "t", "reduced", {"n": np.int64(3), "x": np.float32(0.5),
                                             "keys": np.arange(3), "none": None})
    assert write_record(ok, tmp_path).exists()


@pytest.mark.parametrize("stem", ["../escaped", "a/b", "<tmp>/abs", "..", ".", "", 3])
def test_write_record_refuses_a_stem_that_is_not_a_plain_name(tmp_path, stem):
    """``stem`` names a file in ``out_dir``: ``../escaped`` wrote outside it."""
    out = tmp_path / "out"
    stem = stem.replace("<tmp>", str(tmp_path)) if isinstance(stem, str) else stem
    with pytest.raises(ValueError, match=r"write_record: stem must be a plain file name .*"
                                         rf"got {re.escape(repr(stem))}"):
        write_record(_record(), out, stem=stem)
    assert not (tmp_path / "escaped.json").exists() and not out.exists()


def test_write_record_uses_a_unique_fsynced_temporary_file_beside_the_target(tmp_path,
                                                                           monkeypatch):
    """The JSON is written to a temporary file of its own in ``out_dir`` (it was the fixed
    ``<stem>.json.tmp``, shared by two writers of one record), fsynced, then renamed."""
    import os

    replaced, synced = [], []
    real_replace, real_fsync = os.replace, os.fsync
    monkeypatch.setattr(os, "replace", lambda a, b: (replaced.append((a, b)),
                                                      real_replace(a, b))[1])
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    p1 = write_record(_record(), tmp_path, stem="same")
    p2 = write_record(_record(), tmp_path, stem="same")
    assert p1 == p2 == tmp_path / "same.json" and load_record(p1)["artifact"] == "x"
    (a1, b1), (a2, b2) = replaced
    assert a1 != a2 and os.path.dirname(a1) == os.path.dirname(a2) == str(tmp_path)
    assert b1 == b2 == tmp_path / "same.json"
    assert len(synced) >= 2  # the file (and the folder) before and after each rename
    assert sorted(q.name for q in tmp_path.iterdir()) == ["same.json"]  # no temporary left


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002])
def test_a_written_record_has_the_mode_of_a_new_file(tmp_path, mask):
    """The record is ``0666`` less the umask like any file the process creates: the
    temporary file's ``0600`` was kept by the rename (others could not read a record)."""
    import os
    import stat

    old = os.umask(mask)
    try:
        p = write_record(_record(), tmp_path)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o666 & ~mask
