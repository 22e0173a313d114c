"""tree.html in a real headless browser (Debian's chromium driven by Playwright).

The page must load from file:// with no console errors and no request leaving the file, draw
one `.node` per node, and show a clicked node's code in the side panel. Screenshots are saved
in the test's tmp folder.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.records.outputs import write_tree_html
from engine.records.store import RunStore
from tests.helpers import make_node
from tests.test_outputs import NASTY_CODE, scripted_run, small_store

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--disable-sync"]

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(),
                                reason=f"{CHROMIUM} is absent (Debian package chromium)")


class Page:
    """A page plus everything it logged or asked the network for."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.problems: list[str] = []
        self.requests: list[str] = []
        self.dialogs: list[str] = []
        page.on("console", lambda m: self.problems.append(f"console {m.type}: {m.text}")
                if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))
        page.on("request", lambda r: self.requests.append(r.url))
        page.on("dialog", self._dialog)

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def open(self, html: Path) -> None:
        self.page.goto(html.resolve().as_uri())
        self.page.wait_for_selector("#header h1")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return scripted_run(tmp_path_factory)


@pytest.fixture(scope="module")
def browser(run_dir: Path) -> Iterator[Any]:
    # Depends on run_dir so the run is made first: Playwright's sync API keeps an asyncio loop
    # running in this thread, and the engine's asyncio.run refuses to start inside one.
    from playwright.sync_api import sync_playwright

    with sync_playwright() as play, tempfile.TemporaryDirectory() as profile:
        # A fresh profile, Debian's chromium, never a downloaded one (no `playwright install`).
        context = play.chromium.launch_persistent_context(
            profile, executable_path=str(CHROMIUM), headless=True, args=FLAGS,
            viewport={"width": 1400, "height": 900},
        )
        try:
            yield context
        finally:
            context.close()


def new_page(browser: Any) -> Page:
    return Page(browser.new_page())


def test_tree_of_a_real_run(browser: Any, run_dir: Path, tmp_path: Path) -> None:
    run = run_dir
    nodes, _ = RunStore.open(run).read_nodes()
    view = new_page(browser)
    view.open(run / "tree.html")
    page = view.page
    assert page.evaluate("document.querySelectorAll('.node').length") == len(nodes)
    assert page.evaluate("document.querySelectorAll('.node.best').length") == 1
    assert page.evaluate("document.querySelectorAll('.edge.on-path').length") >= 1
    assert "answer's valid" in page.inner_text("#header")
    assert "buggy" in page.inner_text("#legend")
    assert page.locator("#node-code").count() == 0  # nothing shown before a click

    target = next(n for n in nodes if n.code and n.status.value == "buggy")
    page.click(f'.node[data-id="{target.node_id}"]')
    assert page.text_content("#node-code") == target.code
    assert target.operator.value in page.inner_text("#panel h2")
    assert target.error.split(":")[0] in page.inner_text("#node-error")
    assert "tokens" in page.inner_text("#node-facts")
    page.screenshot(path=str(tmp_path / "tree.png"), full_page=True)
    assert (tmp_path / "tree.png").stat().st_size > 10_000
    assert view.problems == []
    assert all(url.startswith(("file:", "data:")) for url in view.requests), view.requests


def test_markup_in_code_is_shown_as_text(browser: Any, tmp_path: Path) -> None:
    root = small_store(tmp_path, [make_node("root", code=NASTY_CODE, step=0),
                                  make_node("kid", "root", step=1, metric=2.0)])
    view = new_page(browser)
    view.open(write_tree_html(root))
    page = view.page
    assert page.evaluate("document.querySelectorAll('.node').length") == 2
    page.click('.node[data-id="root"]')
    assert page.text_content("#node-code") == NASTY_CODE + "# root\n"
    assert view.dialogs == []  # the alert() inside the code never ran
    page.screenshot(path=str(tmp_path / "nasty.png"))
    assert view.problems == []


def test_reflection_and_analysis_output_in_the_panel(browser: Any, tmp_path: Path) -> None:
    from dataclasses import replace

    from search.node import Operator

    analysis = replace(make_node("look", step=0, code="print('rows: 40')\n"),
                       operator=Operator.ANALYZE, metric=None, metric_raw=None,
                       stdout_tail="rows: 40\ncorr a with y: 0.61\n")
    kid = replace(make_node("kid", "root", step=2, metric=2.0),
                  reflection="The model underfits: add squared features.")
    root = small_store(tmp_path, [analysis, make_node("root", step=1), kid])
    view = new_page(browser)
    view.open(write_tree_html(root))
    page = view.page
    page.click('.node[data-id="kid"]')
    assert page.text_content("#node-reflection") == kid.reflection
    assert page.locator("#node-stdout").count() == 0
    page.click('.node[data-id="look"]')
    assert page.text_content("#node-stdout") == analysis.stdout_tail
    assert page.locator("#node-reflection").count() == 0
    assert view.problems == []
