"""Every script in bench/ still runs: each once, on a tiny input, as its own process.

The figures are not checked (they are the scripts' business, on their full inputs); that a script
starts, reads its input and prints its report is. The dev sets a script reads from ``../shared/data``
are stood in for by tests/bench_data.py's tiny ones. The scripts that load the real model, start
many processes or a PostgreSQL server take longer: they are marked slow (``make test-slow``).
"""

from __future__ import annotations

import filecmp
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from bench_data import write_locomo, write_longmemeval

BENCH = Path(__file__).resolve().parents[1] / "bench"
#: Modules the scripts import, not run on their own.
HELPERS = {"embedders.py", "synthetic_embedder.py"}
#: Each script's tiny run: ``{data}`` is the folder of both dev sets, ``{locomo}`` LoCoMo's,
#: ``{tmp}`` a scratch folder (for the caches the scripts keep in bench/results by default).
QUICK = {
    "bench_backfill.py": ["--sessions", "2", "--records", "5"],
    "bench_distill.py": ["--skills", "5", "--number", "5", "--repeat", "1"],
    "bench_distill_from_transcripts.py": ["--runs", "3"],
    "bench_experience.py": ["--turns", "50", "--sessions", "3", "--turns-per-session", "5"],
    "bench_forget_derived.py": ["--turns", "50", "--forget", "5"],
    "bench_gc.py": ["--n", "300", "--deletes", "10", "--repeat", "1"],
    "bench_key_rotation.py": ["--entries", "20"],
    "bench_loop.py": ["--runs", "1"],
    "bench_orchestrator.py": ["--jobs", "10", "--repeat", "1"],
    "bench_pg_counts.py": ["--notes", "50", "--rounds", "1"],
    "bench_postgres.py": ["--data", "{locomo}", "--modes", "keyword"],
    "bench_pseudonym_guesses.py": ["--guesses", "100"],
    "bench_redact.py": ["--mb", "0.05"],
    "bench_scale.py": ["--n", "500", "--questions", "5", "--keyword", "--data", "{locomo}"],
    "bench_store.py": ["--n", "300", "--queries", "5", "--repeat", "1", "--import-repeat", "1"],
    "bench_sync.py": ["--n", "200", "--repeat", "1"],
    "bench_entry_counts.py": ["--n", "200", "--rounds", "1"],
    "bench_ui.py": ["--n", "300", "--repeat", "1", "--cache", "{tmp}"],
}
#: The real model, many processes or a large file, even on a tiny input.
SLOW = {
    "bench_derived_lme.py": ["--data", "{data}", "--hybrid", "--cache", "{tmp}"],  # the built-in model, cached in tmp
    "bench_coding_memory.py": [],
    "bench_consolidate.py": ["--data", "{locomo}", "--sessions", "5"],
    "bench_facts.py": [],  # every case of bench/data: no smaller input
    "bench_embedder.py": ["--n", "200", "--rounds", "1", "--texts", "20", "--cache", "{tmp}"],
    "bench_hook_lock.py": ["--hooks", "1"],
    "bench_int8_recipes.py": ["--data", "{locomo}", "--conversations", "1"],
    "bench_hooks.py": ["--n", "30", "--runs", "2"],
    "bench_long_texts.py": ["--data", "{data}", "--questions", "2", "--models", "minilm-int8"],
    "bench_mcp.py": ["--n", "200", "--rounds", "1", "--queries", "3", "--cache", "{tmp}"],
    "bench_mcp_http.py": ["--n", "50", "--recalls", "3", "--rounds", "1"],
    "bench_pg_gc.py": ["--mb", "1", "--forget", "5"],
    "bench_pg_spaces.py": ["--notes", "60", "--rounds", "1"],
    "bench_embedding_speed.py": ["--short", "8", "--long", "2", "--sessions", "1", "--rounds", "1", "--data", "{locomo}",
                                 "--budgets", "128,256"],
    "bench_sessions.py": ["--data", "{locomo}", "--n", "300", "--queries", "3", "--cache", "{tmp}"],
    "bench_turn_sentences.py": ["--data", "{data}", "--questions", "1", "--rounds", "1"],
    "bench_soak.py": ["--seconds", "5", "--writers", "1", "--readers", "1", "--mcp", "1"],
    "bench_vectors.py": ["--n", "200", "--queries", "5", "--throughput-texts", "20", "--no-chroma", "--cache", "{tmp}"],
    "bench_workers.py": ["--jobs", "10", "--workers", "2"],
    "compare_embedders.py": ["--data", "{locomo}", "--cache", "{tmp}", "--models", "minilm-int8", "--cold-runs", "1"],
    "tune_hybrid.py": ["--data", "{locomo}", "--cache", "{tmp}", "--no-loco"],
}
#: The scripts that read what ``bench_recall.py --dump`` wrote (run once, by the fixture below).
ON_RECALL_DUMP = {
    "calibrate_scores.py": ["{dump}"],
    "tune_fusion.py": ["{dump}"],
    "bench_passages.py": ["--dump", "{dump}", "--data", "{data}", "--cache", "{tmp}"],
    "sentence_cosines.py": ["{dump}", "--data", "{data}", "--cache", "{tmp}"],
}
#: Its own test below: it rewrites a file of the repository.
MAKES_CASES = "make_redaction_cases.py"
#: Its own test below: it reads the stores ``bench_postgres.py --scale N --keep DIR`` built.
ON_KEPT_STORES = "bench_exact_neighbours.py"
TIMEOUT_S = 1800  # a failure detector: a tiny run takes seconds, minutes for the slow ones at a load of 10


