"""What people type that the command lines used to refuse or accept wrongly (issue: the first hour)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from harness_loop.cli import main as loop_cli
from harness_mem.cli import cli


def invoke(*args: str) -> object:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "memory.db"
    assert invoke("--db", str(path), "--embedder", "none", "add", "deploys go out on Tuesdays",
                  "--session", "s-1").exit_code == 0
    return path


@pytest.mark.parametrize("args", [
    ["recall", "--db", "{db}", "deploys"],
    ["recall", "deploys", "--db={db}"],
    ["recall", "deploys", "-k", "1", "--db", "{db}", "-N", "default"],
    ["sessions", "list", "--db", "{db}"],
])
def test_the_store_options_are_taken_after_the_command_too(db: Path, args: list[str]) -> None:
    result = invoke(*(a.format(db=db) for a in args))
    assert result.exit_code == 0, result.output
    assert "s-1" in result.output


def test_a_command_given_the_group_option_twice_uses_the_later(db: Path, tmp_path: Path) -> None:
    result = invoke("--db", str(tmp_path / "nothing-here.db"), "recall", "deploys", "--db", str(db))
    assert result.exit_code == 0 and "Tuesdays" in result.output


def test_nothing_after_a_double_dash_moves(db: Path) -> None:
    added = invoke("--db", str(db), "add", "--", "--db")
    assert added.exit_code == 0
    assert invoke("--db", str(db), "get", added.output.strip()).output.count("--db") == 1


def test_harness_loop_runs_takes_the_store_after_its_subcommand(db: Path) -> None:
    result = CliRunner().invoke(loop_cli, ["runs", "list", "--db", str(db)], catch_exceptions=False)
    assert result.exit_code == 0 and "No runs" in result.output


@pytest.mark.parametrize("query", ["", "   "])
def test_an_empty_query_is_refused_in_one_line(db: Path, query: str) -> None:
    for command in (["recall", query], ["sessions", "recall", query]):
        result = invoke("--db", str(db), *command)
        assert result.exit_code == 2 and "the query is empty" in result.output


@pytest.mark.parametrize("score", ["2", "-0.1"])
def test_a_minimum_score_outside_zero_to_one_is_refused(db: Path, score: str) -> None:
    result = invoke("--db", str(db), "recall", "deploys", "--min-score", score)
    assert result.exit_code == 2 and "0<=x<=1" in result.output


@pytest.fixture
def chat(tmp_path: Path) -> Path:
    path = tmp_path / "chat.db"
    said = [("Ada", "Hi Bob! By the way, I'm vegetarian."), ("Bob", "Noted!"), ("Ada", "I moved to Porto last month.")]
    for n, (who, text) in enumerate(said):
        assert invoke("--db", str(path), "--embedder", "none", "add", text, "--role", who, "--session", "chat-1",
                      "--id", f"t{n}").exit_code == 0
    return path


def test_a_dry_run_shows_the_texts_it_would_write_and_writes_nothing(chat: Path) -> None:
    result = invoke("--db", str(chat), "consolidate", "--dry-run")
    assert result.exit_code == 0, result.output
    shown = result.stdout.splitlines()
    assert "    fact     Ada is vegetarian." in shown
    assert any(line.startswith("    summary  Ada and Bob on ") for line in shown)
    assert invoke("--db", str(chat), "list", "--kind", "fact").stdout == ""


def test_get_shows_a_derived_entry_with_the_words_it_came_from(chat: Path) -> None:
    assert invoke("--db", str(chat), "consolidate").exit_code == 0
    fact = next(line.split()[1] for line in invoke("--db", str(chat), "list", "--kind", "fact").stdout.splitlines()
                if line.startswith("fact ") and "vegetarian" in invoke("--db", str(chat), "get", line.split()[1]).stdout)
    shown = invoke("--db", str(chat), "get", fact).stdout
    assert "from:\n  Ada · " in shown and "    Hi Bob! By the way, I'm vegetarian." in shown
