"""Closing the learning loop: runs that worked become skills, skills that misled a run get revised.

**Distilling.** :class:`SkillDistiller` turns a successful, non-trivial episode into a SKILL.md
draft. Most episodes should *not* become skills, and deciding that must cost nothing, so the gate
is plain code with no model call and no I/O:

1. the run succeeded (``success is True`` — unknown counts as no: a skill minted from a run nobody
   confirmed is how bad procedural memory is born);
2. at least 4 tool calls, duplicates counted;
3. at least 2 distinct tools;
4. a trimmed situation of at least 16 characters;
5. no existing skill overlapping the situation by 0.6 or more (:func:`~harness_mem.experience.skills.overlap_similarity`).

A refusal is a value (:class:`Skip`) carrying its numbers — ``TooFewToolCalls(got=1, need=4)`` — not
an exception. Only an episode that passes costs exactly one model call, asking for a JSON draft; the
draft is then built and checked by code: the name is slugified (model name, else the situation,
else a stable ``skill-<hash>``), steps are required, the description is finalised to ≤1024 bytes
with a routing cue, a name clash or a drafted duplicate is a :class:`Skip`, and the SKILL.md must
validate with no error or warning. ``distill`` never writes: :meth:`SkillDistiller.save` (database)
and :meth:`SkillDistiller.write` (a skills directory) do, when asked.

**Revising.** :class:`SkillReviser` repairs a skill after a failed run that followed it. It refuses,
again as values and without a model call, when the episode succeeded, when the skill was not used
in it, after 10 revisions in the skill's life, or after 2 revisions on the same (UTC) day. Otherwise
one model call proposes a minimal edit: the name never changes, the body must stay at least 50
bytes, the description changes only with a stated reason, every other metadata key is kept, and
the ledger in ``metadata.experience`` is bumped.

Model failures and unusable replies raise :class:`~harness_mem.errors.ModelError`; a draft or
revision that breaks the SKILL.md rules raises :class:`~harness_mem.errors.InvalidSkillError`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ..errors import InvalidSkillError, ModelError
from ..providers.textmodel import TextModel, extract_json, str_list
from .episode import Episode
from .skills import (
    Finding,
    RevisionLedger,
    Skill,
    SkillIndex,
    check_skill,
    collapse_whitespace,
    finalize_description,
    iter_skills,
    skill_key_text,
    slugify,
    title_from_slug,
    utf8_len,
    write_skill_md,
)

if TYPE_CHECKING:
    from .store import ExperienceStore, SkillRecord

# ---- policies ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class DistillPolicy:
    """The distiller's thresholds: the gate in the module docstring, and the draft's token cap."""

    min_tool_calls: int = 4
    min_distinct_tools: int = 2
    min_situation_chars: int = 16
    duplicate_threshold: float = 0.6
    max_output_tokens: int = 1200


@dataclass(frozen=True)
class RevisePolicy:
    """The reviser's caps: how often a skill may be revised, and what a revision must keep."""

    lifetime_cap: int = 10
    daily_cap: int = 2
    require_skill_in_episode: bool = True
    refuse_when_episode_succeeded: bool = True
    max_output_tokens: int = 3000
    min_body_bytes: int = 50


# ---- skips (distiller) -------------------------------------------------------------------------


@dataclass(frozen=True)
class Skip:
    """Why an episode was not turned into a skill. Subclasses carry the numbers."""

    reason: ClassVar[str] = "skipped"

    @property
    def message(self) -> str:
        return self.reason.replace("_", " ")

    def to_dict(self) -> dict[str, Any]:
        return {"skipped": self.reason, **{k: v for k, v in vars(self).items()}, "message": self.message}


@dataclass(frozen=True)
class NotSuccessful(Skip):
    reason: ClassVar[str] = "not_successful"
    success: bool | None

    @property
    def message(self) -> str:
        said = "failed" if self.success is False else "was not marked as a success"
        return f"the run {said}; only runs that worked become skills"


@dataclass(frozen=True)
class TooFewToolCalls(Skip):
    reason: ClassVar[str] = "too_few_tool_calls"
    got: int
    need: int

    @property
    def message(self) -> str:
        return f"{self.got} tool call(s); a skill needs at least {self.need}"


@dataclass(frozen=True)
class TooFewDistinctTools(Skip):
    reason: ClassVar[str] = "too_few_distinct_tools"
    got: int
    need: int

    @property
    def message(self) -> str:
        return f"{self.got} distinct tool(s); a skill needs at least {self.need}"


