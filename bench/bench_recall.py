"""Recall on the three dev corpora, every mode beside a plain FTS5 BM25 baseline, in one run.

    HF_HUB_OFFLINE=1 nice -n 10 .venv/bin/python bench/bench_recall.py                 # all corpora
    HF_HUB_OFFLINE=1 nice -n 10 .venv/bin/python bench/bench_recall.py --corpus locomo-facts --json out.json

Corpora (read at run time from ``--data``, never copied into the project):

- ``locomo-turns``: LoCoMo dev's 2,760 turns (``locomo_turns.jsonl`` through ``import_jsonl``) and
  its 760 questions; each question searches its own conversation.
- ``locomo-facts``: the 1,210 third-person facts (``locomo_facts.jsonl``) and the 630 questions
  over them (``locomo_fact_queries.jsonl``): a small fact store as agents build one over MCP.
- ``lme-user`` / ``lme-all``: LongMemEval_S dev (100 questions, ~490 turns each), every question's
  haystack stored under the session prefix ``"<question id>:"`` and searched alone; ``lme-user``
  stores the user turns only (the paper's protocol), ``lme-all`` both roles. Abstention questions
  are skipped; a question none of whose evidence turns is stored (assistant evidence, user-only) is
  scored at the session level only.

Each corpus is built into a real store through the public API (``MemoryStore.add_many`` /
``import_jsonl``) with the built-in model, all-MiniLM-L6-v2's int8 export (``--embedder minilm``: the
float model),
redaction off (the texts stay those the baseline indexes). Every mode (keyword, semantic, hybrid, and
hybrid with ``rerank=True``) runs through ``MemoryStore.recall``; beside them **plain FTS5** is a bare FTS5 table (``porter unicode61``) over the bare texts (no speaker, no
date, no previous turn), queried with the OR-ed content words (``keyword.match_expression``)
``ORDER BY rank``, within the question's scope. Figures: R@5, R@10 (share of the evidence in the top
k), MRR@10, recall latency p50/p95, per question type; for LongMemEval also the paper's turn-level
any@5 / any@10 / all@5 and session-level any@5 / all@5 (sessions in order of first appearance in the
top 50 turns).

Vectors are cached by text hash under ``--cache`` (default /tmp/recall-cache), so only a cold run
embeds (texts sorted by length, in batches, on ``--threads`` threads). ``--dump DIR`` also writes,
per corpus, every hybrid query's fusion candidates (the input of ``fusion.fuse``) with the evidence,
so fusion recipes can be compared offline on exactly what the store fuses (bench/tune_fusion.py).
"""

from __future__ import annotations

import argparse
import atexit
import gzip
import hashlib
import json
import os
import pickle
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from harness_mem import MemoryStore, fusion, keyword, passages
from harness_mem.db import driver
from harness_mem.jsonl import import_jsonl
from harness_mem.models import has_visible_text
from harness_mem.passages import embedding_text
from harness_mem.providers.embeddings import DEFAULT_QUANTIZATION, FLAG_NAMES, MiniLMEmbedder

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data"
DEFAULT_CACHE = Path("/tmp/recall-cache")
CORPORA = ("locomo-turns", "locomo-facts", "lme-user", "lme-all")
MODES = ("plain-fts5", "keyword", "semantic", "hybrid", "hybrid+rerank")


class _Anyone(frozenset[str]):
    """Every speaker: as if every turn were the agent's (no turn gets sentence passages)."""

    def __contains__(self, role: object) -> bool:
        return True


#: --turn-sentences: the speakers whose turns get no sentence passages (passages.AGENT_ROLES).
TURN_SENTENCES = {"people": passages.AGENT_ROLES, "everyone": frozenset(), "none": _Anyone()}
PLAIN_FTS = "CREATE VIRTUAL TABLE plain USING fts5(text, tokenize = 'porter unicode61 remove_diacritics 2')"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------- embedder


