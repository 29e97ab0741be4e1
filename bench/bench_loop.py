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

With ``--memory [N]`` (N defaults to 100,000), :func:`make_guides` opens a keyword-only harness_mem
store of N entries -- built once with ``add_many`` in batches and cached under ``bench/results/`` --
and the same run measures the loop with memory next to the rows above (its "without" baseline):

- ``+ MemoryGuide, uncached``      the ``[memory-recall]`` guide recalling before every model call;
- ``+ ExperienceGuide, uncached``  the ``[experience-recall]`` guide, likewise (these two rows use at
                                   most 3 runs × 5 iterations: each call costs a full recall);
- ``+ memory guides, cached``      both, each in a :class:`~harness_loop.memory.CachedGuide` made
                                   fresh per run, as ``attach_memory`` registers them: one recall
                                   per run, amortised over its iterations;
- ``+ attach_memory``              the whole wiring -- cached guides, transcript capture written as
                                   the run goes by a background thread, an episode per run -- on a
                                   copy of the store.

Before the loop table it prints each guide's render time on its own, for a broad task (common words:
about a third of the store matches) and a narrow one (about 1% matches), and the block it injects.
The store is a realistic mix -- 30% notes and facts, transcript turns in 20-turn sessions, 1%
episodes -- over a Zipf vocabulary of 8,000 words.

    python bench/bench_loop.py --memory            # 100k entries (built once, ~40 s)
    python bench/bench_loop.py --memory 10000 --runs 5

With ``--capture``, it measures what transcript capture costs the loop **per turn, on the hook
side**: the same runs with :func:`attach_memory` on a fresh store file, every call of the memory
hook timed on its own (``perf_counter_ns`` around it). The per-turn events are PostModel and
PostToolUse -- the hook enqueues and returns, the writer thread does the writing -- reported as
p50/p99/max, next to a hook that does nothing timed the same way (the machine's noise floor: on a
loaded machine the p99 and max are the scheduler's, not the hook's); SessionStart (opening the writer's connection, starting its thread) and SessionEnd
(the episode, the last batch, joining the thread) happen once per run and are reported apart. Tool
results of 20 bytes and of 20 kB show that the per-turn cost does not grow with the turn. With a
zero-latency model the writer thread is busy the whole run and the hooks compete with it for the
GIL (the worst case); a model that takes 2 ms per call -- still far quicker than a real one --
leaves the writer idle time to write in, as a real run does.

    python bench/bench_loop.py --capture --runs 20 --iters 50
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from harness_loop.chat import ModelOutput, ModelRequest, ScriptedModel, ToolCall
from harness_loop.hooks import Event, Hook, HookBus, HookEvent
from harness_loop.loop import AgentLoop, Done, Guide
from harness_loop.memory import CachedGuide, MemoryGuide, MemoryWiring, attach_memory
from harness_loop.record import SessionRecorder
from harness_loop.tools import Tool, tool
from harness_mem import Episode, ExperienceStore, MemoryStore
from harness_mem.experience.store import ExperienceGuide

RESULTS = Path(__file__).resolve().parent / "results"
TASK = "deploy the billing service to staging and check the error logs"  # common words: many matches
NARROW_TASK = "apply the terraform plan and fix the drift"  # rarer words: about 1% of entries match
# Bump when the generated store changes, so a stale cache is not reused.
STORE_VERSION = 2


@tool
async def noop_async(i: int) -> str:
    """Do nothing."""
    return "ok"


@tool
def noop_sync(i: int) -> str:
    """Do nothing, synchronously."""
    return "ok"


BIG_RESULT = "the ledger row is reconciled; " * 700  # about 20 kB


@tool
async def noop_big(i: int) -> str:
    """Return a 20 kB result."""
    return BIG_RESULT


class StaticGuide:
    """A guide whose block never changes: the cost of the guide hook itself."""

    def render(self, query: str) -> str:
        return "Relevant notes:\n- the user prefers short answers\n- the repo uses ruff"


# ---- the memory store ----------------------------------------------------------------------------

# A Zipf vocabulary (frequency ~ 1/rank) of 8,000 words: made-up filler, with real ops words spread
# over ranks 20-1,800 -- the task's words among the most frequent of them, so that recall for the
# task has thousands of matches to rank (each of its words is in 2-12% of entries), not a handful.
OPS_WORDS = (
    "deploy billing service staging production error logs check release rollback cache token config "
    "database migration schema index query latency replica backup restore certificate gateway cluster "
    "queue worker metrics alert canary tenant region quota secret build test pipeline branch merge "
    "review customer invoice payment refund ticket incident pager timeout retry network dns proxy "
    "storage disk memory cpu container image registry helm chart terraform plan apply drift owner team"
).split()
VOCAB_SIZE = 8000
ROLES = ("user", "assistant", "tool")


def _vocabulary() -> tuple[list[str], list[float]]:
    words = [f"w{i}" for i in range(VOCAB_SIZE)]
    for j, word in enumerate(OPS_WORDS):
        words[20 + 15 * j] = word
    cumulative, total = [], 0.0
    for rank in range(1, VOCAB_SIZE + 1):
        total += 1 / rank
        cumulative.append(total)
    return words, cumulative


WORDS, CUM_WEIGHTS = _vocabulary()


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choices(WORDS, cum_weights=CUM_WEIGHTS, k=n)).capitalize() + "."