@dataclass(frozen=True)
class SituationTooShort(Skip):
    reason: ClassVar[str] = "situation_too_short"
    got: int
    need: int

    @property
    def message(self) -> str:
        return f"the situation is {self.got} characters; a skill needs at least {self.need}"


@dataclass(frozen=True)
class DuplicateSkill(Skip):
    reason: ClassVar[str] = "duplicate_skill"
    existing: str
    similarity: float
    threshold: float

    @property
    def message(self) -> str:
        return f"skill {self.existing!r} already covers this (overlap {self.similarity:.2f} ≥ {self.threshold})"


@dataclass(frozen=True)
class NameTaken(Skip):
    reason: ClassVar[str] = "name_taken"
    name: str
    existing: str

    @property
    def message(self) -> str:
        if self.name == self.existing:
            return f"a skill named {self.name!r} already exists"
        return f"the drafted name {self.name!r} is too close to the existing skill {self.existing!r}"


# ---- the distiller -----------------------------------------------------------------------------

DISTILL_PROMPT = """\
You are turning one successful agent run into a reusable skill: an agentskills.io SKILL.md that \
another agent will follow the next time a task of the same kind comes up.

The run:
Situation: {situation}
Tools used, in order: {tools}
Outcome: {outcome}

Write the procedure for the whole class of tasks this run belongs to, not for this one instance. \
Generalise: replace one-off values (file paths, ids, host names, dates, people, exact numbers) with \
what they stand for. Keep only steps that mattered.

Reply with one JSON object and nothing else:
{{
  "name": "lowercase-hyphenated, at most 5 words, naming the kind of task, e.g. \\"deploy-static-site\\"",
  "title": "a short human title",
  "description": "one or two sentences: what the skill achieves, ending with \\"Use when …\\" and the situations that call for it",
  "steps": ["3 to 10 imperative steps, in order"],
  "pitfalls": ["mistakes to avoid; may be empty"]
}}"""

# "1. ", "2) ", "3: ", "(4) " or "5 - " in front of a step: the body numbers steps itself.
_NUMBERING = re.compile(r"^\s*(?:\(?\d{1,3}[.):](?!\d)|\d{1,3}\s+-(?=\s))\s*")
_BULLET = re.compile(r"^\s*[-*•]\s+")


def _strip_numbering(text: str) -> str:
    previous = None
    while previous != text:
        previous = text
        text = _BULLET.sub("", _NUMBERING.sub("", text, count=1), count=1)
    return text.strip()


def skill_body(title: str, description: str, situation: str, steps: list[str], pitfalls: list[str]) -> str:
    """The body of a distilled skill: title, description, then "When this applies", "Steps", "Pitfalls"."""
    body = f"# {title}\n\n{description}\n\n## When this applies\n\n{situation}\n\n## Steps\n\n"
    body += "".join(f"{i}. {step}\n" for i, step in enumerate(steps, start=1))
    if pitfalls:
        body += "\n## Pitfalls\n\n" + "".join(f"- {p}\n" for p in pitfalls)
    return body


@dataclass(frozen=True)
class Draft:
    """A skill drafted from an episode, valid and not yet written anywhere."""

    skill: Skill
    episode: Episode
    findings: tuple[Finding, ...] = ()   # remaining info-level lint advice

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.skill.name,
            "skill_md": self.skill.render(),
            "findings": [str(f) for f in self.findings],
        }


