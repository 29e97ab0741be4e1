"""Embedding at the runtime's speed: the raw ONNX int8 session against harness-mem's own paths (issue #37).

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_embedding_speed.py                 # grid + 3 interleaved rounds
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_embedding_speed.py --rounds 5 --short 1000 --long 200
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_embedding_speed.py --big 50000     # + the 50,000-turn import
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_embedding_speed.py --json
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_embedding_speed.py --against-dynamic 5000
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_embedding_speed.py --budgets 128,256,384,512   # pass sizes

**Raw**: an onnxruntime ``InferenceSession`` on the light runtime's int8 model (``--model``: the
static ``minilm-int8s``, a new file's default, or the dynamic ``minilm-int8``), fed by the same
tokenizer (truncated to the model's 256 word pieces) and asked for the pooled output only: no store,
no redaction, no passages. A grid first, on a sample (128 short texts, 16 long ones): batch sizes 1/8/16/32/64/128, one or two
intra-op threads (two with and without onnxruntime's spin-waiting), length-sorted batches or not.

**Paths**, then, each timed end to end and interleaved round by round with the raw session's best
configurations on exactly the texts that path gave the model (recorded by a wrapper around the
store's embedder), so a ratio compares like with like on a machine whose load moves:

- ``embed``: the model's ``MiniLMEmbedder.embed`` alone;
- ``import``: :func:`harness_mem.jsonl.import_jsonl` into a new file, with vectors and keyword-only;
- ``reindex``: ``--embedder <model> reindex`` of a keyword-only copy of that file;
- ``consolidate``: :func:`harness_mem.experience.consolidate` on LoCoMo-replayed sessions (see
  ``bench_consolidate.py``), with vectors and keyword-only (turns/s end to end); its embedding rate
  is the texts it embedded (segments, facts, and a summary's sentences as passages) over the time
  its embedder calls took.

Short texts are ~15-word chat turns, long ones ~200-word replies. Each ratio is a path's texts/s over
the raw session's on the same texts; ``raw best`` is the fastest configuration of the grid (``raw
sleeping`` the fastest whose threads sleep between passes, as the light runtime's do), ``raw
batch 1`` the fastest that embeds one text per pass, which is what the dynamic int8 model must do to
keep a vector a function of its text alone (it scales a batch by its whole range: see
:mod:`harness_mem.providers.int8`), and ``dynamic b1`` the dynamic model's raw session one text a pass
on the same texts (what a batched model must beat to be worth its place). ``--budgets`` times the
light runtime's own encoder at each cap of word pieces a pass (``light.PASS_TOKENS``). The load
average is printed with every round.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_consolidate import DEFAULT_DATA, synthetic_lines  # noqa: E402
from bench_store import FILLER, WORDS  # noqa: E402

from harness_mem import MemoryStore  # noqa: E402
from harness_mem.experience import consolidate  # noqa: E402
from harness_mem.jsonl import import_jsonl  # noqa: E402
from harness_mem.providers import light  # noqa: E402
from harness_mem.providers.embeddings import (  # noqa: E402
    DEFAULT_QUANTIZATION,
    FLAG_NAMES,
    MiniLMEmbedder,
    named_embedder,
)

BATCH_SIZES = (1, 8, 16, 32, 64, 128)
MODEL = FLAG_NAMES[DEFAULT_QUANTIZATION]


@dataclass(frozen=True)
class Config:
    """One way to run the raw session."""

    batch: int
    threads: int
    spinning: bool
    sort: bool

    def __str__(self) -> str:
        spin = "" if self.threads == 1 else (" spin" if self.spinning else " no-spin")
        return f"batch {self.batch}, {self.threads} thread{'s' if self.threads > 1 else ''}{spin}" + (
            ", sorted" if self.sort else ", unsorted")


class RawSession:
    """The int8 export on bare onnxruntime, tokenised as the light runtime tokenises."""

    def __init__(self, name: str) -> None:
        import onnxruntime  # type: ignore[import-untyped]
        from tokenizers import Tokenizer

        model = named_embedder(name)
        model.embed(["warm up"])  # makes the export when it is missing
        self.file = light.export_path(model.fingerprint.rsplit(":", 1)[0], model.recipe)
        self.tokenizer = Tokenizer.from_file(str(model.model_path / "tokenizer.json"))
        self.tokenizer.enable_truncation(256)
        self.tokenizer.no_padding()
        self._ort = onnxruntime
        self._sessions: dict[tuple[int, bool], Any] = {}

    def session(self, threads: int, spinning: bool) -> Any:
        if (threads, spinning) not in self._sessions:
            options = self._ort.SessionOptions()
            options.log_severity_level = 3
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
            options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
            self._sessions[threads, spinning] = self._ort.InferenceSession(
                str(self.file), options, providers=["CPUExecutionProvider"])
        return self._sessions[threads, spinning]

    def seconds(self, texts: Sequence[str], config: Config) -> float:
        session = self.session(config.threads, config.spinning)
        started = time.perf_counter()
        encodings = self.tokenizer.encode_batch(list(texts))
        lengths = [len(e.ids) for e in encodings]
        order = np.argsort([-n for n in lengths], kind="stable") if config.sort else np.arange(len(texts))
        for start in range(0, len(order), config.batch):
            chosen = order[start:start + config.batch]
            width = max(lengths[i] for i in chosen)
            ids = np.zeros((len(chosen), width), dtype=np.int64)
            mask = np.zeros((len(chosen), width), dtype=np.int64)
            for row, i in enumerate(chosen):
                ids[row, :lengths[i]] = encodings[i].ids
                mask[row, :lengths[i]] = 1
            session.run(["embedding"], {"input_ids": ids, "attention_mask": mask})
        return time.perf_counter() - started


class Recording(MiniLMEmbedder):
    """The benchmarked int8 embedder, keeping every text it is given (what the path asked the model
    for) and the time it spent on them."""

    def __init__(self) -> None:
        super().__init__(quantization=named_embedder(MODEL).recipe.kind)  # type: ignore[union-attr]
        self.texts: list[str] = []
        self.seconds = 0.0

    def embed(self, texts: Sequence[str]) -> Any:
        self.texts.extend(texts)
        started = time.perf_counter()
        try:
            return super().embed(texts)
        finally:
            self.seconds += time.perf_counter() - started


def words(rng: random.Random, low: int, high: int) -> str:
    picked = (rng.choice(FILLER) if rng.random() < 0.45 else rng.choice(WORDS) for _ in range(rng.randint(low, high)))
    return " ".join(picked).capitalize() + "."


def turn_lines(texts: Sequence[str], tag: str) -> list[str]:
    return [json.dumps({"id": f"{tag}-{i}", "text": text, "role": ("user", "assistant")[i % 2],
                        "session": f"{tag}-s{i // 20}", "timestamp": f"2025-03-01T10:{i // 60 % 60:02d}:{i % 60:02d}Z"})
            for i, text in enumerate(texts)]


def load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def grid(raw: RawSession, texts: Sequence[str]) -> dict[Config, float]:
    """texts/s of every configuration on ``texts``."""
    configs = [Config(b, t, spin, sort) for t, spin in ((1, True), (2, True), (2, False))
               for b in BATCH_SIZES for sort in (True, False) if not (b == 1 and not sort)]
    return {c: len(texts) / raw.seconds(texts, c) for c in configs}


def timed(run: Callable[[], Any]) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


class Paths:
    """Each path once, on fresh copies, recording what it embedded."""

    def __init__(self, scratch: Path, short: list[str], long: list[str], sessions: list[str]) -> None:
        self.scratch = scratch
        self.lines = {"short": turn_lines(short, "short"), "long": turn_lines(long, "long")}
        self.sessions = sessions
        self.keyword_files: dict[str, Path] = {}
        self.session_files: dict[str, Path] = {}
        for name, lines in self.lines.items():  # the files reindex starts from
            self.keyword_files[name] = self._imported(f"kw-{name}", lines, None)
        for label, embedder in (("vectors", Recording()), ("keyword", None)):  # consolidation's inputs
            self.session_files[label] = self._imported(f"sessions-{label}", sessions, embedder)

    def _imported(self, name: str, lines: list[str], embedder: Any) -> Path:
        path = self.scratch / f"{name}.db"
        with MemoryStore(path, embedder=embedder) as store:
            import_jsonl(store, lines)
        return path

    def copy(self, path: Path) -> Path:
        target = self.scratch / f"copy-{path.name}"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{target}{suffix}").unlink(missing_ok=True)
        shutil.copy(path, target)
        return target

    def embed(self, name: str) -> tuple[float, list[str]]:
        model = Recording()
        texts = [json.loads(line)["text"] for line in self.lines[name]]
        model.embed(texts[:4])
        model.texts.clear()
        return timed(lambda: model.embed(texts)), model.texts

    def import_(self, name: str, vectors: bool) -> tuple[float, list[str]]:
        target = self.scratch / "import.db"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{target}{suffix}").unlink(missing_ok=True)
        model = Recording() if vectors else None
        with MemoryStore(target, embedder=model) as store:
            if model is not None:
                model.embed(["warm up"])
                model.texts.clear()
            seconds = timed(lambda: import_jsonl(store, self.lines[name]))
        return seconds, model.texts if model is not None else []

    def reindex(self, name: str) -> tuple[float, list[str]]:
        model = Recording()
        model.embed(["warm up"])
        model.texts.clear()
        with MemoryStore(self.copy(self.keyword_files[name]), embedder=model) as store:
            seconds = timed(store.reindex)
        return seconds, model.texts

    def consolidate(self, vectors: bool) -> tuple[float, list[str], float]:
        """Seconds end to end, the texts embedded and the seconds the embedder spent on them."""
        model = Recording() if vectors else None
        if model is not None:
            model.embed(["warm up"])
            model.texts.clear()
            model.seconds = 0.0
        with MemoryStore(self.copy(self.session_files["vectors" if vectors else "keyword"]), embedder=model) as store:
            seconds = timed(lambda: consolidate(store))
        return seconds, model.texts if model is not None else [], model.seconds if model is not None else 0.0


def budgets(texts: dict[str, list[str]], caps: list[int], n: int) -> dict[str, dict[int, float]]:
    """texts/s of the light runtime's encoder (the benchmarked model) at each cap of word pieces a
    pass, interleaved, median of ``n`` rounds."""
    model = named_embedder(MODEL)
    model.embed(["warm up"])
    encoder = light.OnnxEncoder(light.export_path(model.fingerprint.rsplit(":", 1)[0], model.recipe), model.model_path)
    found: dict[str, dict[int, list[float]]] = {kind: {} for kind in texts}
    default = light.PASS_TOKENS
    try:
        for i in range(n):
            print(f"pass budgets, round {i + 1}/{n}, load {load()}", file=sys.stderr, flush=True)
            for kind, sample in texts.items():
                for cap in caps:
                    light.PASS_TOKENS = cap
                    found[kind].setdefault(cap, []).append(len(sample) / timed(lambda s=sample: encoder.encode(s)))  # type: ignore[misc]
    finally:
        light.PASS_TOKENS = default
    return {kind: {cap: round(statistics.median(rates), 1) for cap, rates in by_cap.items()} for kind, by_cap in found.items()}


def rounds(raw: RawSession, dynamic: RawSession, paths: Paths, best: dict[str, Config],
           best_single: dict[str, Config], best_sleeping: dict[str, Config], n: int) -> dict[str, dict[str, list[float]]]:
    """Per path: its texts/s, and the raw session's on the same texts (best and batch-1 configurations)."""
    found: dict[str, dict[str, list[float]]] = {}

    def note(path: str, seconds: float, texts: list[str], kind: str) -> None:
        entry = found.setdefault(path, {"path": [], "raw best": [], "raw sleeping": [], "raw batch 1": [], "dynamic b1": [],
                                        "texts": []})
        entry["path"].append(len(texts) / seconds)
        entry["raw best"].append(len(texts) / raw.seconds(texts, best[kind]))
        entry["raw sleeping"].append(len(texts) / raw.seconds(texts, best_sleeping[kind]))
        entry["raw batch 1"].append(len(texts) / raw.seconds(texts, best_single[kind]))
        entry["dynamic b1"].append(len(texts) / dynamic.seconds(texts, best_single[kind]))
        entry["texts"].append(len(texts))

    for i in range(n):
        print(f"round {i + 1}/{n}, load {load()}", file=sys.stderr, flush=True)
        for kind in ("short", "long"):
            note(f"embed {kind}", *paths.embed(kind), kind)
            seconds, texts = paths.import_(kind, vectors=True)
            keyword_s, _ = paths.import_(kind, vectors=False)
            note(f"import {kind}", seconds, texts, kind)
            found[f"import {kind}"].setdefault("keyword-only turns/s", []).append(len(paths.lines[kind]) / keyword_s)
            note(f"reindex {kind}", *paths.reindex(kind), kind)
        seconds, texts, embedding_s = paths.consolidate(vectors=True)
        keyword_s, _, _ = paths.consolidate(vectors=False)
        note("consolidate (its embedder calls)", embedding_s, texts, "long")
        entry = found["consolidate (its embedder calls)"]
        entry.setdefault("turns/s with vectors", []).append(len(paths.sessions) / seconds)
        entry.setdefault("turns/s keyword-only", []).append(len(paths.sessions) / keyword_s)
    return found


