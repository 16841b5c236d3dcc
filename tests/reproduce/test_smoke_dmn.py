"""Every `reproduce/dmn_*.py` script: a --smoke run writes a valid record and figure
(parametrized in tests/reproduce/conftest.py)."""
PAPER = "dmn"


def test_smoke_run_writes_a_valid_record(smoke_script, tmp_path, run_smoke):
    run_smoke(smoke_script, tmp_path)
