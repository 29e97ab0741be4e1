"""Experience: what agents did and learned, kept beside their memories in the same file.

- :class:`Episode` — situation → tools used → outcome, in a fixed text format (``episode``);
- :class:`ExperienceStore` — episodes and skills as rows, recall of similar episodes (``store``);
- :class:`TranscriptRecorder` — turns captured as they happen, written in the background (``transcript``);
- :class:`TranscriptWriter` — the same on a thread of its own, so a kill -9 loses only the last
  interval's turns (``transcript_writer``);
- :func:`consolidate` — transcripts turned offline into topic segments, facts and, for agent runs,
  episodes (``consolidate``, with ``derive``, ``segments``, ``statements``, ``timephrases``,
  ``outcomes`` and, with a model, ``model_consolidation``);
- :class:`Skill` and the SKILL.md rules (``skills``); :class:`SkillDistiller` and
  :class:`SkillReviser` draft and fix skills with a text model (``distill``).
"""

from .consolidate import ConsolidationReport, consolidate, episode_id_for
from .distill import Draft, Revision, SkillDistiller, SkillReviser, distill_episode, revise_skill
from .episode import Episode, SkillUseTrace, ToolTrace
from .outcomes import Outcome, infer_outcome
from .skills import Skill, check_skill, read_skill, scan_skills_dir, write_skill_md
from .store import (
    EXPERIENCE_SOURCE,
    ExperienceGuide,
    ExperienceRecorder,
    ExperienceStore,
    RecalledEpisode,
    SkillImportReport,
    SkillRecord,
    SkillVersion,
    StoredEpisode,
    episode_tags,
)
from .transcript import DEFAULT_MAX_CHARS, TranscriptRecorder, TranscriptStats, truncate_turn
from .transcript_writer import TranscriptWriter

__all__ = [
    "DEFAULT_MAX_CHARS",
    "EXPERIENCE_SOURCE",
    "ConsolidationReport",
    "Draft",
    "Episode",
    "ExperienceGuide",
    "ExperienceRecorder",
    "ExperienceStore",
    "Outcome",
    "RecalledEpisode",
    "Revision",
    "Skill",
    "SkillDistiller",
    "SkillImportReport",
    "SkillRecord",
    "SkillReviser",
    "SkillUseTrace",
    "SkillVersion",
    "StoredEpisode",
    "ToolTrace",
    "TranscriptRecorder",
    "TranscriptStats",
    "TranscriptWriter",
    "check_skill",
    "consolidate",
    "distill_episode",
    "episode_id_for",
    "episode_tags",
    "infer_outcome",
    "read_skill",
    "revise_skill",
    "scan_skills_dir",
    "truncate_turn",
    "write_skill_md",
]
