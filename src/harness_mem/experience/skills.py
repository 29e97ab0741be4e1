"""Skills: agentskills.io ``SKILL.md`` documents — parse, render, validate, lint, read and write.

A skill is a directory ``<name>/SKILL.md``: YAML front matter between two ``---`` lines (``name``,
``description``, and optionally ``license``, ``compatibility``, ``metadata``, ``allowed-tools``),
then a markdown body. :class:`Skill` is that document as a value; ``Skill.parse(skill.render())``
gives the same value back.

The rules:

* **validation** (errors): name is all of ``[a-z0-9]+(-[a-z0-9]+)*`` (so no newline or other
  control character), is at most 64 characters and, when read from a directory, equals the
  directory's name; description is 1–1024 UTF-8 *bytes*; compatibility is at most 500 characters.
* **reading** (malformed otherwise): a SKILL.md of at most 1 MiB, front matter of at most 64 KiB,
  with no YAML anchors or aliases.
* **lint** (advice): R1 a description under 30 bytes (warning); R2 a description with no routing
  cue such as "Use when…" (info); R3 a body under 50 bytes (info); R4 a description under 60 bytes
  that only restates the name (info); across skills, near-duplicate names, or descriptions whose
  token Jaccard exceeds 0.5 with at least 4 shared tokens (warning). Drafted skills must have no
  error or warning.

The text helpers the distiller relies on live here too, each with a guarantee worth stating:

* :func:`finalize_description` always returns at most 1024 bytes *including* its ``…`` and cuts on
  a character boundary (a 3-byte ellipsis after 1023 bytes would give 1026 bytes and fail the
  1024-byte check).
* :func:`slugify` never returns ``""`` for a non-blank text: a situation written only in CJK gets a
  stable ``skill-<hash>`` name instead of a failed draft.
* :func:`overlap_similarity` tokenises Han (and kana) runs into bigrams, so duplicate detection
  works for Chinese and Japanese text, where whitespace tokenising finds no tokens at all.
* :class:`SkillIndex` tokenises each existing skill once, with an inverted index, so checking an
  episode against 500 skills touches only the skills that share a token with it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import unicodedata
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, datetime
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
import numpy.typing as npt
import yaml
from pydantic import BeforeValidator, ConfigDict, Field, StrictStr
from pydantic_core import ErrorDetails

from ..errors import InvalidInputError, InvalidSkillError
from ..models import MAX_NESTING, Record, check_nesting

SKILL_FILE = "SKILL.md"
# Matched whole (``fullmatch``): with ``match`` and ``$``, "deploy\n" would pass, since ``$`` also
# matches before a final newline, and the newline would end up in a directory name.
NAME_PATTERN = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")
MAX_NAME_CHARS = 64
MAX_DESCRIPTION_BYTES = 1024
MAX_COMPATIBILITY_CHARS = 500
# What is parsed is bounded: a SKILL.md file is read up to MAX_SKILL_BYTES and its YAML front matter
# up to MAX_FRONT_MATTER_BYTES; and YAML anchors and aliases are refused, since a few hundred bytes of
# aliases to aliases (a "billion laughs") expand to billions of values.
MAX_SKILL_BYTES = 1 << 20
MAX_FRONT_MATTER_BYTES = 64 << 10
ELLIPSIS = "…"
# The front-matter keys agentskills.io defines, in the order they are written.
KNOWN_FIELDS = ("name", "description", "license", "compatibility", "metadata", "allowed-tools")
LEDGER_KEY = "experience"

ROUTING_CUES = (
    "use when", "use for", "use this skill", "use after", "use before", "when the user",
    "whenever the user", "trigger when", "trigger whenever", "invoke when", "applies when",
)

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """Writes a value used twice out twice: an anchor and alias would make the file unreadable here."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


# ---- UTF-8 and text helpers --------------------------------------------------------------------


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


def clip_utf8(text: str, max_bytes: int, ellipsis: str = ELLIPSIS) -> str:
    """``text`` if it fits in ``max_bytes`` UTF-8 bytes, else a prefix plus ``ellipsis`` that does.

    The cut falls on a character boundary and the ellipsis is counted.
    """
    raw = text.encode("utf-8")
    if len(raw) <= max_bytes:
        return text
    budget = max(0, max_bytes - utf8_len(ellipsis))
    # errors="ignore" drops the partial character a byte cut may leave at the end.
    head = raw[:budget].decode("utf-8", errors="ignore").rstrip()
    return head + ellipsis if utf8_len(head + ellipsis) <= max_bytes else head