def run_script(script: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, str(BENCH / script), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=TIMEOUT_S, env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    assert done.returncode == 0, f"{script} {' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}"
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.stdout.strip(), f"{script} printed no report"
    return done


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("bench-data")
    write_locomo(folder)
    write_longmemeval(folder)
    return folder


def filled(args: list[str], data: Path, tmp: Path, dump: Path | None = None) -> list[str]:
    places = {"data": data, "locomo": data / "locomo-dev", "tmp": tmp, "dump": dump}
    return [arg.format(**places) for arg in args]


def test_every_script_in_bench_has_a_tiny_run() -> None:
    listed = set(QUICK) | set(SLOW) | set(ON_RECALL_DUMP) | HELPERS | {MAKES_CASES, ON_KEPT_STORES, "bench_recall.py"}
    assert {p.name for p in BENCH.glob("*.py")} == listed
    assert not set(QUICK) & set(SLOW)


@pytest.mark.parametrize("script", sorted(QUICK))
def test_a_quick_script_runs_on_a_tiny_input(script: str, data: Path, tmp_path: Path) -> None:
    run_script(script, filled(QUICK[script], data, tmp_path), tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(SLOW))
def test_a_slow_script_runs_on_a_tiny_input(script: str, data: Path, tmp_path: Path) -> None:
    run_script(script, filled(SLOW[script], data, tmp_path), tmp_path)


@pytest.mark.slow
def test_bench_scale_measures_vectors_on_a_tiny_input(data: Path, tmp_path: Path) -> None:
    args = ["--n", "300", "--questions", "5", "--vectors", "--data", "{locomo}", "--db", "{tmp}/scale.db"]
    run_script("bench_scale.py", filled(args, data, tmp_path), tmp_path)


@pytest.mark.slow
def test_bench_turn_sentences_measures_postgresql_on_a_tiny_input(data: Path, tmp_path: Path) -> None:
    args = ["--data", "{data}", "--corpus", "lme-user", "--questions", "1", "--rounds", "1", "--engine", "postgresql"]
    run_script("bench_turn_sentences.py", filled(args, data, tmp_path), tmp_path)


@pytest.mark.slow
def test_bench_pg_counts_measures_the_vectors_counter_on_a_tiny_input(data: Path, tmp_path: Path) -> None:
    run_script("bench_pg_counts.py", ["--notes", "50", "--rounds", "1", "--vectors"], tmp_path)


@pytest.mark.slow
def test_bench_exact_neighbours_reads_the_stores_bench_postgres_kept(data: Path, tmp_path: Path) -> None:
    # The kept server runs as 'nobody': its folder must be one other users can reach (not tmp_path's).
    with tempfile.TemporaryDirectory() as reachable:
        os.chmod(reachable, 0o755)
        kept = ["--scale", "300", "--questions", "3", "--keep", reachable, "--data", "{locomo}"]
        run_script("bench_postgres.py", filled(kept, data, tmp_path), tmp_path)
        run_script(ON_KEPT_STORES, filled(kept, data, tmp_path), tmp_path)
        run_script(ON_KEPT_STORES, filled([*kept, "--simulate", "500"], data, tmp_path), tmp_path)


@pytest.fixture(scope="module")
def recall_dump(data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``bench_recall.py`` on every corpus, its candidates and hits dumped for the scripts that read them."""
    scratch = tmp_path_factory.mktemp("recall")
    run_script("bench_recall.py", ["--data", str(data), "--cache", str(scratch), "--dump", str(scratch / "dump")],
               scratch)
    return scratch / "dump"


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(ON_RECALL_DUMP))
def test_a_script_on_recalls_dump_runs(script: str, data: Path, recall_dump: Path, tmp_path: Path) -> None:
    run_script(script, filled(ON_RECALL_DUMP[script], data, tmp_path, recall_dump), tmp_path)


def test_the_redaction_cases_are_what_their_script_makes(tmp_path: Path) -> None:
    # Run from a copy, so that it writes beside the copy, not into the repository.
    (tmp_path / "data").mkdir()
    shutil.copy(BENCH / MAKES_CASES, tmp_path)
    done = subprocess.run([sys.executable, str(tmp_path / MAKES_CASES)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    made = tmp_path / "data" / "redaction_cases.jsonl"
    assert filecmp.cmp(made, BENCH / "data" / "redaction_cases.jsonl", shallow=False)
