"""`harness-loop runs …` over runs written by the real orchestrator."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner

from harness_loop import Job, JobResult, Orchestrator
from harness_loop.cli import main as cli
from harness_loop.runstore import RunStore


def _run_a_dag(db: Path | str) -> str:
    async def runner(job: Job, upstream: dict[str, JobResult]) -> JobResult:
        if job.id == "broken":
            raise RuntimeError("the build server is down")
        return JobResult(text=f"did {job.id}", input_tokens=3, output_tokens=2)

    async def main() -> str:
        with RunStore.open(db) as store:
            orchestrator = Orchestrator(runner, store=store)
            report = await orchestrator.run("ship it", [Job("plan", "plan it"), Job("build", "build it", deps=["plan"]), Job("broken", "try it")],
                                            run_id="run-1")
            return report.run_id

    return anyio.run(main)


def invoke(db: Path | str, *args: str) -> object:
    return CliRunner().invoke(cli, [args[0], "--db", str(db), *args[1:]], catch_exceptions=False)


def test_runs_list_show_and_events(run_target: str) -> None:
    db_path = run_target  # a file, or a postgresql:// URL
    run_id = _run_a_dag(db_path)
    listed = invoke(db_path, "runs", "list")
    assert listed.exit_code == 0 and run_id in listed.stdout and "failed" in listed.stdout
    shown = invoke(db_path, "runs", "show", run_id)
    assert "  - build: succeeded (entered 1×, attempts 1, tokens 5) — did build" in shown.stdout
    assert "  - broken: dead-lettered" in shown.stdout and "failed: the build server is down" in shown.stdout
    as_json = json.loads(invoke(db_path, "runs", "show", run_id, "--json").stdout)
    assert {job["id"] for job in as_json["jobs"]} == {"plan", "build", "broken"}
    events = [json.loads(line) for line in invoke(db_path, "runs", "events", run_id, "--json").stdout.splitlines()]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))


@pytest.mark.parametrize("args", [["runs", "show", "nope"], ["runs", "events", "nope"]])
def test_unknown_run_is_one_line_error(db_path: Path, args: list[str]) -> None:
    result = invoke(db_path, *args)
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: no run 'nope'") and result.stderr.count("\n") == 1


HUGE = "9" * 30


@pytest.mark.parametrize("args", [
    ["runs", "list", "--limit", HUGE],
    ["runs", "events", "run-1", "--after", HUGE],
    ["runs", "events", "run-1", "--after", "-1"],
])
def test_an_out_of_range_number_is_refused_in_one_line_and_the_runs_stay(db_path: Path, args: list[str]) -> None:
    _run_a_dag(db_path)
    result = invoke(db_path, *args)
    assert result.exit_code == 2, result.output
    assert "Error: Invalid value for" in result.stderr and "Traceback" not in result.output
    assert "run-1" in invoke(db_path, "runs", "list").stdout


@pytest.mark.parametrize("option", [["--max-iters", HUGE], ["--retries", HUGE], ["--time-limit", "1e308"], ["--max-iters", "0"]])
def test_run_refuses_an_out_of_range_bound_before_anything_runs(option: list[str]) -> None:
    result = CliRunner().invoke(cli, ["run", *option, "--model-url", "http://127.0.0.1:9/v1", "--model", "m", "hi"],
                                catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '{option[0]}'" in result.stderr
