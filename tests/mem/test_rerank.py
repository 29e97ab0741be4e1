"""rerank=True: the top candidates ordered again by MaxSim over the model's word-piece vectors
(harness_mem/rerank.py), with the real model on both engines; and what a store without one gets."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from harness_mem import MemoryStore
from harness_mem.cli import cli
from harness_mem.errors import EmbedderError
from harness_mem.rerank import RERANK_DEPTH, PieceCache, maxsim

TOM = [
    ("detail", "We spent Saturday at the farmers market, bought peaches and sourdough, then my sister Ines called: "
               "she got the job at the Berlin observatory, and in the evening I fixed the leaking kitchen tap."),
    ("berlin", "Berlin is such a great city, so many jobs in tech and science there."),
    ("sister", "My sister always wanted to work somewhere with telescopes."),
    ("hunt", "Job hunting is exhausting, I sent out forty applications this month."),
    ("tour", "The observatory tour was closed when we visited last spring."),
]


def unit(rows: list[list[float]]) -> np.ndarray:
    matrix = np.asarray(rows, dtype=np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def test_maxsim_averages_each_question_pieces_best_match() -> None:
    question = unit([[1, 0, 0], [0, 1, 0]])
    candidate = unit([[1, 0, 0], [0, 0, 1], [0, 1, 1]])
    # piece 1 finds itself (1.0); piece 2's best is [0, 1, 1] (cos 1/√2)
    assert maxsim(question, candidate) == pytest.approx((1 + 2 ** -0.5) / 2)
    assert maxsim(question, candidate[:1]) == pytest.approx(0.5)
    assert maxsim(question, np.zeros((0, 3), dtype=np.float32)) == 0.0
    assert maxsim(np.zeros((0, 3), dtype=np.float32), candidate) == 0.0


class CountingPieces:
    """A word-piece embedder that records the texts each call asked for (a random unit vector per word)."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def token_vectors(self, texts: list[str]) -> list[np.ndarray]:
        self.calls.append(list(texts))
        return [unit(np.random.default_rng(len(text)).normal(size=(len(text.split()), 8)).tolist()) for text in texts]


def test_the_piece_cache_runs_the_model_over_new_texts_only() -> None:
    cache, model = PieceCache(), CountingPieces()
    first = cache.pieces(model, ["the red door", "a blue car"])
    again = cache.pieces(model, ["a blue car", "green tea", "the red door"])
    assert model.calls == [["the red door", "a blue car"], ["green tea"]]
    # The same vectors whether computed now or kept: the pieces are used at the precision kept.
    assert np.array_equal(again[0], first[1]) and np.array_equal(again[2], first[0])
    assert again[0].dtype == np.float32
    assert cache.pieces(model, ["a blue car"]) and len(model.calls) == 2


def test_the_piece_cache_keeps_digests_not_texts_and_stays_in_its_budget() -> None:
    model = CountingPieces()
    row_bytes = 3 * 8 * 2  # three pieces of 8 float16
    cache = PieceCache(budget=2 * row_bytes)
    cache.pieces(model, ["one two three", "four five six", "seven eight nine"])
    assert len(cache) == 2 and cache.size <= cache.budget
    cache.pieces(model, ["one two three"])  # the oldest was dropped: asked again
    assert model.calls[-1] == ["one two three"]
    PieceCache(budget=1).pieces(model, ["too big to keep"])  # a row over the budget is used, not kept


@pytest.mark.real_model
def test_a_repeated_rerank_runs_the_model_over_the_question_only(tmp_path: Path) -> None:
    from harness_mem.providers.embeddings import MiniLMEmbedder

    class Counting(MiniLMEmbedder):
        asked: list[list[str]] = []

        def token_vectors(self, texts: Sequence[str]) -> list[np.ndarray]:
            self.asked.append(list(texts))
            return super().token_vectors(texts)

    with MemoryStore(tmp_path / "m.db", embedder=Counting()) as store:
        store.add_many([{"id": id, "content": text, "role": "Tom"} for id, text in TOM])
        first = [h.entry.id for h in store.recall("Which job did Ines get?", k=5, rerank=True)]
        assert len(Counting.asked) == 1 and len(Counting.asked[0]) == 6  # the question and the five turns
        again = [h.entry.id for h in store.recall("Where did Tom's sister get a job?", k=5, rerank=True)]
        assert again[0] == first[0] == "detail"
        [asked] = Counting.asked[1]  # the question alone (its speaker's name left out): the turns were kept
        assert "sister get a job?" in asked
        store.add("Ines starts at the observatory in June.", id="new", role="Tom")
        store.recall("Which job did Ines get?", k=6, rerank=True)
        assert Counting.asked[2] == ["Tom: Ines starts at the observatory in June."]


@pytest.mark.real_model
def test_rerank_puts_first_the_turn_that_holds_the_detail_asked_about(engine_semantic_store: MemoryStore) -> None:
    store = engine_semantic_store
    store.add_many([{"id": id, "content": text, "role": "Tom"} for id, text in TOM])
    for question in ("Where did Tom's sister get a job?", "Which job did Ines get?"):
        # The pooled vector of a turn about five things sits far from a question about one of them.
        hits = store.recall(question, k=5, rerank=True, explain=True)
        assert hits[0].entry.id == "detail", [h.entry.id for h in hits]
        assert sorted(h.entry.id for h in hits) == sorted(id for id, _ in TOM)  # reordered, nothing lost
        components = hits[0].components or {}
        assert components["rerank"]["rank"] == 1 and 0 < components["rerank"]["score"] <= 1
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)  # scores follow the order
        assert [h.entry.id for h in store.recall(question, k=2, rerank=True)] == [h.entry.id for h in hits[:2]]
        assert [h.entry.id for h in store.recall(question, k=2, offset=1, rerank=True)] == [h.entry.id for h in hits[1:3]]


