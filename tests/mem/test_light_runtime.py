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


def test_the_light_runtime_gives_the_reference_vectors() -> None:
    texts = varied_texts(1000)
    reference, fast = MiniLMEmbedder(runtime="torch"), MiniLMEmbedder(runtime="onnx")
    expected, got = reference.embed(texts), fast.embed(texts)
    assert (reference.active_runtime, fast.active_runtime) == ("torch", "onnx")
    assert got.shape == expected.shape == (1000, 384) and got.dtype == np.float32
    cosines = np.sum(expected * got, axis=1)
    assert float(cosines.min()) >= 0.9999, texts[int(cosines.argmin())]
    assert reference.fingerprint == fast.fingerprint  # stored vectors stay valid whichever runtime wrote them
    # The export lives in the cache, keyed by the model's fingerprint.
    assert light.export_path(fast.fingerprint).is_file()
    assert light.export_path(fast.fingerprint) != light.export_path("sha256:" + "0" * 32)


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
