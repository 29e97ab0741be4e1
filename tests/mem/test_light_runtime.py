"""The light runtime (onnxruntime) against the reference (sentence-transformers), with the real model."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness_mem.providers import light
from harness_mem.providers.embeddings import MiniLMEmbedder

pytestmark = [pytest.mark.slow, pytest.mark.real_model]

SAMPLES = [
    "We chose argon2id for password hashing, 64 MiB of memory and three passes.",
    "The deploy to staging failed again because the migration locked the users table.",
    "东京的天气很好，我们明天去公园散步吧。", "数据库迁移的问题已经解决了。", "東京の天気は晴れです。",
    "한국어 문장도 들어 있습니다.", "Émigré café naïve résumé — ça va?", "🙂 shipping on Friday 🚀",
    "SELECT * FROM entries WHERE kind = 'turn' AND session LIKE 'proj:%';", "ok", "?",
    "Melanie: I painted a sunrise over the lake last week, it took me three mornings.",
]


def varied_texts(n: int) -> list[str]:
    """Short and long, Latin and CJK, prose and code: ``n`` texts from a fixed seed."""
    rng = random.Random(7)
    words = " ".join(SAMPLES).split()
    texts = []
    for i in range(n):
        shape = i % 3
        if i % 25 == 0:
            texts.append(" ".join(rng.choice(words) for _ in range(rng.randint(60, 240))))  # past 256 tokens too
        elif shape == 0:
            texts.append(rng.choice(SAMPLES))
        elif shape == 1:
            texts.append(" ".join(rng.choice(words) for _ in range(rng.randint(1, 12))))
        else:
            texts.append(rng.choice(SAMPLES)[: rng.randint(1, 40)] + f" #{i}")
    return texts


# The parity cases: each a way the two runtimes' tokenise-pad-pool paths could part. "long" texts
# run past the model's max_seq_length word pieces (both must cut at the same piece); "limit" ones
# end one piece before, at and after it ([CLS] and [SEP] included).
_CYCLE = "the deploy failed again".split()  # one word piece each
PARITY_CASES: dict[str, list[str]] = {
    "short": ["ok", "?", "a", "Hi", "deploy", "x1", "...", "-"],
    "empty-ish": ["", " ", "\n\t  ", "\u200b"],  # nothing but [CLS] and [SEP]
    "mixed case": [
        "WE CHOSE ARGON2ID FOR PASSWORD HASHING", "we chose argon2id for password hashing",
        "camelCaseIdentifier and snake_case_name", "iPhone, McDonald's and NASA's JSON API",
        "ÉMIGRÉ CAFÉ naïve Résumé — ÇA VA?",
    ],
    "cjk": [
        "东京的天气很好，我们明天去公园散步吧。", "東京の天気は晴れです。", "한국어 문장도 들어 있습니다.",
        "部署到 staging 失败了 again", "数",
    ],
    "emoji": ["🙂", "🙂🚀🎉", "👨‍👩‍👧 family", "🇯🇵 flag", "🙂 shipping on Friday 🚀 (finally)"],
    "prose and code": [
        *SAMPLES[:2], SAMPLES[8], SAMPLES[11], "https://example.com/a?b=1#frag", "Привет, мир", "مرحبا بالعالم",
        "card 4111 1111 1111 1111, pi 3.14159, due 2024-05-01",
    ],
    "long": [
        (SAMPLES[0] + " " + SAMPLES[1] + " ") * 12,
        "东京的天气很好，我们明天去公园散步吧。数据库迁移的问题已经解决了。" * 12,
        " ".join(SAMPLES) * 3,
        (SAMPLES[8] + "\n") * 20,
        "🙂 " * 300,
    ],
    "limit": [" ".join(_CYCLE[i % 4] for i in range(n)) for n in (253, 254, 255)],
}
PARITY_TEXTS = [text for texts in PARITY_CASES.values() for text in texts]


def test_the_parity_texts_cover_their_cases() -> None:
    from tokenizers import Tokenizer

    model_dir = MiniLMEmbedder().model_path
    limit = json.loads((model_dir / "sentence_bert_config.json").read_text())["max_seq_length"]
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()

    def pieces(texts: list[str]) -> list[int]:
        return [len(e.ids) for e in tokenizer.encode_batch(texts)]

    assert all(n > limit for n in pieces(PARITY_CASES["long"]))
    assert pieces(PARITY_CASES["limit"]) == [limit - 1, limit, limit + 1]
    assert pieces(PARITY_CASES["empty-ish"]) == [2] * len(PARITY_CASES["empty-ish"])
    assert all(n <= 5 for n in pieces(PARITY_CASES["short"]))
    assert "[UNK]" in tokenizer.encode(PARITY_CASES["emoji"][0]).tokens


def test_the_light_runtime_gives_the_reference_vectors() -> None:
    # The light encoder in several batches (the first allocates the output, later ones fill it), each
    # padded to its own longest text; the reference in one.
    reference, fast = MiniLMEmbedder(runtime="torch"), MiniLMEmbedder(runtime="onnx", batch_size=16)
    expected, got = reference.embed(PARITY_TEXTS), fast.embed(PARITY_TEXTS)
    assert (reference.active_runtime, fast.active_runtime) == ("torch", "onnx")
    assert got.shape == expected.shape == (len(PARITY_TEXTS), 384) and got.dtype == np.float32
    assert len(PARITY_TEXTS) > 2 * fast.batch_size
    cosines = np.sum(expected * got, axis=1)
    assert float(cosines.min()) >= 0.9999, PARITY_TEXTS[int(cosines.argmin())]
    assert reference.fingerprint == fast.fingerprint  # stored vectors stay valid whichever runtime wrote them
    # The export lives in the cache, keyed by the model's fingerprint.
    assert light.export_path(fast.fingerprint).is_file()
    assert light.export_path(fast.fingerprint) != light.export_path("sha256:" + "0" * 32)


def test_the_light_runtime_gives_the_reference_word_piece_vectors() -> None:
    # What rerank matches: one unit vector per word piece, the two markers left out, the same from
    # both runtimes whatever the batch pads to.
    reference, fast = MiniLMEmbedder(runtime="torch"), MiniLMEmbedder(runtime="onnx", batch_size=16)
    expected, got = reference.token_vectors(PARITY_TEXTS), fast.token_vectors(PARITY_TEXTS)
    assert [len(g) for g in got] == [len(e) for e in expected]
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(fast.model_path / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    read = [min(len(e.ids), 256) - 2 for e in tokenizer.encode_batch(PARITY_TEXTS)]
    assert [len(g) for g in got] == read  # every piece the model reads, its markers out
    for text, want, have in zip(PARITY_TEXTS, expected, got, strict=True):
        if len(have):
            assert have.dtype == np.float32 and have.shape[1] == 384
            assert np.allclose(np.linalg.norm(have, axis=1), 1.0, atol=1e-4)
            assert float(np.sum(want * have, axis=1).min()) >= 0.999, text


def test_the_int8_model_is_another_model() -> None:
    base, int8 = MiniLMEmbedder(runtime="onnx"), MiniLMEmbedder(quantized=True)
    texts = varied_texts(40)
    cosines = np.sum(base.embed(texts) * int8.embed(texts), axis=1)
    assert 0.8 < float(cosines.mean()) < 0.9999  # close, but not the same vectors …
    assert int8.fingerprint != base.fingerprint and int8.name != base.name  # … so a file records it apart


HEAVY = ("torch", "sentence_transformers", "transformers", "onnxruntime")

# Runs the real entry point, then reports which heavy modules the run imported.
_LAUNCHER = """
import atexit, json, runpy, sys
def report():
    loaded = [m for m in {heavy!r} if m in sys.modules]
    sys.stderr.write("LOADED " + json.dumps(loaded) + "\\n")