def memory_items(n: int, seed: int = 7) -> tuple[list[dict[str, Any]], list[Episode]]:
    """``n`` entries: 1% episodes, 30% notes and facts, the rest transcript turns in 20-turn sessions."""
    rng = random.Random(seed)
    episodes = n // 100
    items: list[dict[str, Any]] = []
    for i in range(n - episodes):
        if i % 10 < 3:
            items.append({"content": _text(rng, rng.randint(8, 30)), "kind": rng.choice(["note", "fact"])})
        else:
            role = ROLES[i % 3]
            body = _text(rng, rng.randint(5, 60))
            items.append(
                {
                    "content": f"[{rng.choice(['shell', 'read_file', 'grep'])}] {body}"
                    if role == "tool"
                    else body,
                    "role": role,
                    "session": f"bench-{i // 20:06d}",
                    "tags": [f"role:{role}", f"session:bench-{i // 20:06d}"],
                    "source": "transcript",
                }
            )
    eps = [
        Episode(
            _text(rng, rng.randint(6, 16)),
            _text(rng, rng.randint(8, 40)),
            tools=[rng.choice(["shell", "read_file", "grep", "deploy"]) for _ in range(rng.randint(1, 6))],
            success=rng.choice([True, True, False, None]),
        )
        for _ in range(episodes)
    ]
    return items, eps


