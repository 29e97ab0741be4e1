"""Did the run work? A run's result inferred from the turns that show it — or unknown.

:func:`infer_outcome` reads a transcript (any objects with ``id``, ``role``, ``content``, ``tags``
and ``metadata``, in order) and returns an :class:`Outcome`: ``success`` (True, False or None), the
turn that showed it and a short reason. Only a clear signal decides; anything else is unknown,
because a skill distilled from a run nobody confirmed is how bad procedural memory is born. Pure
code: no model, no I/O.

The signals, strongest first:

1. **A result tag** (``result:success`` / ``result:failure``, written by the recorder when the host
   passes ``success=``): the host's own statement of the run's result. The latest one decides and
   nothing overrides it.
2. **A verdict line** in the final assistant or tool turn: a line starting with ``Result:`` or
   ``Status:`` and ``success``/``succeeded``/``passed`` or ``failure``/``failed`` (the episode
   format's own line). It is the agent's statement, so a user reaction *after* it still overrides it.
3. **Tool results** (``tool`` turns only — a summary an assistant quotes may be an old run):

   * a test summary: pytest (``== 3 failed, 10 passed in 1.2s ==``, ``5 passed``), unittest
     (``OK`` after ``Ran N tests``, ``FAILED (failures=2)``), jest (``Tests: 1 failed, 4 passed``),
     mocha (``3 passing`` / ``1 failing``), cargo (``test result: ok.``) and go (``ok  pkg``,
     ``FAIL``). A count of 0 failed is a pass. A summary beats the exit status of the same result
     (``pytest | tee log`` exits 0 whatever the tests did);
   * an exit status: a JSON result's ``exit`` / ``exit_code`` / ``exitCode`` / ``returncode`` (or the
     turn's metadata), or a line *ending* in ``exit code 2``, ``exited with status 1``,
     ``Process finished with exit code 0``, ``returned non-zero exit status 1.`` — a bare ``exit 0``
     or a phrase in the middle of a sentence is prose, not a status;
   * in the **final** tool result only: an HTTP status (a JSON ``status`` / ``status_code`` of
     100–599, or an ``HTTP/1.1 503`` status line; 2xx and 3xx pass) — a health check at the end is
     the run's proof, a 404 while exploring is not; and a traceback, an ``Error:``-style line
     (``ValueError: …``, ``error[E0425]: …``, ``fatal: …``, ``npm ERR!``) or a JSON ``error`` —
     an error the agent went on to fix is not the run's result.
4. **The user reacting** after the agent's work (a user turn after at least one assistant or tool
   turn): "that works", "perfect, thanks", "great, it's fixed" against "still failing", "that
   didn't work", "no, wrong". Questions and hedges ("does it work?", "not sure if it works") are
   not reactions; a turn with both ("that works, but the header is still broken") is a rejection;
   a bare "thanks" is politeness, not a verdict.

**The latest signal wins**, in transcript order — a failing test run, a fix and a passing run is a
success; passing tests and then a failing push is a failure; "still broken" after a pass is a
failure — with one exception: a failing test summary is cleared only by a passing one, a verdict
line or the user, not by a later command that merely exited 0 or a final 200 (a commit or a
listing after red tests is no evidence they were fixed). The assistant's tone is never a signal:
"Everything worked perfectly!" is unknown.

**Brought up to date.** Given ``before`` (the outcome of the run's earlier turns), the new turns
go on from it and give what the whole transcript would — a user's reply that arrives after the
episode was made still decides it — save one case: a signal that counted only for being final
lapses once new work follows it, leaving unknown rather than whatever came before it.

Limits, by design: the recorder keeps a long turn's *head*, so a test summary at the end of a long
output may have been cut away (the run is then unknown, not guessed); and an exit status that is
non-zero by convention (``grep`` finding nothing) counts as a failure unless something later passes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .transcript import RESULT_TAGS

__all__ = ["NO_SIGNAL", "Outcome", "Signal", "TurnLike", "infer_outcome", "tool_signal", "user_reaction"]

NO_SIGNAL = "no clear signal"
QUOTE_CHARS = 80  # how much of a user's words a reason quotes


class TurnLike(Protocol):
    """What :func:`infer_outcome` reads of a turn: consolidation's ``Turn`` and a stored
    :class:`~harness_mem.models.Entry` both have it."""

    @property
    def id(self) -> str: ...
    @property
    def role(self) -> str | None: ...  # a stored entry's role may be None
    @property
    def content(self) -> str: ...
    @property
    def tags(self) -> Sequence[str]: ...
    @property
    def metadata(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class Outcome:
    """A run's result, the turn that showed it and why; ``success`` None means nobody can tell.

    ``signal`` is the kind of evidence (``tag``, ``verdict``, ``test``, ``exit``, ``http``,
    ``error``, ``user``), None when there was none.
    """

    success: bool | None
    turn_id: str | None = None
    reason: str = NO_SIGNAL
    signal: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """As an episode's ``metadata.outcome`` records it."""
        return {"success": self.success, "turn": self.turn_id, "reason": self.reason, "signal": self.signal}

    @classmethod
    def from_dict(cls, data: Any) -> Outcome | None:
        """The outcome :meth:`to_dict` wrote, or None when ``data`` is not one (metadata is anyone's)."""
        if not isinstance(data, Mapping) or data.get("success") not in (True, False, None):
            return None
        turn, reason, signal = data.get("turn"), data.get("reason"), data.get("signal")
        return cls(
            data.get("success"),
            turn if isinstance(turn, str) else None,
            reason if isinstance(reason, str) else NO_SIGNAL,
            signal if isinstance(signal, str) else None,
        )


