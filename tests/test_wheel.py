"""The built wheel carries both migration sets: install it into a clean venv and open both stores there."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import textwrap
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_installs_into_a_clean_venv_and_opens_a_store(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(ROOT)],
        check=True, capture_output=True, timeout=300,
    )
    (wheel,) = dist.glob("harness_mem-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "harness_mem/migrations/0001_init.sql" in names
    assert "harness_loop/migrations/0001_runs.sql" in names
    # the memory browser's pages and stylesheet
    assert {"harness_mem/ui/templates/base.html", "harness_mem/ui/static/style.css"} <= set(names)
    assert "harness_mem/migrations/postgres/0001_init.sql" in names  # the PostgreSQL engine's set
    # harness_loop's sets: SQLite's, and PostgreSQL's in its subfolder (and only there: harness_mem's
    # PostgreSQL folder holds exactly harness_mem's files).
    loop_sets = {ROOT / "src" / "harness_loop" / "migrations": "harness_loop/migrations/",
                 ROOT / "src" / "harness_loop" / "migrations" / "postgres": "harness_loop/migrations/postgres/",
                 ROOT / "migrations" / "postgres": "harness_mem/migrations/postgres/"}
    for folder, prefix in loop_sets.items():
        shipped = {name.removeprefix(prefix) for name in names if name.startswith(prefix) and name.endswith(".sql")
                   and "/" not in name.removeprefix(prefix)}
        assert shipped == {p.name for p in folder.glob("*.sql")}, prefix
    assert "harness_loop/migrations/postgres/0001_runs.sql" in names
    assert not any(name.startswith("harness_mem/migrations/") and name.count("/") > 2
                   and not name.startswith("harness_mem/migrations/postgres/") for name in names)
    assert not any("locomo" in name.lower() for name in names)

    clean = tmp_path / "clean"
    venv.create(clean, with_pip=True)
    python = clean / "bin" / "python"
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)],
                   check=True, capture_output=True, timeout=300)
    # Dependencies (click, sqlite-vec, …) come from the test environment, placed *after* the clean
    # site-packages so that harness_mem itself can only be the wheel's copy.
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    script = textwrap.dedent(
        f"""
        import harness_loop, harness_mem, harness_mem.store as s
        from harness_loop.runstore import RunRecord, RunStore
        assert harness_mem.__file__.startswith({str(clean)!r}), harness_mem.__file__
        assert harness_loop.__file__.startswith({str(clean)!r}), harness_loop.__file__
        with RunStore.open({str(tmp_path / "w.db")!r}) as runs:
            runs.create(RunRecord(id="r1", goal="shipped runs tables work"))
        from harness_loop.runtables_postgres import known_migrations as postgres_runs
        assert [m.name for m in postgres_runs()][0] == "0001_runs", postgres_runs()
        with s.MemoryStore({str(tmp_path / "w.db")!r}, embedder=None) as store:
            store.add("shipped migrations work")
            assert store.recall("migrations")[0].entry.content == "shipped migrations work"
            print(store.stats()["schema_version"])
        """
    )
    # Without PYTHONPATH, which could point at a source checkout and shadow the wheel's copy.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([python, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    from harness_mem.migrations import known_migrations

    assert int(result.stdout) == known_migrations()[-1].number