def memory_store_path(n: int) -> Path:
    """The cached store of ``n`` entries, built on first use (keyword-only: no model needed)."""
    path = RESULTS / f"loop-memory-{n}-v{STORE_VERSION}.db"
    if path.exists():
        return path
    RESULTS.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial.db")
    for leftover in RESULTS.glob(partial.name + "*"):
        leftover.unlink()
    started = time.perf_counter()
    print(f"building a {n:,}-entry memory store (cached as {path}) ...", file=sys.stderr)
    items, episodes = memory_items(n)
    with MemoryStore(partial, embedder=None) as store:
        for start in range(0, len(items), 5000):
            store.add_many(items[start : start + 5000])
        experience = ExperienceStore(store)
        for ep in episodes:
            experience.record(ep)
        assert store.count() == n, store.count()
    partial.rename(path)  # only a complete store becomes the cache
    print(f"built in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return path


def make_guides(args: argparse.Namespace) -> list[Guide]:
    """The memory guides over the ``--memory`` store (none without the option), uncached."""
    return list(_memory_guides(args.memory)) if args.memory else []


@functools.cache
def _memory_guides(n: int) -> tuple[Guide, ...]:
    store = MemoryStore(memory_store_path(n), embedder=None)
    return MemoryGuide(store), ExperienceGuide(ExperienceStore(store))


def render_costs(guides: Sequence[Guide], budget_s: float = 3.0) -> list[dict[str, Any]]:
    """Each guide's render time on its own for a broad and a narrow task, and the block it injects.

    Repeats until ``budget_s`` is spent (5 to 200 times), after one warm-up render.
    """
    rows = []
    for query, label in ((TASK, "broad"), (NARROW_TASK, "narrow")):
        for g in guides:
            block = g.render(query)
            times: list[float] = []
            spent = time.perf_counter()
            while len(times) < 5 or (len(times) < 200 and time.perf_counter() - spent < budget_s):
                started = time.perf_counter()
                g.render(query)
                times.append((time.perf_counter() - started) * 1e6)
            times.sort()
            rows.append(
                {
                    "guide": type(g).__name__,
                    "task": label,
                    "renders": len(times),
                    "p50_us": round(statistics.median(times), 1),
                    "p95_us": round(times[min(len(times) - 1, int(0.95 * len(times)))], 1),
                    "block_chars": len(block),
                }
            )
    return rows


def script(name: str, iters: int) -> list[ModelOutput | str]:
    calls: list[ModelOutput | str] = [
        ModelOutput.with_calls(ToolCall.of(name, i=i)) for i in range(iters - 1)
    ]
    return [*calls, "done"]


_COPIES: dict[Path, MemoryStore] = {}


def writable_copy(n: int, workspace: Path) -> MemoryStore:
    """A copy of the cached ``n``-entry store in ``workspace`` (made once), for runs that write."""
    if workspace not in _COPIES:
        shutil.copyfile(memory_store_path(n), workspace / "wired-memory.db")
        _COPIES[workspace] = MemoryStore(workspace / "wired-memory.db", embedder=None)
    return _COPIES[workspace]


async def one_run(
    t: Tool,
    iters: int,
    workspace: Path,
    *,
    recorder: bool = False,
    guides: Sequence[Guide] = (),
    cached: tuple[Sequence[Guide], MemoryStore] | None = None,
    memory: int | None = None,
) -> float:
    rec = SessionRecorder.create(workspace / "sessions") if recorder else None
    if cached is not None:
        guides = [CachedGuide(g, cached[1]) for g in cached[0]]
    loop = AgentLoop(
        ScriptedModel(script(t.name, iters)), [t], workspace=workspace, recorder=rec, guides=guides
    )
    if memory is not None:
        attach_memory(loop, writable_copy(memory, workspace))
    started = time.perf_counter()
    outcome = await loop.run(TASK)
    elapsed = time.perf_counter() - started
    if rec is not None:
        rec.close()
    assert isinstance(outcome, Done) and outcome.iters == iters, outcome
    return elapsed / iters


@dataclass(frozen=True)
class Scenario:
    name: str
    run: Callable[[Path], Awaitable[float]]  # one run in a workspace -> seconds per iteration
    runs: int
    iters: int


def scenarios(args: argparse.Namespace) -> list[Scenario]:
    def row(name: str, *, runs: int | None = None, iters: int | None = None, **options: Any) -> Scenario:
        n_iters = iters or args.iters
        return Scenario(
            name, lambda ws: one_run(noop_async, n_iters, ws, **options), runs or args.runs, n_iters
        )

    rows = [
        row("async tool"),
        Scenario("sync tool (thread)", lambda ws: one_run(noop_sync, args.iters, ws), args.runs, args.iters),
        row("async tool + recorder", recorder=True),
        row("async tool + static guide", guides=[StaticGuide()]),
    ]
    if guides := make_guides(args):
        n = f"{args.memory // 1000}k" if args.memory >= 1000 else str(args.memory)
        store = MemoryStore(memory_store_path(args.memory), embedder=None)
        # Uncached, every model call recalls: a few short runs show the per-iteration cost.
        few = {"runs": min(args.runs, 3), "iters": min(args.iters, 5)}
        for g in guides:
            rows.append(row(f"async tool + {type(g).__name__} ({n}, uncached)", guides=[g], **few))
        # Cached as attach_memory registers them: fresh per run, so every run recalls once.
        rows.append(row(f"async tool + memory guides ({n}, cached)", cached=(guides, store)))
        # The whole wiring writes turns and an episode per run: on a copy, so the cache stays clean.
        rows.append(row(f"async tool + attach_memory ({n})", memory=args.memory))
    return rows


async def bench(args: argparse.Namespace) -> list[dict[str, Any]]:
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp)
        for sc in scenarios(args):
            await sc.run(ws)  # warm-up: imports, thread pool, first allocations
            per_iter = [await sc.run(ws) for _ in range(sc.runs)]
            us = sorted(x * 1e6 for x in per_iter)
            results.append(
                {
                    "scenario": sc.name,
                    "runs": sc.runs,
                    "iters": sc.iters,
                    "p50_us": round(statistics.median(us), 1),
                    "p95_us": round(us[min(len(us) - 1, int(0.95 * len(us)))], 1),
                    "min_us": round(us[0], 1),
                }
            )
    return results