@dataclass(frozen=True)
class Signal:
    """One turn's evidence: pass or fail, what kind (``test``, ``exit``, ``http``, ``error``,
    ``verdict``, ``user``) and a reason for people."""

    success: bool
    kind: str
    reason: str


_TAG_VERDICT = {tag: value for value, tag in RESULT_TAGS.items()}
# The same line rule as consolidation's verdict(), so the two agree wherever that one decides.
_VERDICT_LINE = re.compile(
    r"^\s*(?:result|status)\s*:\s*(success|succeeded|passed|failure|failed)\b", re.IGNORECASE | re.MULTILINE
)
_TOOL_PREFIX = re.compile(r"^\[([^\],\n\r]{1,200})\] ")
# Kinds of success too weak to clear a failing test summary.
_WEAK_SUCCESS = frozenset({"exit", "http"})


def infer_outcome(turns: Sequence[TurnLike], *, before: Outcome | None = None) -> Outcome:
    """The run's result as its turns show it (rules in the module docstring); never raises for content.

    :param before: the outcome of the run's earlier turns, when ``turns`` are only its new ones (an
        episode brought up to date). The new turns go on from it: the user's first turn may react to
        the earlier work, red tests stay red, and the earlier result stands when the new turns show
        nothing — except a result stated for the work so far (a result tag, a verdict line) or a
        signal that counted only because it was final (a final HTTP status or error), which lapses
        once new work follows it.
    """
    turns = list(turns)
    for at in range(len(turns) - 1, -1, -1):
        tag = next((t for t in reversed(tuple(turns[at].tags)) if t in _TAG_VERDICT), None)
        if tag is not None:
            # The host's word on the run so far: it stands unless more work follows it, which is
            # then judged going on from it (as consolidation does when those turns come later).
            before = Outcome(_TAG_VERDICT[tag], turns[at].id, f"tag {tag}", "tag")
            turns = turns[at + 1:]
            break
    if before is not None and before.signal == "tag" and not any(t.role in ("assistant", "tool") for t in turns):
        return before
    work = [i for i, t in enumerate(turns) if t.role in ("assistant", "tool")]
    tools = [i for i, t in enumerate(turns) if t.role == "tool"]
    final_work = work[-1] if work else -1
    final_tool = tools[-1] if tools else -1
    state: tuple[Signal, str | None] | None = None
    if before is not None and before.success is not None and not _lapsed(before, work, tools):
        state = (Signal(before.success, before.signal or "earlier", before.reason), before.turn_id)
    for i, turn in enumerate(turns):
        signal = _verdict_line(_text(turn.content)) if i == final_work else None
        if signal is None and turn.role == "tool":
            signal = tool_signal(turn, final=i == final_tool)
        if signal is None and turn.role == "user" and (before is not None or (work and i > work[0])):
            signal = user_reaction(_text(turn.content))
        if signal is None:
            continue
        if state is not None and state[0].kind == "test" and not state[0].success and (
            signal.success and signal.kind in _WEAK_SUCCESS
        ):
            continue  # red tests stay red until something that can tell says otherwise
        state = (signal, turn.id)
    if state is None:
        return Outcome(None)
    return Outcome(state[0].success, state[1], state[0].reason, state[0].kind)


