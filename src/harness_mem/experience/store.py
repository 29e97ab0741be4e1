"""The experience store: episodes recorded and recalled, and skills kept with their history.

**Episodes** are stored twice, on purpose. Their rendered text (:meth:`Episode.render`) is a memory
entry — kind ``"episode"``, source ``"experience"``, tags ``experience``, ``tool:<name>`` for each
tool, ``skill:<name>`` for each skill, then the episode's own tags — so ordinary recall finds them
and any tool that reads the episode text format (a contract, see :mod:`.episode`) still
understands them. Their fields are also a row in the
``episodes`` table, so that listing, filtering by tool, skill or result, and joining to skills
need no text parsing. The row is written from what the store actually kept (the entry's content
after redaction, its id as stored), never from the caller's raw text, and deleting the entry deletes
the row. The episode's own tags are stored as the entry's tags are (keyed pseudonyms).

**Recall** asks the memory store for episodes relevant to a situation (over-fetching 2k), then
ranks them by relevance × a result weight: :data:`RESULT_WEIGHTS` gives a success ×1.25, an
unknown result ×1.0 and a failure ×0.8, so at equal relevance a run that worked comes first (ties
keep the store's order). Failures are still recalled — knowing what did not work is experience too
— unless ``success=True`` asks for successes only.

**Skills** live in the ``skills`` table as whole SKILL.md documents; every save that changes the
document adds a ``skill_revisions`` row with its origin (distilled, revised, imported, saved),
rationale and the episode that prompted it, and ``skill_sources`` links a skill to the episodes it
came from. :meth:`ExperienceStore.export_skills` and :meth:`ExperienceStore.import_skills` move
skills to and from a ``<dir>/<name>/SKILL.md`` tree. Every save (by hand, imported, distilled or
revised) passes the memory store's redactor: the document's fields (description, body, the
other front-matter values, metadata) and the rationale are scrubbed before anything is written, and
the episode id is stored as its pseudonym, as the entry's id is. A skill's name is its identity on
disk (the directory's name, ``[a-z0-9-]``) and is stored as validated.

**Recording during a run**: :class:`ExperienceRecorder` holds a :class:`ToolTrace` and a
:class:`SkillUseTrace` for the host's hooks, and turns them into an episode when the run ends.
:class:`ExperienceGuide` renders the ``[experience-recall]`` block injected before a model call.
Neither knows anything about harness_loop: the loop adapts them to its hook system.
"""

from __future__ import annotations

import builtins
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ..errors import DuplicateIdError, InvalidInputError, InvalidSkillError, NotFoundError, StorageError
from ..models import dumps, format_time, from_ms, new_id, now_ms, to_ms
from ..storage import after_position
from .episode import Episode, SkillUseTrace, ToolTrace
from .skills import Skill, check_skill, scan_skills_dir, write_skill_md
from .tables import Tables, tables_of

if TYPE_CHECKING:
    from ..models import Hit
    from ..store import MemoryStore

EXPERIENCE_TAG = "experience"
EXPERIENCE_SOURCE = "experience"
# Relevance multipliers by result: a success outranks a failure of equal relevance.
RESULT_WEIGHTS: dict[bool | None, float] = {True: 1.25, None: 1.0, False: 0.8}
SKILL_ORIGINS = ("distilled", "revised", "imported", "saved")

GUIDE_HEADER = "[experience-recall]\nSimilar past experience — how you handled comparable situations before:"


def episode_tags(episode: Episode) -> list[str]:
    """The entry tags an episode is stored with."""
    tags = [EXPERIENCE_TAG]
    tags += [f"tool:{t}" for t in dict.fromkeys(episode.tools)]
    tags += [f"skill:{s}" for s in dict.fromkeys(episode.skills)]
    return list(dict.fromkeys([*tags, *episode.tags]))


def _weighted(score: float, weight: float) -> float:
    # Scores are "higher is better" but may be negative: dividing keeps the ordering right there.
    return score * weight if score >= 0 else score / weight


@dataclass(frozen=True)
class StoredEpisode:
    """An episode as recorded: its id, fields, time, and the memory entry holding its text."""

    id: str
    episode: Episode
    created_at: datetime
    entry_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            **self.episode.to_dict(),
            "created_at": format_time(self.created_at),
            "entry_id": self.entry_id,
        }


