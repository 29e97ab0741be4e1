"""What consolidation's derived entries are worth on LoCoMo dev, and how fast it runs (issue #20).

Run from the repository root::

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_consolidate.py                  # everything
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_consolidate.py --parts locomo   # quality only
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_consolidate.py --parts throughput --sessions 2000
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_consolidate.py --json > out.json
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_consolidate.py --import-cache /tmp/bc-cache  # reuse the import
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_consolidate.py --parts throughput --vector-sessions 200
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_consolidate.py --parts locomo --rerank-every 1  # + recall's rerank

The default run takes 10 to 12 minutes on two shared cores (LoCoMo 3 to 5: its import and its
consolidation embed with the real model; 10,000 sessions about 7); ``--sessions 2000`` makes it
about 6, ``--import-cache`` saves the LoCoMo import (about a minute) on later runs.

The data (LoCoMo, Maharana et al., ACL 2024; CC BY-NC 4.0) is read at run time from ``--data``
(default ``../shared/data/locomo-dev`` beside the repository) and never copied into the project.

**LoCoMo quality** (``--parts locomo``). ``locomo_turns.jsonl`` is imported as it is, through the
path ``harness-mem import`` takes (:func:`harness_mem.jsonl.import_jsonl`), into a new file with the
default embedder (all-MiniLM-L6-v2); the raw-turn figures are measured there, then
:func:`harness_mem.experience.consolidate` runs (no model: segments and facts by code) and the
derived figures are measured on the same file. Every recall is hybrid, within the conversation
(``session_prefix="<conversation>:"``), with the query embedded as recall embeds it.

- **derived / turns**: derived entries (kind ``summary`` + kind ``fact``) per transcript turn; the
  goal is at most 0.25.
- **link@1**: for each of the 1,210 observations of ``locomo_observations.jsonl`` (a third-person
  fact an annotator kept, with the turns it was written from), its text as the query, recall over
  the derived entries only (``derived=True``): a hit when the top entry's ``metadata.source_turns``
  include one of the observation's ``evidence`` turns. Recall ranks a derived entry by the better
  of its own words and the turns it cites (:mod:`harness_mem.sourced`); the same link@1 with its
  own words alone is shown beside it. Raw turns: the same recall over the turns
  only (plain recall), a hit when the top turn *is* an evidence turn. Goal .80 (raw turns ~.741).
  ``link@10`` (the same over the top 10: a ceiling for reranking) is shown beside it, and link@1 is
  broken down by the kind of the entry that came first. Each kind is also asked alone (its own
  lane, ``kind=``): the issue's two baselines are one lane each, topic segments for link@1 at a
  fifth of the turns, fact sentences for F1@1.
- **F1@1**: SQuAD token F1 (lower-case, punctuation and a/an/the removed, whitespace tokens)
  between the observation and the top entry's text: how close the derived text is to what a
  reader would keep (a long segment that holds the fact scores low). Goal .45 (raw turns ~.360).
  A turn's text is ``"<speaker>: <content>"``, as the store indexes it (a derived entry names its
  speakers in its content); the turns' F1 over the content alone is shown beside it.
- **QA R@10**: the questions of ``locomo_queries.jsonl``, k=10: the share of each question's
  evidence turns in the top 10. *turns* is plain recall (derived entries left out), before and
  after consolidating: the two should be equal (the derived lane must not disturb it); the
  number of questions whose plain top 10 changed at all is printed under the table.
  *mixed* is recall over everything (``kind=("turn", "fact", "summary")``) after consolidating,
  where a derived hit stands for its source turns: each hit is expanded in place into its
  ``source_turns``, duplicates dropped, the list cut at 10.

**Throughput** (``--parts throughput``). ``--sessions`` synthetic two-person sessions (default
10,000, about 216k turns), made by replaying LoCoMo's 128 sessions under new session ids, with the
speakers renamed (a pair of names per session), the dates moved on a week per replay and every
sentence ending "in <a made-up place, one per replay>", so that no two replays derive the same facts
(a fact said twice is stored once: replayed words would be written once and skew the count). The
extra word lifts some statements over the fact threshold, so these sessions derive more entries
per turn than LoCoMo's (about 0.8 against 0.64): if anything the rate is pessimistic. They are
imported into a keyword-only file (``MemoryStore(path, embedder=None)``, the import's default
worker choice) and consolidated; turns/s of the import and turns/s and sessions/s of
consolidation are reported. The rate depends on the file's size, so compare runs at the same
``--sessions``. The cost of vectors
is shown by the LoCoMo run above (its row in the same table: 128 sessions with the embedder, as
consolidation embeds every derived entry it writes) and, with ``--vector-sessions N`` (e.g. 200;
default 0, as it adds minutes), by N synthetic sessions imported and consolidated with the embedder.

**Failure examples** (``--examples N``, default 5): link@1 misses (the observation, its evidence
turns, the top derived entry and the rank of the first linked one) and hits with a low F1@1,
chosen evenly across the set, not the first ones found — they show what to tune.

Timings are wall-clock on whatever else the machine is running; the quality figures do not
depend on it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import statistics
import string
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from harness_mem import MemoryStore, sourced
from harness_mem.errors import NotFoundError
from harness_mem.experience import consolidate
from harness_mem.jsonl import import_jsonl
from harness_mem.models import Hit

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "locomo-dev"
DERIVED_KINDS = ("summary", "fact")
MIXED_KINDS = ("turn", *DERIVED_KINDS)
K = 10
# Names for the replayed speakers: a different pair per replay, so replays derive different facts.
NAMES = ("Avery Blake Casey Dana Eli Farah Gus Hana Ivo Jun Kira Leo Maya Nico Omar Pia Quinn Rosa Sami Tess "
         "Uma Vik Wren Xena Yusuf Zoe Arlo Bea Cyrus Dot Emil Fern Gil Hope Isla Jade Kai Lina Milo Nora").split()


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Observation:
    id: str
    conversation: str
    text: str
    evidence: frozenset[str]


@dataclass(frozen=True)
class Question:
    qid: str
    conversation: str
    text: str
    category: str
    evidence: frozenset[str]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def load_observations(data: Path) -> list[Observation]:
    return [Observation(r["id"], r["conversation"], r["text"], frozenset(r["evidence"]))
            for r in read_jsonl(data / "locomo_observations.jsonl") if r["evidence"]]


def load_questions(data: Path) -> list[Question]:
    return [Question(r["qid"], r["conversation"], r["question"], r.get("category_name") or str(r["category"]),
                     frozenset(r["evidence"]))
            for r in read_jsonl(data / "locomo_queries.jsonl") if r["evidence"]]


# ------------------------------------------------------------------------------------------ scoring


_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def squad_tokens(text: str) -> list[str]:
    """SQuAD's answer normalisation: lower-case, punctuation and articles removed, split on spaces."""
    return _ARTICLES.sub(" ", text.lower().translate(_PUNCTUATION)).split()


