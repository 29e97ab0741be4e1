"""The docs cannot drift: the site builds with every warning an error, and every sample in it runs.

A page's ``python`` and ``console`` blocks run in order, in one fresh directory per page (with the
repository's ``examples/`` beside them), so a later block may use a file an earlier one made. Python
blocks share one namespace per page and may ``await`` at top level; in a console block each line
starting with ``$ `` is a command that must exit 0 (the lines after it are what it printed, shown to
the reader, not compared: scores and times move). A block that cannot run here says why in an HTML
comment just before it: ``<!-- not run: needs a model server -->``. Blocks with any other language
(or none) are illustrations: configuration, transcripts, shell sessions for a fresh machine.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted([ROOT / "README.md", *DOCS.rglob("*.md")])
BIN = Path(sys.executable).parent

FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)
NOT_RUN = re.compile(r"<!--\s*not run:\s*(.+?)\s*-->\s*$")

# Runs a page's steps in one process: python steps in one namespace (top-level await allowed),
# console steps through bash, each command checked.
DRIVER = r"""
import ast, asyncio, json, subprocess, sys
steps = json.load(sys.stdin)
namespace = {"__name__": "__docs__"}
for language, code, where in steps:
    if language == "python":
        compiled = compile(code, where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        result = eval(compiled, namespace)
        if asyncio.iscoroutine(result):
            asyncio.run(result)
        continue
    for line in code.splitlines():
        if line.startswith("$ "):
            done = subprocess.run(["bash", "-c", line[2:]], capture_output=True, text=True)
            if done.returncode:
                sys.exit(f"{where}: `{line[2:]}` exited {done.returncode}: {done.stderr.strip()[-2000:]}")
"""


def runnable_blocks(page: Path) -> list[tuple[str, str, str]]:
    """The page's ``python``/``console`` blocks that run, as (language, code, "page:line")."""
    text = page.read_text()
    blocks = []
    for match in FENCE.finditer(text):
        language, code = match.group(1), match.group(2)
        if language not in ("python", "console"):
            continue
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        if NOT_RUN.search(before):
            continue
        line = text.count("\n", 0, match.start()) + 2
        blocks.append((language, code, f"{page.relative_to(ROOT)}:{line}"))
    return blocks


PAGES_WITH_SAMPLES = [page for page in PAGES if runnable_blocks(page)]


@pytest.mark.parametrize("page", PAGES_WITH_SAMPLES, ids=lambda p: str(p.relative_to(ROOT)))
def test_samples_run(page: Path, tmp_path: Path) -> None:
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    (tmp_path / "home").mkdir()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
           "HARNESS_MEM_HOME": str(tmp_path / "home"), "HARNESS_MEM_CONFIG": str(tmp_path / "config"),
           "HOME": str(tmp_path / "home")}  # a sample's ~/agent-memory.db: never a file another run shares
    env.pop("HARNESS_MEM_DB", None)
    done = subprocess.run([sys.executable, "-c", DRIVER], input=json.dumps(runnable_blocks(page)), cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]


def test_every_skipped_sample_says_why() -> None:
    for page in PAGES:
        for comment in re.findall(r"<!--\s*not run:?(.*?)-->", page.read_text(), re.DOTALL):
            assert comment.strip(), f"{page.name}: a sample not run must say why"


def test_site_builds_without_warnings(tmp_path: Path) -> None:
    mkdocs = shutil.which("mkdocs", path=str(BIN))
    assert mkdocs, "mkdocs is in the test dependencies"
    done = subprocess.run([mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    assert (tmp_path / "site" / "cli-reference.html").read_text().count("harness-mem consolidate") >= 1