@dataclass(frozen=True)
class RecalledEpisode:
    """An episode found by :meth:`ExperienceStore.recall`.

    ``relevance`` is the memory store's score; ``score`` is it weighted by the result
    (:data:`RESULT_WEIGHTS`) and is what the list is sorted by.
    """

    id: str
    episode: Episode
    score: float
    relevance: float
    created_at: datetime
    entry_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "score": self.score,
            "relevance": self.relevance,
            **self.episode.to_dict(),
            "created_at": format_time(self.created_at),
            "entry_id": self.entry_id,
        }


@dataclass(frozen=True)
class SkillRecord:
    """A skill as saved: the document, its version in this database, and its source episodes."""

    skill: Skill
    version: int
    created_at: datetime
    updated_at: datetime
    source_episodes: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.skill.name

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.skill.name,
            "description": self.skill.description,
            "version": self.version,
            "revision": self.skill.ledger.revision,
            "metadata": self.skill.metadata,
            "created_at": format_time(self.created_at),
            "updated_at": format_time(self.updated_at),
            "source_episodes": list(self.source_episodes),
            "skill_md": self.skill.render(),
        }


@dataclass(frozen=True)
class SkillVersion:
    """One row of a skill's history."""

    name: str
    version: int
    skill_md: str
    origin: str
    rationale: str
    episode_id: str | None
    created_at: datetime

    @property
    def skill(self) -> Skill:
        return Skill.parse(self.skill_md)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "origin": self.origin,
            "rationale": self.rationale,
            "episode_id": self.episode_id,
            "created_at": format_time(self.created_at),
            "skill_md": self.skill_md,
        }


@dataclass
class SkillImportReport:
    """What :meth:`ExperienceStore.import_skills` did: names saved, names already identical, and
    the directories it refused with the reason."""

    saved: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    invalid: list[tuple[str, str]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "saved": self.saved,
            "unchanged": self.unchanged,
            "invalid": [{"path": p, "error": e} for p, e in self.invalid],
        }


_EPISODE_COLUMNS = "ep.id, ep.entry_id, ep.situation, ep.tools, ep.skills, ep.outcome, ep.success, ep.tags, ep.created_at"


def _stored_episode(row: Sequence[Any]) -> StoredEpisode:
    episode_id, entry_id, situation, tools, skills, outcome, success, tags, created = row
    episode = Episode(
        situation=situation,
        outcome=outcome,
        tools=json.loads(tools),
        skills=json.loads(skills),
        tags=json.loads(tags),
        success=None if success is None else bool(success),
    )
    return StoredEpisode(episode_id, episode, from_ms(created), entry_id)


