"""The HTML report in a real headless Chromium: no errors, nothing fetched, the verdict and the
charts in the rendered DOM, sortable tables, and hostile trace strings shown as text."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from browser import Browser, open_page
from report_helpers import IMG_PAYLOAD, SCRIPT_PAYLOAD, hostile_trace, need_chromium, result_of

from trainprof.commands.report import report_result
from trainprof.report.html.report import write_html

from helpers.paths import PARAM, RESNET_W0, TRACE_FILTER

pytestmark = pytest.mark.slow


def assert_clean(page, html_path: Path) -> None:
    assert page.exceptions == []
    assert page.console_errors == []  # CSP violations would be logged here
    assert page.dialogs == []
    assert page.requests == [html_path.resolve().as_uri()]  # the page itself, nothing else
    assert page.evaluate("document.documentElement.dataset.ready") == "1"  # our script ran


def test_resnet_report_renders_in_chromium(tmp_path):
    html_path = write_html(result_of(RESNET_W0), tmp_path / "report.html")
    with Browser(need_chromium()) as browser:
        page = open_page(browser, html_path)
        assert_clean(page, html_path)
        findings = page.evaluate("[...document.querySelectorAll('#verdict .finding h3')]"
                                 ".map(h => h.textContent)")
        assert findings and "Waiting for data" in findings[0]
        assert page.evaluate("document.querySelector('#verdict').getBoundingClientRect().top"
                             " < window.innerHeight")  # the page opens on the verdict
        charts = page.evaluate("[...document.querySelectorAll('svg.chart')].map(s => "
                               "[s.querySelectorAll('rect,polyline').length, "
                               "Math.round(s.getBoundingClientRect().width)])")
        assert len(charts) >= 6 and all(n > 0 and width > 300 for n, width in charts)
        # Screenshots stay out of the repository (a temporary folder).
        shot = page.screenshot(Path(tempfile.mkdtemp(prefix="trainprof-shot-")) / "report.png")
        assert shot.stat().st_size > 10_000


def test_tables_sort_when_a_column_head_is_clicked(tmp_path):
    html_path = write_html(result_of(RESNET_W0), tmp_path / "report.html")
    calls_of_first_rows = """(() => {
        const table = [...document.querySelectorAll('table.sortable')]
            .find(t => t.tHead.rows[0].cells[0].textContent === 'operator');
        const head = [...table.tHead.rows[0].cells].find(c => c.textContent === 'calls');
        head.click();
        const col = head.cellIndex;
        const calls = [...table.tBodies[0].rows].map(r => +r.cells[col].dataset.v);
        return [calls, head.getAttribute('aria-sort')];
    })()"""
    with Browser(need_chromium()) as browser:
        page = open_page(browser, html_path)
        calls, order = page.evaluate(calls_of_first_rows)
        assert order == "descending" and calls == sorted(calls, reverse=True)
        calls, order = page.evaluate(calls_of_first_rows)
        assert order == "ascending" and calls == sorted(calls)


def test_hostile_names_render_as_text_and_run_nothing(tmp_path):
    html_path = write_html(report_result(hostile_trace(tmp_path)), tmp_path / "report.html")
    with Browser(need_chromium()) as browser:
        page = open_page(browser, html_path)
        assert_clean(page, html_path)  # no alert, no fetch of "x", no error
        assert page.evaluate("typeof window.__pwned") == "undefined"
        assert page.evaluate("document.querySelectorAll('img').length") == 0
        assert page.evaluate("document.scripts.length") == 2
        cells = page.evaluate("[...document.querySelectorAll('td')].map(c => c.textContent)")
        assert IMG_PAYLOAD in cells and SCRIPT_PAYLOAD in cells
        assert page.evaluate("document.title").endswith(IMG_PAYLOAD + ".json")


def test_multi_rank_and_stepless_reports_render_clean(tmp_path):
    with Browser(need_chromium()) as browser:
        for path in (TRACE_FILTER, PARAM):
            html_path = write_html(result_of(path), tmp_path / f"{path.stem}.html")
            page = open_page(browser, html_path)
            assert_clean(page, html_path)
            assert page.evaluate("document.querySelectorAll('#verdict .finding').length") >= 1
            assert page.evaluate("document.querySelectorAll('svg.chart rect').length") > 10
