"""An :class:`Episode`: one unit of experience — the situation faced, the tools used, the outcome.

The text format is a contract: other tools parse it, and episodes already sitting in memory files
use it, so it is kept byte for byte::

    Situation: {situation}
    Tools used: {tool, tool, …  or "(none)"}
    Skills used: {skill, …}          ← only when skills are present
    Result: success|failure          ← only when success is known
    Outcome: {outcome}               ← always last, no trailing newline

``Outcome:`` is the terminal field: everything after its prefix, to the end of the text, is the
outcome. That is why the late fields (skills, result) sit *before* it, and why the three-line
legacy text still parses (the late fields come back empty and
unknown) and re-renders to the same bytes.

This parser keeps information a first-line-only reader would lose, without changing a byte of what
single-line episodes render to:

* A multi-line situation round-trips. Its continuation lines run until the first field line
  (``Tools used:`` …). A continuation line that would itself *look* like a field line is written
  with one extra leading space and read back without it, so any text survives
  (``parse(render(e)) == e``); a reader that takes only the first line loses the rest.
* ``Outcome:`` is found as a line prefix after the situation, not anywhere in the text: a situation
  mentioning "Outcome: " no longer swallows the rest of the episode.
* Lines are split on ``\\n`` only (not every Unicode line separator), so ``\\r``, form feeds or
  ``\\u2028`` inside a field come back unchanged.

Tags are *not* part of the text (adding a line would change the bytes of tagged episodes); :class:`~harness_mem.experience.store.ExperienceStore` keeps them in
the entry's tags and in its own table. Old JSON (``{"situation", "tools", "outcome", "tags"}``
without the late keys) reads through :meth:`Episode.from_dict` / :meth:`Episode.parse`.

This module also holds the two small recorders a host feeds while a run happens:
:class:`ToolTrace` (tool names in call order) and :class:`SkillUseTrace` (skills the run followed).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping
from functools import partial
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field, StrictBool, StrictStr
from pydantic_core import ErrorDetails

from ..errors import InvalidInputError
from ..models import Record

SITUATION_PREFIX = "Situation: "
TOOLS_PREFIX = "Tools used: "
SKILLS_PREFIX = "Skills used: "
RESULT_PREFIX = "Result: "
OUTCOME_PREFIX = "Outcome: "
NO_TOOLS = "(none)"

# The lines that end a (multi-line) situation. A bare label ("Outcome:" with nothing after it) counts
# too: an empty outcome renders as "Outcome: ", and an editor may have trimmed the trailing space.
_FIELD_PREFIXES = (TOOLS_PREFIX, SKILLS_PREFIX, RESULT_PREFIX, OUTCOME_PREFIX)
_FIELD_LABELS = frozenset(p.rstrip() for p in _FIELD_PREFIXES)


def _is_field_line(line: str) -> bool:
    return line.startswith(_FIELD_PREFIXES) or line.rstrip() in _FIELD_LABELS


def _value_after(line: str, prefix: str) -> str | None:
    """The value of ``line`` if it is the field ``prefix`` (bare label accepted), else None."""
    if line.startswith(prefix):
        return line[len(prefix) :]
    if line.rstrip() == prefix.rstrip():
        return ""
    return None


def _clean_names(values: Iterable[str] | None, what: str) -> list[str]:
    """Names as a list: stripped, blanks dropped, order and duplicates kept.

    A comma or a line break would change the list when it is read back, so they are refused.
    """
    if values is None:
        return []
    if isinstance(values, str):
        raise InvalidInputError(f"{what} must be a list of names, not a string ({values!r}) — wrap it in a list")
    names: list[str] = []
    for value in values:
        if not isinstance(value, str):
            raise InvalidInputError(f"{what} must be strings, got {value!r}")
        name = value.strip()
        if not name:
            continue
        if "," in name or "\n" in name or "\r" in name:
            raise InvalidInputError(f"{what} name {name!r} contains a comma or a line break — names are identifiers")
        if name == NO_TOOLS:
            raise InvalidInputError(f"{NO_TOOLS!r} is reserved in the episode format and cannot be a {what} name")
        names.append(name)
    return names


def _clean_tags(values: Any) -> Any:
    """Tags stripped and de-duplicated in first-seen order; one tag may come bare, non-strings are dropped."""
    if values is None:
        return []
    if isinstance(values, str):
        values = [values]
    return list(dict.fromkeys(t.strip() for t in values if isinstance(t, str) and t.strip()))


_Text = Annotated[StrictStr, AfterValidator(str.strip)]


class Episode(Record):
    """One remembered experience.

    ``situation`` and ``outcome`` are stored stripped (the text format trims them). ``tools`` keeps
    call order and duplicates; ``skills`` names the skills the run followed; ``success`` is
    deliberately three-valued — ``None`` means nobody said, and the distiller treats it as "no".
    Built as ``Episode(situation, outcome, tools=…, …)``: the rest are keyword-only.
    """

    model_config = ConfigDict(frozen=False, extra="forbid")
    positional: ClassVar[int | None] = 2

    situation: _Text = Field(description="what the agent faced")
    outcome: _Text = Field("", description="what came of it")
    tools: Annotated[list[str], BeforeValidator(partial(_clean_names, what="tool"))] = Field(
        default_factory=list, description="tool names in call order, duplicates kept"
    )
    tags: Annotated[list[str], BeforeValidator(_clean_tags)] = Field(default_factory=list)
    skills: Annotated[list[str], BeforeValidator(partial(_clean_names, what="skill"))] = Field(
        default_factory=list, description="the skills the run followed"
    )
    success: StrictBool | None = Field(None, description="whether the run worked; null: nobody said")

    @classmethod
    def message(cls, field: str, error: ErrorDetails) -> str | None:
        if field in ("situation", "outcome") and error["type"] == "string_type":
            return "an episode's situation and outcome must be strings"
        if field == "success" and error["type"] == "bool_type":
            return f"success must be True, False or None, not {error.get('input')!r}"
        return None

    def succeeded(self) -> bool:
        """True only when the host said the run worked; unknown counts as no."""
        return self.success is True

    @property
    def result(self) -> str | None:
        """``"success"``, ``"failure"`` or None — the ``Result:`` line's value."""
        return None if self.success is None else ("success" if self.success else "failure")

    # ---- text -----------------------------------------------------------------------------------

    def render(self) -> str:
        """The searchable text: the contract format, byte for byte (see the module docstring)."""
        first, *rest = self.situation.split("\n")
        # One extra space on a continuation line that looks like a field line; parse removes it.
        rest = [" " + line if _is_field_line(line.lstrip(" ")) else line for line in rest]
        lines = [SITUATION_PREFIX + "\n".join([first, *rest])]
        lines.append(TOOLS_PREFIX + (", ".join(self.tools) if self.tools else NO_TOOLS))
        if self.skills:
            lines.append(SKILLS_PREFIX + ", ".join(self.skills))
        if self.success is not None:
            lines.append(RESULT_PREFIX + ("success" if self.success else "failure"))
        lines.append(OUTCOME_PREFIX + self.outcome)
        return "\n".join(lines)

    @classmethod
    def parse(cls, text: str) -> Episode | None:
        """Read :meth:`render` output, the legacy three-line text, or an old JSON episode.

        Returns None when ``text`` is not an episode (no ``Situation:`` line). Tags are not in the
        text and come back empty.
        """
        if not isinstance(text, str):
            return None
        stripped = text.strip()
        if stripped.startswith("{"):
            try:
                data = json.loads(stripped)
            except ValueError:
                data = None
            if isinstance(data, dict):
                try:
                    return cls.from_dict(data)
                except InvalidInputError:
                    return None
        lines = text.split("\n")
        start = next((i for i, line in enumerate(lines) if _value_after(line, SITUATION_PREFIX) is not None), None)
        if start is None:
            return None
        situation_lines = [_value_after(lines[start], SITUATION_PREFIX) or ""]
        i = start + 1
        while i < len(lines) and not _is_field_line(lines[i]):
            line = lines[i]
            if line.startswith(" ") and _is_field_line(line.lstrip(" ")):
                line = line[1:]  # undo render's escape
            situation_lines.append(line)
            i += 1
        # Header fields: the lines after the situation up to the outcome (and, leniently, any before it).
        header = lines[:start]
        outcome = ""
        while i < len(lines):
            value = _value_after(lines[i], OUTCOME_PREFIX)
            if value is not None:
                outcome = "\n".join([value, *lines[i + 1 :]])
                break
            header.append(lines[i])
            i += 1
        tools = skills = result = None
        for line in header:
            if tools is None:
                tools = _value_after(line, TOOLS_PREFIX)
            if skills is None:
                skills = _value_after(line, SKILLS_PREFIX)
            if result is None:
                result = _value_after(line, RESULT_PREFIX)
        verdict = (result or "").strip().lower()
        return cls(
            situation="\n".join(situation_lines),
            outcome=outcome,
            tools=_split_list(tools),
            skills=_split_list(skills),
            success=True if verdict == "success" else False if verdict == "failure" else None,
        )

    # ---- JSON -----------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "situation": self.situation,
            "tools": list(self.tools),
            "outcome": self.outcome,
            "tags": list(self.tags),
            "skills": list(self.skills),
            "success": self.success,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Episode:
        """Read :meth:`to_dict` output, including old JSON without ``skills``/``success``."""
        situation = data.get("situation")
        if not isinstance(situation, str):
            raise InvalidInputError("an episode needs a 'situation' string")
        outcome = data.get("outcome") or ""
        return cls(
            situation=situation,
            outcome=outcome if isinstance(outcome, str) else str(outcome),
            tools=list(data.get("tools") or []),
            tags=list(data.get("tags") or []),
            skills=list(data.get("skills") or []),
            success=data.get("success"),
        )