def token_f1(reference: str, candidate: str) -> float:
    ref, got = squad_tokens(reference), squad_tokens(candidate)
    common = sum((Counter(ref) & Counter(got)).values())
    if not common:
        return 0.0
    precision, recall = common / len(got), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def spoken(hit: Hit) -> str:
    """What an entry says, with whose words they are: ``"<role>: <content>"`` for a turn (as the
    store indexes it; a derived entry names its speakers in its content)."""
    return f"{hit.entry.role}: {hit.entry.content}" if hit.entry.role else hit.entry.content


def source_turns(hit: Hit) -> list[str]:
    turns = (hit.entry.metadata or {}).get("source_turns") or []
    return [t for t in turns if isinstance(t, str)]


def linked(hit: Hit, evidence: frozenset[str], *, derived: bool) -> bool:
    """Whether a hit stands for an evidence turn: a derived entry through its source turns, a turn by its id."""
    return bool(evidence.intersection(source_turns(hit))) if derived else hit.entry.id in evidence


def expanded(hits: Sequence[Hit], k: int = K) -> list[str]:
    """Turn ids of a mixed ranking: a derived hit replaced in place by its source turns, deduplicated, cut at k."""
    ranked: dict[str, None] = {}
    for hit in hits:
        for turn_id in source_turns(hit) or [hit.entry.id]:  # a turn (or a fact nobody derived) is itself
            ranked.setdefault(turn_id, None)
    return list(ranked)[:k]