def _lapsed(before: Outcome, work: Sequence[int], tools: Sequence[int]) -> bool:
    """Whether an earlier outcome counted only for being final, and new work has followed it."""
    if before.signal in ("verdict", "tag"):  # a result stated for the work so far: new work reopens it
        return bool(work)
    return before.signal in ("http", "error") and bool(tools)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


def _verdict_line(text: str) -> Signal | None:
    match = _VERDICT_LINE.search(text)
    if match is None:
        return None
    return Signal(match.group(1).lower() in ("success", "succeeded", "passed"), "verdict", "verdict line")


# ---- tool results ------------------------------------------------------------------------------


def tool_signal(turn: TurnLike, *, final: bool = False) -> Signal | None:
    """What one tool result shows: a test summary, else an exit status, else (``final`` only) an
    HTTP status or an error; None when it shows nothing decisive."""
    content = _text(turn.content)
    match = _TOOL_PREFIX.match(content)
    name = turn.metadata.get("tool")
    if not isinstance(name, str) or not name.strip():
        name = match.group(1) if match else "tool"
    body = content[match.end():] if match else content
    data = _json_object(body)
    texts = list(_strings(data)) if data is not None else [body]
    test = _test_summary(texts)
    if test is not None:
        return test
    status = _exit_status(data, turn.metadata, texts)
    if status is not None:
        return Signal(status == 0, "exit", f"exit status {status} in [{name}]")
    if not final:
        return None
    http = _http_status(data, texts)
    if http is not None:
        return Signal(http < 400, "http", f"HTTP {http} in the final tool result [{name}]")
    error = _error(data, texts)
    if error is not None:
        return Signal(False, "error", f"{error} in the final tool result [{name}]")
    return None


def _json_object(body: str) -> dict[str, Any] | None:
    stripped = body.strip()
    if not stripped.startswith("{"):
        return None
    try:
        data = json.loads(stripped)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _strings(value: Any, depth: int = 0) -> Iterator[str]:
    """Every string inside a JSON value (stdout, stderr, output, …), nested a few levels at most."""
    if isinstance(value, str):
        yield value
    elif depth < 4 and isinstance(value, dict):
        for item in value.values():
            yield from _strings(item, depth + 1)
    elif depth < 4 and isinstance(value, list):
        for item in value:
            yield from _strings(item, depth + 1)


_COUNT_WORDS = r"(?:failed|passed|errors?|skipped|xfailed|xpassed|deselected|warnings?|rerun)"
_PYTEST = re.compile(
    rf"^[ \t]*(?:=+[ \t]+)?(?P<counts>\d+ {_COUNT_WORDS}(?:, \d+ {_COUNT_WORDS})*)"
    r"(?: in [\d.]+s(?: \([^)\n]*\))?)?(?:[ \t]+=+)?[ \t]*$",
    re.MULTILINE,
)
_UNITTEST_RAN = re.compile(r"^Ran \d+ tests? in [\d.]+s\s*$", re.MULTILINE)
_UNITTEST_OK = re.compile(r"^OK(?: \([^)\n]*\))?\s*$", re.MULTILINE)
_UNITTEST_FAILED = re.compile(r"^FAILED \((?P<counts>(?:failures|errors)=\d+[^)\n]*)\)\s*$", re.MULTILINE)
_JEST = re.compile(r"^Tests:\s+(?P<counts>(?:\d+ \w+, )*\d+ total)\s*$", re.MULTILINE)
_MOCHA = re.compile(r"^\s*(?P<n>\d+) (?P<word>passing|failing)\b", re.MULTILINE)
_CARGO = re.compile(r"^test result: (?P<word>ok|FAILED)\. (?P<passed>\d+) passed; (?P<failed>\d+) failed", re.MULTILINE)
_GO_OK = re.compile(r"^ok\s+(?P<pkg>\S+)\s+(?:[\d.]+s|\(cached\))", re.MULTILINE)
_GO_FAIL = re.compile(r"^(?:FAIL(?:\s+(?P<pkg>\S+).*)?|--- FAIL: (?P<test>\S+).*)$", re.MULTILINE)