# ---- capture: the hook side, per turn ---------------------------------------------------------------


class TimedBus(HookBus):
    """A hook bus that times every call of the memory wiring's hook, by event -- and, as the noise
    floor, a hook that does nothing, timed the same way on the same events."""

    def __init__(self) -> None:
        super().__init__()
        self.samples: dict[Event, list[int]] = {}
        self.floor: list[int] = []

        def noop(event: HookEvent) -> None:
            return None

        def timed_noop(event: HookEvent) -> None:
            started = time.perf_counter_ns()
            noop(event)
            self.floor.append(time.perf_counter_ns() - started)

        super().add(timed_noop, Event.POST_MODEL, Event.POST_TOOL_USE)

    def add(self, hook: Hook, *events: Event) -> Hook:
        if not isinstance(hook, MemoryWiring):
            return super().add(hook, *events)
        wiring = hook

        def timed(event: HookEvent) -> None:
            started = time.perf_counter_ns()
            wiring(event)
            self.samples.setdefault(event.event, []).append(time.perf_counter_ns() - started)

        return super().add(timed, *events)


class PacedModel(ScriptedModel):
    """A scripted model that takes ``latency`` seconds per call (still far below a real model's)."""

    def __init__(self, script: list[ModelOutput | str], latency: float) -> None:
        super().__init__(script)
        self.latency = latency

    async def complete(self, request: ModelRequest) -> ModelOutput:
        if self.latency:
            await anyio.sleep(self.latency)
        return await super().complete(request)