def recall_at(ranked: Sequence[str], evidence: frozenset[str], k: int = K) -> float:
    return len(evidence.intersection(ranked[:k])) / len(evidence)


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


# ----------------------------------------------------------------------------------------- LoCoMo


def query_vectors(store: MemoryStore, texts: Sequence[str]) -> list[Any]:
    """The queries embedded as recall embeds them, in one batch (None each without an embedder)."""
    if store.embedder is None:
        return [None] * len(texts)
    return list(store.embed_queries(list(texts)))


@dataclass(frozen=True)
class Linked:
    """One observation's recall: the top entry, and where the first entry linked to its evidence came."""

    observation: Observation
    top: Hit | None
    first_linked_rank: int | None
    f1: float  # against the top entry's text ("<speaker>: <content>" for a turn)
    f1_content: float  # against its content alone

    @property
    def hit(self) -> bool:
        return self.first_linked_rank == 1

    @property
    def kind(self) -> str | None:
        return self.top.entry.kind if self.top else None


@contextmanager
def own_words_only() -> Iterator[None]:
    """Recall with derived entries ranked by their own words, not also by the turns they cite."""
    share = sourced.SOURCE_SHARE
    sourced.SOURCE_SHARE = 0.0
    try:
        yield
    finally:
        sourced.SOURCE_SHARE = share


def linking(store: MemoryStore, observations: Sequence[Observation], vectors: Sequence[Any], *,
            derived: bool, rerank: bool = False, lane: str | None = None) -> tuple[dict[str, Any], list[Linked]]:
    """link@1, link@10 and F1@1 of the observations, over the derived entries (``lane``: those of
    one kind alone) or over the turns."""
    rows = []
    for obs, vector in zip(observations, vectors, strict=True):
        hits = store.recall(obs.text, K, mode="hybrid", session_prefix=f"{obs.conversation}:",
                            query_vector=vector, derived=True if derived else None, rerank=rerank, kind=lane)
        top = hits[0] if hits else None
        first = next((rank for rank, hit in enumerate(hits, start=1) if linked(hit, obs.evidence, derived=derived)),
                     None)
        rows.append(Linked(obs, top, first, token_f1(obs.text, spoken(top)) if top else 0.0,
                           token_f1(obs.text, top.entry.content) if top else 0.0))
    by_kind: dict[str, dict[str, Any]] = {}
    for kind in sorted({r.kind for r in rows if r.kind}):
        mine = [r for r in rows if r.kind == kind]
        by_kind[kind] = {"top1": len(mine), "link_at_1": mean([r.hit for r in mine]),
                         "f1_at_1": mean([r.f1 for r in mine])}
    return {
        "n": len(rows),
        "link_at_1": mean([r.hit for r in rows]),
        "link_at_10": mean([r.first_linked_rank is not None for r in rows]),
        "f1_at_1": mean([r.f1 for r in rows]),
        "f1_content_at_1": mean([r.f1_content for r in rows]),
        "by_top_kind": by_kind,
    }, rows


def qa(store: MemoryStore, questions: Sequence[Question], vectors: Sequence[Any], *, mixed: bool) -> dict[str, Any]:
    """R@10 over the questions: turns only (plain recall), or mixed with derived hits expanded."""
    scores: dict[str, list[float]] = defaultdict(list)
    rankings = []
    derived_in_top = 0
    for q, vector in zip(questions, vectors, strict=True):
        if mixed:
            hits = store.recall(q.text, K, mode="hybrid", session_prefix=f"{q.conversation}:", query_vector=vector,
                                kind=MIXED_KINDS)
            derived_in_top += sum(hit.entry.kind in DERIVED_KINDS for hit in hits)
            ranked = expanded(hits)
        else:
            hits = store.recall(q.text, K, mode="hybrid", session_prefix=f"{q.conversation}:", query_vector=vector)
            ranked = [hit.entry.id for hit in hits]
        rankings.append(ranked)
        score = recall_at(ranked, q.evidence)
        scores["overall"].append(score)
        scores[q.category].append(score)
    result: dict[str, Any] = {name: mean(values) for name, values in scores.items()}
    if mixed:
        result["derived_hits_per_question"] = derived_in_top / max(1, len(questions))
    result["rankings"] = rankings
    return result