def _split_list(value: str | None) -> list[str]:
    """A rendered ``a, b, c`` list; empty or ``(none)`` means no entries."""
    if value is None or value.strip() in ("", NO_TOOLS):
        return []
    return [name.strip() for name in value.split(",") if name.strip()]


# ---- run-time recorders ------------------------------------------------------------------------


class ToolTrace:
    """Tool names in call order, duplicates kept — what an episode's ``tools`` is made of.

    A host calls :meth:`note` when a tool call is about to run (the loop's PreToolUse hook). A call
    denied by an earlier hook never reaches a later one, so register the trace first if denied
    calls should count. Thread-safe: tools may be dispatched concurrently.
    """

    def __init__(self) -> None:
        self._names: list[str] = []
        self._lock = threading.Lock()

    def note(self, name: str) -> None:
        """Record one call of ``name`` (blank names are ignored)."""
        name = name.strip() if isinstance(name, str) else ""
        if name:
            with self._lock:
                self._names.append(name)

    __call__ = note

    @property
    def tools(self) -> list[str]:
        """A copy of what was recorded so far."""
        with self._lock:
            return list(self._names)

    def drain(self) -> list[str]:
        """Everything recorded so far, and start over."""
        with self._lock:
            names, self._names = self._names, []
        return names

    def clear(self) -> None:
        self.drain()

    def __len__(self) -> int:
        return len(self._names)