class CachedEmbedder:
    """all-MiniLM-L6-v2 with every vector cached on disk by the hash of its text.

    The store sees the real model (same name, dimension and fingerprint); texts it has embedded
    before, in any run, are read from the cache instead.
    """

    def __init__(self, cache: Path, threads: int, name: str = "minilm") -> None:
        quantization = {flag: recipe for recipe, flag in FLAG_NAMES.items()}[name]
        self.model = MiniLMEmbedder(threads=threads, batch_size=16, quantization=quantization)
        self.name, self.dim = self.model.name, self.model.dim
        self.fingerprint = self.model.fingerprint
        self.folder = cache / f"minilm-{hashlib.sha1(self.fingerprint.encode()).hexdigest()[:12]}"  # the int8 model has its own
        self.folder.mkdir(parents=True, exist_ok=True)
        self.rows: dict[bytes, npt.NDArray[np.float32]] = {}
        for keys_file in sorted(self.folder.glob("keys-*.npy")):
            keys = np.load(keys_file)
            vectors = np.load(keys_file.with_name(keys_file.name.replace("keys-", "vectors-")))
            self.rows.update(zip((bytes(k) for k in keys), vectors, strict=True))
        self.pending: dict[bytes, npt.NDArray[np.float32]] = {}
        # Written 1,024 at a time and at exit: a consolidation embeds a few texts per session, and a
        # file pair per call would leave thousands for the next run to read.
        atexit.register(self.flush)
        self.embedded, self.seconds = 0, 0.0

    def passages(self, text: str) -> list[tuple[int, int]]:
        """The model's windows of a long text (harness_mem.passages): embedded, and cached, like any text."""
        return self.model.passages(text)

    def token_vectors(self, texts: Sequence[str]) -> list[npt.NDArray[np.float32]]:
        """Word-piece vectors for rerank (harness_mem.rerank): computed each time, as a store does."""
        return self.model.token_vectors(texts)

    @staticmethod
    def key(text: str) -> bytes:
        return hashlib.sha1(text.encode("utf-8", "surrogatepass")).digest()

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        keys = [self.key(t) for t in texts]
        missing = {k: t for k, t in zip(keys, texts, strict=True) if k not in self.rows}
        if missing:
            # Sorted by length, a batch pads to texts of about its own length: ~2x faster on these chats.
            todo = sorted(missing.items(), key=lambda item: len(item[1]))
            started = time.perf_counter()
            for start in range(0, len(todo), 512):
                chunk = todo[start:start + 512]
                vectors = self.model.embed([t for _, t in chunk])
                for (k, _), v in zip(chunk, vectors, strict=True):
                    self.rows[k] = self.pending[k] = v
                if len(todo) > 2000:
                    log(f"    embedded {min(start + 512, len(todo)):,}/{len(todo):,}"
                        f" ({time.perf_counter() - started:.0f}s)")
                if len(self.pending) >= 1024:  # a killed run keeps nearly all it embedded
                    self.flush()
            self.embedded += len(todo)
            self.seconds += time.perf_counter() - started
        if not keys:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self.rows[k] for k in keys]).astype(np.float32)

    def flush(self) -> None:
        if not self.pending:
            return
        stamp = f"{time.time_ns()}-{os.getpid()}"
        np.save(self.folder / f"vectors-{stamp}.npy", np.stack(list(self.pending.values())))
        np.save(self.folder / f"keys-{stamp}.npy", np.array(list(self.pending), dtype="S20"))
        self.pending = {}


# --------------------------------------------------------------------------------------- corpora


@dataclass(frozen=True)
class Question:
    qid: str
    text: str
    category: str
    prefix: str
    evidence: frozenset[str]  # entry ids (may be empty: scored by session only)
    evidence_sessions: frozenset[str] = frozenset()


@dataclass
class Corpus:
    name: str
    build: Callable[[MemoryStore], None]
    embedded_texts: list[str]  # what the store will embed, to warm the cache in one sorted pass
    bare: list[tuple[str, str, str]]  # (id, session, bare text) for plain FTS5, in scope order
    questions: list[Question]
    depth: int = 10
    sessions: bool = False  # report the session-level figures
    notes: list[str] = field(default_factory=list)


def locomo_turns(data: Path) -> Corpus:
    folder = data / "locomo-dev"
    lines = (folder / "locomo_turns.jsonl").read_bytes().splitlines()
    rows = [json.loads(line) for line in lines]
    questions = [
        Question(r["qid"], r["question"], r["category_name"], f"{r['conversation']}:", frozenset(r["evidence"]))
        for r in map(json.loads, (folder / "locomo_queries.jsonl").read_text().splitlines())
    ]
    rows.sort(key=lambda r: (r["conversation"], r["seq"]))
    return Corpus(
        "locomo-turns",
        lambda store: _import(store, lines),
        [embedding_text(r["text"], r["role"]) for r in rows],
        [(r["id"], r["session"], r["text"]) for r in rows],
        [q for q in questions if q.evidence],
    )


