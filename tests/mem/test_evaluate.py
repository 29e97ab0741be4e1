"""``harness_mem.evaluate`` and ``harness-mem eval``: the metrics of a small labelled set, worked out by hand."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from fake_embedder import HashedEmbedder

from harness_mem.cli import cli
from harness_mem.errors import InvalidInputError
from harness_mem.evaluate import evaluate, parse_queries
from harness_mem.store import MemoryStore

# Twelve texts of twelve words: a{i} holds "apple" 12 - i times. BM25 ranks equal-length texts by
# term count, so the keyword ranking of "apple" is a0, a1, …, a11 (rank = i + 1).
APPLES = [{"id": f"a{i}", "text": " ".join(["apple"] * (12 - i) + ["pear"] * i)} for i in range(12)]

QUERIES = [
    # evidence ranks 1:              R@5 1,   R@10 1,   MRR 1
    {"question": "apple", "evidence": ["a0"], "category": "single"},
    # ranks 3 and 7:                 R@5 1/2, R@10 1,   MRR 1/3
    {"question": "apple", "evidence": ["a2", "a6"], "category": "single"},
    # ranks 11 and 12 (outside 10):  R@5 0,   R@10 0,   MRR 0
    {"question": "apple", "evidence": ["a10", "a11"], "category": "multi"},
    # rank 6, and an id never stored: R@5 0,  R@10 1/2, MRR 1/6
    {"question": "apple", "evidence": ["a5", "nowhere"], "category": "multi"},
    # no evidence: skipped, counted nowhere
    {"question": "apple", "evidence": [], "category": "single"},
]
# overall (4 queries): R@5 (1 + 1/2) / 4 = .375; R@10 (1 + 1 + 1/2) / 4 = .625; MRR (1 + 1/3 + 1/6) / 4 = .375
EXPECTED = {
    "overall": {"queries": 4, "recall@5": 0.375, "recall@10": 0.625, "mrr@10": 0.375},
    "by_category": {
        "multi": {"queries": 2, "recall@5": 0.0, "recall@10": 0.25, "mrr@10": 0.0833},     # MRR (0 + 1/6) / 2
        "single": {"queries": 2, "recall@5": 0.75, "recall@10": 1.0, "mrr@10": 0.6667},   # MRR (1 + 1/3) / 2
    },
    "skipped": 1,
}


def lines(queries: list[dict[str, object]]) -> list[bytes]:
    return [json.dumps(q).encode() for q in queries]


# Every evaluation of a store runs on both engines: ``store`` is conftest's ``engine_store``, and
# the command's store is at ``engine_target``. Only a bad query file (no database is touched) stays.
@pytest.fixture
def store(engine_store: MemoryStore) -> MemoryStore:
    return engine_store


@pytest.fixture
def apples(store: MemoryStore) -> MemoryStore:
    store.add_many(APPLES)
    return store


def test_the_labelled_ranking_is_the_one_the_numbers_assume(apples: MemoryStore) -> None:
    assert [hit.entry.id for hit in apples.recall("apple", k=12, mode="keyword")] == [f"a{i}" for i in range(12)]


def test_metrics_match_the_hand_computed_values(apples: MemoryStore) -> None:
    report = evaluate(apples, parse_queries(lines(QUERIES)), mode="keyword", keep_per_query=True)
    assert {key: report.to_dict()[key] for key in EXPECTED} == EXPECTED
    assert report.to_dict()["mode"] == "keyword"
    assert report.overall.recall_at_5 == pytest.approx(0.375)
    assert report.by_category["single"].mrr_at_10 == pytest.approx(2 / 3)
    assert report.by_category["multi"].mrr_at_10 == pytest.approx(1 / 12)
    scores = [[1, 1, 1], [0.5, 1, 1 / 3], [0, 0, 0], [0, 0.5, 1 / 6]]  # [R@5, R@10, MRR@10] of each query
    assert [q["scores"] for q in report.per_query] == [pytest.approx(row) for row in scores]
    assert report.per_query[0]["ranked"] == [f"a{i}" for i in range(10)]  # the top 10 is what is scored
    assert 0 < report.latency_ms_p50 <= report.latency_ms_p95


def test_a_query_without_a_category_counts_once(apples: MemoryStore) -> None:
    report = evaluate(apples, parse_queries([b'{"question": "apple", "evidence": ["a1"]}']), mode="keyword")
    assert report.overall.to_dict() == {"queries": 1, "recall@5": 1.0, "recall@10": 1.0, "mrr@10": 0.5}
    assert report.by_category == {}


@pytest.mark.parametrize(
    ("extra", "categories"),
    [
        ({}, {}),
        ({"category": None}, {}),
        ({"category": "all"}, {"all": 1}),  # a category named "all" is a category like any other
        ({"category_name": "all", "category": 3}, {"all": 1}),
        ({"category": 0}, {"0": 1}),
    ],
)
def test_every_query_counts_once_overall_and_once_in_its_category(
    apples: MemoryStore, extra: dict[str, object], categories: dict[str, int]
) -> None:
    queries = [json.dumps({"question": "apple", "evidence": ["a1"], **extra}),
               json.dumps({"question": "apple", "evidence": ["a0"], "category": "single"})]
    report = evaluate(apples, parse_queries(queries), mode="keyword")
    assert report.overall.queries == 2
    assert {name: m.queries for name, m in report.by_category.items()} == {**categories, "single": 1}
    assert report.overall.recall_at_5 == 1.0 and report.overall.mrr_at_10 == pytest.approx(0.75)


def test_a_conversation_searches_only_its_sessions(store: MemoryStore) -> None:
    store.add_many([{"id": f"c1-{i}", "text": "banana banana banana split", "session": f"c1:s{i}"} for i in range(2)])
    store.add("banana bread and more words here", id="c2-0", session="c2:s0")
    everywhere = {"question": "banana", "evidence": ["c2-0"]}
    inside = {**everywhere, "conversation": "c2"}
    by_prefix = {**everywhere, "session_prefix": "c2:"}
    ranked = [hit.entry.id for hit in store.recall("banana", mode="keyword")]
    assert ranked == ["c1-0", "c1-1", "c2-0"] or ranked == ["c1-1", "c1-0", "c2-0"]
    assert evaluate(store, parse_queries(lines([everywhere])), mode="keyword").overall.mrr_at_10 == pytest.approx(1 / 3)
    for query in (inside, by_prefix):
        assert evaluate(store, parse_queries(lines([query])), mode="keyword").overall.mrr_at_10 == 1.0


def test_questions_are_embedded_in_one_batch_before_timing(engine_target: str, hashed_embedder: HashedEmbedder) -> None:
    with MemoryStore(engine_target, embedder=hashed_embedder) as store:
        store.add_many(APPLES)
        before = len(hashed_embedder.calls)
        report = evaluate(store, parse_queries(lines(QUERIES)), mode="hybrid")
        assert hashed_embedder.calls[before:] == [len(QUERIES)]  # skipped ones too: one call, not one per query
        assert report.overall.queries == 4 and report.mode == "hybrid"
        # The hashed vectors agree with the keyword ranking on the first query: a0 shares the most features.
        assert evaluate(store, parse_queries(lines(QUERIES[:1])), mode="semantic").overall.mrr_at_10 == 1.0
        before = len(hashed_embedder.calls)
        evaluate(store, parse_queries(lines(QUERIES)), mode="keyword")
        assert hashed_embedder.calls[before:] == []  # keyword needs no embeddings


def test_no_queries_is_an_empty_report(store: MemoryStore) -> None:
    report = evaluate(store, [], mode="keyword")
    assert report.to_dict() == {"mode": "keyword", "overall": {"queries": 0, "recall@5": 0.0, "recall@10": 0.0,
                                "mrr@10": 0.0}, "by_category": {}, "latency_ms": {"p50": 0.0, "p95": 0.0},
                                "skipped": 0}


def test_parse_reads_every_documented_field() -> None:
    (query,) = parse_queries([json.dumps({"question": "q", "evidence": ["e1", 7], "conversation": "conv-26",
                                          "category": 2, "qid": "q-1"})])
    assert (query.question, query.evidence, query.session_prefix, query.category, query.qid) == (
        "q", ("e1", "7"), "conv-26:", "2", "q-1")
    named = parse_queries(["", '{"question": "q", "category": 4, "category_name": "temporal"}', "  "])
    assert [(q.category, q.evidence, q.session_prefix) for q in named] == [("temporal", (), None)]
    assert parse_queries(['{"question": "q", "category": null}'])[0].category is None


# ---- the command ---------------------------------------------------------------------------------


def run(db: Path | str, *args: str) -> object:
    return CliRunner().invoke(cli, ["--db", str(db), *args], catch_exceptions=False)


@pytest.fixture
def labelled(engine_target: str, tmp_path: Path) -> Path:
    with MemoryStore(engine_target, embedder=None) as store:
        store.add_many(APPLES)
    path = tmp_path / "queries.jsonl"
    path.write_bytes(b"\n".join(lines(QUERIES)) + b"\n")
    return path


def test_eval_prints_the_table(engine_target: str, labelled: Path) -> None:
    result = run(engine_target, "eval", str(labelled), "--mode", "keyword")
    assert result.exit_code == 0 and result.stderr == ""
    table = result.stdout.splitlines()
    assert table[:5] == [
        "mode: keyword   queries: 4   skipped: 1",
        "category           n     R@5    R@10  MRR@10",
        "overall            4   0.375   0.625   0.375",
        "multi              2   0.000   0.250   0.083",
        "single             2   0.750   1.000   0.667",
    ]
    assert len(table) == 6 and table[5].startswith("latency p50 ") and table[5].endswith(" ms")


def test_eval_json_is_the_report(engine_target: str, labelled: Path) -> None:
    result = run(engine_target, "eval", str(labelled), "--mode", "keyword", "--json")
    assert result.exit_code == 0
    report = json.loads(result.stdout)
    assert {key: report[key] for key in EXPECTED} == EXPECTED
    assert report["mode"] == "keyword" and set(report["latency_ms"]) == {"p50", "p95"}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"question": "a", "evidence": ["x"]}\n{oops\n',
         "Error: query line 2: not valid JSON (Expecting property name enclosed in double quotes at column 2)"),
        (b'\n\n{"evidence": ["x"]}\n', "Error: query line 3: missing 'question'"),
        (b'{"question": "a"}\n\xff\xfe\n', "Error: query line 2: not valid UTF-8 (byte 0)"),
        (b'{"question": "caf\xc3"}\n', "Error: query line 1: not valid UTF-8 (byte 17)"),
        (b'["question", "evidence"]\n', "Error: query line 1: expected a JSON object, got list"),
        (b'null\n', "Error: query line 1: expected a JSON object, got NoneType"),
        (b'{"question": 7, "evidence": []}\n', "Error: query line 1: question must be a string and evidence a list"),
        (b'{"question": "a", "evidence": "x"}\n', "Error: query line 1: question must be a string and evidence a list"),
    ],
)
def test_a_bad_query_file_is_one_line_and_touches_no_database(
    db_path: Path, tmp_path: Path, content: bytes, message: str
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    result = run(db_path, "eval", str(path))
    assert result.exit_code == 1
    assert result.stderr == message + "\n" and result.stdout == ""
    assert not db_path.exists()  # the file is read before the database is opened
    with pytest.raises(InvalidInputError, match=re.escape(message.removeprefix("Error: "))):
        parse_queries(content.splitlines(keepends=True))


def test_a_missing_query_file_is_a_usage_error(db_path: Path, tmp_path: Path) -> None:
    result = run(db_path, "eval", str(tmp_path / "nope.jsonl"))
    assert result.exit_code == 2 and "No such file or directory" in result.stderr and "Traceback" not in result.stderr