class SkillUseTrace:
    """The skills a run followed: deduplicated, in first-use order, blanks ignored.

    Nothing emits skill activations by itself; a host calls :meth:`note` or feeds
    :meth:`note_payload` from its ``"skill.activated"`` event.
    """

    EVENT = "skill.activated"

    def __init__(self) -> None:
        self._names: dict[str, None] = {}
        self._lock = threading.Lock()

    def note(self, name: str) -> None:
        name = name.strip() if isinstance(name, str) else ""
        if name:
            with self._lock:
                self._names.setdefault(name, None)

    def note_payload(self, payload: Any) -> None:
        """Accept ``{"skill": x}``, ``{"skills": [x, …]}`` or a bare string; anything else is ignored."""
        if isinstance(payload, str):
            self.note(payload)
        elif isinstance(payload, Mapping):
            single = payload.get("skill")
            if isinstance(single, str):
                self.note(single)
            many = payload.get("skills")
            if isinstance(many, (list, tuple)):
                for name in many:
                    if isinstance(name, str):
                        self.note(name)

    __call__ = note_payload

    @property
    def skills(self) -> list[str]:
        with self._lock:
            return list(self._names)

    def drain(self) -> list[str]:
        with self._lock:
            names, self._names = list(self._names), {}
        return names

    def clear(self) -> None:
        self.drain()

    def __len__(self) -> int:
        return len(self._names)