class SkillDistiller:
    """Drafts skills from successful episodes (see the module docstring for the rules).

    :param model: the text model for the one drafting call.
    :param existing: the skills already known (``Skill`` objects or ``(name, description)`` pairs);
        they are tokenised once into a :class:`~harness_mem.experience.skills.SkillIndex`.
    """

    def __init__(
        self,
        model: TextModel,
        existing: Iterable[Skill | tuple[str, str]] = (),
        *,
        policy: DistillPolicy | None = None,
    ) -> None:
        self.model = model
        self.policy = policy or DistillPolicy()
        self.index = SkillIndex(existing)

    @classmethod
    def for_store(
        cls, model: TextModel, experience: ExperienceStore, *, policy: DistillPolicy | None = None
    ) -> SkillDistiller:
        """A distiller that knows every skill saved in ``experience``."""
        return cls(model, experience.skill_keys(), policy=policy)

    @classmethod
    def for_directory(
        cls, model: TextModel, root: str | os.PathLike[str], *, policy: DistillPolicy | None = None
    ) -> SkillDistiller:
        """A distiller that knows the skills under ``root`` (a missing directory has none)."""
        return cls(model, iter_skills(root), policy=policy)

    # -- the gate: pure code, no model call --

    def gate(self, episode: Episode) -> Skip | None:
        """The first reason ``episode`` should not become a skill, or None when it may."""
        p = self.policy
        if not episode.succeeded():
            return NotSuccessful(episode.success)
        if len(episode.tools) < p.min_tool_calls:
            return TooFewToolCalls(len(episode.tools), p.min_tool_calls)
        distinct = len(set(episode.tools))
        if distinct < p.min_distinct_tools:
            return TooFewDistinctTools(distinct, p.min_distinct_tools)
        size = len(episode.situation.strip())
        if size < p.min_situation_chars:
            return SituationTooShort(size, p.min_situation_chars)
        return self._duplicate(episode.situation)

    def _duplicate(self, text: str) -> DuplicateSkill | None:
        match = self.index.best_match(text)
        if match is not None and match[1] >= self.policy.duplicate_threshold:
            return DuplicateSkill(match[0], match[1], self.policy.duplicate_threshold)
        return None

    # -- drafting --

    def prompt(self, episode: Episode) -> str:
        return DISTILL_PROMPT.format(
            situation=episode.situation,
            tools=", ".join(episode.tools) or "(none)",
            outcome=episode.outcome or "(not recorded)",
        )

    def distill(self, episode: Episode) -> Draft | Skip:
        """Gate, then one model call, then a checked draft. Writes nothing."""
        skip = self.gate(episode)
        if skip is not None:
            return skip
        reply = self.model.complete(
            self.prompt(episode), max_tokens=self.policy.max_output_tokens, json=True
        )
        return self.build(episode, reply)

    def build(self, episode: Episode, reply: str) -> Draft | Skip:
        """Turn the model's reply into a checked draft (no model call; exposed for replay and tests)."""
        data = extract_json(reply)
        if data is None:
            raise ModelError("the model's skill draft is not a JSON object — try again or use another model")
        model_name = _text(data, "name")
        name = (
            slugify(model_name, fallback=False)
            or slugify(episode.situation, fallback=False)
            or slugify(model_name or episode.situation)
        )
        if not name:
            raise ModelError("the skill draft has no usable name")
        steps = [collapse_whitespace(_strip_numbering(s)) for s in str_list(data.get("steps"))]
        steps = [s for s in steps if s]
        if not steps:
            raise ModelError("the skill draft has no steps — a skill is a procedure")
        pitfalls = [collapse_whitespace(_strip_numbering(p)) for p in str_list(data.get("pitfalls"))]
        pitfalls = [p for p in pitfalls if p]
        raw_title = _text(data, "title")
        title = collapse_whitespace(raw_title.lstrip("# ")) or title_from_slug(name)
        raw_description = _text(data, "description")
        description = finalize_description(raw_description, episode.situation, fallback=title)
        skill = Skill(
            name=name,
            description=description,
            body=skill_body(title, description, episode.situation, steps, pitfalls),
            metadata={"experience": RevisionLedger(origin="distilled").to_dict()},
        )
        taken = self._name_clash(name)
        if taken is not None:
            return NameTaken(name, taken)
        duplicate = self._duplicate(skill_key_text(name, description))
        if duplicate is not None:
            return duplicate
        findings = check_skill(skill, strict=True)
        return Draft(skill, episode, tuple(findings))

    def _name_clash(self, name: str) -> str | None:
        return self.index.similar_name(name)

    # -- persistence, only when asked --

    def accept(self, skill: Skill) -> None:
        """Tell the distiller a skill now exists (later episodes are checked against it)."""
        self.index.add(skill.name, skill.description)

    def save(self, draft: Draft, experience: ExperienceStore, *, episode_id: str | None = None) -> SkillRecord:
        """Save a draft as a new skill in the database (refused if the name appeared meanwhile)."""
        record = experience.save_skill(
            draft.skill,
            origin="distilled",
            rationale="distilled from a successful run",
            episode_id=episode_id,
            expected_version=0,
        )
        self.accept(draft.skill)
        return record

    def write(self, draft: Draft, root: str | os.PathLike[str]) -> Path:
        """Write a draft to ``<root>/<name>/SKILL.md`` (refused if that skill already exists there)."""
        if (Path(root) / draft.skill.name).exists():
            raise InvalidSkillError(f"{Path(root) / draft.skill.name} already exists — not overwriting a skill")
        path = write_skill_md(draft.skill, root)
        self.accept(draft.skill)
        return path


# ---- refusals (reviser) ------------------------------------------------------------------------