def _counts(text: str) -> dict[str, int]:
    found: dict[str, int] = {}
    for number, word in re.findall(r"(\d+) (\w+)", text):
        word = word.rstrip("s") if word in ("errors", "warnings") else word
        found[word] = found.get(word, 0) + int(number)
    return found


def _test_summary(texts: Sequence[str]) -> Signal | None:
    """The verdict of the test summaries in one tool result: any failing summary fails it."""
    passes: list[str] = []
    for text in texts:
        for match in _PYTEST.finditer(text):
            counts, shown = _counts(match["counts"]), match["counts"].strip()
            if counts.get("failed", 0) or counts.get("error", 0):
                return Signal(False, "test", f"pytest: {shown}")
            if counts.get("passed", 0):
                passes.append(f"pytest: {shown}")
        failed = _UNITTEST_FAILED.search(text)
        if failed:
            return Signal(False, "test", f"unittest: FAILED ({failed['counts']})")
        if _UNITTEST_RAN.search(text) and _UNITTEST_OK.search(text):
            passes.append("unittest: OK")
        for match in _JEST.finditer(text):
            counts = _counts(match["counts"])
            shown = ", ".join(p.strip() for p in match["counts"].split(",") if not p.strip().endswith("total"))
            if counts.get("failed", 0):
                return Signal(False, "test", f"jest: {shown}")
            if counts.get("passed", 0):
                passes.append(f"jest: {shown}")
        for match in _MOCHA.finditer(text):
            if match["word"] == "failing" and int(match["n"]):
                return Signal(False, "test", f"mocha: {match['n']} failing")
            if match["word"] == "passing" and int(match["n"]):
                passes.append(f"mocha: {match['n']} passing")
        for match in _CARGO.finditer(text):
            shown = f"cargo test: {match['word']}, {match['passed']} passed, {match['failed']} failed"
            if match["word"] == "FAILED" or int(match["failed"]):
                return Signal(False, "test", shown)
            passes.append(shown)
        go_fail = _GO_FAIL.search(text)
        if go_fail:
            what = go_fail["pkg"] or go_fail["test"]
            return Signal(False, "test", "go test: FAIL" + (f" {what}" if what else ""))
        passes.extend(f"go test: ok {m['pkg']}" for m in _GO_OK.finditer(text))
    return Signal(True, "test", passes[-1]) if passes else None


_EXIT_KEYS = ("exit", "exit_code", "exitCode", "exit_status", "returncode", "return_code")
# A status phrase that ends its line: "exit code 2", "exited with status 1", "Process finished with
# exit code 0", "returned non-zero exit status 1.", "[exit code: 3]".
_EXIT_TEXT = re.compile(r"\bexit(?:ed)?(?: with)?\s+(?:code|status)\s*[:=]?\s*(-?\d+)[ \t.)\]]*$", re.IGNORECASE | re.MULTILINE)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _exit_status(data: Mapping[str, Any] | None, metadata: Mapping[str, Any], texts: Sequence[str]) -> int | None:
    for source in (data, metadata):
        if source is not None:
            for key in _EXIT_KEYS:
                status = _int(source.get(key))
                if status is not None:
                    return status
    found = [int(m.group(1)) for text in texts for m in _EXIT_TEXT.finditer(text)]
    return found[-1] if found else None


_HTTP_KEYS = ("status", "status_code", "statusCode", "http_status")
_HTTP_LINE = re.compile(r"^HTTP/\d(?:\.\d)? (\d{3})\b", re.MULTILINE)


def _http_status(data: Mapping[str, Any] | None, texts: Sequence[str]) -> int | None:
    if data is not None:
        for key in _HTTP_KEYS:
            status = _int(data.get(key))
            if status is not None and 100 <= status <= 599:
                return status
    found = [int(m.group(1)) for text in texts for m in _HTTP_LINE.finditer(text)]
    return found[-1] if found else None  # the last one: after any redirects


