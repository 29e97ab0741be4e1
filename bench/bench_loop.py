"""Agent-loop overhead per iteration: a zero-latency scripted model and a no-op tool.

    python bench/bench_loop.py                  # 20 runs of 50 iterations per scenario
    python bench/bench_loop.py --iters 200 --runs 5 --json

Each run is ``iters - 1`` rounds of one tool call (distinct arguments, so the stuck guard stays
quiet) and a final text answer. What is measured is everything the loop itself does per iteration:
request building, hooks, the stuck guard, result shaping, transcript bookkeeping, and (per scenario)
a recorder or a guide. Scenarios:

- ``async tool``        a no-op ``async def`` tool;
- ``sync tool``         a no-op plain function (runs in a worker thread so a deadline can cancel it);
- ``+ recorder``        the async tool with a JSONL :class:`SessionRecorder` on a temp file;
- ``+ static guide``    the async tool with one guide that returns a fixed block.

Memory guides: :func:`make_guides` is the hook. A later ``--memory-store N`` option will build a
harness_mem store of N entries and return a recall guide over it, adding a "with memory guides over
a 100k-entry store" row; the loop already renders every guide before each model call.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio

from harness_loop.loop import AgentLoop, Done, Guide
from harness_loop.models import ModelOutput, ScriptedModel, ToolCall
from harness_loop.record import SessionRecorder
from harness_loop.tools import Tool, tool


@tool
async def noop_async(i: int) -> str:
    """Do nothing."""
    return "ok"


@tool
def noop_sync(i: int) -> str:
    """Do nothing, synchronously."""
    return "ok"


class StaticGuide:
    """A guide whose block never changes: the cost of the guide hook itself."""

    def render(self, query: str) -> str:
        return "Relevant notes:\n- the user prefers short answers\n- the repo uses ruff"


def make_guides(args: argparse.Namespace) -> list[Guide]:
    """The guides for the ``+ memory guide`` scenario (none yet: harness_mem recall plugs in here)."""
    return []


def script(name: str, iters: int) -> list[ModelOutput | str]:
    calls: list[ModelOutput | str] = [
        ModelOutput.with_calls(ToolCall.of(name, i=i)) for i in range(iters - 1)
    ]
    return [*calls, "done"]


async def one_run(
    t: Tool, iters: int, workspace: Path, *, recorder: bool = False, guides: Sequence[Guide] = ()
) -> float:
    rec = SessionRecorder.create(workspace / "sessions") if recorder else None
    loop = AgentLoop(
        ScriptedModel(script(t.name, iters)), [t], workspace=workspace, recorder=rec, guides=guides
    )
    started = time.perf_counter()
    outcome = await loop.run("benchmark")
    elapsed = time.perf_counter() - started
    if rec is not None:
        rec.close()
    assert isinstance(outcome, Done) and outcome.iters == iters, outcome
    return elapsed / iters


def scenarios(args: argparse.Namespace) -> list[tuple[str, Callable[[Path], Any]]]:
    rows: list[tuple[str, Callable[[Path], Any]]] = [
        ("async tool", lambda ws: one_run(noop_async, args.iters, ws)),
        ("sync tool (thread)", lambda ws: one_run(noop_sync, args.iters, ws)),
        ("async tool + recorder", lambda ws: one_run(noop_async, args.iters, ws, recorder=True)),
        ("async tool + static guide", lambda ws: one_run(noop_async, args.iters, ws, guides=[StaticGuide()])),
    ]
    if guides := make_guides(args):
        rows.append(
            ("async tool + memory guides", lambda ws: one_run(noop_async, args.iters, ws, guides=guides))
        )
    return rows


async def bench(args: argparse.Namespace) -> list[dict[str, Any]]:
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp)
        for name, fn in scenarios(args):
            await fn(ws)  # warm-up: imports, thread pool, first allocations
            per_iter = [await fn(ws) for _ in range(args.runs)]
            us = sorted(x * 1e6 for x in per_iter)
            results.append(
                {
                    "scenario": name,
                    "runs": args.runs,
                    "iters": args.iters,
                    "p50_us": round(statistics.median(us), 1),
                    "p95_us": round(us[min(len(us) - 1, int(0.95 * len(us)))], 1),
                    "min_us": round(us[0], 1),
                }
            )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--iters", type=int, default=50, help="iterations per run (default 50, the loop's budget)"
    )
    parser.add_argument("--runs", type=int, default=20, help="runs per scenario")
    parser.add_argument("--json", action="store_true", help="print JSON lines instead of a table")
    args = parser.parse_args()
    if args.iters < 1 or args.runs < 1:
        parser.error("--iters and --runs must be at least 1")
    results = anyio.run(bench, args)
    if args.json:
        for r in results:
            print(json.dumps(r))
        return
    print(
        f"loop overhead per iteration ({args.runs} runs × {args.iters} iterations, zero-latency model, no-op tool)"
    )
    print(f"{'scenario':<28} {'p50 µs/iter':>12} {'p95 µs/iter':>12} {'min µs/iter':>12}")
    for r in results:
        print(f"{r['scenario']:<28} {r['p50_us']:>12.1f} {r['p95_us']:>12.1f} {r['min_us']:>12.1f}")


if __name__ == "__main__":
    main()