def big_import(scratch: Path, n: int) -> dict[str, float]:
    """Turns/s importing ``n`` short turns end to end, keyword-only and with vectors."""
    rng = random.Random(50)
    lines = turn_lines([words(rng, 10, 20) for _ in range(n)], "big")
    out: dict[str, float] = {}
    for label, embedder in (("keyword-only", None), ("with vectors", named_embedder(MODEL))):
        target = scratch / f"big-{label}.db"
        print(f"importing {n:,} turns {label}, load {load()}", file=sys.stderr, flush=True)
        with MemoryStore(target, embedder=embedder) as store:
            out[f"{label} turns/s"] = n / timed(lambda store=store: import_jsonl(store, lines))  # type: ignore[misc]
    out["load after"] = float(load())
    return out


def against_dynamic(scratch: Path, n: int, rounds: int) -> dict[str, list[float]]:
    """Turns/s importing ``n`` short turns end to end with the benchmarked model and with the dynamic
    one, taking turns round by round."""
    rng = random.Random(51)
    lines = turn_lines([words(rng, 10, 20) for _ in range(n)], "ab")
    out: dict[str, list[float]] = {}
    for i in range(rounds):
        for name in dict.fromkeys((MODEL, "minilm-int8")):
            print(f"importing {n:,} turns with {name}, round {i + 1}, load {load()}", file=sys.stderr, flush=True)
            with MemoryStore(scratch / f"ab-{name}-{i}.db", embedder=named_embedder(name)) as store:
                store.embedder.embed(["warm up"])  # type: ignore[union-attr]
                out.setdefault(f"{name} turns/s", []).append(n / timed(lambda store=store: import_jsonl(store, lines)))  # type: ignore[misc]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--short", type=int, default=600, help="short turns (~15 words)")
    parser.add_argument("--long", type=int, default=120, help="long replies (~200 words)")
    parser.add_argument("--sessions", type=int, default=30, help="LoCoMo-replayed sessions to consolidate")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--big", type=int, default=0, help="also import this many turns end to end")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--model", choices=["minilm-int8", "minilm-int8s"], default=FLAG_NAMES[DEFAULT_QUANTIZATION])
    parser.add_argument("--against-dynamic", type=int, default=0, metavar="N",
                        help="also import N short turns end to end with --model and with minilm-int8, interleaved")
    parser.add_argument("--budgets", default="", help="word pieces a pass to time the encoder at, e.g. 128,256,512")
    args = parser.parse_args()
    global MODEL
    MODEL = args.model

    rng = random.Random(37)
    texts = {"short": [words(rng, 10, 20) for _ in range(args.short)],
             "long": [words(rng, 150, 250) for _ in range(args.long)]}
    raw, dynamic = RawSession(args.model), RawSession("minilm-int8")
    result: dict[str, Any] = {"load_before": load()}
    if args.budgets:
        result["budgets"] = budgets({"short": texts["short"][:256], "long": texts["long"][:24]},
                                    [int(cap) for cap in args.budgets.split(",")], args.rounds)
    grids = {}
    for kind, sample in texts.items():
        print(f"grid on {kind} texts, load {load()}", file=sys.stderr, flush=True)
        grids[kind] = grid(raw, sample[:128 if kind == "short" else 16])
    best = {kind: max(g, key=g.__getitem__) for kind, g in grids.items()}
    best_single = {kind: max((c for c in g if c.batch == 1), key=g.__getitem__) for kind, g in grids.items()}
    # The light runtime's threads sleep between passes (spinning ones cost 2.5x at load 11): its own mode's best.
    best_sleeping = {kind: max((c for c in g if not (c.threads > 1 and c.spinning)), key=g.__getitem__)
                     for kind, g in grids.items()}
    result["grid"] = {kind: {str(c): round(rate, 1) for c, rate in sorted(g.items(), key=lambda x: -x[1])}
                      for kind, g in grids.items()}
    with tempfile.TemporaryDirectory(prefix="bench-embed-") as folder:
        scratch = Path(folder)
        print(f"preparing the stores, load {load()}", file=sys.stderr, flush=True)
        paths = Paths(scratch, texts["short"], texts["long"], synthetic_lines(args.data, args.sessions))
        measured = rounds(raw, dynamic, paths, best, best_single, best_sleeping, args.rounds)
        result["paths"] = {
            name: {key: round(statistics.median(values), 1) for key, values in entry.items()}
            | {"ratio to raw best": [round(p / r, 2) for p, r in zip(entry["path"], entry["raw best"], strict=True)],
               "ratio to raw sleeping": [round(p / r, 2) for p, r in zip(entry["path"], entry["raw sleeping"], strict=True)],
               "ratio to raw batch 1": [round(p / r, 2) for p, r in zip(entry["path"], entry["raw batch 1"],
                                                                        strict=True)]}
            for name, entry in measured.items()}
        if args.big:
            result["big import"] = big_import(scratch, args.big)
        if args.against_dynamic:
            result["against dynamic"] = against_dynamic(scratch, args.against_dynamic, args.rounds)
    result["load_after"] = load()
    result["best"] = {kind: str(c) for kind, c in best.items()}
    result["best batch 1"] = {kind: str(c) for kind, c in best_single.items()}
    result["best sleeping"] = {kind: str(c) for kind, c in best_sleeping.items()}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for kind, by_cap in result.get("budgets", {}).items():
        print(f"\nthe encoder by word pieces a pass, {kind} texts (texts/s):",
              ", ".join(f"{cap}: {rate}" for cap, rate in by_cap.items()))
    for kind, g in result["grid"].items():
        print(f"\nraw session, {kind} texts (texts/s, best first):")
        for config, rate in g.items():
            print(f"  {rate:8.1f}  {config}")
    print(f"\nload {result['load_before']} before, {result['load_after']} after; ratios per round")
    print(f"{'path':34} {'texts/s':>8} {'raw best':>9} {'sleeping':>9} {'raw b1':>8} {'dynamic b1':>10}"
          "  ratio (best)        ratio (sleeping)    ratio (batch 1)")
    for name, entry in result["paths"].items():
        print(f"{name:34} {entry['path']:8.1f} {entry['raw best']:9.1f} {entry['raw sleeping']:9.1f} {entry['raw batch 1']:8.1f}"
              f" {entry['dynamic b1']:10.1f}  {str(entry['ratio to raw best']):18}  {str(entry['ratio to raw sleeping']):18}"
              f"  {entry['ratio to raw batch 1']}")
        for key in ("keyword-only turns/s", "turns/s with vectors", "turns/s keyword-only"):
            if key in entry:
                print(f"    {key}: {entry[key]:,.1f}")
    if "against dynamic" in result:
        print(f"\nimport of {args.against_dynamic:,} short turns, interleaved:",
              "; ".join(f"{k} {[round(v, 1) for v in vs]}" for k, vs in result["against dynamic"].items()))
    if "big import" in result:
        print("\n50,000-turn import:" if args.big == 50000 else f"\n{args.big:,}-turn import:",
              ", ".join(f"{k} {v:,.1f}" for k, v in result["big import"].items()))


if __name__ == "__main__":
    main()