def collapse_whitespace(text: str) -> str:
    return " ".join(text.split())


def has_routing_cue(text: str) -> bool:
    """Whether a description tells an agent when to pick the skill ("Use when…" and friends)."""
    lowered = text.lower()
    return any(cue in lowered for cue in ROUTING_CUES)


_SENTENCE_END = re.compile(r"[.!?](?=\s|$)|[。！？]")


def first_sentence(text: str, limit: int = 160) -> str:
    """The first sentence of ``text`` on one line, without its final stop, at most ``limit`` chars."""
    text = collapse_whitespace(text)
    match = _SENTENCE_END.search(text)
    sentence = text[: match.start()] if match else text
    sentence = sentence.strip()
    if len(sentence) > limit:
        cut = sentence[: limit - 1]
        space = cut.rfind(" ")
        sentence = (cut[:space] if space > limit // 2 else cut).rstrip() + ELLIPSIS
    return sentence


def _lower_first(text: str) -> str:
    """``Deploy the site`` → ``deploy the site``; acronyms (``CI is red``) stay as they are."""
    if len(text) > 1 and text[0].isupper() and text[1].islower():
        return text[0].lower() + text[1:]
    return text


def slugify(text: str, *, fallback: bool = True) -> str:
    """A skill name from free text: ASCII letters and digits lowercased, every other run a hyphen.

    At most 64 characters, cut back to a whole word. Text with no ASCII letters or digits (a CJK
    situation) gets ``skill-<8 hex>``, stable for the same text, unless ``fallback`` is False —
    then it is ``""``.
    """
    # NFKC first, so full-width "Ｄｅｐｌｏｙ" reads as "Deploy".
    chars = [c.lower() if c.isascii() and c.isalnum() else "-" for c in unicodedata.normalize("NFKC", text)]
    slug = re.sub(r"-+", "-", "".join(chars)).strip("-")
    if len(slug) > MAX_NAME_CHARS:
        cut = slug[:MAX_NAME_CHARS]
        if slug[MAX_NAME_CHARS] != "-" and "-" in cut:
            cut = cut[: cut.rfind("-")]
        slug = cut.strip("-")
    if not slug and fallback and text.strip():
        digest = hashlib.sha256(collapse_whitespace(text).encode("utf-8")).hexdigest()[:8]
        slug = f"skill-{digest}"
    return slug


def title_from_slug(slug: str) -> str:
    """``deploy-runbook`` → ``Deploy Runbook``."""
    return " ".join(part.capitalize() for part in slug.split("-") if part)


def finalize_description(description: str, situation: str = "", *, fallback: str = "") -> str:
    """A description ready for the front matter: one line, a routing cue, 1–1024 bytes.

    1. Collapse whitespace; an empty description becomes ``fallback`` (else the situation's first
       sentence).
    2. Without a routing cue, end it with a full stop and append
       ``" Use when {first sentence of the situation}."``.
    3. Still under 60 bytes: append ``" Distilled from a past run: {situation}."``.
    4. Cut the description (never the appended cue) so the whole is at most 1024 bytes, ``…``
       included, on a character boundary.
    """
    desc = collapse_whitespace(description or "") or collapse_whitespace(fallback or "")
    when = first_sentence(situation) if situation else ""
    if not desc:
        desc = when or "A procedure distilled from a past run."
    suffix = ""
    if not has_routing_cue(clip_utf8(desc, MAX_DESCRIPTION_BYTES)):
        if desc[-1] not in ".!?。！？…":
            desc += "."
        suffix = f" Use when {_lower_first(when) or 'a similar task comes up'}."
    if utf8_len(desc + suffix) < 60:
        context = first_sentence(situation, 200) if situation else "a task that worked"
        suffix += f" Distilled from a past run: {context}."
    result = clip_utf8(desc, MAX_DESCRIPTION_BYTES - utf8_len(suffix)) + suffix
    return clip_utf8(result, MAX_DESCRIPTION_BYTES)


# ---- tokens and similarity ---------------------------------------------------------------------

# Scripts written without spaces: Han (with extensions and compatibility ideographs) and kana.
_NO_SPACE_RUN = re.compile(
    r"[\u3040-\u309f\u30a0-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ebef]+"
)
_WORD = re.compile(r"[^\W_]+")
MIN_TOKEN_BYTES = 4

# Words of four bytes or more that say nothing about *which* procedure a text describes.
OVERLAP_STOPWORDS = frozenset(
    """
    that this with from user users asks asked asking skill skills step steps when then than them they
    there their these those into onto have has been were will would should could what which while
    where about after before also just only some such your yours make made sure need needs like using
    used uses each more most other over very want wants please task tasks help does done doing
    """.split()
)


def _bigrams(run: str) -> list[str]:
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]