@dataclass(frozen=True)
class Refusal:
    """Why a skill was not revised. Subclasses carry the numbers."""

    reason: ClassVar[str] = "refused"

    @property
    def message(self) -> str:
        return self.reason.replace("_", " ")

    def to_dict(self) -> dict[str, Any]:
        return {"refused": self.reason, **{k: v for k, v in vars(self).items()}, "message": self.message}


@dataclass(frozen=True)
class EpisodeSucceeded(Refusal):
    reason: ClassVar[str] = "episode_succeeded"

    @property
    def message(self) -> str:
        return "the run succeeded; only a run the skill misled is a reason to revise it"


@dataclass(frozen=True)
class SkillNotUsedInEpisode(Refusal):
    reason: ClassVar[str] = "skill_not_used"
    skill: str

    @property
    def message(self) -> str:
        return f"the run did not use skill {self.skill!r}, so it cannot have been misled by it"


@dataclass(frozen=True)
class LifetimeCapReached(Refusal):
    reason: ClassVar[str] = "lifetime_cap_reached"
    revisions: int
    cap: int

    @property
    def message(self) -> str:
        return f"the skill has been revised {self.revisions} times (cap {self.cap}); review it by hand"


@dataclass(frozen=True)
class DailyCapReached(Refusal):
    reason: ClassVar[str] = "daily_cap_reached"
    revisions_today: int
    cap: int
    day: str

    @property
    def message(self) -> str:
        return f"the skill was revised {self.revisions_today} times on {self.day} (cap {self.cap}); try tomorrow"


REVISE_PROMPT = """\
An agent followed the skill below and the run failed. Revise the skill with the smallest change \
that would have prevented this failure.

Skill name (fixed; it will not change): {name}
Current description: {description}
Current body:
<<<
{body}
>>>

The failed run:
Situation: {situation}
Tools used, in order: {tools}
Outcome: {outcome}
What went wrong: {complaint}

Rules:
- Keep everything that is still right. Change only what caused or allowed the failure.
- Keep the markdown layout: title, sections, numbered steps.
- Change the description only if it made an agent pick this skill for the wrong task.

Reply with one JSON object and nothing else:
{{"body": "the full revised markdown body", "rationale": "what you changed and why, in one or two \
sentences", "description_change": null}}
or, if the description must change, "description_change": {{"new": "the new description", "why": "why"}}"""

NO_RATIONALE = "(the model gave no rationale for this revision)"


@dataclass(frozen=True)
class DescriptionChange:
    old: str
    new: str
    why: str


@dataclass(frozen=True)
class Revision:
    """A revised skill, valid and not yet written anywhere."""

    skill: Skill
    previous: Skill
    rationale: str
    episode: Episode
    description_change: DescriptionChange | None = None

    def to_dict(self) -> dict[str, Any]:
        change = self.description_change
        return {
            "name": self.skill.name,
            "revision": self.skill.ledger.revision,
            "rationale": self.rationale,
            "description_change": None if change is None else {"new": change.new, "why": change.why},
            "skill_md": self.skill.render(),
        }


Today = date | str | Callable[[], date | str]


def _day(value: date | str) -> str:
    return value.isoformat()[:10] if isinstance(value, (date, datetime)) else str(value)


