"""bench/bench_scale.py: its corpus is seeded and Zipf-like, and a built store holds the planted LoCoMo turns."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))
import bench_scale  # noqa: E402

from harness_mem.store import MemoryStore  # noqa: E402

HAS_LOCOMO = (bench_scale.DEFAULT_DATA / "locomo_turns.jsonl").exists()
needs_locomo = pytest.mark.skipif(not HAS_LOCOMO, reason="the LoCoMo dev set is not beside the repository")


def test_the_corpus_is_the_same_for_a_seed_and_differs_across_seeds() -> None:
    planted = [{"id": "p1", "text": "planted one", "role": "Ann", "session": "conv-x:session_1",
                "timestamp": "2023-01-01T00:00:00Z"},
               {"id": "p2", "text": "planted two", "role": "Ben", "session": "conv-x:session_1",
                "timestamp": "2023-01-01T00:00:00Z"}]
    first = list(bench_scale.generate(3000, 3, planted=planted))
    assert first == list(bench_scale.generate(3000, 3, planted=planted))
    other = list(bench_scale.generate(3000, 4, planted=planted))
    assert len(first) == len(other) == 3000 and first != other
    assert len({row["id"] for row in first}) == 3000
    # The planted session comes whole, at its place in time among the filler sessions.
    at = [row["id"] for row in first].index("p1")
    assert first[at + 1]["id"] == "p2" and 0 < at < 2998
    assert first[at - 1]["timestamp"] <= "2023-01-01T00:00:00Z"
    roles = Counter(row["role"] for row in first)
    assert {"user", "assistant", "tool"} <= set(roles) and len(roles) > 5  # named speakers too
    assert len({row["session"] for row in first}) > 3000 // 100


def test_words_follow_a_zipf_law() -> None:
    words = Counter(w for row in bench_scale.generate(5000, 7) for w in row["text"].lower().rstrip(".?").split())
    counts = [n for _, n in words.most_common()]
    assert counts[0] > 20 * counts[99]  # Zipf with exponent ~1.15: ~45 times
    assert counts[99] > 5 * counts[999]
    assert len(words) > 10_000  # a long tail of word types
    lengths = [len(row["text"].split()) for row in bench_scale.generate(5000, 7)]
    assert 15 <= sorted(lengths)[len(lengths) // 2] <= 25 and max(lengths) > 100


@needs_locomo
def test_a_built_store_holds_the_planted_evidence_and_is_reused(tmp_path: Path) -> None:
    db = tmp_path / "scale.db"
    built = bench_scale.build_corpus(2000, 7, db, conversations=["conv-26"], work=tmp_path)
    assert not built["reused"] and built["entries"] == 2000
    assert not {t["role"] for t in bench_scale.planted_turns()} & set(bench_scale.NAMES)
    questions = bench_scale.planted_questions(conversations=["conv-26"])
    assert len(questions) > 100 and {q.conversation for q in questions} == {"conv-26"}
    with bench_scale.open_built(db) as store:
        assert store.count() == 2000
        evidence = {e for q in questions for e in q.evidence}
        assert all(store.get(e) is not None for e in evidence)
        stored_sessions = {s for (s,) in store.db.execute("SELECT DISTINCT session FROM entries")}
        assert set(questions[0].sessions) <= stored_sessions
        assert questions[0].session_prefix == "conv-26:"
        hits = store.recall(questions[0].question, k=10, mode="keyword", session_prefix=questions[0].session_prefix)
        assert hits and all(h.entry.session in questions[0].sessions for h in hits)
    assert json.loads(bench_scale.meta_path(db).read_text())["n"] == 2000

    before = db.stat().st_mtime_ns
    again = bench_scale.build_corpus(2000, 7, db, conversations=["conv-26"], work=tmp_path)
    assert again["reused"] and db.stat().st_mtime_ns == before
    rebuilt = bench_scale.build_corpus(1500, 7, db, conversations=["conv-26"], work=tmp_path)
    assert not rebuilt["reused"]
    with MemoryStore(db, embedder=None) as store:
        assert store.count() == 1500


def test_the_command_line_refuses_a_file_it_did_not_build(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    foreign = tmp_path / "mine.db"
    foreign.write_bytes(b"")
    with pytest.raises(SystemExit):
        bench_scale.main(["--n", "10", "--db", str(foreign)])
    assert "was not built here" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench_scale.main(["--n", "10", "--keep"])
    assert "need --db" in capsys.readouterr().err


def test_the_synthetic_embedder_is_its_own_model_and_stays_near_real_vectors() -> None:
    from synthetic_embedder import NAME, RHO, SyntheticMiniLM

    rng = np.random.default_rng(0)
    mean = rng.standard_normal(384)
    anchors = (mean + 2 * rng.standard_normal((300, 384))).astype(np.float32)  # a cone, as sentence vectors are
    anchors /= np.linalg.norm(anchors, axis=1, keepdims=True)
    real = anchors[0] * 1.0
    embedder = SyntheticMiniLM(anchors, {"Caroline: a planted turn": real}, "sha256:model")
    assert embedder.name == NAME and embedder.fingerprint.startswith(NAME) and "sha256:model" in embedder.fingerprint
    first = embedder.embed(["user: filler one", "Caroline: a planted turn", "user: filler two"])
    again = SyntheticMiniLM(anchors, {}, "sha256:model").embed(["user: filler one"])
    assert np.array_equal(first[0], again[0])  # a function of the text alone
    assert np.array_equal(first[1], real) and (embedder.real_given, embedder.synthetic_given) == (1, 2)
    assert np.allclose(np.linalg.norm(first, axis=1), 1, atol=1e-5)
    filler = embedder.embed([f"user: filler {i}" for i in range(400)])
    nearest = (filler @ anchors.T).max(axis=1)
    assert nearest.mean() > RHO - 0.1  # each sits by a real vector ...
    assert (filler @ anchors.mean(axis=0)).mean() > 0.5 * (anchors @ anchors.mean(axis=0)).mean()  # ... in their cone
    assert (filler[:200] @ filler[200:].T).max() < 0.99  # and no two are the same