@pytest.mark.real_model
def test_rerank_reorders_the_top_of_every_mode_and_leaves_the_rest(semantic_store: MemoryStore) -> None:
    store = semantic_store
    store.add_many([{"id": id, "content": text, "role": "Tom"} for id, text in TOM])
    store.add_many([{"id": f"n{n}", "content": f"note {n} about the observatory job and the market"}
                    for n in range(RERANK_DEPTH + 5)])
    for mode in ("keyword", "semantic", "hybrid"):
        plain = [h.entry.id for h in store.recall("observatory job market", k=RERANK_DEPTH + 5, mode=mode)]
        reranked = [h.entry.id for h in store.recall("observatory job market", k=RERANK_DEPTH + 5, mode=mode,
                                                     rerank=True)]
        assert sorted(reranked[:RERANK_DEPTH]) == sorted(plain[:RERANK_DEPTH]), mode
        assert reranked[RERANK_DEPTH:] == plain[RERANK_DEPTH:], mode


@pytest.mark.real_model
def test_rerank_matches_the_window_of_a_long_entry_that_matched(semantic_store: MemoryStore, embedder: object) -> None:
    # The needle lies past the 256 word pieces the model reads of a text: rerank must read the
    # passage the search matched it in, not the entry's start.
    filler = "The pipeline builds the image, runs the test suite and deploys to staging before production. " * 14
    store = semantic_store
    content = f"{filler}Maria adopted a greyhound called Biscuit from the shelter in March. {filler}"
    store.add(content, id="long", role="assistant")
    store.add_many([{"id": f"s{n}", "content": text, "role": "user"} for n, text in enumerate(
        ["Maria's neighbour has a loud terrier.", "We moved to Porto in May."])])
    question = "Which greyhound did Maria adopt from the shelter?"
    hits = {h.entry.id: h for h in store.recall(question, k=3, rerank=True, explain=True)}
    assert "greyhound" in hits["long"].snippet
    asked, start = embedder.token_vectors([question, f"assistant: {content}"])  # type: ignore[attr-defined]
    at_start = maxsim(asked, start)
    assert (hits["long"].components or {})["rerank"]["score"] > at_start + 0.05


def test_a_store_without_a_model_refuses_rerank_in_one_line(store: MemoryStore) -> None:
    store.add("the deploy failed on Friday")
    with pytest.raises(EmbedderError, match="rerank") as caught:
        store.recall("deploy", rerank=True)
    assert "\n" not in str(caught.value)
    assert store.recall("deploy")[0].entry.content == "the deploy failed on Friday"  # nothing lost


def test_an_embedder_without_word_pieces_refuses_rerank(hashed_store: MemoryStore) -> None:
    hashed_store.add("the deploy failed on Friday")
    with pytest.raises(EmbedderError, match="word-piece vectors"):
        hashed_store.recall("deploy", rerank=True)


def test_recall_rerank_on_a_keyword_only_file_is_one_line_and_a_failure(tmp_path: Path) -> None:
    db = str(tmp_path / "kw.db")
    runner = CliRunner()
    assert runner.invoke(cli, ["--db", db, "init", "--keyword-only"]).exit_code == 0
    assert runner.invoke(cli, ["--db", db, "add", "the deploy failed on Friday"]).exit_code == 0
    result = runner.invoke(cli, ["--db", db, "recall", "deploy", "--rerank"])
    assert result.exit_code != 0
    assert "rerank" in result.output and "keyword-only" in result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output


@pytest.mark.real_model
def test_mcp_recall_reranks_when_asked_and_a_keyword_only_store_says_why(tmp_path: Path, embedder: object) -> None:
    import anyio

    mcp = pytest.importorskip("mcp")
    from harness_mem.mcp_server import MemoryTools, build_server

    async def ask(store: MemoryStore, arguments: dict[str, object]) -> object:
        tools = MemoryTools(store)
        assert tools.model.wait(60) or store.embedder is None
        async with mcp.Client(build_server(tools)) as client:
            return await client.call_tool("recall", arguments)

    with MemoryStore(tmp_path / "m.db", embedder=embedder) as store:  # type: ignore[arg-type]
        store.add_many([{"id": id, "content": text, "role": "Tom", "kind": "fact"} for id, text in TOM])
        answer = anyio.run(ask, store, {"query": "Which job did Ines get?", "k": 3, "rerank": True})
        assert not answer.is_error  # type: ignore[attr-defined]
        assert answer.structured_content["hits"][0]["id"] == "detail"  # type: ignore[attr-defined]
    with MemoryStore(tmp_path / "kw.db", embedder=None) as keyword_only:
        keyword_only.add("the deploy failed on Friday", kind="fact")
        refused = anyio.run(ask, keyword_only, {"query": "deploy", "rerank": True})
        assert refused.is_error  # type: ignore[attr-defined]
        [text] = [c.text for c in refused.content]  # type: ignore[attr-defined]
        assert "rerank" in text and "\n" not in text