_TRACEBACK = re.compile(r"^Traceback \(most recent call last\):", re.MULTILINE)
# "ValueError: …", "Error: …", "error[E0425]: …", "ERROR: …", "fatal: …", "npm ERR! …" at a line's start
# ("no errors", "Errors: 0" are not).
_ERROR_LINE = re.compile(
    r"^\s*(?:(?:[A-Za-z_][\w.]*)?(?:Error|Exception)|error|ERROR|fatal|FATAL)(?:\[\w+\])?:[ \t]+\S|^npm ERR!",
    re.MULTILINE,
)


def _error(data: Mapping[str, Any] | None, texts: Sequence[str]) -> str | None:
    if data is not None and data.get("error"):
        return "an error"
    for text in texts:
        if _TRACEBACK.search(text):
            return "a traceback"
        if _ERROR_LINE.search(text):
            return "an error"
    return None


# ---- the user's reaction -------------------------------------------------------------------------

_SENTENCES = re.compile(r"(?<=[.!?])\s+|\n+")
_HEDGE = re.compile(r"\b(?:if|whether|not sure|don'?t know|maybe|might|should)\b", re.IGNORECASE)
_REQUEST = re.compile(r"\b(?:go ahead|proceed|please|can you|could you|let'?s|next)\b", re.IGNORECASE)
_NEGATED = re.compile(r"(?:\bnothing|\bnot|n't|\bnever|\bno longer)\s+(?:\w+\s+)?$", re.IGNORECASE)
_REJECT = [
    re.compile(p, re.IGNORECASE)
    for p in (
        r"\bstill\b[^.!?]{0,30}?(?:fail|broke|crash|error|wrong|bug|same|\bnot\b|n't|\bno\b)",
        r"\b(?:does|did|is|was|has|do|are|it|that|this|nothing)(?:n'?t| not)\s+(?:\w+\s+)?"
        r"(?:work|fix|help|solve|run|pass|compile|build|load|start|change)",
        r"\b(?:not|no longer|never)\s+(?:working|fixed|solved|resolved|passing|right|correct)\b",
        r"\bsame (?:error|problem|issue|failure|result|thing)\b",
        r"\b(?:it|this|that|everything|build|tests?|deploy\w*|site|page|app)\s+(?:now\s+|still\s+)?"
        r"(?:fails|failed|crashes|crashed|errors out|broke)\b",
        r"^(?:no|nope)(?:[,.!]|$)",
    )
]
_REJECT_WORD = re.compile(r"\b(?:wrong|incorrect|broken|worse)\b", re.IGNORECASE)
_CONFIRM = [
    re.compile(p, re.IGNORECASE)
    for p in (
        r"\b(?:it|that|this|everything|all)\s+(?:now\s+|finally\s+|really\s+|actually\s+|totally\s+|just\s+)?"
        r"(?:works|worked)\b",
        r"\bworks?\s+(?:now|great|perfectly|fine|for me)\b",
        r"\b(?:working|passing|green)\s+now\b",
        r"\b(?:it'?s|it is|that'?s|that is|everything'?s|all)\s+(?:now\s+|finally\s+)?(?:fixed|solved|resolved|working)\b",
        r"\bthat (?:fixed|solved|did) it\b|\bdid the trick\b|\bproblem solved\b|\ball good\b",
        r"\bexactly what I (?:needed|wanted)\b",
        r"^(?:perfect|excellent|awesome|great|lgtm|looks good)\b",
    )
]


def user_reaction(text: str) -> Signal | None:
    """Whether a user's words confirm (True) or reject (False) the work just done; None when they
    do neither. A rejection anywhere in the turn wins over a confirmation."""
    sentences = [s.strip() for s in _SENTENCES.split(text) if s and s.strip()]
    statements = [s for s in sentences if not s.endswith("?")]
    quote = " ".join(text.split())
    quote = quote if len(quote) <= QUOTE_CHARS else quote[: QUOTE_CHARS - 1] + "…"
    for sentence in statements:
        if any(p.search(sentence) for p in _REJECT) or any(
            not _NEGATED.search(sentence[: m.start()]) for m in _REJECT_WORD.finditer(sentence)
        ):
            return Signal(False, "user", f"the user rejected: '{quote}'")
    for sentence in statements:
        if _HEDGE.search(sentence) or _REQUEST.search(sentence):
            continue
        if any(p.search(sentence) for p in _CONFIRM):
            return Signal(True, "user", f"the user confirmed: '{quote}'")
    return None
