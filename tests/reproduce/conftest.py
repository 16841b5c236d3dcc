"""Smoke runs of the reproduction scripts, one test file per paper.

``tests/reproduce/test_smoke_<paper>.py`` sets ``PAPER`` and defines a test taking the
``smoke_script`` argument; it is parametrized here over ``reproduce/<paper>_*.py``. One file
per paper (not one for all ~35 scripts) lets ``--dist loadfile`` spread the runs over the
workers."""
import importlib
import pathlib

import pytest

from layerlab.record import load_record

REPO = pathlib.Path(__file__).resolve().parents[2]


def scripts(paper: str) -> list[str]:
    return sorted(p.stem for p in (REPO / "reproduce").glob(f"{paper}_*.py"))


def pytest_generate_tests(metafunc):
    if "smoke_script" in metafunc.fixturenames:
        metafunc.parametrize("smoke_script", scripts(metafunc.module.PAPER))


@pytest.fixture
def run_smoke():
    """``run_smoke(name, out)``: ``python -m reproduce.<name> --smoke --out <out>``, in
    process, then the record's schema and figure are checked."""
    def run(name, out):
        from layerlab.data import DatasetNotFoundError
        from reproduce._cli import NothingRan
        mod = importlib.import_module(f"reproduce.{name}")
        try:
            rc = mod.main(["--smoke", "--out", str(out), "--no-progress"])
        except DatasetNotFoundError as e:  # like every real-data test: skipped, with the reason
            pytest.skip(f"{name} --smoke needs a dataset that is not here: {e}")
        except NothingRan:  # every row marked not run (exit status 1), e.g. no CIFAR-100 here
            rec = load_record(out / f"{name.split('_', 1)[1]}.json")
            assert rec["rows"] and all(r["ours"] is None for r in rec["rows"])
            pytest.skip(f"{name} --smoke: no row ran ({rec['rows'][0]['note'].splitlines()[0]})")
        assert rc in (0, None)
        paper, artifact = name.split("_", 1)
        rec = load_record(out / f"{artifact}.json")
        assert rec["paper"] == paper and rec["artifact"] == artifact
        assert rec["scale"] == "reduced"
        assert rec["wall_s"] is not None and rec["wall_s"] > 0
        assert rec["rows"] or rec["claims"]
        assert (out / f"{artifact}.png").stat().st_size > 1000
        return rec
    return run
