"""Importers of other tools' histories: months of a coding agent's work brought into memory at once.

A coding agent's hooks (:mod:`harness_mem.integrations.claude_code`) capture turns from the day they
are installed; everything before that sits in the agent's own files. These modules read those
files and store what the hooks would have stored, turn by turn, through the store's normal write
path (so it is redacted like every write):

- :mod:`.transcripts` finds the files, tells a transcript from any other JSON Lines file, and writes
  what the readers give, skipping what an earlier run stored (:func:`import_transcripts`);
- :mod:`.claude_code` reads Claude Code's transcripts (``~/.claude/projects/*/*.jsonl``);
- :mod:`.codex` reads Codex CLI's session files (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``);
- :mod:`.turns` is what a reader gives: a turn to store, or a record skipped and why.
"""

from __future__ import annotations

from .transcripts import (
    FORMATS,
    TranscriptFormat,
    TranscriptReport,
    find_transcripts,
    format_of,
    import_transcripts,
)

__all__ = ["FORMATS", "TranscriptFormat", "TranscriptReport", "find_transcripts", "format_of", "import_transcripts"]
