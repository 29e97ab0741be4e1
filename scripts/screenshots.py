"""Screenshots of the memory browser for the docs and the README, from the demo conversation.

    python scripts/screenshots.py          # writes docs/img/browser-*.png

It imports examples/sample_conversation.jsonl into a fresh keyword-only store, consolidates it,
serves it with ``harness-mem ui`` and photographs the main pages in the system's headless Chromium,
so the pictures show what the code renders today.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from ui_process import browser, ui_process  # noqa: E402 (the tests' helper, found through the path above)

OUT = ROOT / "docs" / "img"
CLI = [sys.executable, "-m", "harness_mem", "--embedder", "none"]


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "demo.db"
        for step in (["import", str(ROOT / "examples" / "sample_conversation.jsonl")], ["consolidate", "-q"]):
            subprocess.run([*CLI, "--db", str(db), *step], check=True, capture_output=True)
        with ui_process(db, launcher=CLI) as (url, _), browser() as chromium:
            page = chromium.new_page(viewport={"width": 1100, "height": 760})
            page.goto(url)
            page.fill("#q", "password hashing")
            page.press("#q", "Enter")
            page.wait_for_selector("li.hit")
            page.screenshot(path=OUT / "browser-search.png")
            page.goto(url.split("?")[0] + "facts")
            page.click("li.hit a.entry-link")
            page.wait_for_selector("main h1")
            page.screenshot(path=OUT / "browser-entry.png", full_page=True)
            page.goto(url.split("?")[0] + "sessions")
            page.click("table.sessions a")
            page.wait_for_selector("p.derived-here")  # the timeline, what was derived beside its turns
            page.screenshot(path=OUT / "browser-session.png")
            page.goto(url.split("?")[0] + "episodes")
            page.wait_for_selector("main h1")
            page.screenshot(path=OUT / "browser-episodes.png")
            page.goto(url.split("?")[0] + "facts")
            page.click("li.hit a.entry-link")
            page.wait_for_selector("main h1")
            page.click("section.sources a.entry-link")  # the turn it was learnt from: forgetting it takes the fact
            page.wait_for_selector("text=Forget…")
            page.click("text=Forget…")
            page.wait_for_selector("button.confirm")
            page.screenshot(path=OUT / "browser-forget.png")
    print(f"wrote {', '.join(sorted(p.name for p in OUT.glob('browser-*.png')))} in {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