def locomo_facts(data: Path) -> Corpus:
    folder = data / "locomo-dev"
    lines = (folder / "locomo_facts.jsonl").read_bytes().splitlines()
    rows = sorted(map(json.loads, lines), key=lambda r: r["id"])
    questions = [
        Question(r["qid"], r["question"], r["category_name"], f"{r['conversation']}:", frozenset(r["evidence"]))
        for r in map(json.loads, (folder / "locomo_fact_queries.jsonl").read_text().splitlines())
    ]
    return Corpus(
        "locomo-facts",
        lambda store: _import(store, lines),
        [r["text"] for r in rows],
        [(r["id"], r["session"], r["text"]) for r in rows],
        [q for q in questions if q.evidence],
    )


def _import(store: MemoryStore, lines: list[bytes]) -> None:
    report = import_jsonl(store, lines, workers=0)
    if report.added != len(lines):
        raise SystemExit(f"imported {report.added} of {len(lines)} lines")


def haystack_turns(record: dict[str, Any]) -> Iterator[tuple[str, int, datetime, dict[str, Any]]]:
    """(session id, turn number, time, turn) of every non-blank turn of a LongMemEval haystack, a turn
    a second after the one before from its session's start."""
    seen: set[str] = set()
    for sid, day, turns in zip(record["haystack_session_ids"], record["haystack_dates"], record["haystack_sessions"],
                               strict=True):
        if sid in seen:  # two haystacks repeat a session (identical, not evidence): stored once
            continue
        seen.add(sid)
        start = datetime.strptime(day.split(" (")[0] + " " + day.split(") ")[1], "%Y/%m/%d %H:%M")
        for n, turn in enumerate(turns):
            if has_visible_text(turn["content"]):  # a few are only control characters: no entry
                yield sid, n, start + timedelta(seconds=n), turn


def longmemeval(data: Path, roles: tuple[str, ...], questions_limit: int | None, stride: int = 1) -> Corpus:
    with gzip.open(data / "longmemeval-dev" / "longmemeval_s_dev.json.gz", "rt", encoding="utf-8") as f:
        records = json.load(f)
    # The file is grouped by question type: a stride keeps every type in a smaller run.
    records = [r for r in records if not r["question_id"].endswith("_abs")][::stride][:questions_limit]
    items: list[dict[str, Any]] = []
    questions = []
    skipped_turns = 0
    for r in records:
        qid = r["question_id"]
        evidence = set()
        for sid, n, when, turn in haystack_turns(r):
            if turn["role"] not in roles:
                continue
            entry_id = f"{qid}:{sid}:{n}"
            if turn.get("has_answer"):
                evidence.add(entry_id)
            items.append({"id": entry_id, "content": turn["content"], "role": turn["role"],
                          "session": f"{qid}:{sid}", "created_at": when})
        if not evidence:
            skipped_turns += 1
        questions.append(Question(qid, r["question"], r["question_type"], f"{qid}:", frozenset(evidence),
                                  frozenset(f"{qid}:{s}" for s in r["answer_session_ids"])))

    def build(store: MemoryStore) -> None:
        store.add_many(items, batch_size=2000)

    name = "lme-user" if roles == ("user",) else "lme-all"
    notes = [f"{len(questions)} questions (abstention skipped); {skipped_turns} without a stored evidence turn"
             " are scored by session only"]
    return Corpus(name, build, [embedding_text(i["content"], i["role"]) for i in items],
                  [(i["id"], i["session"], i["content"]) for i in items], questions, depth=50, sessions=True,
                  notes=notes)


def load_corpus(name: str, data: Path, questions_limit: int | None, stride: int = 1) -> Corpus:
    if name == "locomo-turns":
        return locomo_turns(data)
    if name == "locomo-facts":
        return locomo_facts(data)
    return longmemeval(data, ("user",) if name == "lme-user" else ("user", "assistant"), questions_limit, stride)


# --------------------------------------------------------------------------------------- rankers


