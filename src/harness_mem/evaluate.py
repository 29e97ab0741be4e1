"""Retrieval quality of a store on a labelled query set: recall@5, recall@10, MRR@10, latency.

A query is ``{"question", "evidence": [entry ids], "conversation"?|"session_prefix"?, "category"?,
"category_name"?}``. A query with a conversation searches only that conversation's sessions (ids
``"<conversation>:…"``), which is how LoCoMo is measured. recall@k is the share of a question's
evidence entries found in its top k, averaged over questions; MRR@10 is 1/rank of the first
evidence entry in the top 10 (0 when none is there).

A query file is read a line at a time and never held past its limits: a line longer than
:data:`MAX_QUERY_LINE_BYTES` or a file longer than :data:`MAX_QUERY_FILE_BYTES` is refused as soon
as that much is read, so ``eval /dev/zero`` stops at once instead of filling the memory.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from .errors import InvalidInputError
from .models import MAX_NESTING, check_nesting
from .recall import Mode
from .store import MemoryStore

CUTOFFS = (5, 10)
#: The longest query line: a question and its evidence ids take a few hundred bytes.
MAX_QUERY_LINE_BYTES = 1 << 20
#: The longest query file: several times the largest benchmark's (MS MARCO dev, 100,000 queries in
#: about 10 MB). The queries are held in memory while they run.
MAX_QUERY_FILE_BYTES = 64 << 20


@dataclass(frozen=True)
class Query:
    question: str
    evidence: tuple[str, ...]
    session_prefix: str | None = None
    category: str | None = None  # None: counted in the overall figures only
    qid: str | None = None


@dataclass
class Metrics:
    queries: int = 0
    recall_at_5: float = 0.0
    recall_at_10: float = 0.0
    mrr_at_10: float = 0.0

    def to_dict(self) -> dict[str, float | int]:
        return {
            "queries": self.queries,
            "recall@5": round(self.recall_at_5, 4),
            "recall@10": round(self.recall_at_10, 4),
            "mrr@10": round(self.mrr_at_10, 4),
        }


@dataclass
class EvalReport:
    mode: str
    overall: Metrics
    by_category: dict[str, Metrics]
    latency_ms_p50: float
    latency_ms_p95: float
    skipped: int = 0  # queries without evidence
    per_query: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "overall": self.overall.to_dict(),
            "by_category": {name: m.to_dict() for name, m in self.by_category.items()},
            "latency_ms": {"p50": round(self.latency_ms_p50, 3), "p95": round(self.latency_ms_p95, 3)},
            "skipped": self.skipped,
        }


def read_query_lines(stream: IO[bytes] | IO[str]) -> Iterator[bytes | str]:
    """The lines of a query file, each read no further than :data:`MAX_QUERY_LINE_BYTES` (and the
    file no further than :data:`MAX_QUERY_FILE_BYTES`): past a limit, InvalidInputError."""
    total = 0
    number = 0
    while line := stream.readline(MAX_QUERY_LINE_BYTES + 1):
        number += 1
        total += len(line)
        if len(line) > MAX_QUERY_LINE_BYTES and line[-1:] not in (b"\n", "\n"):
            raise InvalidInputError(f"query line {number}: longer than {MAX_QUERY_LINE_BYTES:,} bytes — shorten it")
        if total > MAX_QUERY_FILE_BYTES:
            raise InvalidInputError(f"the query file is longer than {MAX_QUERY_FILE_BYTES:,} bytes — split it")
        yield line


def parse_queries(lines: Iterable[bytes | str] | IO[bytes] | IO[str]) -> list[Query]:
    """Queries from JSON Lines (a file is read with :func:`read_query_lines`); a bad line raises
    InvalidInputError naming its number."""
    if hasattr(lines, "readline"):
        lines = read_query_lines(lines)  # type: ignore[arg-type]  # an IO, which hasattr cannot narrow
    queries = []
    for number, raw in enumerate(lines, start=1):
        data = _query_object(raw, number)
        if data is None:
            continue
        question, evidence = data["question"], data.get("evidence") or []
        prefix = data.get("session_prefix") or (f"{data['conversation']}:" if data.get("conversation") else None)
        category = data.get("category_name") or (str(data["category"]) if data.get("category") is not None else None)
        queries.append(Query(question, tuple(map(str, evidence)), prefix, category, data.get("qid")))
    return queries


def _query_object(raw: bytes | str, number: int) -> dict[str, Any] | None:
    """One query line as a JSON object with a string question (None for a blank line), else a clear error."""

    def bad(reason: str) -> InvalidInputError:
        return InvalidInputError(f"query line {number}: {reason}")

    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise bad(f"not valid UTF-8 (byte {exc.start})") from None
    if not raw.strip():
        return None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise bad(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    except RecursionError:  # nested deeper than the parser's stack
        raise bad(f"nested more than {MAX_NESTING} levels deep — flatten it") from None
    except ValueError:  # the parser's other ValueError: an integer too long to convert from text
        raise bad(f"a number has more than {sys.get_int_max_str_digits():,} digits — write it as a string") from None
    try:
        check_nesting(data, "the line")
    except InvalidInputError as exc:
        raise bad(str(exc)) from None
    if not isinstance(data, dict):
        raise bad(f"expected a JSON object, got {type(data).__name__}")
    if "question" not in data:
        raise bad("missing 'question'")
    if not isinstance(data["question"], str) or not isinstance(data.get("evidence") or [], list):
        raise bad("question must be a string and evidence a list")
    return data


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


def evaluate(
    store: MemoryStore,
    queries: Sequence[Query],
    *,
    mode: Mode | None = None,
    progress: Callable[[int], None] | None = None,
    keep_per_query: bool = False,
) -> EvalReport:
    """Run every query against ``store`` and score the rankings against the evidence ids.

    Latency is the retrieval's alone: questions are embedded in one batch beforehand.
    """
    # Per category; the overall figures are kept apart (key None), so that no category name, "all"
    # included, can share their tally and count a query twice.
    sums: dict[str | None, list[float]] = {}
    counts: dict[str | None, int] = {}
    latencies: list[float] = []
    per_query: list[dict[str, Any]] = []
    skipped = 0
    depth = max(CUTOFFS)
    # Embed every question up front, in batches: the latency measured is the retrieval's, and one
    # model call per question would dominate the run.
    vectors = None
    if store.embedder is not None and (mode or "hybrid") != "keyword":
        vectors = store.embed_queries([q.question for q in queries])
    for position, query in enumerate(queries):
        if progress is not None:
            progress(1)
        if not query.evidence:
            skipped += 1
            continue
        started = time.perf_counter()
        hits = store.recall(query.question, k=depth, mode=mode, session_prefix=query.session_prefix,
                            query_vector=vectors[position] if vectors is not None else None)
        latencies.append((time.perf_counter() - started) * 1000)
        ranked = [hit.entry.id for hit in hits]
        evidence = set(query.evidence)
        scores = [len(evidence & set(ranked[:cutoff])) / len(evidence) for cutoff in CUTOFFS]
        first = next((i for i, hit_id in enumerate(ranked[:10], start=1) if hit_id in evidence), None)
        scores.append(1.0 / first if first else 0.0)
        for bucket in (None, query.category) if query.category is not None else (None,):
            totals = sums.setdefault(bucket, [0.0] * len(scores))
            for i, value in enumerate(scores):
                totals[i] += value
            counts[bucket] = counts.get(bucket, 0) + 1
        if keep_per_query:
            per_query.append({"qid": query.qid, "category": query.category, "ranked": ranked, "scores": scores})

    def metrics(bucket: str | None) -> Metrics:
        n = counts.get(bucket, 0)
        if not n:
            return Metrics()
        r5, r10, mrr = (value / n for value in sums[bucket])
        return Metrics(n, r5, r10, mrr)

    latencies.sort()
    categories = sorted(b for b in counts if b is not None)
    return EvalReport(
        mode=mode or "default",
        overall=metrics(None),
        by_category={name: metrics(name) for name in categories},
        latency_ms_p50=_percentile(latencies, 0.5),
        latency_ms_p95=_percentile(latencies, 0.95),
        skipped=skipped,
        per_query=per_query,
    )