def imported_store(data: Path, scratch: Path, cache: Path | None, embedder: str) -> tuple[Path, float | None]:
    """A new file holding LoCoMo's turns as ``harness-mem import`` writes them; (path, import seconds).

    With ``cache``, the imported file is kept there (keyed by the data and the embedder) and copied
    on later runs, which then report no import time.
    """
    source = data / "locomo_turns.jsonl"
    db = scratch / "locomo.db"
    key = hashlib.sha256(source.read_bytes() + embedder.encode()).hexdigest()[:16]
    cached = cache / f"locomo-{key}.db" if cache else None
    if cached is not None and cached.exists():
        shutil.copyfile(cached, db)
        return db, None
    with MemoryStore(db, embedder=embedder) as store:
        started = time.perf_counter()
        report = import_jsonl(store, source.read_bytes().splitlines())
        seconds = time.perf_counter() - started
        if report.errors:
            raise SystemExit(f"import of {source} failed: {report.errors[0]}")
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(db, cached)  # closed: the WAL is checkpointed into the file
    return db, seconds


def summary_shape(store: MemoryStore) -> dict[str, Any]:
    """What the summaries read like: their length against the turns they cover (words), and how
    many still hold a question or a list of topic words instead of what was said."""
    words = {e.id: len(e.content.split()) for e in store.list(kind="turn")}
    ratios, questions, word_lists, n = [], 0, 0, 0
    for entry in store.list(kind="summary"):
        covered = sum(words.get(t, 0) for t in entry.metadata.get("source_turns", []))
        if covered:
            ratios.append(len(entry.content.split()) / covered)
        n += 1
        questions += "?" in entry.content
        word_lists += re.search(r"talked about \w+, \w+", entry.content) is not None
    return {"summaries": n, "median_ratio": statistics.median(ratios) if ratios else 0.0,
            "with_question": questions / n if n else 0.0, "word_lists": word_lists / n if n else 0.0}