def overlap_tokens(text: str) -> frozenset[str]:
    """The tokens :func:`overlap_similarity` compares.

    Lowercased words of at least 4 UTF-8 bytes minus :data:`OVERLAP_STOPWORDS`, plus every
    bigram of each Han/kana run (a lone character stands for itself).
    """
    lowered = text.lower()
    tokens: set[str] = set()
    runs = _NO_SPACE_RUN.findall(lowered)
    for run in runs:
        tokens.update(_bigrams(run))
    if runs:
        lowered = _NO_SPACE_RUN.sub(" ", lowered)
    for word in _WORD.findall(lowered):
        # Four characters are at least four bytes; only shorter non-ASCII words need encoding.
        if (len(word) >= MIN_TOKEN_BYTES or (not word.isascii() and len(word.encode("utf-8")) >= MIN_TOKEN_BYTES)) \
                and word not in OVERLAP_STOPWORDS:
            tokens.add(word)
    return frozenset(tokens)


def set_overlap(a: frozenset[str] | set[str], b: frozenset[str] | set[str]) -> float:
    """``|A∩B| / min(|A|, |B|)``; 0.0 when either is empty."""
    if not a or not b:
        return 0.0
    return len(a & b) / min(len(a), len(b))


def overlap_similarity(a: str, b: str) -> float:
    """How much of the shorter text's vocabulary the other one shares, in [0, 1].

    Deliberately not Jaccard: a terse skill description inside a long situation (a lopsided
    duplicate) scores high, while unrelated texts stay low.
    """
    return set_overlap(overlap_tokens(a), overlap_tokens(b))


def skill_key_text(name: str, description: str) -> str:
    """What a skill is compared on: its name as words, then its description."""
    return name.replace("-", " ") + " " + description


class SkillIndex:
    """Existing skills, tokenised once, for "is this already a skill?" questions.

    Each skill gets a slot (in indexing order) and an inverted index maps each token to the slots
    that contain it. A query counts its shared tokens per slot with one ``bincount`` over the
    postings of its own tokens: skills sharing nothing with it cost nothing, and there is no
    per-skill Python loop.
    """

    def __init__(self, skills: Iterable[Skill | tuple[str, str]] = ()) -> None:
        self._slots: dict[str, int] = {}                 # name → slot (ties go to the lower slot)
        self._names: list[str | None] = []               # slot → name, None once removed
        self._sizes: list[int] = []                      # slot → token count, 0 once removed
        self._tokens: dict[str, frozenset[str]] = {}
        self._postings: dict[str, list[int]] = {}        # token → slots
        self._arrays: dict[str, npt.NDArray[np.intp]] = {}  # token → slots as an array (cache)
        self._size_array: npt.NDArray[np.float64] | None = None
        self._name_keys: dict[str, list[str]] = {}       # _name_key(name) → names
        self._by_length: dict[int, list[str]] = {}       # len(name) → names, for the one-typo check
        for item in skills:
            if isinstance(item, Skill):
                self.add(item.name, item.description)
            else:
                self.add(item[0], item[1])

    def add(self, name: str, description: str) -> None:
        """Index a skill (replacing an earlier one of the same name)."""
        self.remove(name)
        tokens = overlap_tokens(skill_key_text(name, description))
        slot = len(self._names)
        self._slots[name] = slot
        self._names.append(name)
        self._sizes.append(len(tokens))
        self._tokens[name] = tokens
        for token in tokens:
            self._postings.setdefault(token, []).append(slot)
            self._arrays.pop(token, None)
        self._size_array = None
        self._name_keys.setdefault(_name_key(name), []).append(name)
        self._by_length.setdefault(len(name), []).append(name)

    def remove(self, name: str) -> None:
        slot = self._slots.pop(name, None)
        if slot is None:
            return
        for token in self._tokens.pop(name):
            _discard(self._postings, token, slot)
            self._arrays.pop(token, None)
        self._names[slot] = None
        self._sizes[slot] = 0
        self._size_array = None
        _discard(self._name_keys, _name_key(name), name)
        _discard(self._by_length, len(name), name)

    def __contains__(self, name: object) -> bool:
        return name in self._slots

    def __len__(self) -> int:
        return len(self._slots)

    @property
    def names(self) -> list[str]:
        return list(self._slots)

    def similar_name(self, name: str) -> str | None:
        """An indexed name equal or nearly equal to ``name`` (see :func:`near_duplicate_names`), or None."""
        if name in self._slots:
            return name
        same_words = self._name_keys.get(_name_key(name))
        if same_words:
            return same_words[0]
        if len(name) < 6:
            return None
        for length in (len(name) - 1, len(name), len(name) + 1):
            for other in self._by_length.get(length, ()):
                if len(other) >= 6 and _within_one_edit(name, other):
                    return other
        return None

    def best_match(self, text: str | frozenset[str]) -> tuple[str, float] | None:
        """The most similar skill and its :func:`set_overlap` score, or None when none shares a token.

        Ties go to the skill indexed first.
        """
        query = overlap_tokens(text) if isinstance(text, str) else text
        hits = [self._array(token) for token in query if token in self._postings]
        if not hits:
            return None
        counts = np.bincount(np.concatenate(hits), minlength=len(self._names))
        if self._size_array is None:
            self._size_array = np.maximum(np.asarray(self._sizes, dtype=np.float64), 1.0)
        scores = counts / np.minimum(float(len(query)), self._size_array)
        slot = int(np.argmax(scores))  # the first maximum: the lowest slot wins a tie
        name = self._names[slot]
        if name is None or counts[slot] == 0:
            return None
        return name, float(scores[slot])

    def _array(self, token: str) -> npt.NDArray[np.intp]:
        array = self._arrays.get(token)
        if array is None:
            array = self._arrays[token] = np.asarray(self._postings[token], dtype=np.intp)
        return array


