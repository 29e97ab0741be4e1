"""An agent loop with a memory: recall before each model call, the transcript captured, an episode recorded.

Offline by default -- a scripted model lists the workspace with the built-in ``list_dir`` tool, then
answers -- so it runs anywhere. Point it at any OpenAI-compatible server to use a real model::

    python examples/agent_with_memory.py                                  # offline, ./agent_memory.db
    python examples/agent_with_memory.py --note "the deploy target is staging-eu" "Where do we deploy?"
    python examples/agent_with_memory.py --model-url http://127.0.0.1:8000/v1 --model qwen3 \\
        -w . "What does pyproject.toml install?"     # or set HARNESS_LOOP_MODEL_URL / HARNESS_LOOP_MODEL

Run it twice and the second run's ``[experience-recall]`` block (``--show-context``) holds the first
run's episode: memory that compounds. Afterwards the store is an ordinary harness-mem file::

    harness-mem --db agent_memory.db list
    harness-mem --db agent_memory.db recall "workspace" --kind episode

The answer goes to stdout; what was remembered goes to stderr. Exit status 0 when the answer passed
its acceptance check, 1 otherwise.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from pathlib import Path

import anyio

from harness_loop import (
    WORKSPACE_SYSTEM,
    AgentLoop,
    Event,
    HookEvent,
    LoopConfig,
    Model,
    ModelOutput,
    OpenAIChatModel,
    Outcome,
    ScriptedModel,
    ToolCall,
    attach_memory,
    describe_ending,
    workspace_tools,
)
from harness_mem import MemoryStore

DEFAULT_TASK = "What is in this workspace?"
OFFLINE_ANSWER = (
    "(offline demo) I listed the workspace with list_dir; the listing is in the tool result above. "
    "Pass --model-url and --model to have a real model read and summarise it."
)


def offline_model() -> ScriptedModel:
    """A zero-dependency stand-in for a model: one built-in tool call, then a fixed answer."""
    return ScriptedModel([ModelOutput.with_calls(ToolCall.of("list_dir", path=".")), OFFLINE_ANSWER])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "task", nargs="?", default=DEFAULT_TASK, help=f"what to do [default: {DEFAULT_TASK!r}]"
    )
    parser.add_argument(
        "--db", type=Path, default=Path("agent_memory.db"), help="the memory file [./agent_memory.db]"
    )
    parser.add_argument(
        "-w", "--workspace", type=Path, default=Path("."), help="directory the tools may read [.]"
    )
    parser.add_argument(
        "--model-url",
        default=os.environ.get("HARNESS_LOOP_MODEL_URL"),
        help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1 [env HARNESS_LOOP_MODEL_URL]",
    )
    parser.add_argument(
        "--model", default=os.environ.get("HARNESS_LOOP_MODEL"), help="model name [env HARNESS_LOOP_MODEL]"
    )
    parser.add_argument(
        "--api-key",
        default=os.environ.get("HARNESS_LOOP_API_KEY"),
        help="bearer token [env HARNESS_LOOP_API_KEY]",
    )
    parser.add_argument("--max-iters", type=int, default=20, help="iteration budget [20]")
    parser.add_argument(
        "--note",
        action="append",
        default=[],
        metavar="TEXT",
        help="remember TEXT (a note) before the run; repeatable",
    )
    parser.add_argument(
        "--keyword-only",
        action="store_true",
        help="no embedding model: keyword recall only (starts instantly)",
    )
    parser.add_argument(
        "--show-context", action="store_true", help="print the memory blocks the first model call received"
    )
    args = parser.parse_args(argv)
    if bool(args.model_url) != bool(args.model):
        parser.error("a model server needs both --model-url and --model (or neither, to run offline)")
    if not args.workspace.is_dir():
        parser.error(f"workspace {args.workspace} is not a directory")
    if args.max_iters < 1:
        parser.error("--max-iters must be at least 1")
    return args


def show_first_context(event: HookEvent) -> None:
    """PreModel hook: print the guide blocks of the run's first model call to stderr."""
    if event.iter == 0 and event.request is not None:
        blocks = list(event.request.guides) or ["(no memory recalled yet)"]
        print("\n\n".join(blocks), end="\n\n", file=sys.stderr)


async def run(args: argparse.Namespace, store: MemoryStore, model: Model) -> Outcome:
    loop = AgentLoop(
        model,
        workspace_tools(),
        system=WORKSPACE_SYSTEM,
        workspace=args.workspace,
        config=LoopConfig(max_iters=args.max_iters),
    )
    if args.show_context:
        loop.hooks.add(show_first_context, Event.PRE_MODEL)
    # Guides, transcript capture and the episode; leaving the block writes the turns of a run that raised.
    with attach_memory(loop, store) as memory:
        outcome = await loop.run(args.task)
    stats = memory.transcript_stats
    turns = stats.written if stats else 0
    episode = memory.last_episode
    result = "unknown" if episode is None or episode.episode.result is None else episode.episode.result
    print(f"{describe_ending(outcome)} after {outcome.iters} iterations", file=sys.stderr)
    print(f"memory: {turns} transcript turns in session {memory.last_session}", file=sys.stderr)
    if episode is not None:
        print(f"memory: episode {episode.id} recorded ({result})", file=sys.stderr)
    if memory.last_error:
        print(f"memory: warning: {memory.last_error}", file=sys.stderr)
    return outcome


async def main_async(args: argparse.Namespace) -> int:
    with MemoryStore(args.db, embedder=None if args.keyword_only else "auto") as store:
        for note in args.note:
            # An id from the text: running the same command twice does not remember the note twice.
            note_id = "note:" + hashlib.sha256(note.encode()).hexdigest()[:16]
            store.add(note, kind="note", source="user-explicit", id=note_id, on_conflict="ignore")
        if args.model_url and args.model:
            async with OpenAIChatModel(args.model_url, args.model, api_key=args.api_key) as model:
                outcome = await run(args, store, model)
        else:
            outcome = await run(args, store, offline_model())
    text = getattr(outcome, "text", None) or outcome.last_text
    if text:
        print(text)
    return 0 if outcome.ok else 1


def main(argv: list[str] | None = None) -> int:
    return anyio.run(main_async, parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