def locomo(data: Path, scratch: Path, cache: Path | None, embedder: str, examples: int,
           rerank_every: int = 0) -> dict[str, Any]:
    observations, questions = load_observations(data), load_questions(data)
    log("LoCoMo: importing the turns …")
    db, import_s = imported_store(data, scratch, cache, embedder)
    with MemoryStore(db, embedder=embedder) as store:
        turns = store.count(kind="turn")
        sessions = len({e.session for e in store.list(kind="turn")})
        obs_vectors = query_vectors(store, [o.text for o in observations])
        q_vectors = query_vectors(store, [q.text for q in questions])
        log("LoCoMo: raw-turn baselines …")
        raw, _ = linking(store, observations, obs_vectors, derived=False)
        qa_before = qa(store, questions, q_vectors, mixed=False)
        log("LoCoMo: consolidating …")
        started = time.perf_counter()
        report = consolidate(store)
        consolidate_s = time.perf_counter() - started
        log(f"LoCoMo: {report.summary()} in {consolidate_s:.1f} s; measuring …")
        derived_count = {kind: store.count(kind=kind, derived=True) for kind in DERIVED_KINDS}
        shape = summary_shape(store)
        derived, derived_rows = linking(store, observations, obs_vectors, derived=True)
        with own_words_only():  # the same recall, each derived entry ranked by its own words alone
            own_words, _ = linking(store, observations, obs_vectors, derived=True)
        # Each kind alone: the two baselines are a lane each (segments for link@1 at a
        # quarter of the turns, fact sentences for F1@1).
        lanes = {kind: linking(store, observations, obs_vectors, derived=True, lane=kind)[0] for kind in DERIVED_KINDS}
        qa_after = qa(store, questions, q_vectors, mixed=False)
        qa_mixed = qa(store, questions, q_vectors, mixed=True)
        failures = failure_examples(store, derived_rows, examples)
        reranked = None
        if rerank_every:  # recall's rerank option, on a sample: a model pass per observation
            log("LoCoMo: linking with rerank …")
            sample = list(range(0, len(observations), rerank_every))
            picked, picked_vectors = [observations[i] for i in sample], [obs_vectors[i] for i in sample]
            reranked = {"every": rerank_every,
                        "hybrid": linking(store, picked, picked_vectors, derived=True)[0],
                        "rerank": linking(store, picked, picked_vectors, derived=True, rerank=True)[0],
                        "lanes": {kind: linking(store, picked, picked_vectors, derived=True, rerank=True, lane=kind)[0]
                                  for kind in DERIVED_KINDS}}
        embedder_name = store.embedder.name if store.embedder is not None else "keyword-only"
    # The derived entries have a keyword index of their own, so a plain recall should not move at
    # all: count the questions whose plain top 10 moved, even where R@10 did not.
    moved = sum(a != b for a, b in zip(qa_before["rankings"], qa_after["rankings"], strict=True))
    for result in (qa_before, qa_after, qa_mixed):
        del result["rankings"]
    return {
        "turns": turns,
        "sessions": sessions,
        "observations": len(observations),
        "questions": len(questions),
        "embedder": embedder_name,
        "import_s": import_s,
        "consolidate_s": consolidate_s,
        "consolidate_turns_per_s": turns / consolidate_s,
        "consolidate_sessions_per_s": sessions / consolidate_s,
        "segments_written": report.segments,
        "facts_written": report.facts,
        "facts_repeated": report.facts_repeated,
        "derived": derived_count,
        "derived_per_turn": sum(derived_count.values()) / turns,
        "summary_shape": shape,
        "facts_per_turn": derived_count["fact"] / turns,
        "raw_turns": raw,
        "derived_entries": derived,
        "derived_entries_own_words": own_words,
        "derived_entries_reranked": reranked,
        "lanes": lanes,
        "qa_turns_before": qa_before,
        "qa_turns_after": qa_after,
        "qa_mixed": qa_mixed,
        "qa_turns_rankings_moved": moved,
        "examples": failures,
    }


def _evenly(rows: Sequence[Linked], n: int) -> list[Linked]:
    if n <= 0 or not rows:
        return []
    step = len(rows) / min(n, len(rows))
    return [rows[int(i * step)] for i in range(min(n, len(rows)))]


def _clip(text: str, limit: int = 400) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def failure_examples(store: MemoryStore, rows: Sequence[Linked], n: int) -> dict[str, list[dict[str, Any]]]:
    """Link@1 misses, and link@1 hits whose top entry is far from the observation's words (F1@1 < .2)."""

    def shown(row: Linked) -> dict[str, Any]:
        obs, top = row.observation, row.top
        evidence = []
        for turn_id in sorted(obs.evidence):
            try:
                turn = store.get(turn_id)
                evidence.append(f"{turn_id} {turn.role}: {_clip(turn.content, 300)}")
            except NotFoundError:  # an evidence id the turns file lacks (a label error upstream)
                evidence.append(f"{turn_id} (not in the turns)")
        return {
            "observation": f"{obs.id}: {obs.text}",
            "evidence": evidence,
            "top": None if top is None else {
                "id": top.entry.id, "kind": top.entry.kind, "source_turns": source_turns(top),
                "content": _clip(top.entry.content)},
            "first_linked_rank": row.first_linked_rank,
            "f1": round(row.f1, 3),
        }

    misses = [r for r in rows if not r.hit]
    low_f1 = [r for r in rows if r.hit and r.f1 < 0.2]
    return {"link_misses": [shown(r) for r in _evenly(misses, n)],
            "low_f1_hits": [shown(r) for r in _evenly(low_f1, n)]}


# ------------------------------------------------------------------------------------- throughput