def _discard(index: dict[Any, list[Any]], key: Any, name: Any) -> None:
    names = index.get(key)
    if names is not None and name in names:
        names.remove(name)
        if not names:
            del index[key]


# ---- the ledger --------------------------------------------------------------------------------


@dataclass(frozen=True)
class RevisionLedger:
    """The experience layer's bookkeeping, kept in a skill's ``metadata.experience``.

    ``revision`` counts model revisions over the skill's life; ``revisions_today`` counts those on
    ``revised_on`` (a UTC ``YYYY-MM-DD``). A skill without a ledger has revision 0.
    """

    revision: int = 0
    revised_on: str = ""
    revisions_today: int = 0
    origin: str | None = None

    @classmethod
    def of(cls, metadata: Mapping[str, Any] | None) -> RevisionLedger:
        raw = (metadata or {}).get(LEDGER_KEY)
        if not isinstance(raw, Mapping):
            return cls()
        revised_on = raw.get("revised_on")
        if isinstance(revised_on, (date, datetime)):
            revised_on = revised_on.isoformat()[:10]
        origin = raw.get("origin")
        return cls(
            revision=_count(raw.get("revision")),
            revised_on=revised_on if isinstance(revised_on, str) else "",
            revisions_today=_count(raw.get("revisions_today")),
            origin=origin if isinstance(origin, str) and origin else None,
        )

    def today_count(self, today: str) -> int:
        """Revisions made on ``today`` (0 once the day has changed)."""
        return self.revisions_today if self.revised_on == today else 0

    def bumped(self, today: str) -> RevisionLedger:
        """After one more revision on ``today``."""
        return replace(
            self, revision=self.revision + 1, revised_on=today, revisions_today=self.today_count(today) + 1
        )

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"revision": self.revision}
        if self.revised_on:
            data["revised_on"] = self.revised_on
        data["revisions_today"] = self.revisions_today
        if self.origin:
            data["origin"] = self.origin
        return data