class ExperienceStore:
    """Episodes and skills on top of a :class:`~harness_mem.store.MemoryStore` (same file, same namespace)."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        # Whether the namespace holds episodes written as notes (see _episode_kinds), and up to
        # which entry that has been looked for.
        self._notes_hold_episodes = False
        self._notes_checked_to = 0
        # The memory store's own connection, on its engine: this class is the storage of the
        # experience tables, and writes through the store's transactions so an entry and its row
        # commit together.
        self.tables: Tables = tables_of(store.storage)

    @property
    def conn(self) -> Any:
        """The memory store's own connection (sqlite3, or psycopg on PostgreSQL)."""
        return self.tables.conn

    @property
    def namespace(self) -> str:
        return self.store.namespace

    def _key(self, value: str | None) -> str | None:
        """An episode id as stored (its pseudonym when it holds PII), for a lookup by equality."""
        return self.store.scope.key(value)

    def _redacted_skill(self, skill: Skill) -> Skill:
        """``skill`` with every text of its document scrubbed by the store's redactor (the name aside)."""
        redactor = self.store.redactor
        if redactor is None:
            return skill
        description, body, license_, compatibility, tools, metadata, extra = redactor.scrub_value([
            skill.description, skill.body, skill.license, skill.compatibility, skill.allowed_tools,
            skill.metadata, skill.extra,
        ]).value
        return replace(skill, description=description, body=body, license=license_, compatibility=compatibility,
                       allowed_tools=tools, metadata=metadata, extra=extra)

    # ---- episodes ---------------------------------------------------------------------------

    def record(
        self,
        episode: Episode,
        *,
        id: str | None = None,
        session: str | None = None,
        metadata: dict[str, Any] | None = None,
        created_at: str | datetime | None = None,
    ) -> str:
        """Store an episode (entry + row) and return its id."""
        return self.save(episode, id=id, session=session, metadata=metadata, created_at=created_at).id

    def save(
        self,
        episode: Episode,
        *,
        id: str | None = None,
        session: str | None = None,
        metadata: dict[str, Any] | None = None,
        created_at: str | datetime | None = None,
    ) -> StoredEpisode:
        """Like :meth:`record`, returning the episode as stored (after redaction)."""
        if not isinstance(episode, Episode):
            raise InvalidInputError(f"expected an Episode, got {type(episode).__name__}")
        if not episode.situation:
            raise InvalidInputError("an episode needs a situation — it is what the episode is recalled by")
        episode_id = id or new_id()
        # The entry and its episode row commit together; the row keys the entry by its stored id.
        with self.store.transaction(), self.store.stored_forms():
            entry = self.store.add(
                episode.render(),
                kind="episode",
                session=session,
                tags=episode_tags(episode),
                source=EXPERIENCE_SOURCE,
                metadata=metadata,
                id=episode_id,
                created_at=created_at,
            )
            kept = Episode.parse(entry.content)
            if kept is None:
                raise StorageError("the stored episode text no longer parses as an episode")
            kept.tags = self.kept_tags(episode.tags)
            self.tables.execute(
                "INSERT INTO episodes (id, namespace, entry_id, situation, tools, skills, outcome, success,"
                " tags, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    entry.id, self.namespace, entry.id, kept.situation, dumps(kept.tools),
                    dumps(kept.skills), kept.outcome, None if kept.success is None else int(kept.success),
                    dumps(kept.tags), to_ms(entry.created_at),
                ),
            )
        return StoredEpisode(entry.id, kept, entry.created_at, entry.id)

    def kept_tags(self, tags: Iterable[str]) -> builtins.list[str]:
        """An episode's own tags as its row stores them: as the entry's tags are, each a keyed
        pseudonym where redaction finds something in it."""
        key = self.store.scope.key
        return [key(str(tag)) or str(tag) for tag in tags]

    def _live(self) -> str:
        """Join condition: the episode's entry is missing (structural only), or neither expired nor
        forgotten (its row goes at the purge, with the entry)."""
        return (
            "LEFT JOIN entries e ON e.namespace = ep.namespace AND e.id = ep.entry_id"
            " WHERE ep.namespace = ? AND (e.expires_at IS NULL OR e.expires_at > ?) AND e.forgotten_at IS NULL"
        )

    def get(self, id: str) -> StoredEpisode:
        """The episode with this id; raises :class:`NotFoundError`."""
        row = self.tables.execute(
            f"SELECT {_EPISODE_COLUMNS} FROM episodes ep {self._live()} AND ep.id = ?",
            (self.namespace, now_ms(), self._key(id)),
        ).fetchone()
        if row is None:
            raise NotFoundError(
                f"no episode with id {id!r} in namespace {self.namespace!r} — `harness-mem episodes list` shows the ids"
            )
        return _stored_episode(row)

    def get_many(self, ids: Sequence[str]) -> builtins.list[StoredEpisode]:
        """The episodes with these ids that are there, in the order asked, each once: one query."""
        keys = {episode_id: self._key(episode_id) or episode_id for episode_id in dict.fromkeys(ids)}
        if not keys:
            return []
        rows = self.tables.execute(
            f"SELECT {_EPISODE_COLUMNS} FROM episodes ep {self._live()} AND ep.id IN ({', '.join('?' * len(keys))})",
            (self.namespace, now_ms(), *keys.values()),
        ).fetchall()
        found = {row[0]: _stored_episode(row) for row in rows}
        return [found[key] for key in keys.values() if key in found]

    def list(
        self,
        *,
        limit: int | None = 50,
        tool: str | None = None,
        skill: str | None = None,
        success: bool | None = None,
        newest_first: bool = True,
        after: str | None = None,
    ) -> builtins.list[StoredEpisode]:
        """Recorded episodes, newest first, optionally only those using ``tool``/``skill`` or with a
        result; ``after`` (an episode id): those listed after it (the next page, through the index)."""
        sql = f"SELECT {_EPISODE_COLUMNS} FROM episodes ep {self._live()}"
        params: list[Any] = [self.namespace, now_ms()]
        if after is not None:
            position = self.tables.execute("SELECT created_at, pk FROM episodes WHERE namespace = ? AND id = ?",
                                           (self.namespace, self._key(after))).fetchone()
            if position is None:
                return []
            condition, bound = after_position('ep', (position[0], position[1]), newest_first, '?')
            sql, params = f"{sql} AND {condition}", [*params, *bound]
        if tool is not None:
            sql += f" AND EXISTS (SELECT 1 FROM {self.tables.elements('ep.tools')} WHERE value = ?)"
            params.append(tool)
        if skill is not None:
            sql += f" AND EXISTS (SELECT 1 FROM {self.tables.elements('ep.skills')} WHERE value = ?)"
            params.append(skill)
        if success is not None:
            sql += " AND ep.success = ?"
            params.append(int(success))
        order = "DESC" if newest_first else "ASC"
        sql += f" ORDER BY ep.created_at {order}, ep.pk {order}"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return [_stored_episode(row) for row in self.tables.execute(sql, params)]

    def count(self) -> int:
        return int(self.tables.execute(
            f"SELECT count(*) FROM episodes ep {self._live()}", (self.namespace, now_ms())
        ).fetchone()[0])

    def delete(self, id: str) -> bool:
        """Delete an episode and its memory entry; False when there was none."""
        key = self._key(id)
        with self.store.transaction():
            row = self.tables.execute(
                "SELECT entry_id FROM episodes WHERE namespace = ? AND id = ?", (self.namespace, key)
            ).fetchone()
            if row is None:
                return self.store.delete(id)  # an episode entry with no row (written by an older writer)
            if row[0] is not None:
                self.store.delete(row[0])  # the row goes with it (ON DELETE CASCADE)
            self.tables.execute("DELETE FROM episodes WHERE namespace = ? AND id = ?", (self.namespace, key))
        return True

    def recall(
        self,
        situation: str,
        k: int = 3,
        *,
        tool: str | None = None,
        skill: str | None = None,
        success: bool | None = None,
        mode: str | None = None,
    ) -> builtins.list[RecalledEpisode]:
        """The ``k`` past episodes most like ``situation``, successes first at equal relevance.

        :param tool: only episodes that called this tool.
        :param skill: only episodes that followed this skill.
        :param success: only successes (True) or only failures (False); None keeps all.
        :param mode: passed to the memory store's recall (its default when None).
        """
        if k <= 0 or not isinstance(situation, str) or not situation.strip():
            return []
        tags = [EXPERIENCE_TAG]
        if tool:
            tags.append(f"tool:{tool}")
        if skill:
            tags.append(f"skill:{skill}")
        fetch = 2 * k if success is None else 6 * k
        options: dict[str, Any] = {} if mode is None else {"mode": mode}
        # cast: MemoryStore.recall's `list[Hit]` is read as its own `list` method by type checkers.
        # The kind as well as the tag: the kind is indexed, so a few episodes among many entries
        # are ranked among themselves instead of by testing the tags of every entry.
        with self.store.stored_forms():  # the episode rows are looked up by the entries' stored ids
            hits = cast("Sequence[Hit]", self.store.recall(
                situation, k=fetch, kind=self._episode_kinds(), tags=tags, **options
            ))
        rows = self._rows_for_entries([hit.entry.id for hit in hits])
        found: builtins.list[RecalledEpisode] = []
        for hit in hits:
            stored = rows.get(hit.entry.id)
            if stored is None:
                # An episode entry without a row (an older writer, an import): read its text.
                parsed = Episode.parse(hit.entry.content)
                if parsed is None:
                    continue
                auto = set(episode_tags(parsed))
                parsed.tags = [t for t in hit.entry.tags if t not in auto]
                stored = StoredEpisode(hit.entry.id, parsed, hit.entry.created_at, hit.entry.id)
            episode = stored.episode
            if success is not None and episode.success is not success:
                continue
            score = _weighted(hit.score, RESULT_WEIGHTS[episode.success])
            found.append(RecalledEpisode(stored.id, episode, score, hit.score, stored.created_at, hit.entry.id))
        found.sort(key=lambda r: -r.score)  # stable: equal scores keep the store's order
        return found[:k]

    def _episode_kinds(self) -> str | tuple[str, ...]:
        """The kinds episode entries have here: "episode", and "note" when an older writer or an
        import stored episodes as notes. Entries are looked at once each, newest first time round."""
        if not self._notes_hold_episodes:
            newest = self.tables.execute("SELECT max(pk) FROM entries").fetchone()[0] or 0
            if newest > self._notes_checked_to:
                found = self.tables.execute(
                    "SELECT 1 FROM entries WHERE pk > ? AND pk <= ? AND namespace = ? AND kind = 'note'"
                    f" AND EXISTS (SELECT 1 FROM {self.tables.elements('tags')} WHERE value = ?) LIMIT 1",
                    (self._notes_checked_to, newest, self.namespace, EXPERIENCE_TAG),
                ).fetchone()
                self._notes_hold_episodes = found is not None
                self._notes_checked_to = newest
        return ("episode", "note") if self._notes_hold_episodes else "episode"

    def _rows_for_entries(self, entry_ids: builtins.list[str]) -> dict[str, StoredEpisode]:
        if not entry_ids:
            return {}
        marks = ",".join("?" * len(entry_ids))
        rows = self.tables.execute(
            f"SELECT {_EPISODE_COLUMNS} FROM episodes ep WHERE ep.namespace = ? AND ep.entry_id IN ({marks})",
            (self.namespace, *entry_ids),
        ).fetchall()
        return {row[1]: _stored_episode(row) for row in rows}

    # ---- skills -----------------------------------------------------------------------------

    def save_skill(
        self,
        skill: Skill,
        *,
        origin: str = "saved",
        rationale: str = "",
        episode_id: str | None = None,
        expected_version: int | None = None,
    ) -> SkillRecord:
        """Save ``skill`` as its name's current version, keeping the previous ones as history.

        Saving an identical document adds no version. ``episode_id`` is recorded with the version
        and, when that episode is in this store, linked as a source of the skill.
        ``expected_version`` guards read-modify-write: 0 means "must not exist yet", n means "the
        current version must still be n"; otherwise :class:`InvalidInputError` (or
        :class:`DuplicateIdError` for 0) is raised and nothing is written.
        """
        if origin not in SKILL_ORIGINS:
            raise InvalidInputError(f"unknown skill origin {origin!r} — use one of: {', '.join(SKILL_ORIGINS)}")
        check_skill(skill)
        skill = self._redacted_skill(skill)
        check_skill(skill)  # a label longer than what it replaced could push the description over its limit
        text = skill.render()
        redactor = self.store.redactor
        if redactor is not None:
            rationale = redactor.scrub(rationale).text
        episode_id = self._key(episode_id)
        now = now_ms()
        with self.store.transaction():
            row = self.tables.execute(
                "SELECT pk, version, skill_md FROM skills WHERE namespace = ? AND name = ?",
                (self.namespace, skill.name),
            ).fetchone()
            current = row[1] if row else 0
            if expected_version is not None and expected_version != current:
                if expected_version == 0:
                    raise DuplicateIdError(
                        f"a skill named {skill.name!r} already exists — revise it instead, or delete it first"
                    )
                raise InvalidInputError(
                    f"skill {skill.name!r} is at version {current}, not {expected_version}: someone else changed it"
                    " — reload it and try again"
                )
            if row is None:
                skill_pk = self.tables.insert(
                    "INSERT INTO skills (namespace, name, skill_md, description, metadata, version, created_at,"
                    " updated_at) VALUES (?, ?, ?, ?, ?, 1, ?, ?) RETURNING pk",
                    (self.namespace, skill.name, text, skill.description, dumps(skill.metadata), now, now),
                )
                version = 1
            else:
                skill_pk, version = row[0], row[1]
                if row[2] != text:
                    version += 1
                    self.tables.execute(
                        "UPDATE skills SET skill_md = ?, description = ?, metadata = ?, version = ?, updated_at = ?"
                        " WHERE pk = ?",
                        (text, skill.description, dumps(skill.metadata), version, now, skill_pk),
                    )
            if row is None or row[2] != text:
                self.tables.execute(
                    "INSERT INTO skill_revisions (skill_pk, version, skill_md, origin, rationale, episode_id,"
                    " created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (skill_pk, version, text, origin, rationale, episode_id, now),
                )
            if episode_id is not None:
                self.tables.execute(
                    "INSERT INTO skill_sources (skill_pk, episode_pk, role, created_at)"
                    " SELECT ?, pk, ?, ? FROM episodes WHERE namespace = ? AND id = ? ON CONFLICT DO NOTHING",
                    (skill_pk, "revised" if origin == "revised" else "distilled", now, self.namespace, episode_id),
                )
        return self.get_skill(skill.name)

    def find_skill(self, name: str) -> SkillRecord | None:
        row = self.tables.execute(
            "SELECT pk, skill_md, version, created_at, updated_at FROM skills WHERE namespace = ? AND name = ?",
            (self.namespace, name),
        ).fetchone()
        return None if row is None else self._skill_record(row)

    def get_skill(self, name: str) -> SkillRecord:
        """The saved skill called ``name``; raises :class:`NotFoundError`."""
        record = self.find_skill(name)
        if record is None:
            raise NotFoundError(
                f"no skill named {name!r} in namespace {self.namespace!r} — `harness-mem skills list` shows them"
            )
        return record

    def _skill_record(self, row: Sequence[Any]) -> SkillRecord:
        skill_pk, text, version, created, updated = row
        sources = tuple(r[0] for r in self.tables.execute(
            "SELECT e.id FROM skill_sources s JOIN episodes e ON e.pk = s.episode_pk"
            " WHERE s.skill_pk = ? ORDER BY s.created_at, e.pk",
            (skill_pk,),
        ))
        return SkillRecord(Skill.parse(text), version, from_ms(created), from_ms(updated), sources)

    def list_skills(self, *, limit: int | None = None, after: str | None = None) -> builtins.list[SkillRecord]:
        """Every saved skill, by name (``limit`` of them, those named after ``after``: a page)."""
        sql = "SELECT pk, skill_md, version, created_at, updated_at FROM skills WHERE namespace = ?"
        params: list[Any] = [self.namespace]
        if after is not None:
            sql += " AND name > ?"
            params.append(after)
        sql += " ORDER BY name"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        rows = self.tables.execute(sql, params).fetchall()
        return [self._skill_record(row) for row in rows]

    def skills_from_episode(self, id: str) -> builtins.list[SkillRecord]:
        """The saved skills distilled or revised from the episode ``id``, by name."""
        rows = self.tables.execute(
            "SELECT s.pk, s.skill_md, s.version, s.created_at, s.updated_at FROM skills s"
            " JOIN skill_sources src ON src.skill_pk = s.pk JOIN episodes ep ON ep.pk = src.episode_pk"
            " WHERE ep.namespace = ? AND ep.id = ? ORDER BY s.name",
            (self.namespace, self._key(id) or id),
        ).fetchall()
        return [self._skill_record(row) for row in rows]

    def skills(self) -> builtins.list[Skill]:
        """The current document of every saved skill."""
        rows = self.tables.execute(
            "SELECT skill_md FROM skills WHERE namespace = ? ORDER BY name", (self.namespace,)
        ).fetchall()
        return [Skill.parse(row[0]) for row in rows]

    def skill_keys(self) -> builtins.list[tuple[str, str]]:
        """``(name, description)`` of every saved skill — all a duplicate check needs, without YAML."""
        rows = self.tables.execute(
            "SELECT name, description FROM skills WHERE namespace = ? ORDER BY name", (self.namespace,)
        ).fetchall()
        return [(name, description) for name, description in rows]

    def skill_history(self, name: str) -> builtins.list[SkillVersion]:
        """Every saved version of ``name``, oldest first; raises :class:`NotFoundError`."""
        rows = self.tables.execute(
            "SELECT r.version, r.skill_md, r.origin, r.rationale, r.episode_id, r.created_at"
            " FROM skill_revisions r JOIN skills s ON s.pk = r.skill_pk"
            " WHERE s.namespace = ? AND s.name = ? ORDER BY r.version",
            (self.namespace, name),
        ).fetchall()
        if not rows:
            self.get_skill(name)  # raises NotFoundError
        return [SkillVersion(name, v, md, origin, why, ep, from_ms(at)) for v, md, origin, why, ep, at in rows]

    def delete_skill(self, name: str) -> bool:
        """Delete a skill with its history and source links; False when there was none."""
        with self.store.transaction():
            cursor = self.tables.execute(
                "DELETE FROM skills WHERE namespace = ? AND name = ?", (self.namespace, name)
            )
        return bool(cursor.rowcount)

    def export_skills(self, root: str | os.PathLike[str], names: Iterable[str] | None = None) -> builtins.list[Path]:
        """Write each skill (or only ``names``) to ``<root>/<name>/SKILL.md``; returns the paths."""
        records = self.list_skills() if names is None else [self.get_skill(n) for n in names]
        return [write_skill_md(record.skill, root) for record in records]

    def import_skills(self, root: str | os.PathLike[str]) -> SkillImportReport:
        """Save every valid ``<root>/<name>/SKILL.md``; invalid ones are reported, not saved."""
        base = Path(root)
        if not base.is_dir():
            raise InvalidInputError(f"{base} is not a directory — point at a folder of <name>/SKILL.md skills")
        report = SkillImportReport()
        for item in scan_skills_dir(base):
            if item.skill is None:
                report.invalid.append((str(item.path), item.error or "unreadable"))
                continue
            try:
                check_skill(item.skill, dir_name=item.dir_name)
            except InvalidSkillError as exc:
                report.invalid.append((str(item.path), str(exc)))
                continue
            before = self.find_skill(item.skill.name)
            record = self.save_skill(item.skill, origin="imported", rationale=f"imported from {item.path}")
            if before is not None and before.version == record.version:
                report.unchanged.append(record.name)
            else:
                report.saved.append(record.name)
        return report