class PlainFTS:
    """A bare FTS5 table over the bare texts: the untuned baseline every mode is measured against."""

    def __init__(self, bare: list[tuple[str, str, str]]) -> None:
        self.conn = driver().connect(":memory:")
        self.conn.execute(PLAIN_FTS)
        self.conn.executemany("INSERT INTO plain (rowid, text) VALUES (?, ?)",
                              [(i + 1, text) for i, (_, _, text) in enumerate(bare)])
        self.ids = [entry_id for entry_id, _, _ in bare]
        self.span: dict[str, tuple[int, int]] = {}

    def scope(self, prefix: str) -> tuple[int, int]:
        if prefix not in self.span:
            rowids = [i + 1 for i, entry_id in enumerate(self.ids) if entry_id.startswith(prefix)]
            self.span[prefix] = (min(rowids), max(rowids))
        return self.span[prefix]

    def ranked(self, question: str, prefix: str, k: int) -> list[str]:
        expression = keyword.match_expression(question)
        if expression is None:
            return []
        low, high = self.scope(prefix)
        rows = self.conn.execute("SELECT rowid FROM plain WHERE plain MATCH ? AND rowid BETWEEN ? AND ?"
                                 " ORDER BY rank LIMIT ?", (expression, low, high, k))
        return [self.ids[rowid - 1] for (rowid,) in rows]


# --------------------------------------------------------------------------------------- metrics


def scores(q: Question, ranked: list[str], session_of: dict[str, str]) -> dict[str, float]:
    out: dict[str, float] = {}
    if q.evidence:
        for k in (5, 10):
            found = len(q.evidence & set(ranked[:k]))
            out[f"R@{k}"] = found / len(q.evidence)
            out[f"any@{k}"] = float(found > 0)
        out["all@5"] = float(q.evidence <= set(ranked[:5]))
        first = next((i for i, e in enumerate(ranked[:10], start=1) if e in q.evidence), None)
        out["MRR@10"] = 1 / first if first else 0.0
    if q.evidence_sessions:
        sessions = list(dict.fromkeys(session_of[e] for e in ranked))[:5]
        out["s-any@5"] = float(bool(q.evidence_sessions & set(sessions)))
        out["s-all@5"] = float(q.evidence_sessions <= set(sessions))
    return out


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))] if ordered else 0.0


def summarise(per_query: list[dict[str, Any]]) -> dict[str, Any]:
    names = sorted({m for row in per_query for m in row["scores"]})
    out: dict[str, Any] = {}
    for m in names:
        values = [row["scores"][m] for row in per_query if m in row["scores"]]
        out[m] = float(np.mean(values)) if values else None
    out["n"] = sum(1 for row in per_query if "R@5" in row["scores"])
    latencies = [row["ms"] for row in per_query]
    out["p50"], out["p95"] = percentile(latencies, 0.5), percentile(latencies, 0.95)
    return out


# ------------------------------------------------------------------------------------------- run


class CandidateRecorder:
    """Records what fusion.fuse is given, per hybrid query (for offline comparison of recipes)."""

    def __init__(self) -> None:
        self.current: list[tuple[int, float, float, bool, str | None]] | None = None
        self.original = fusion.fuse

    def __enter__(self) -> CandidateRecorder:
        def recording(candidates: Sequence[fusion.Candidate], k: int, *,
                      gathering: bool = False) -> list[tuple[int, float]]:
            self.current = [(c.pk, c.keyword, c.cosine, c.named, c.session) for c in candidates]
            return self.original(candidates, k, gathering=gathering)

        fusion.fuse = recording  # type: ignore[assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        fusion.fuse = self.original  # type: ignore[assignment]