def _count(value: Any) -> int:
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return max(0, value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return 0


# ---- the document ------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """A JSON-shaped copy: YAML dates become ISO strings, tuples lists, odd keys strings."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (date, datetime)):
        return value.isoformat()
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


@dataclass
class Skill:
    """One SKILL.md document.

    ``extra`` keeps front-matter keys the specification does not define, so a file read and written
    back loses nothing (lint warns about them). The body is kept without leading blank lines or
    trailing whitespace, which is how :meth:`render` writes it.
    """

    name: str
    description: str
    body: str = ""
    license: str | None = None
    compatibility: str | None = None
    allowed_tools: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.body = self.body.replace("\r\n", "\n").rstrip().lstrip("\n")
        self.metadata = _plain(self.metadata or {})
        self.extra = _plain(self.extra or {})

    @property
    def ledger(self) -> RevisionLedger:
        return RevisionLedger.of(self.metadata)

    def with_ledger(self, ledger: RevisionLedger) -> Skill:
        """A copy whose ``metadata.experience`` holds ``ledger`` (other keys there are kept)."""
        metadata = dict(self.metadata)
        current = metadata.get(LEDGER_KEY)
        experience = dict(current) if isinstance(current, Mapping) else {}
        for key in ("revised_on", "origin"):
            experience.pop(key, None)
        experience.update(ledger.to_dict())
        metadata[LEDGER_KEY] = experience
        return replace(self, metadata=metadata)

    def front_matter(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "description": self.description}
        if self.license is not None:
            data["license"] = self.license
        if self.compatibility is not None:
            data["compatibility"] = self.compatibility
        if self.metadata:
            data["metadata"] = self.metadata
        if self.allowed_tools is not None:
            data["allowed-tools"] = self.allowed_tools
        for key, value in self.extra.items():
            data.setdefault(key, value)
        return data

    def render(self) -> str:
        """The SKILL.md text: ``---``, the YAML front matter, ``---``, the body, one final newline."""
        data = self.front_matter()
        check_nesting(data, "the skill's front matter")  # and no value containing itself
        front = yaml.dump(
            data, Dumper=_Dumper, sort_keys=False, allow_unicode=True,
            default_flow_style=False, width=1 << 30,
        )
        return f"---\n{front}---\n{self.body}\n"

    @classmethod
    def parse(cls, text: str) -> Skill:
        """Read a SKILL.md document; raises :class:`InvalidSkillError` when it is malformed.

        Malformed means: no front matter, YAML that does not parse to a mapping, or a field of the
        wrong type. Rule violations (a bad name, a long description) are for :func:`validate`.
        """
        if not isinstance(text, str):
            raise InvalidSkillError("a SKILL.md document must be text")
        lines = text.lstrip("\ufeff").replace("\r\n", "\n").split("\n")
        if not lines or lines[0].rstrip() != "---":
            raise InvalidSkillError("SKILL.md must start with a '---' line opening its YAML front matter")
        close = next((i for i in range(1, len(lines)) if lines[i].rstrip() == "---"), None)
        if close is None:
            raise InvalidSkillError("SKILL.md front matter is not closed by a '---' line")
        front_text = "\n".join(lines[1:close])
        if len(front_text) > MAX_FRONT_MATTER_BYTES // 4 and utf8_len(front_text) > MAX_FRONT_MATTER_BYTES:
            raise InvalidSkillError(
                f"SKILL.md front matter is {utf8_len(front_text):,} bytes; the limit is {MAX_FRONT_MATTER_BYTES:,}"
            )
        try:
            # Events are read without building anything, so an alias costs nothing until refused here.
            for event in yaml.parse(front_text, Loader=_Loader):
                if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
                    raise InvalidSkillError(
                        "SKILL.md front matter uses a YAML anchor or alias (&name, *name) — write the value out"
                    )
            data = yaml.load(front_text, Loader=_Loader)
        except yaml.YAMLError as exc:
            raise InvalidSkillError(f"SKILL.md front matter is not valid YAML: {exc}") from None
        except RecursionError:
            raise InvalidSkillError(f"SKILL.md front matter is nested more than {MAX_NESTING} levels deep") from None
        try:
            check_nesting(data, "SKILL.md front matter")
        except InvalidInputError as exc:
            raise InvalidSkillError(str(exc)) from None
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise InvalidSkillError("SKILL.md front matter must be a YAML mapping (key: value lines)")
        front = SkillFrontMatter.check({str(k): v for k, v in data.items()})
        return cls(
            name=front.name or "",
            description=front.description or "",
            body="\n".join(lines[close + 1 :]),
            license=front.license,
            compatibility=front.compatibility,
            allowed_tools=front.allowed_tools,
            metadata=front.metadata or {},
            extra={str(k): v for k, v in data.items() if k not in KNOWN_FIELDS},
        )

    def to_dict(self) -> dict[str, Any]:
        return {**self.front_matter(), "body": self.body}


def _scalar(value: Any) -> Any:
    """A number or date YAML read as such, as its text; anything else unchanged (a non-string is refused)."""
    if isinstance(value, (int, float, date, datetime)) and not isinstance(value, bool):
        return value.isoformat() if isinstance(value, (date, datetime)) else str(value)
    return value


def _tool_list(value: Any) -> Any:
    """``allowed-tools`` may be a YAML list of names: it is kept as the one line the spec writes."""
    if isinstance(value, list) and all(isinstance(t, str) for t in value):
        return " ".join(value)
    return _scalar(value)


_Scalar = Annotated[StrictStr | None, BeforeValidator(_scalar)]


class SkillFrontMatter(Record):
    """The YAML front matter of a SKILL.md, as read: the keys agentskills.io defines.

    Only the types are checked here (a list where a string belongs is a malformed file);
    the specification's rules (name format, description length) are :func:`validate`'s, so that
    a file breaking them can still be read, linted and fixed. Other keys are allowed and kept.
    """

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)
    error: ClassVar[type[InvalidInputError]] = InvalidSkillError

    name: _Scalar = Field(None, description="lowercase letters and digits joined by single hyphens, at most "
                                            "64 characters; equal to the skill's directory name")
    description: _Scalar = Field(None, description="what the skill does and when to use it, 1-1024 UTF-8 bytes")
    license: _Scalar = None
    compatibility: _Scalar = Field(None, description="at most 500 characters")
    metadata: dict[Any, Any] | None = Field(None, description="free-form; metadata.experience is the revision ledger")
    allowed_tools: Annotated[StrictStr | None, BeforeValidator(_tool_list)] = Field(
        None, alias="allowed-tools", description="space-separated tool names (a YAML list is read too)"
    )

    @classmethod
    def message(cls, field: str, error: ErrorDetails) -> str | None:
        key = cls.model_fields[field].alias or field if field in cls.model_fields else field
        if field == "metadata":
            return "SKILL.md 'metadata' must be a mapping"
        if error["type"] == "string_type":
            return f"SKILL.md '{key}' must be a string, not {type(error.get('input')).__name__}"
        return None


