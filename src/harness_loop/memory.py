"""Memory, as a consumer: recall before each model call, turns captured as they happen, an episode at the end.

The loop knows nothing of memory; this module wires harness_mem's public pieces onto the loop's two
extension points -- guides and hooks -- and nothing else::

    store = MemoryStore("agent.db")
    loop = AgentLoop(model, tools)
    with attach_memory(loop, store):          # guides + hooks (+ tools=True: memory tools)
        outcome = await loop.run("deploy the site")
    # the run's transcript and its episode are in agent.db

**Recall** comes as two guides, rendered by the loop before every model call with the task as the
query, their blocks replaced (never stacked into the history):

- :class:`MemoryGuide` -- the ``[memory-recall]`` block: the store's best hits for
  the task, numbered. By default it recalls *curated* memory only (kinds ``note``, ``fact``,
  ``summary``): transcript turns are raw (a repeated task would otherwise find its own earlier user
  turn first, then tool echoes) and episodes have a block of their own. ``kind=None`` recalls all.
- harness_mem's :class:`~harness_mem.experience.store.ExperienceGuide` -- the ``[experience-recall]``
  block of past episodes like this task, successes first. It already *is* a loop
  :class:`~harness_loop.loop.Guide` (``render(query) -> str``), so no adapter is needed.

The loop's query is always the task, so :func:`attach_memory` wraps each guide in a
:class:`CachedGuide`: a run recalls once rather than before every model call, and again only when
the store has changed -- at 100k entries one recall can cost a large fraction of a second.
The guides read the store on the loop's thread and let errors through: a misconfigured store (semantic
recall without a model, say) fails the run at its first model call instead of silently answering
without memory. :class:`MemoryGuide` checks its ``mode`` when it is built, earlier still.

**A run never recalls its own turns.** They are in the store while it runs (see below), so every
recall made for the run -- :class:`MemoryGuide` and the memory tools (:mod:`.memory_tools`) --
drops them by session: :meth:`MemoryWiring.is_own` is true for a ``turn`` of the running run's
session (with a fixed session spanning runs, of the running run: its ``run:<id>`` tag).

**Capture** follows harness_mem's transcript contract through a :class:`~harness_mem.experience.TranscriptWriter`:
the hooks only *enqueue* -- the task as the ``user`` turn (SessionStart), each model turn as
``assistant`` (PostModel; a turn that only calls tools is blank and skipped), each tool result as
``tool`` under its tool's name (PostToolUse, the shaped result the model saw) -- and a writer
thread with a connection of its own writes them **as the run goes**, a batch at most every
``flush_interval`` seconds (0.5 by default). A run killed with SIGKILL keeps every turn captured
more than about one interval before the kill. The final answer's turn is held back until the run
ends so that it can carry the run's result (tags ``result:success``/``result:failure``), which is
what offline consolidation reads; a run that ends without an answer gets a one-line ``system``
turn saying how it ended instead.

**The flush guarantee:** at SessionEnd -- a normal end or a cancellation (:class:`Cancelled`),
before ``loop.run`` returns -- the writer writes what is still queued and stops, so when ``await
loop.run(task)`` returns every turn of that run is in the store. That last batch is written while
the loop's thread waits (milliseconds: at most one interval's turns). A run that *raises* fires no
SessionEnd (the loop's rule: the exception is the news); its writer keeps writing in the background,
and is stopped by the next run's SessionStart, by :meth:`MemoryWiring.close`, on leaving ``with
attach_memory(...)``, or at interpreter exit, whichever comes first. A write that fails is logged
and kept in :attr:`MemoryWiring.last_error`, never raised: the caller must not lose the outcome to
a memory write.

The writer's own turn writes do not invalidate the :class:`CachedGuide` blocks (they only cache
recall, which never returns them): :meth:`MemoryWiring.data_version` leaves them out, and still
sees every other write -- this process's at once, other processes' within one interval.

**The episode** is recorded at SessionEnd too: situation = the task, tools = the tools that ran (fed
to the :class:`~harness_mem.experience.store.ExperienceRecorder`'s trace at PostToolUse, so a denied call,
which never ran, is not counted), outcome = the final text, success = :func:`run_success` -- True
only when the acceptance verdict passed, False for Unverified, Stuck and BudgetExhausted, None when
unknown (Cancelled). Its id is the one consolidation derives from the session
(``session:<id>``), so a later ``harness-mem consolidate`` updates this episode in place -- rebuilt
from the turns, which is why the last turn carries the result -- instead of adding a second one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, cast

from harness_mem import Entry, Episode, ExperienceStore, Hit, MemoryStore, TranscriptWriter
from harness_mem.errors import DuplicateIdError, InvalidInputError
from harness_mem.experience import (
    DEFAULT_MAX_CHARS,
    ExperienceGuide,
    ExperienceRecorder,
    StoredEpisode,
    TranscriptStats,
    episode_id_for,
    truncate_turn,
)
from harness_mem.experience.transcript_writer import DEFAULT_INTERVAL

from .hooks import Event, HookEvent
from .loop import AgentLoop, BudgetExhausted, Done, Guide, Outcome, Stuck, Unverified
from .memory_tools import memory_tools
from .tools import Tool

if TYPE_CHECKING:
    from harness_mem import GuardedMemory

__all__ = [
    "MEMORY_HEADER",
    "MEMORY_KINDS",
    "CachedGuide",
    "MemoryGuide",
    "MemoryWiring",
    "attach_memory",
    "describe_ending",
    "format_memory_block",
    "run_success",
    "store_version",
]

logger = logging.getLogger(__name__)

MEMORY_HEADER = "[memory-recall]\nRelevant prior context (from your long-term memory):"
# Curated memory: what an agent or a consolidation chose to keep. Turns and episodes are left out.
MEMORY_KINDS: tuple[str, ...] = ("note", "fact", "summary")
# One recalled entry in the block: a 20 kB note must not ride along on every request.
MAX_ITEM_CHARS = 1000
# Over-fetch factor when entries are dropped after recall (excluded tags): asking for 3k hits
# usually leaves k after the drop.
OVERFETCH = 3


def format_memory_block(contents: Sequence[str]) -> str:
    """The ``[memory-recall]`` block for ``contents`` (``""`` for none).

    ``"\\n  {i}. {content}"`` per item after the header; continuation lines of a multi-line
    item are indented under it so that the numbering stays readable.
    """
    if not contents:
        return ""
    lines = [MEMORY_HEADER]
    for i, content in enumerate(contents, start=1):
        lines.append(f"\n  {i}. " + content.strip().replace("\n", "\n     "))
    return "".join(lines)


class MemoryGuide:
    """A loop guide that injects the store's best hits for the query as a ``[memory-recall]`` block.

    :param store: the memory to recall from.
    :param top_k: at most this many entries in the block.
    :param min_score: drop hits scoring below this. Scores are in [0, 1] on one scale for every
        mode (:mod:`harness_mem.scores`): 0.5 keeps most answers and drops most unrelated hits.
    :param mode: ``keyword``, ``semantic`` or ``hybrid``; None is the store's default. Checked
        now, so a mode the store cannot serve fails here rather than at the first model call.
    :param exclude_tags: leave out entries carrying any of these tags (in the query itself).
        Entries whose content repeats an earlier hit's are dropped too.
    :param max_item_chars: longer entries are cut to their head plus a ``[n chars truncated]`` marker.
    :param exclude: drop entries for which this is true (:meth:`MemoryWiring.is_own`: the running
        run's own turns); over-fetches ``3 × top_k`` when the kinds recalled include turns.
    :param filters: passed to :meth:`MemoryStore.recall` -- ``kind`` (default :data:`MEMORY_KINDS`;
        None for every kind), ``role``, ``session``, ``session_prefix``, ``tags`` (all of),
        ``any_tags``, ``since``, ``until``.
    """

    def __init__(
        self,
        store: MemoryStore,
        *,
        top_k: int = 5,
        min_score: float | None = None,
        mode: Literal["keyword", "semantic", "hybrid"] | None = None,
        exclude_tags: Iterable[str] = (),
        max_item_chars: int = MAX_ITEM_CHARS,
        exclude: Callable[[Entry], bool] | None = None,
        **filters: Any,
    ) -> None:
        self.store = store
        self.top_k = top_k
        self.min_score = min_score
        self.mode = mode
        self.exclude_tags = frozenset([exclude_tags] if isinstance(exclude_tags, str) else exclude_tags)
        self.max_item_chars = max_item_chars
        filters.setdefault("kind", MEMORY_KINDS)
        self.filters = filters
        kinds = filters["kind"]
        recalls_turns = kinds is None or "turn" in ([kinds] if isinstance(kinds, str) else kinds)
        # Only turns can be a run's own (see MemoryWiring.is_own): other kinds need no over-fetch.
        self.exclude = exclude if recalls_turns else None
        # k=0 resolves the mode and validates nothing else, without touching the index.
        store.recall("", k=0, mode=mode)

    def recall(self, query: str) -> list[Hit]:
        """The hits the block is made of, best first."""
        if self.top_k <= 0 or not query.strip():
            return []
        # The tags are left out in SQL; the run's own turns (a turn of its session that carries its
        # tag) are no one filter, so they are dropped here, from a deeper fetch.
        fetch = self.top_k * OVERFETCH if self.exclude else self.top_k
        # cast: inside MemoryStore, `list[Hit]` names its own `list` method for type checkers.
        hits = cast("Sequence[Hit]", self.store.recall(query, k=fetch, mode=self.mode,
                                                       exclude_tags=tuple(self.exclude_tags), **self.filters))
        kept: list[Hit] = []
        seen: set[str] = set()
        for h in hits:
            if self.min_score is not None and h.score < self.min_score:
                break  # best first: the rest score lower still
            if self.exclude is not None and self.exclude(h.entry):
                continue
            if h.entry.content in seen:  # the same note saved twice would take two lines of context
                continue
            seen.add(h.entry.content)
            kept.append(h)
        return kept[: self.top_k]

    def render(self, query: str) -> str:
        """The block for ``query``, or ``""`` when nothing is recalled."""
        return format_memory_block(
            [truncate_turn(h.entry.content, self.max_item_chars)[0] for h in self.recall(query)]
        )


def store_version(store: MemoryStore) -> tuple[int, int]:
    """A token that changes whenever ``store``'s file may have changed (see ``MemoryStore.data_version``)."""
    return store.data_version()


class CachedGuide:
    """A guide that renders once per query for as long as the store is unchanged.

    The loop renders every guide before every model call, always with the task as the query, so
    without this a run would recall the same thing up to ``max_iters`` times -- and one keyword
    recall over a 100k-entry store costs 0.1-0.8 s when the task's words are common (see
    ``bench/bench_loop.py --memory``). The block is re-rendered when the query changes, when the
    store was written (by this process or any other: :func:`store_version`), or after ``max_age``
    seconds (entries expire with time, not only with writes). A note saved mid-run therefore shows
    up in the very next call's block, as it would without the cache.

    ``version`` replaces :func:`store_version` as the token of the store's state:
    :func:`attach_memory` passes :meth:`MemoryWiring.data_version`, which ignores the run's own
    turn writes.
    """

    def __init__(
        self,
        guide: Guide,
        store: MemoryStore,
        *,
        max_age: float = 60.0,
        version: Callable[[], Hashable] | None = None,
    ) -> None:
        self.guide = guide
        self.store = store
        self.max_age = max_age
        self.version: Callable[[], Hashable] = version or (lambda: store_version(store))
        self.renders = 0  # how many times the wrapped guide actually ran
        self._key: tuple[str, Hashable] | None = None
        self._block = ""
        self._at = 0.0

    def render(self, query: str) -> str:
        key = (query, self.version())  # read first: a write during render invalidates
        now = time.monotonic()
        if key != self._key or now - self._at > self.max_age:
            self._block = self.guide.render(query)
            self._key, self._at = key, now
            self.renders += 1
        return self._block

    def __repr__(self) -> str:
        return f"CachedGuide({self.guide!r})"


def run_success(outcome: Outcome) -> bool | None:
    """The run's result for its episode: True only when the acceptance verdict passed; False for an
    unverified answer, a stuck run and an exhausted budget (or time limit); None when unknown."""
    if isinstance(outcome, Done):
        return outcome.verdict.passed
    if isinstance(outcome, Unverified | Stuck | BudgetExhausted):
        return False
    return None  # Cancelled, or an ending this module does not know


def describe_ending(outcome: Outcome) -> str:
    """How a run ended, in a few words: ``"stuck: repeated the same tool call 6× …"``."""
    detail = ""
    if reason := getattr(outcome, "reason", None):
        detail = f": {reason}"
    elif (verdict := getattr(outcome, "verdict", None)) is not None and verdict.reason:
        detail = f": {verdict.reason}"
    elif getattr(outcome, "deadline_reached", False):
        detail = ": time limit reached"
    return outcome.kind.replace("_", " ") + detail


def _final_text(outcome: Outcome) -> str | None:
    text = getattr(outcome, "text", None) or outcome.last_text
    return text if text and text.strip() else None


def _episode_name(name: str) -> str | None:
    # The episode format keeps tools as a comma-separated line: a name it cannot hold is left out.
    name = name.strip()
    return name if name and "," not in name and "\n" not in name and "\r" not in name else None


class MemoryWiring:
    """What :func:`attach_memory` hooked onto a loop; see the module docstring for the contract.

    After each run: :attr:`last_session` (the session its turns and episode are stored under),
    :attr:`last_episode` (the episode as stored, after redaction; None if none was recorded),
    :attr:`transcript_stats` (turns written, dropped, failed) and :attr:`last_error`.
    :attr:`tools` holds the memory tools :func:`attach_memory` registered (``tools=True``).
    """

    def __init__(
        self,
        store: MemoryStore,
        recorder: ExperienceRecorder,
        *,
        session: str | None = None,
        guides: Sequence[Guide] = (),
        transcripts: bool = True,
        record_episode: bool = True,
        flush_interval: float = DEFAULT_INTERVAL,
    ) -> None:
        if isinstance(flush_interval, bool) or not isinstance(flush_interval, int | float) or not flush_interval > 0:
            raise InvalidInputError(f"flush_interval must be a positive number of seconds, not {flush_interval!r}")
        self.store = store
        self.recorder = recorder
        self.session = session
        self.guides = tuple(guides)
        self.transcripts = transcripts
        self.record_episode = record_episode
        self.flush_interval = float(flush_interval)
        self.tools: tuple[Tool, ...] = ()
        self.last_session: str | None = None
        self.last_episode: StoredEpisode | None = None
        self.transcript_stats: TranscriptStats | None = None
        self.last_error: str | None = None
        self._writer: TranscriptWriter | None = None
        self._task: str | None = None
        # The running run: (the session its turns go to, its run tag when the session is shared).
        self._own: tuple[str, str | None] | None = None
        # The latest turn without tool calls: the final answer if the run ends after it (see _end).
        self._held: tuple[str | None, str | None] | None = None

    events: tuple[Event, ...] = (
        Event.SESSION_START,
        Event.POST_MODEL,
        Event.POST_TOOL_USE,
        Event.SESSION_END,
    )

    # ---- the hook: synchronous, and on the hot path it only enqueues ---------------------------

    def __call__(self, event: HookEvent) -> None:
        if event.event is Event.POST_TOOL_USE:
            assert event.call is not None and event.result is not None
            if (name := _episode_name(event.call.name)) is not None:
                self.recorder.on_tool_use(name)
            if self._writer is not None:
                self._writer.note_tool(event.call.name, event.result.content)
        elif event.event is Event.POST_MODEL:
            assert event.output is not None
            self._release_held()
            if event.output.tool_calls:
                if self._writer is not None:
                    self._writer.note_assistant(event.output.text, reasoning=event.output.reasoning)
            else:
                self._held = (event.output.text, event.output.reasoning)
        elif event.event is Event.SESSION_START:
            self._start(event)
        elif event.event is Event.SESSION_END:
            self._end(event.outcome)

    def _release_held(self, success: bool | None = None) -> bool:
        """Enqueue the held answer turn (with the run's result, at the end); False if it was blank."""
        held, self._held = self._held, None
        if held is None or self._writer is None:
            return False
        text, reasoning = held
        if not (text and text.strip()) and not (reasoning and reasoning.strip()):
            return False
        self._writer.note_assistant(text, reasoning=reasoning, success=success)
        return True

    def _start(self, event: HookEvent) -> None:
        self._stop_writer()  # a run that raised left its writer running: finish it first
        session = self.session or event.session
        self.last_session, self.last_episode, self.transcript_stats = session, None, None
        self._task, self._held = event.task or "", None
        # With a fixed session spanning runs, a tag tells the runs apart.
        run_tag = f"run:{event.session}" if self.session and self.session != event.session else None
        self._own = (session, run_tag)
        # The traces describe this run only (a run that raised may have left names behind).
        self.recorder.tool_trace.clear()
        self.recorder.skill_trace.clear()
        if self.transcripts:
            try:
                self._writer = TranscriptWriter(
                    self.store,
                    session=session,
                    tags=[run_tag] if run_tag else [],
                    interval=self.flush_interval,
                )
            except Exception as exc:  # no capture is better than no run
                self._failed(f"transcript not captured: {type(exc).__name__}: {exc}")
                return
            self._writer.note_user(self._task)

    def _end(self, outcome: Outcome | None) -> None:
        if outcome is None:  # not a loop's SessionEnd: nothing to conclude
            self._stop_writer()
            self._own = None
            return
        success = run_success(outcome)
        # The episode first: a consolidation running meanwhile then finds it and updates it rather
        # than creating its own from the turns (see the module docstring).
        if self.record_episode and self._task and self._task.strip():
            self._record_episode(outcome, success)
        if self._writer is not None and not self._release_held(success) and success is not None:
            self._writer.note("system", f"[run ended: {describe_ending(outcome)}]", success=success)
        self._held = None
        self._stop_writer()
        self._own = None

    def _record_episode(self, outcome: Outcome, success: bool | None) -> None:
        assert self._task is not None and self.last_session is not None
        text = _final_text(outcome) or f"(no answer: {describe_ending(outcome)})"
        metadata = {
            "run": {"ending": outcome.kind, "iters": outcome.iters, "tools_called": outcome.tools_called}
        }
        experience = self.recorder.experience
        # A per-run session has one episode, under consolidation's id for it; a session spanning
        # several runs gets one episode per run, each with a fresh id.
        episode_id = episode_id_for(self.last_session) if self.session is None else None
        try:
            # The task and the answer are not redacted yet (the store redacts the episode as it
            # writes it): their cuts must not go through a value, or half of it gets past.
            redactor = self.store.redactor
            episode = Episode(
                situation=truncate_turn(self._task.strip(), DEFAULT_MAX_CHARS, redactor=redactor)[0],
                outcome=truncate_turn(text.strip(), DEFAULT_MAX_CHARS, redactor=redactor)[0],
                tools=self.recorder.tool_trace.drain(),
                skills=self.recorder.skill_trace.drain(),
                success=success,
            )
            try:
                self.last_episode = experience.save(
                    episode, id=episode_id, session=self.last_session, metadata=metadata
                )
            except DuplicateIdError:
                self.last_episode = experience.save(episode, session=self.last_session, metadata=metadata)
        except Exception as exc:  # the caller must get the outcome even when memory cannot be written
            self._failed(f"episode not recorded: {type(exc).__name__}: {exc}")

    def _stop_writer(self) -> None:
        writer, self._writer = self._writer, None
        if writer is None:
            return
        stats = writer.stop()  # writes every queued turn (on the writer's thread) before returning
        self.transcript_stats = stats
        if stats.failed:
            self._failed(f"{stats.failed} transcript turn(s) not written: {writer.last_error}")

    def _failed(self, message: str) -> None:
        self.last_error = message
        logger.warning("memory wiring (session %s): %s", self.last_session, message)

    # ---- what recall needs to know about the running run ---------------------------------------

    def is_own(self, entry: Entry) -> bool:
        """True for a turn the running run captured itself: recall made for the run drops it."""
        own = self._own
        if own is None or entry.kind != "turn" or entry.session != own[0]:
            return False
        return own[1] is None or own[1] in entry.tags

    @property
    def own_session(self) -> str | None:
        """The session the running run's turns go to (None between runs)."""
        return None if self._own is None else self._own[0]

    def data_version(self) -> Hashable:
        """A token of the store's state for recall caches that ignores the running run's own turn
        writes (recall never returns them) and sees every other write: this connection's at once
        (``total_changes``), other connections' and processes' as the writer last sampled them."""
        writer = self._writer
        if writer is None or not writer.threaded:
            return store_version(self.store)
        return ("capturing", id(writer), self.store.data_version()[0], writer.others_version)

    # ---- lifecycle -------------------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Transcript turns captured and not yet written."""
        return 0 if self._writer is None else self._writer.pending

    def close(self) -> None:
        """Write whatever is still queued (the turns of a run that raised) and stop the writer.
        Safe to call twice."""
        self._held = None  # a run that raised has no result to attach to its last answer
        self._stop_writer()
        self._own = None

    def __enter__(self) -> MemoryWiring:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def attach_memory(
    loop: AgentLoop,
    store: MemoryStore,
    *,
    session: str | None = None,
    experience: ExperienceStore | ExperienceRecorder | None = None,
    guides: bool = True,
    top_k: int = 5,
    experience_top_k: int = 3,
    transcripts: bool = True,
    record_episode: bool = True,
    tools: bool = False,
    guard: GuardedMemory | None = None,
    flush_interval: float = DEFAULT_INTERVAL,
) -> MemoryWiring:
    """Give ``loop`` a memory in ``store``: recall guides, transcript capture, an episode per run.

    :param session: the session every run's turns and episodes are stored under (a conversation
        spanning several runs); None, the default, uses each run's own session id.
    :param experience: where episodes go and come from -- an :class:`ExperienceStore`, or an
        :class:`ExperienceRecorder` the host also feeds (``on_skill_activated``); default: an
        experience store over ``store``.
    :param guides: register a :class:`MemoryGuide` (``top_k``) and an ``ExperienceGuide``
        (``experience_top_k``), each in a :class:`CachedGuide`; False to add your own to
        ``loop.guides`` instead.
    :param transcripts: capture the run's turns as they happen (see :class:`~harness_mem.TranscriptWriter`).
    :param record_episode: record an episode when the run ends.
    :param tools: register the memory tools (the operations of :mod:`harness_mem.tools`, as
        :func:`~harness_loop.memory_tools.memory_tools` renders them) on the loop;
        their recall leaves out the running run's own turns.
    :param guard: with ``tools``, vet the tools' writes through this ``GuardedMemory``'s rules.
    :param flush_interval: the longest a captured turn waits before it is written, in seconds.

    Call it once per loop. The returned :class:`MemoryWiring` is also a context manager whose exit
    writes the turns of a run that raised.
    """
    if isinstance(experience, ExperienceRecorder):
        recorder = experience
    else:
        recorder = ExperienceRecorder(experience if experience is not None else ExperienceStore(store))
    wiring = MemoryWiring(
        store,
        recorder,
        session=session,
        transcripts=transcripts,
        record_episode=record_episode,
        flush_interval=flush_interval,
    )
    if guides:
        added: list[Guide] = [
            CachedGuide(
                MemoryGuide(store, top_k=top_k, exclude=wiring.is_own), store, version=wiring.data_version
            ),
            CachedGuide(
                ExperienceGuide(recorder.experience, top_k=experience_top_k),
                recorder.experience.store,
                version=wiring.data_version if recorder.experience.store is store else None,
            ),
        ]
        wiring.guides = tuple(added)
        loop.guides.extend(added)
    if tools:
        wiring.tools = tuple(memory_tools(store, guard=guard, exclude=wiring.is_own))
        for t in wiring.tools:
            loop.registry.register(t)
        loop.tool_specs = loop.registry.specs()
    loop.hooks.add(wiring, *MemoryWiring.events)
    return wiring