class SkillReviser:
    """Revises a skill after a failed run that followed it (see the module docstring).

    :param today: the day caps are counted on — a date, ``"YYYY-MM-DD"``, or a callable returning
        one; by default the current UTC date.
    """

    def __init__(self, model: TextModel, *, policy: RevisePolicy | None = None, today: Today | None = None) -> None:
        self.model = model
        self.policy = policy or RevisePolicy()
        self._today = today

    def today(self) -> str:
        value = self._today
        if value is None:
            return datetime.now(UTC).date().isoformat()
        return _day(value() if callable(value) else value)

    @staticmethod
    def _skill(skill: Skill | str) -> Skill:
        parsed = Skill.parse(skill) if isinstance(skill, str) else skill
        check_skill(parsed)
        return parsed

    def check(self, skill: Skill | str, episode: Episode) -> Refusal | None:
        """The first reason not to revise, or None. A malformed SKILL.md raises InvalidSkillError."""
        parsed = self._skill(skill)
        p = self.policy
        if p.refuse_when_episode_succeeded and episode.succeeded():
            return EpisodeSucceeded()
        if p.require_skill_in_episode and parsed.name not in episode.skills:
            return SkillNotUsedInEpisode(parsed.name)
        ledger = parsed.ledger
        if ledger.revision >= p.lifetime_cap:
            return LifetimeCapReached(ledger.revision, p.lifetime_cap)
        today = self.today()
        if ledger.today_count(today) >= p.daily_cap:
            return DailyCapReached(ledger.today_count(today), p.daily_cap, today)
        return None

    def prompt(self, skill: Skill, episode: Episode, complaint: str = "") -> str:
        return REVISE_PROMPT.format(
            name=skill.name,
            description=skill.description,
            body=skill.body,
            situation=episode.situation,
            tools=", ".join(episode.tools) or "(none)",
            outcome=episode.outcome or "(not recorded)",
            complaint=complaint.strip() or "(not stated; infer it from the outcome)",
        )

    def revise(self, skill: Skill | str, episode: Episode, complaint: str = "") -> Revision | Refusal:
        """Check, then one model call, then a checked revision. Writes nothing."""
        parsed = self._skill(skill)
        refusal = self.check(parsed, episode)
        if refusal is not None:
            return refusal
        reply = self.model.complete(
            self.prompt(parsed, episode, complaint), max_tokens=self.policy.max_output_tokens, json=True
        )
        return self.build(parsed, episode, reply)

    def build(self, skill: Skill, episode: Episode, reply: str) -> Revision:
        """Apply the model's reply to ``skill`` (no model call; exposed for replay and tests)."""
        data = extract_json(reply)
        if data is None:
            raise ModelError("the model's revision is not a JSON object — try again or use another model")
        body = _body_only(_text(data, "body")).strip()
        if utf8_len(body) < self.policy.min_body_bytes:
            raise ModelError(
                f"the revised body is {utf8_len(body)} bytes; at least {self.policy.min_body_bytes} are required"
                " — the model returned a stub"
            )
        rationale = collapse_whitespace(_text(data, "rationale")) or NO_RATIONALE
        change = None
        description = skill.description
        raw_change = data.get("description_change")
        if isinstance(raw_change, dict):
            new, why = collapse_whitespace(_text(raw_change, "new")), collapse_whitespace(_text(raw_change, "why"))
            if new and why and new != skill.description:
                change = DescriptionChange(skill.description, new, why)
                description = new
        # The name is the skill's identity: whatever the reply says, it stays.
        revised = replace(skill, description=description, body=body).with_ledger(skill.ledger.bumped(self.today()))
        check_skill(revised)
        return Revision(revised, skill, rationale, episode, change)

    # -- persistence, only when asked --

    def save(
        self,
        revision: Revision,
        experience: ExperienceStore,
        *,
        episode_id: str | None = None,
        expected_version: int | None = None,
    ) -> SkillRecord:
        """Save the revision as the skill's next version, with its rationale, in the database."""
        return experience.save_skill(
            revision.skill,
            origin="revised",
            rationale=revision.rationale,
            episode_id=episode_id,
            expected_version=expected_version,
        )

    def write(self, revision: Revision, root: str | os.PathLike[str]) -> Path:
        """Write the revised SKILL.md into ``root`` (the previous file is restored if it fails)."""
        return write_skill_md(revision.skill, root)


def _text(data: dict[str, Any], key: str) -> str:
    """``data[key]`` when it is a string, else ``""`` (model JSON is untrusted)."""
    value = data.get(key)
    return value if isinstance(value, str) else ""


def _body_only(text: str) -> str:
    """A model sometimes returns the whole SKILL.md as the body: keep only the body then."""
    if text.lstrip().startswith("---"):
        try:
            return Skill.parse(text.lstrip()).body
        except InvalidSkillError:
            return text
    return text


# ---- one-liners for the CLI ----------------------------------------------------------------------


def distill_episode(
    experience: ExperienceStore,
    episode_id: str,
    model: TextModel,
    *,
    save: bool = False,
    policy: DistillPolicy | None = None,
) -> Draft | Skip:
    """Draft a skill from a recorded episode against the skills in the database; save it if asked."""
    stored = experience.get(episode_id)
    distiller = SkillDistiller.for_store(model, experience, policy=policy)
    result = distiller.distill(stored.episode)
    if save and isinstance(result, Draft):
        distiller.save(result, experience, episode_id=stored.id)
    return result


def revise_skill(
    experience: ExperienceStore,
    name: str,
    episode_id: str,
    model: TextModel,
    *,
    complaint: str = "",
    save: bool = False,
    today: Today | None = None,
    policy: RevisePolicy | None = None,
) -> Revision | Refusal:
    """Revise a saved skill after the recorded episode it misled; save the new version if asked."""
    record = experience.get_skill(name)
    stored = experience.get(episode_id)
    reviser = SkillReviser(model, policy=policy, today=today)
    result = reviser.revise(record.skill, stored.episode, complaint)
    if save and isinstance(result, Revision):
        reviser.save(result, experience, episode_id=stored.id, expected_version=record.version)
    return result
