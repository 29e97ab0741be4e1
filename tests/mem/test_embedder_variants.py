"""The int8 models and the thread cap of the light runtime, with the real model."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from harness_mem.errors import EmbedderError
from harness_mem.providers import int8 as recipes
from harness_mem.providers import light
from harness_mem.providers.embeddings import MiniLMEmbedder, default_embedder, giving_vectors

DYNAMIC, STATIC = recipes.RECIPES["dynamic"], recipes.RECIPES["static"]

pytestmark = [pytest.mark.slow, pytest.mark.real_model]

# Lengths from one token to past the truncation, so a batch of them is mostly padding for the short ones.
TEXTS = [
    "ok",
    "We chose argon2id for password hashing.",
    "Melanie: I painted a sunrise over the lake last week, it took me three mornings.",
    "東京の天気は晴れです。我们讨论了数据库迁移。",
    "the deploy failed again " * 60,
]


def test_an_int8_vector_depends_on_its_text_alone() -> None:
    # Dynamic quantisation scales activations by the range of everything in a forward pass, so
    # a text's vector must not be computed beside other texts: a query embedded alone has to
    # match the same text stored in a batch.
    int8 = MiniLMEmbedder(quantized=True)
    together = int8.embed(TEXTS)
    alone = np.stack([int8.embed([text])[0] for text in TEXTS])
    reversed_batch = int8.embed(TEXTS[::-1])[::-1]
    assert np.array_equal(together, alone)
    assert np.array_equal(together, reversed_batch)


def test_the_int8_model_stays_close_to_the_reference_under_its_own_fingerprint() -> None:
    base, int8 = MiniLMEmbedder(runtime="onnx"), MiniLMEmbedder(quantized=True)
    vectors = int8.embed(TEXTS)
    assert vectors.shape == (len(TEXTS), 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    # Weights quantised per output channel: a whole-matrix scale leaves "ok" at cosine 0.87.
    cosines = np.sum(base.embed(TEXTS) * vectors, axis=1)
    assert float(cosines.min()) > 0.96, TEXTS[int(cosines.argmin())]
    # Another recipe would be another model: the fingerprint names this one, and its file too,
    # so an int8 file made by an older recipe is never reused for it.
    assert int8.fingerprint == f"{base.fingerprint}:int8-q{DYNAMIC.version}"
    assert light.export_path(base.fingerprint, DYNAMIC).name == f"model-int8-q{DYNAMIC.version}.onnx"
    assert not int8.batch_invariant


def test_a_static_int8_vector_is_its_own_in_any_batch() -> None:
    # Its activation ranges are fixed at export, and padding is masked: the texts share forward
    # passes (padded to the longest) and each still gets the vector it gets alone.
    static = MiniLMEmbedder(quantization="static")
    assert static.batch_invariant
    together = static.embed(TEXTS)
    alone = np.stack([static.embed([text])[0] for text in TEXTS])
    reversed_batch = static.embed(TEXTS[::-1])[::-1]
    for other in (alone, reversed_batch):
        assert float(np.sum(together * other, axis=1).min()) >= 0.9999


def test_the_static_int8_model_stays_close_to_the_reference_under_its_own_name() -> None:
    base, static = MiniLMEmbedder(runtime="onnx"), MiniLMEmbedder(quantization="static")
    vectors = static.embed(TEXTS)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    cosines = np.sum(base.embed(TEXTS) * vectors, axis=1)
    # A one-word text moves most ("ok": 0.947); sentences stay near 0.99, as with the dynamic recipe.
    assert float(cosines.min()) > 0.93 and float(np.median(cosines)) > 0.98, cosines
    assert static.fingerprint == f"{base.fingerprint}:int8-q{STATIC.version}"
    assert static.name == "all-MiniLM-L6-v2-int8s" != MiniLMEmbedder(quantized=True).name


def test_the_static_recipe_makes_the_same_model_twice(tmp_path: Path) -> None:
    # The fingerprint names the recipe, not the file's bytes: the calibration must be deterministic
    # for one fingerprint to mean one model on every machine.
    model = MiniLMEmbedder(quantization="static")
    model.embed(["makes the export if it is missing"])
    base = model.fingerprint.removesuffix(f":{STATIC.tag}")
    made = light.export_path(base, STATIC)
    tokenizer = light.OnnxEncoder(made, model.model_path).tokenizer
    again = tmp_path / "again.onnx"
    recipes.quantize(STATIC, light.export_path(base), again, lambda text: tokenizer.encode(text).ids)
    assert hashlib.sha256(again.read_bytes()).digest() == hashlib.sha256(made.read_bytes()).digest()


def test_a_thread_cap_changes_the_speed_not_the_vectors() -> None:
    capped, free = MiniLMEmbedder(runtime="onnx", threads=1), MiniLMEmbedder(runtime="onnx")
    assert np.allclose(capped.embed(TEXTS), free.embed(TEXTS), atol=1e-5)
    onnx_file = light.export_path(free.fingerprint)
    session = light.OnnxEncoder(onnx_file, free.model_path, threads=1).session
    assert session.get_session_options().intra_op_num_threads == 1
    assert capped.fingerprint == free.fingerprint
    with pytest.raises(EmbedderError, match="threads must be at least 1"):
        MiniLMEmbedder(threads=0)


def test_the_light_runtimes_threads_sleep_rather_than_spin_between_passes() -> None:
    # On two cores shared with other processes, threads that spin for work take the core the thread
    # with work needs: bench_embedding_speed measured two spinning threads 2.5 times slower at load 11.
    model = MiniLMEmbedder(quantized=True)
    onnx_file = light.export_path(model.fingerprint.removesuffix(f":{DYNAMIC.tag}"), DYNAMIC)
    model.embed(["makes the export if it is missing"])
    for threads in (None, 2):
        options = light.OnnxEncoder(onnx_file, model.model_path, threads=threads).session.get_session_options()
        assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"


def test_a_new_file_gets_the_int8_model_where_its_export_can_be_had(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_MEM_CACHE_DIR", str(tmp_path / "new" / "cache"))  # not made yet, but makeable
    chosen = default_embedder()
    assert chosen is not None and chosen.recipe == STATIC and chosen.name == "all-MiniLM-L6-v2-int8s"
    # Where the export cannot be written, or torch is asked for, the float model (which can fall back).
    blocker = tmp_path / "a-file"
    blocker.write_text("a regular file where the cache folder would go")
    monkeypatch.setenv("HARNESS_MEM_CACHE_DIR", str(blocker / "cache"))
    chosen = default_embedder()
    assert chosen is not None and not chosen.quantized and chosen.name == "all-MiniLM-L6-v2"
    assert giving_vectors() == "`harness-mem --embedder minilm reindex`"  # a hint names what would work here
    monkeypatch.setenv("HARNESS_MEM_CACHE_DIR", str(tmp_path / "new" / "cache"))
    assert giving_vectors() == "`harness-mem --embedder minilm-int8s reindex`"
    monkeypatch.setenv("HARNESS_MEM_EMBED_RUNTIME", "torch")
    chosen = default_embedder()
    assert chosen is not None and not chosen.quantized
    assert not (tmp_path / "new").exists()  # choosing wrote nothing


def test_a_file_made_with_the_float_model_reopens_with_it(tmp_path: Path) -> None:
    from harness_mem import MemoryStore

    with MemoryStore(tmp_path / "m.db", embedder="minilm") as store:
        store.add("We chose argon2id for password hashing.")
    with MemoryStore(tmp_path / "m.db") as store:  # "auto": the file's own model, not the new default
        assert store.embedder is not None and store.embedder.name == "all-MiniLM-L6-v2"
        assert store.recall("password hashing", k=1)[0].entry.content.startswith("We chose argon2id")


def test_a_file_made_with_the_dynamic_int8_model_keeps_it_when_the_default_is_static(tmp_path: Path) -> None:
    # The default for a new file moved from the dynamic recipe to the static one: a file made before
    # reopens with the model its vectors came from, and a query is embedded one text a pass, as they were.
    from harness_mem import MemoryStore

    with MemoryStore(tmp_path / "m.db", embedder="minilm-int8") as store:
        store.add("We chose argon2id for password hashing.")
    with MemoryStore(tmp_path / "m.db") as store:  # "auto": the file's own model, not the default
        assert store.embedder is not None and store.embedder.name == "all-MiniLM-L6-v2-int8"
        assert not store.embedder.batch_invariant  # type: ignore[attr-defined]
        assert store.recall("password hashing", k=1)[0].entry.content.startswith("We chose argon2id")
    with MemoryStore(tmp_path / "new.db", embedder="auto") as store:
        store.add("a new file")
        assert store.embedder is not None and store.embedder.name == "all-MiniLM-L6-v2-int8s"


def test_a_forward_pass_is_not_padded_past_its_word_piece_budget() -> None:
    # A call of mixed lengths used to go as one pass padded to its longest text: a consolidation's
    # calls of a few dozen segments ran 4.9 times slower so. Sorted, a pass now ends at PASS_TOKENS.
    model = MiniLMEmbedder(runtime="onnx")
    model.embed(["makes the export if it is missing"])
    encoder = light.OnnxEncoder(light.export_path(model.fingerprint), model.model_path)
    texts = [("word " * n).strip() for n in (1, 300, 12, 40, 7, 150, 3, 90, 25, 60) * 3]
    seen: list[int] = []
    for chosen, ids, mask in encoder.batches(texts, 64):
        assert len(chosen) == 1 or ids.size <= light.PASS_TOKENS, (len(chosen), ids.shape)
        assert ids.shape == mask.shape and int(mask.sum()) == sum(min(len(t.split()), 254) + 2 for t in (texts[i] for i in chosen))
        seen.extend(int(i) for i in chosen)
    assert sorted(seen) == list(range(len(texts)))