atexit.register(report)
runpy.run_module("harness_mem", run_name="__main__", alter_sys=True)
"""


def harness_mem(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str, list[str]]:
    proc = subprocess.run(
        [sys.executable, "-c", _LAUNCHER.format(heavy=HEAVY), *args], capture_output=True, text=True, timeout=300,
        env={**os.environ, **(env or {})} if env else None,
    )
    lines = proc.stderr.splitlines()
    loaded = json.loads(lines[-1].removeprefix("LOADED ")) if lines and lines[-1].startswith("LOADED ") else []
    return proc.returncode, proc.stdout, "\n".join(lines[:-1]), loaded


def test_only_vector_work_loads_a_runtime_and_never_torch(tmp_path: Path) -> None:
    db = str(tmp_path / "memory.db")
    code, _, err, loaded = harness_mem("--db", db, "add", "we chose argon2id for password hashing")
    assert code == 0, err
    assert "onnxruntime" in loaded and "torch" not in loaded  # the light runtime embedded it
    for args in (["--help"], ["--version"], ["recall", "password", "--mode", "keyword"], ["list"], ["stats"],
                 ["export"], ["doctor"], ["recall", "--help"], ["--embedder", "none", "add", "no vector"]):
        code, _, err, loaded = harness_mem("--db", db, *args)
        assert code == 0, (args, err)
        assert loaded == [], (args, loaded)
    code, out, err, loaded = harness_mem("--db", db, "recall", "how are passwords stored", "--json")
    assert code == 0 and json.loads(out.splitlines()[0])["content"] == "we chose argon2id for password hashing"
    assert loaded == ["onnxruntime"]


def test_without_the_light_runtime_the_reference_answers_and_says_why(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a regular file where the cache folder would go")
    db = str(tmp_path / "memory.db")
    code, _, err, loaded = harness_mem("--db", db, "add", "we chose argon2id", env={
        "HARNESS_MEM_CACHE_DIR": str(blocker / "cache")})
    assert code == 0
    assert err.splitlines() == [
        f"harness-mem: the light embedder is unavailable (cannot write the ONNX export under {blocker / 'cache'}:"
        " Not a directory); using sentence-transformers"
    ]
    assert "torch" in loaded


def test_the_first_use_on_a_machine_says_it_prepares_the_model_once(tmp_path: Path) -> None:
    db = str(tmp_path / "memory.db")
    env = {"HARNESS_MEM_CACHE_DIR": str(tmp_path / "cache")}
    code, _, err, _ = harness_mem("--db", db, "add", "we chose argon2id", env=env)
    assert code == 0, err
    said = err.splitlines()
    assert said[0].startswith("harness-mem: preparing the embedding model for this machine") and "once" in said[0]
    assert said[-1].startswith("harness-mem: the embedding model is ready (")
    code, _, err, _ = harness_mem("--db", db, "recall", "password hashing", env=env)
    assert code == 0 and "preparing" not in err  # cached: said only the first time