_SENTENCE_END = re.compile(r"([.!?]+)(?=\s|$)")
_SYLLABLES = "ka lo mi nu re sa ti vo be da fi go hu ja ke li mo pe ru so".split()


def place_name(replay: int) -> str:
    """A made-up place for a replay (``Kalo``, ``Kami`` …): one per replay, never a real word."""
    digits = [0, 0, 0]
    for i in range(3):
        replay, digits[2 - i] = divmod(replay, len(_SYLLABLES))
    return "".join(_SYLLABLES[d] for d in digits).capitalize()


def synthetic_lines(data: Path, sessions: int) -> list[str]:
    """``sessions`` two-person sessions replayed from LoCoMo's, as import lines (see the docstring)."""
    by_session: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in read_jsonl(data / "locomo_turns.jsonl"):
        by_session[row["session"]].append(row)
    originals = [sorted(turns, key=lambda r: r["seq"]) for _, turns in sorted(by_session.items())]
    pairs = [(a, b) for a in NAMES for b in NAMES if a != b]
    lines = []
    for j in range(sessions):
        replay, index = divmod(j, len(originals))
        turns = originals[index]
        roles = list(dict.fromkeys(t["role"] for t in turns))
        names = dict(zip(roles, pairs[(j * 7919) % len(pairs)], strict=False))  # 7919: spread the pairs
        rename = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")

        def renamed(match: re.Match[str], names: dict[str, str] = names) -> str:
            return names[match.group(1)]

        shift = timedelta(weeks=replay)
        # Every sentence ends "… in <the replay's place>": no two replays say the same words, so
        # their facts are not stored once as a fact said twice is.
        place = f" in {place_name(replay)}\\1"
        session = f"synth-{j:06d}:session"
        for t in turns:
            when = datetime.fromisoformat(t["ts_iso"]) + shift
            lines.append(json.dumps({
                "id": f"synth-{j:06d}:{t['dia_id']}", "session": session, "role": names.get(t["role"], t["role"]),
                "timestamp": when.isoformat(), "text": _SENTENCE_END.sub(place, rename.sub(renamed, t["text"])),
            }))
    return lines


def throughput(data: Path, scratch: Path, sessions: int, embedder: str | None) -> dict[str, Any]:
    """Import and consolidate ``sessions`` synthetic sessions into a new file (keyword-only when no embedder)."""
    lines = synthetic_lines(data, sessions)
    db = scratch / f"synthetic-{sessions}-{embedder or 'none'}.db"
    log(f"throughput ({embedder or 'keyword-only'}): importing {sessions:,} sessions, {len(lines):,} turns …")
    with MemoryStore(db, embedder=embedder) as store:
        label = "keyword-only" if store.embedder is None else store.embedder.name
        started = time.perf_counter()
        imported = import_jsonl(store, lines)
        import_s = time.perf_counter() - started
        if imported.errors:
            raise SystemExit(f"synthetic import failed: {imported.errors[0]}")
        log(f"throughput ({label}): consolidating …")
        started = time.perf_counter()
        report = consolidate(store)
        consolidate_s = time.perf_counter() - started
    return {
        "store": label,
        "sessions": sessions,
        "turns": len(lines),
        "import_s": import_s,
        "import_turns_per_s": len(lines) / import_s,
        "consolidate_s": consolidate_s,
        "consolidate_turns_per_s": len(lines) / consolidate_s,
        "consolidate_sessions_per_s": sessions / consolidate_s,
        "segments": report.segments,
        "facts": report.facts,
        "facts_repeated": report.facts_repeated,
        "derived_per_turn": (report.segments + report.facts) / len(lines),
        "file_mb": db.stat().st_size / 1e6,
    }


# ------------------------------------------------------------------------------------------ output


