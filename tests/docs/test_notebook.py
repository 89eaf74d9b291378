"""docs/notebook.ipynb runs top to bottom on a real Jupyter kernel, and shows what it promises."""

from __future__ import annotations

import pytest

from helpers.paths import ROOT

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("duckdb")

pytestmark = pytest.mark.slow


def _html(cell) -> str:
    return "".join(o.get("data", {}).get("text/html", "") for o in cell.outputs)


@pytest.fixture(scope="module")
def executed():
    import os

    notebook = nbformat.read(ROOT / "docs/notebook.ipynb", as_version=4)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    env.pop("TRAINPROF_NOTEBOOK_TRACE", None)
    old = os.environ.copy()
    os.environ.clear()
    os.environ.update(env)  # the kernel inherits this process's environment
    try:
        nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                                resources={"metadata": {"path": str(ROOT / "docs")}}).execute()
    finally:
        os.environ.clear()
        os.environ.update(old)
    return [c for c in notebook.cells if c.cell_type == "code"]


def test_no_cell_fails(executed):
    errors = [o for c in executed for o in c.outputs if o.output_type == "error"]
    assert not errors, errors[0]["evalue"] if errors else ""
    assert all(c.execution_count for c in executed)


def test_the_analysis_shows_its_findings_table_and_the_report(executed):
    html = _html(executed[0])
    assert 'class="trainprof-findings"' in html
    assert "data_loading" in html and "no_tensor_cores" in html
    assert "<iframe" in html and "srcdoc=" in html


def test_the_findings_the_sections_and_sql_show_as_tables(executed):
    assert 'class="trainprof-findings"' in _html(executed[1])
    frame = executed[2].outputs[0]["data"]["text/plain"]
    assert "data_loading" in frame.splitlines()[1]  # the costliest first
    shapes = executed[6].outputs[0]["data"]["text/plain"]
    assert "'kernels'" in shapes and "'launch'" in shapes and "'host'" in shapes
    sql = executed[7].outputs[0]["data"]["text/plain"]
    assert "step" in sql.splitlines()[0] and "total_ms" in sql.splitlines()[0]


def test_the_comparison_shows_the_fix(executed):
    html = _html(executed[8])
    assert "median step ms" in html
    assert "data ms" in html