# ---- during a run ------------------------------------------------------------------------------


class ExperienceGuide:
    """Renders the ``[experience-recall]`` block for a query (``""`` when nothing is recalled).

    The layout is fixed (tests pin it): the header, then for each episode
    ``"\\n  {i}. situation: …\\n     tools used: …\\n     outcome: …"``. Skills and result are not shown.
    """

    def __init__(
        self,
        experience: ExperienceStore,
        *,
        top_k: int = 3,
        tool: str | None = None,
        skill: str | None = None,
        success: bool | None = None,
    ) -> None:
        self.experience = experience
        self.top_k = top_k
        self._filters: dict[str, Any] = {"tool": tool, "skill": skill, "success": success}

    def render(self, query: str) -> str:
        recalled = self.experience.recall(query, self.top_k, **self._filters)
        return format_guide([r.episode for r in recalled])


def format_guide(episodes: Sequence[Episode]) -> str:
    """The ``[experience-recall]`` block for ``episodes`` (``""`` for none)."""
    if not episodes:
        return ""
    lines = [GUIDE_HEADER]
    for i, ep in enumerate(episodes, start=1):
        tools = ", ".join(ep.tools) or "(none)"
        lines.append(f"\n  {i}. situation: {ep.situation}\n     tools used: {tools}\n     outcome: {ep.outcome}")
    return "".join(lines)