def markdown(result: dict[str, Any]) -> str:
    out: list[str] = []
    lo = result.get("locomo")
    if lo:
        raw, der = lo["raw_turns"], lo["derived_entries"]
        d = lo["derived"]
        out += [
            f"## LoCoMo dev: {lo['turns']:,} turns, {lo['sessions']} sessions, {lo['observations']:,} observations,"
            f" {lo['questions']} questions (hybrid, {lo['embedder']})",
            "",
            f"Derived: {d['summary']:,} segments + {d['fact']:,} facts = {d['summary'] + d['fact']:,} entries,"
            f" **{lo['derived_per_turn']:.3f} per turn** (goal ≤ 0.25);"
            f" {lo['facts_repeated']} facts already known. Consolidation took {lo['consolidate_s']:.1f} s"
            f" ({lo['consolidate_turns_per_s']:.0f} turns/s, embedding included)"
            + (f"; the import {lo['import_s']:.1f} s." if lo["import_s"] is not None else "; the import was cached."),
            "",
            f"Summaries: {lo['summary_shape']['summaries']:,}, a median **{lo['summary_shape']['median_ratio']:.2f}**"
            f" of the words of the turns they cover (goal ≤ 0.4); {lo['summary_shape']['with_question']:.1%} hold a"
            f" question, {lo['summary_shape']['word_lists']:.1%} a list of topic words. Facts:"
            f" {lo['facts_per_turn']:.3f} per turn.",
            "",
            "| observations → entry | link@1 | link@10 | F1@1 | F1@1 content only |",
            "|---|---|---|---|---|",
            f"| raw turns (issue's baseline: link .741, F1 .360) | {raw['link_at_1']:.3f} | {raw['link_at_10']:.3f} |"
            f" {raw['f1_at_1']:.3f} | {raw['f1_content_at_1']:.3f} |",
            f"| derived entries (goal: link ≥ .80, F1 ≥ .45) | **{der['link_at_1']:.3f}** | {der['link_at_10']:.3f} |"
            f" **{der['f1_at_1']:.3f}** | |",
        ]
        if lo.get("derived_entries_own_words"):
            own = lo["derived_entries_own_words"]
            out.append(f"| … ranked by their own words alone (not their sources) | {own['link_at_1']:.3f} |"
                       f" {own['link_at_10']:.3f} | {own['f1_at_1']:.3f} | |")
        for kind, k in der["by_top_kind"].items():
            out.append(f"| … top entry a {kind} ({k['top1']} of {der['n']}) | {k['link_at_1']:.3f} | |"
                       f" {k['f1_at_1']:.3f} | |")
        names = {"summary": "segments", "fact": "facts"}
        for kind, got in lo["lanes"].items():
            out.append(f"| {names[kind]} alone ({d[kind] / lo['turns']:.3f} per turn) | {got['link_at_1']:.3f} |"
                       f" {got['link_at_10']:.3f} | {got['f1_at_1']:.3f} | |")
        if lo.get("derived_entries_reranked"):
            rr = lo["derived_entries_reranked"]
            rows = [("derived entries, hybrid", rr["hybrid"]), ("derived entries, hybrid + rerank", rr["rerank"]),
                    *((f"{names[kind]} alone, hybrid + rerank", got) for kind, got in rr["lanes"].items())]
            for label, got in rows:
                out.append(f"| {label}, every {rr['every']} observations ({got['n']}) |"
                           f" {got['link_at_1']:.3f} | {got['link_at_10']:.3f} | {got['f1_at_1']:.3f} | |")
        cats = [c for c in lo["qa_turns_before"] if c != "overall"]
        out += [
            "",
            "| QA R@10 | overall | " + " | ".join(cats) + " |",
            "|---|---|" + "---|" * len(cats),
        ]
        for name, key in (("turns, before consolidating", "qa_turns_before"),
                          ("turns, after consolidating", "qa_turns_after"),
                          ("mixed (derived hits → their source turns)", "qa_mixed")):
            row = lo[key]
            out.append(f"| {name} | {row['overall']:.3f} | " + " | ".join(f"{row[c]:.3f}" for c in cats) + " |")
        out.append(f"\nPlain recall's top 10 moved after consolidating for {lo['qa_turns_rankings_moved']} of"
                   f" {lo['questions']} questions (the derived entries' words are counted in a keyword index of"
                   f" their own). Mixed recall: {lo['qa_mixed']['derived_hits_per_question']:.1f} derived"
                   " entries in each top 10.")
    runs = result.get("throughput")
    if runs:
        out += [
            "",
            "## Throughput (synthetic sessions replayed from LoCoMo)",
            "",
            "| store | sessions | turns | import turns/s | consolidate turns/s | sessions/s | derived/turn | file MB |",
            "|---|---|---|---|---|---|---|---|",
        ]
        if lo:  # the LoCoMo file above: the same work with vectors (consolidation embeds what it writes)
            imported = f"{lo['turns'] / lo['import_s']:,.0f}" if lo["import_s"] else "(cached)"
            out.append(f"| LoCoMo dev, {lo['embedder']} | {lo['sessions']} | {lo['turns']:,} | {imported} |"
                       f" {lo['consolidate_turns_per_s']:,.0f} | {lo['consolidate_sessions_per_s']:,.1f} |"
                       f" {lo['derived_per_turn']:.3f} | |")
        for r in runs:
            out.append(f"| {r['store']} | {r['sessions']:,} | {r['turns']:,} | {r['import_turns_per_s']:,.0f} |"
                       f" {r['consolidate_turns_per_s']:,.0f} | {r['consolidate_sessions_per_s']:,.1f} |"
                       f" {r['derived_per_turn']:.3f} | {r['file_mb']:,.0f} |")
    if lo and (lo["examples"]["link_misses"] or lo["examples"]["low_f1_hits"]):
        for title, key in (("link@1 misses", "link_misses"), ("link@1 hits with F1@1 < .2", "low_f1_hits")):
            out += ["", f"## Examples: {title}"]
            for ex in lo["examples"][key]:
                top = ex["top"]
                out += [
                    "",
                    f"- **observation** {ex['observation']}",
                    *(f"  - evidence {e}" for e in ex["evidence"]),
                    f"  - top: {top['kind']} {top['id']} (turns {', '.join(top['source_turns'])}),"
                    f" F1 {ex['f1']}, first linked rank {ex['first_linked_rank']}: {top['content']}"
                    if top else "  - top: nothing found",
                ]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the LoCoMo dev folder")
    parser.add_argument("--parts", default="locomo,throughput", help="comma-separated: locomo, throughput")
    parser.add_argument("--sessions", type=int, default=10_000, help="synthetic sessions, keyword-only store")
    parser.add_argument("--vector-sessions", type=int, default=0,
                        help="synthetic sessions with the embedder (default none: the LoCoMo run shows the cost)")
    parser.add_argument("--embedder", default="auto", help="the embedder of the LoCoMo and vector runs")
    parser.add_argument("--examples", type=int, default=5, help="failure examples of each sort")
    parser.add_argument("--rerank-every", type=int, default=0, metavar="N",
                        help="also link every N-th observation with recall's rerank (a model pass each)")
    parser.add_argument("--import-cache", type=Path, help="keep the imported LoCoMo file here and reuse it")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the tables")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    if not parts or parts - {"locomo", "throughput"}:
        parser.error(f"--parts takes locomo and/or throughput, not {args.parts!r}")
    if not (args.data / "locomo_turns.jsonl").exists():
        parser.error(f"no locomo_turns.jsonl in {args.data} — pass --data")
    if args.sessions < 0 or args.vector_sessions < 0:
        parser.error("--sessions and --vector-sessions must be 0 or more")
    result: dict[str, Any] = {"command": " ".join(sys.argv)}
    with tempfile.TemporaryDirectory(prefix="bench-consolidate-") as tmp:
        scratch = Path(tmp)
        if "locomo" in parts:
            result["locomo"] = locomo(args.data, scratch, args.import_cache, args.embedder, args.examples,
                                      args.rerank_every)
        if "throughput" in parts:
            runs = []
            if args.sessions:
                runs.append(throughput(args.data, scratch, args.sessions, None))
            if args.vector_sessions:
                runs.append(throughput(args.data, scratch, args.vector_sessions, args.embedder))
            result["throughput"] = runs
    print(json.dumps(result, indent=1) if args.json else markdown(result))


if __name__ == "__main__":
    main()