# ---- validation and lint -----------------------------------------------------------------------

Severity = Literal["error", "warning", "info"]


@dataclass(frozen=True)
class Finding:
    """One validation or lint result."""

    severity: Severity
    rule: str
    message: str
    skill: str = ""

    def __str__(self) -> str:
        where = f"{self.skill}: " if self.skill else ""
        return f"{self.severity}: {where}{self.message} [{self.rule}]"


def validate(skill: Skill, *, dir_name: str | None = None) -> list[Finding]:
    """The specification's hard rules; an empty list means the skill is valid."""
    found: list[Finding] = []

    def error(rule: str, message: str) -> None:
        found.append(Finding("error", rule, message, skill.name))

    name = skill.name
    if not name:
        error("name-missing", "the front matter has no name")
    else:
        if len(name) > MAX_NAME_CHARS:
            error("name-length", f"name is {len(name)} characters; the limit is {MAX_NAME_CHARS}")
        if not NAME_PATTERN.fullmatch(name):
            error("name-format", f"name {name!r} must be lowercase letters and digits joined by single hyphens")
        if dir_name is not None and dir_name != name:
            error("name-directory", f"name {name!r} differs from its directory {dir_name!r}")
    size = utf8_len(skill.description)
    if not skill.description.strip():
        error("description-missing", "the description is empty")
    elif size > MAX_DESCRIPTION_BYTES:
        error("description-length", f"description is {size} bytes; the limit is {MAX_DESCRIPTION_BYTES}")
    if skill.compatibility is not None and len(skill.compatibility) > MAX_COMPATIBILITY_CHARS:
        error(
            "compatibility-length",
            f"compatibility is {len(skill.compatibility)} characters; the limit is {MAX_COMPATIBILITY_CHARS}",
        )
    return found