class ExperienceRecorder:
    """Collects what a run did and records it as an episode when the run ends.

    Wire :meth:`on_tool_use` to the loop's pre-tool hook (or call ``recorder.tool_trace.note``) and
    :meth:`on_skill_activated` to the host's skill-activation event; then :meth:`record` (or
    :meth:`record_episode`) drains both traces into one episode.
    """

    def __init__(self, experience: ExperienceStore, *, top_k: int = 3, session: str | None = None) -> None:
        self.experience = experience
        self.top_k = top_k
        self.session = session
        self.tool_trace = ToolTrace()
        self.skill_trace = SkillUseTrace()

    def on_tool_use(self, name: str) -> None:
        self.tool_trace.note(name)

    def on_skill_activated(self, payload: Any) -> None:
        self.skill_trace.note_payload(payload)

    def guide(self, top_k: int | None = None) -> ExperienceGuide:
        return ExperienceGuide(self.experience, top_k=self.top_k if top_k is None else top_k)

    def record(
        self,
        situation: str,
        outcome: str,
        success: bool | None = None,
        *,
        tags: Iterable[str] = (),
        skills: Iterable[str] = (),
    ) -> StoredEpisode:
        """Record the run so far: its tools and skills come from the traces, which start over."""
        episode = Episode(situation=situation, outcome=outcome, tags=list(tags), skills=list(skills), success=success)
        return self.record_episode(episode)

    def record_episode(self, episode: Episode) -> StoredEpisode:
        """Record ``episode``: empty ``tools`` come from the tool trace, and ``skills`` gain those the
        skill trace saw. Both traces are drained either way, so the next run starts clean."""
        tools, used = self.tool_trace.drain(), self.skill_trace.drain()
        filled = Episode(
            situation=episode.situation,
            outcome=episode.outcome,
            tools=episode.tools or tools,
            tags=episode.tags,
            skills=list(dict.fromkeys([*episode.skills, *used])) if used else episode.skills,
            success=episode.success,
        )
        return self.experience.save(filled, session=self.session)