def run_corpus(corpus: Corpus, embedder: CachedEmbedder, scratch: Path, dump: Path | None,
               modes: Sequence[str] = MODES) -> dict[str, Any]:
    log(f"{corpus.name}: {len(corpus.bare):,} entries, {len(corpus.questions):,} questions")
    started = time.perf_counter()
    before = embedder.embedded
    embedder.embed(corpus.embedded_texts)
    warm_seconds = time.perf_counter() - started
    path = scratch / f"{corpus.name}.db"
    with MemoryStore(path, embedder=embedder, redactor=None) as store:  # type: ignore[arg-type]
        began = time.perf_counter()
        corpus.build(store)
        build_seconds = time.perf_counter() - began
        log(f"  embedded {embedder.embedded - before:,} new texts in {warm_seconds:.0f}s;"
            f" store built in {build_seconds:.0f}s")
        vectors = store.embed_queries([q.text for q in corpus.questions])
        session_of = {entry_id: session for entry_id, session, _ in corpus.bare}
        plain = PlainFTS(corpus.bare)
        results: dict[str, list[dict[str, Any]]] = {}
        dumped: list[dict[str, Any]] = []
        features: list[dict[str, Any]] = []
        # For each question's prefix, the next distinct one (where it is asked as a "foreign" question).
        distinct = list(dict.fromkeys(q.prefix for q in corpus.questions))
        next_prefix = dict(zip(distinct, distinct[1:] + distinct[:1], strict=True))
        for mode in modes:
            rows = []
            store.recall("warm up", k=corpus.depth, mode="keyword")
            with CandidateRecorder() as recorder:
                for q, vector in zip(corpus.questions, vectors, strict=True):
                    t0 = time.perf_counter()
                    if mode == "plain-fts5":
                        ranked = plain.ranked(q.text, q.prefix, corpus.depth)
                    else:
                        hits = store.recall(q.text, k=corpus.depth, mode=mode.removesuffix("+rerank"),  # type: ignore[arg-type]
                                            session_prefix=q.prefix, query_vector=vector, explain=dump is not None,
                                            rerank=mode.endswith("+rerank"))
                        ranked = [h.entry.id for h in hits]
                        if dump is not None:  # what each hit's score is calibrated from (scores.py)
                            features.append(hit_features(q.qid, mode, sorted(q.evidence), hits))
                    ms = (time.perf_counter() - t0) * 1000
                    rows.append({"qid": q.qid, "category": q.category, "ms": ms, "ranked": ranked[:corpus.depth],
                                 "scores": scores(q, ranked, session_of)})
                    if mode == "hybrid" and dump is not None and recorder.current is not None:
                        dumped.append({"qid": q.qid, "category": q.category, "question": q.text,
                                       "evidence": sorted(q.evidence), "sessions": sorted(q.evidence_sessions),
                                       "candidates": recorder.current})
                        recorder.current = None
                    if mode != "plain-fts5" and dump is not None and next_prefix[q.prefix] != q.prefix:
                        # The same question asked of a conversation that does not hold its answer
                        # (after the candidates above are kept): every hit is a miss, which a score
                        # must say as well.
                        missed = store.recall(q.text, k=corpus.depth, mode=mode.removesuffix("+rerank"),  # type: ignore[arg-type]
                                              session_prefix=next_prefix[q.prefix], query_vector=vector, explain=True,
                                              rerank=mode.endswith("+rerank"))
                        features.append(hit_features(q.qid, mode, [], missed, foreign=True))
                        recorder.current = None
            results[mode] = rows
            log(f"  {mode}: " + _cells(summarise(rows)))
        if dump is not None:
            pks = sorted({c[0] for row in dumped for c in row["candidates"]})
            ids = {pk: entry.id for pk, entry in store._recall._entries_by_pk(pks).items()}
            for row in dumped:
                row["candidates"] = [(ids[pk], *rest) for pk, *rest in row["candidates"]]
            dump.mkdir(parents=True, exist_ok=True)
            with (dump / f"{corpus.name}.pkl").open("wb") as f:
                pickle.dump(dumped, f)
            with (dump / f"{corpus.name}-hits.pkl").open("wb") as f:
                pickle.dump(features, f)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return {"corpus": corpus.name, "entries": len(corpus.bare), "questions": len(corpus.questions),
            "notes": corpus.notes, "embed_seconds": warm_seconds, "build_seconds": build_seconds,
            "sessions": corpus.sessions, "modes": results}


def hit_features(qid: str, mode: str, evidence: list[str], hits: Sequence[Any], *, foreign: bool = False
                 ) -> dict[str, Any]:
    """A question's hits as bench/calibrate_scores.py reads them: (id, score, cosine, coverage)."""
    return {"qid": qid, "mode": mode, "evidence": evidence, "foreign": foreign, "hits": [
        (h.entry.id, h.score, (h.components or {}).get("semantic", {}).get("score"),
         (h.components or {})["coverage"]["score"]) for h in hits]}


def _cells(s: dict[str, Any]) -> str:
    return " ".join(f"{m} {s[m]:.3f}" for m in ("R@5", "R@10", "MRR@10") if s.get(m) is not None)


def fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}".lstrip("0") if value < 1 else f"{value:.3f}"


def print_tables(results: list[dict[str, Any]]) -> None:
    print("\n## Recall per corpus and mode (R@5 / R@10 / MRR@10, recall latency ms)\n")
    print("| corpus | mode | questions | R@5 | R@10 | MRR@10 | p50 ms | p95 ms |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        for mode, rows in r["modes"].items():
            s = summarise(rows)
            print(f"| {r['corpus']} | {mode} | {s['n']} | {fmt(s.get('R@5'))} | {fmt(s.get('R@10'))} |"
                  f" {fmt(s.get('MRR@10'))} | {s['p50']:.1f} | {s['p95']:.1f} |")
    lme = [r for r in results if r["sessions"]]
    if lme:
        print("\n## LongMemEval, the paper's metrics (turn any@5 / any@10 / all@5; session any@5 / all@5)\n")
        print("| corpus | mode | turn any@5 | turn any@10 | turn all@5 | session any@5 | session all@5 |")
        print("|---|---|---|---|---|---|---|")
        for r in lme:
            for mode, rows in r["modes"].items():
                s = summarise(rows)
                print(f"| {r['corpus']} | {mode} | {fmt(s.get('any@5'))} | {fmt(s.get('any@10'))} |"
                      f" {fmt(s.get('all@5'))} | {fmt(s.get('s-any@5'))} | {fmt(s.get('s-all@5'))} |")
    print("\n## Per question type (R@5 / R@10 / MRR@10)\n")
    for r in results:
        categories = sorted({row["category"] for row in next(iter(r["modes"].values()))})
        print(f"\n### {r['corpus']}\n")
        print("| mode | " + " | ".join(categories) + " |\n|---|" + "---|" * len(categories))
        for mode, rows in r["modes"].items():
            cells = []
            for c in categories:
                s = summarise([row for row in rows if row["category"] == c])
                cells.append(f"{fmt(s.get('R@5'))} / {fmt(s.get('R@10'))} / {fmt(s.get('MRR@10'))} (n={s['n']})")
            print(f"| {mode} | " + " | ".join(cells) + " |")
    print()
    for r in results:
        print(f"- {r['corpus']}: {r['entries']:,} entries; embedding {r['embed_seconds']:.0f}s,"
              f" store build {r['build_seconds']:.0f}s" + "".join(f"; {n}" for n in r["notes"]))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", action="append", choices=CORPORA,
                        help="a corpus to measure (repeatable; default: all)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the folder of locomo-dev and longmemeval-dev")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="vector cache (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=2, help="embedding threads (default: 2)")
    parser.add_argument("--embedder", choices=["minilm", "minilm-int8", "minilm-int8s"], default=FLAG_NAMES[DEFAULT_QUANTIZATION],
                        help="the model every corpus is embedded with (default: %(default)s, the built-in one)")
    parser.add_argument("--questions", type=int, help="LongMemEval: only the first N questions")
    parser.add_argument("--stride", type=int, default=1,
                        help="LongMemEval: every Nth question (of every type: the file is grouped by type)")
    parser.add_argument("--mode", action="append", choices=MODES, dest="modes",
                        help="a mode to measure (repeatable; default: all)")
    parser.add_argument("--json", type=Path, help="also write every figure and ranking as JSON here")
    parser.add_argument("--dump", type=Path, help="write each corpus's hybrid fusion candidates here")
    parser.add_argument("--turn-sentences", choices=TURN_SENTENCES, default="people",
                        help="whose turns get sentence passages (default: %(default)s, as the store does)")
    args = parser.parse_args(argv)
    passages.AGENT_ROLES = TURN_SENTENCES[args.turn_sentences]
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    started = time.perf_counter()
    embedder = CachedEmbedder(args.cache, args.threads, args.embedder)
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        for name in args.corpus or CORPORA:
            results.append(run_corpus(load_corpus(name, args.data, args.questions, args.stride), embedder, Path(scratch),
                                      args.dump, args.modes or MODES))
            if args.json:
                args.json.write_text(json.dumps(results))
    print_tables(results)
    print(f"\nwhole run {time.perf_counter() - started:.0f}s; {embedder.embedded:,} texts embedded"
          f" ({embedder.seconds:.0f}s), the rest from the cache")
    return 0


if __name__ == "__main__":
    sys.exit(main())