def _words(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def lint(skill: Skill, *, dir_name: str | None = None) -> list[Finding]:
    """:func:`validate` plus the single-skill advice rules R1–R4 and unknown front-matter keys."""
    found = validate(skill, dir_name=dir_name)
    name, desc = skill.name, skill.description.strip()
    size = utf8_len(desc)
    if desc and size < 30:
        found.append(Finding("warning", "R1", f"description is only {size} bytes; say what it does and when", name))
    if desc and not has_routing_cue(desc):
        found.append(Finding("info", "R2", "description has no routing cue (\"Use when …\")", name))
    body_size = utf8_len(skill.body.strip())
    if body_size < 50:
        found.append(Finding("info", "R3", f"body is only {body_size} bytes", name))
    if desc and size < 60 and name and _words(name.replace("-", " ")) in _words(desc):
        found.append(Finding("info", "R4", "description mostly restates the name", name))
    for key in skill.extra:
        found.append(Finding("warning", "unknown-field", f"front-matter key {key!r} is not in the specification", name))
    return found


def _name_key(name: str) -> str:
    parts = sorted(p[:-1] if len(p) > 3 and p.endswith("s") else p for p in name.split("-") if p)
    return "-".join(parts)


def _within_one_edit(a: str, b: str) -> bool:
    if abs(len(a) - len(b)) > 1:
        return False
    if len(a) > len(b):
        a, b = b, a
    i = 0
    while i < len(a) and a[i] == b[i]:
        i += 1
    if len(a) == len(b):
        return a[i + 1 :] == b[i + 1 :]
    return a[i:] == b[i + 1 :]


def near_duplicate_names(a: str, b: str) -> bool:
    """Same words in any order or number (``deploy-runbook`` ~ ``runbooks-deploy``), or one typo apart."""
    if a == b:
        return True
    if _name_key(a) == _name_key(b):
        return True
    return min(len(a), len(b)) >= 6 and _within_one_edit(a, b)


def lint_collection(skills: Sequence[Skill]) -> list[Finding]:
    """Cross-skill warnings: near-duplicate names, and descriptions too alike (Jaccard > 0.5, ≥4 shared)."""
    found: list[Finding] = []
    tokens = [overlap_tokens(s.description) for s in skills]
    for i, first in enumerate(skills):
        for j in range(i + 1, len(skills)):
            second = skills[j]
            if near_duplicate_names(first.name, second.name):
                found.append(Finding(
                    "warning", "near-duplicate-name",
                    f"name is nearly the same as {second.name!r}", first.name,
                ))
                continue
            shared = tokens[i] & tokens[j]
            union = tokens[i] | tokens[j]
            if len(shared) >= 4 and len(shared) / len(union) > 0.5:
                found.append(Finding(
                    "warning", "near-duplicate-description",
                    f"description overlaps {second.name!r} (Jaccard {len(shared) / len(union):.2f})", first.name,
                ))
    return found


def check_skill(skill: Skill, *, dir_name: str | None = None, strict: bool = False) -> list[Finding]:
    """Raise :class:`InvalidSkillError` on errors (and, when ``strict``, warnings); return the rest."""
    findings = lint(skill, dir_name=dir_name)
    blocking = [f for f in findings if f.severity == "error" or (strict and f.severity == "warning")]
    if blocking:
        label = skill.name or "the skill"
        raise InvalidSkillError(f"{label} is not a valid skill: " + "; ".join(f.message for f in blocking))
    return findings


# ---- files -------------------------------------------------------------------------------------


def read_skill(path: str | os.PathLike[str]) -> Skill:
    """Parse ``path`` — a skill directory or its SKILL.md file."""
    target = Path(path)
    if target.name != SKILL_FILE or target.is_dir():
        target = target / SKILL_FILE
    try:
        text = _read_skill_text(target)
    except FileNotFoundError:
        raise InvalidSkillError(f"{target} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidSkillError(f"cannot read {target}: {exc}") from None
    return Skill.parse(text)


def _read_skill_text(path: Path) -> str:
    """The text of a SKILL.md, read no further than :data:`MAX_SKILL_BYTES` characters."""
    with open(path, encoding="utf-8") as handle:
        text = handle.read(MAX_SKILL_BYTES + 1)
    if len(text) > MAX_SKILL_BYTES:  # as many characters are at least as many bytes
        raise InvalidSkillError(f"{path} is larger than {MAX_SKILL_BYTES:,} bytes — a skill should be far shorter")
    return text


@dataclass(frozen=True)
class SkillFile:
    """One ``<dir>/SKILL.md`` found by :func:`scan_skills_dir`: the skill, or why it could not be read."""

    path: Path
    skill: Skill | None
    error: str | None = None

    @property
    def dir_name(self) -> str:
        return self.path.parent.name


def scan_skills_dir(root: str | os.PathLike[str]) -> list[SkillFile]:
    """Every ``<root>/<name>/SKILL.md``, sorted by directory name; a missing root has none."""
    base = Path(root)
    try:
        with os.scandir(base) as entries:
            children = sorted(e.name for e in entries if e.is_dir())
    except (FileNotFoundError, NotADirectoryError):
        return []
    found: list[SkillFile] = []
    for name in children:
        file = base / name / SKILL_FILE
        try:
            text = _read_skill_text(file)
        except InvalidSkillError as exc:
            found.append(SkillFile(file, None, str(exc)))
            continue
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            continue  # a directory without a SKILL.md is not a skill
        except (OSError, UnicodeDecodeError) as exc:
            found.append(SkillFile(file, None, f"cannot read {file}: {exc}"))
            continue
        try:
            found.append(SkillFile(file, Skill.parse(text)))
        except InvalidSkillError as exc:
            found.append(SkillFile(file, None, str(exc)))
    return found


def iter_skills(root: str | os.PathLike[str]) -> Iterator[Skill]:
    """The readable skills under ``root`` (unreadable ones are skipped)."""
    for item in scan_skills_dir(root):
        if item.skill is not None:
            yield item.skill


def write_skill_md(skill: Skill, root: str | os.PathLike[str]) -> Path:
    """Write ``<root>/<name>/SKILL.md`` atomically, read it back and validate it.

    Nothing is written through a symbolic link: a ``<root>/<name>`` folder or a ``SKILL.md`` that
    is one is refused with :class:`InvalidInputError`, since writing through it would put the file
    outside ``root``. If the file read back is not valid (or not the same skill), the previous file
    is restored — or the new directory removed — and :class:`InvalidSkillError` is raised.
    """
    check_skill(skill)  # the name is safe as a directory name from here on
    directory = Path(root) / skill.name
    target = directory / SKILL_FILE
    _refuse_link(directory)
    created = not directory.exists()
    directory.mkdir(parents=True, exist_ok=True)
    _refuse_link(directory)  # made a link since the check above
    _refuse_link(target)
    prior = target.read_bytes() if target.is_file() else None
    _atomic_write(target, skill.render().encode("utf-8"))
    try:
        reread = read_skill(target)
        check_skill(reread, dir_name=directory.name)
        if reread != skill:
            raise InvalidSkillError(f"{target} did not read back as the skill that was written")
    except BaseException:
        if prior is not None:
            _atomic_write(target, prior)
        else:
            with contextlib.suppress(OSError):
                target.unlink()
            if created:
                with contextlib.suppress(OSError):
                    directory.rmdir()
        raise
    return target


def _refuse_link(path: Path) -> None:
    if path.is_symlink():
        raise InvalidInputError(
            f"{path} is a symbolic link, and skills are never written through one"
            " — remove the link or write to another folder"
        )


# Where the platform can, the file is written relative to its folder opened without following a
# link, so a folder swapped for a link after the checks above is refused too (ELOOP or ENOTDIR).
_NO_FOLLOW = getattr(os, "O_NOFOLLOW", 0)
# (os.replace shares os.rename's implementation; only the latter is listed in supports_dir_fd.)
_BY_FOLDER = bool(_NO_FOLLOW) and {os.open, os.rename, os.unlink} <= os.supports_dir_fd


def _atomic_write(target: Path, data: bytes) -> None:
    folder: int | None = None
    if _BY_FOLDER:
        try:
            folder = os.open(target.parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NO_FOLLOW)
        except OSError:
            _refuse_link(target.parent)
            raise
    # Relative to the open folder when there is one, else the full path.
    tmp_name = f".{target.name}.{os.getpid()}.tmp"
    tmp = tmp_name if folder is not None else str(target.with_name(tmp_name))
    try:
        with contextlib.suppress(FileNotFoundError):  # left by a crashed write with this process id
            os.unlink(tmp, dir_fd=folder)
        # O_EXCL and O_NOFOLLOW: a link planted at the temporary name is never written through.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NO_FOLLOW | getattr(os, "O_BINARY", 0), 0o644,
                     dir_fd=folder)
        with open(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        # Replacing a name never follows a link there: it replaces the name itself.
        if folder is not None:
            os.replace(tmp, target.name, src_dir_fd=folder, dst_dir_fd=folder)
        else:
            os.replace(tmp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=folder)
        if folder is not None:
            os.close(folder)