async def capture_costs(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Per-call cost of the memory hook, by event, over ``args.runs`` runs of ``args.iters``."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cases = (
            (noop_async, 0.0, "20 B, no wait"),
            (noop_big, 0.0, "20 kB, no wait"),
            (noop_async, 0.002, "20 B, 2 ms model"),
        )
        for t, latency, label in cases:
            samples: dict[Event, list[int]] = {}
            floor: list[int] = []
            with MemoryStore(Path(tmp) / f"capture-{t.name}.db", embedder=None) as store:
                for run in range(args.runs + 1):
                    bus = TimedBus()  # one loop, one wiring, one bus per run
                    model = PacedModel(script(t.name, args.iters), latency)
                    loop = AgentLoop(model, [t], workspace=Path(tmp), hooks=bus)
                    attach_memory(loop, store)
                    outcome = await loop.run(TASK)
                    assert isinstance(outcome, Done) and outcome.iters == args.iters, outcome
                    if run == 0:  # warm-up: imports, first allocations
                        continue
                    for event, ns in bus.samples.items():
                        samples.setdefault(event, []).extend(ns)
                    floor.extend(bus.floor)
            per_turn = samples.get(Event.POST_MODEL, []) + samples.get(Event.POST_TOOL_USE, [])
            groups = [
                ("per turn (PostModel + PostToolUse)", per_turn),
                ("  PostModel", samples.get(Event.POST_MODEL, [])),
                ("  PostToolUse", samples.get(Event.POST_TOOL_USE, [])),
                ("once per run: SessionStart", samples.get(Event.SESSION_START, [])),
                ("once per run: SessionEnd", samples.get(Event.SESSION_END, [])),
                ("noise floor: a no-op hook, per turn", floor),
            ]
            for name, ns in groups:
                us = sorted(x / 1000 for x in ns)
                rows.append(
                    {
                        "capture": label,
                        "hook": name.strip(),
                        "calls": len(us),
                        "p50_us": round(statistics.median(us), 2),
                        "p99_us": round(us[min(len(us) - 1, int(0.99 * len(us)))], 2),
                        "max_us": round(us[-1], 2),
                    }
                )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--iters", type=int, default=50, help="iterations per run (default 50, the loop's budget)"
    )
    parser.add_argument("--runs", type=int, default=20, help="runs per scenario")
    parser.add_argument("--json", action="store_true", help="print JSON lines instead of a table")
    parser.add_argument(
        "--memory",
        type=int,
        nargs="?",
        const=100_000,
        default=None,
        metavar="N",
        help="add rows with memory guides over an N-entry store (default N: 100000; cached in bench/results/)",
    )
    parser.add_argument(
        "--capture",
        action="store_true",
        help="measure the transcript capture hook per turn (attach_memory on a fresh store) and exit",
    )
    args = parser.parse_args()
    if args.iters < 1 or args.runs < 1:
        parser.error("--iters and --runs must be at least 1")
    if args.memory is not None and args.memory < 100:
        parser.error("--memory needs at least 100 entries")
    if args.capture:
        rows = anyio.run(capture_costs, args)
        if args.json:
            for r in rows:
                print(json.dumps(r))
            return
        print(f"memory hook cost per call ({args.runs} runs × {args.iters} iterations; fresh keyword-only store)")
        print(f"{'case':<18} {'hook':<36} {'calls':>7} {'p50 µs':>9} {'p99 µs':>9} {'max µs':>10}")
        for r in rows:
            print(
                f"{r['capture']:<18} {r['hook']:<36} {r['calls']:>7} {r['p50_us']:>9.2f} "
                f"{r['p99_us']:>9.2f} {r['max_us']:>10.2f}"
            )
        return
    costs = render_costs(make_guides(args))
    results = anyio.run(bench, args)
    if args.json:
        for c in costs:
            print(json.dumps({"render": c["guide"], "memory": args.memory, **c}))
        for r in results:
            print(json.dumps(r))
        return
    if costs:
        print(f"guide render on its own, {args.memory:,}-entry keyword store")
        print(f"  broad task:  {TASK!r}\n  narrow task: {NARROW_TASK!r}")
        print(f"{'guide':<36} {'p50 µs':>12} {'p95 µs':>12} {'block chars':>12}")
        for c in costs:
            name = f"{c['guide']} ({c['task']})"
            print(f"{name:<36} {c['p50_us']:>12.1f} {c['p95_us']:>12.1f} {c['block_chars']:>12}")
        print()
    print("loop overhead per iteration (zero-latency model, no-op tool; runs × iterations per row)")
    print(f"{'scenario':<44} {'runs×iters':>10} {'p50 µs/iter':>12} {'p95 µs/iter':>12} {'min µs/iter':>12}")
    for r in results:
        shape = f"{r['runs']}×{r['iters']}"
        print(
            f"{r['scenario']:<44} {shape:>10} {r['p50_us']:>12.1f} {r['p95_us']:>12.1f} {r['min_us']:>12.1f}"
        )


if __name__ == "__main__":
    main()
