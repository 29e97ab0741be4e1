"""Embedding long texts: LongMemEval dev's chats imported with vectors, against the raw runtime.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_long_texts.py                  # 10 haystacks
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_long_texts.py --questions 100  # all 100 (~an hour)

The texts are every turn, both roles, of the first ``--questions`` haystacks of LongMemEval_S dev
(~490 turns each; a third of them longer than the model's 256 word pieces), read at run time from
``--data``. For each model (all-MiniLM-L6-v2, and its int8 export), in one run:

- **raw**: the model alone, in this process, over exactly the texts an import embeds (each turn as
  ``role: content``, then the later windows of the long ones, :mod:`harness_mem.passages`), in one
  ``embed`` call: tokenising, sorting by length, batching, inference. Texts per second are counted
  over the turns (what a user imports) and over every window (what the model runs).
- **import**: ``harness-mem --embedder MODEL import FILE`` in a fresh process on a new file, as a
  user runs it (redaction on, both cores): its wall time, and the raw time divided by it.

A keyword-only import (``--embedder none``) of the same file shows what the store costs without
the model. The sides take turns for ``--rounds`` rounds and the best time of each is kept, so they
meet the same load on a shared machine.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_recall import haystack_turns

from harness_mem.passages import embedding_text
from harness_mem.providers.embeddings import MiniLMEmbedder

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data"
CLI = Path(sys.executable).with_name("harness-mem")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def haystack_lines(data: Path, questions: int) -> list[dict[str, Any]]:
    """Every turn of the first ``questions`` haystacks, as import lines (as bench_recall.py stores them)."""
    with gzip.open(data / "longmemeval-dev" / "longmemeval_s_dev.json.gz", "rt", encoding="utf-8") as f:
        records = json.load(f)[:questions]
    return [{"id": f"{r['question_id']}:{sid}:{n}", "text": turn["content"], "role": turn["role"],
             "session": f"{r['question_id']}:{sid}", "created_at": when.isoformat()}
            for r in records for sid, n, when, turn in haystack_turns(r)]


def model_windows(model: MiniLMEmbedder, lines: list[dict[str, Any]]) -> list[str]:
    """What an import of ``lines`` embeds: each turn's text, then every later window."""
    texts = [embedding_text(line["text"], line["role"]) for line in lines]
    windows = [text[start:stop] for text in texts for start, stop in model.passages(text)]
    return texts + windows


def raw_seconds(model: MiniLMEmbedder, texts: list[str]) -> float:
    started = time.perf_counter()
    model.embed(texts)
    return time.perf_counter() - started


def import_seconds(file: Path, embedder: str, folder: Path) -> float:
    db = folder / f"import-{embedder}.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    started = time.perf_counter()
    done = subprocess.run([str(CLI), "--db", str(db), "--embedder", embedder, "import", str(file)],
                          capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"import with {embedder} failed: {done.stderr.strip()}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the folder of longmemeval-dev")
    parser.add_argument("--questions", type=int, default=10, help="haystacks to import (of 100)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of every side; the best is kept")
    parser.add_argument("--models", nargs="+", default=["minilm", "minilm-int8"], choices=["minilm", "minilm-int8"])
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    lines = haystack_lines(args.data, args.questions)
    models = {name: MiniLMEmbedder(quantized=name == "minilm-int8") for name in args.models}
    texts = model_windows(next(iter(models.values())), lines)
    longer = sum(1 for line in lines if models[args.models[0]].passages(embedding_text(line["text"], line["role"])))
    log(f"{args.questions} haystacks: {len(lines):,} turns ({longer:,} longer than one window), {len(texts):,} windows")
    for model in models.values():
        model.embed(texts[:8])  # load (and, the first time, export) the model outside the timings

    best: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        file = folder / "haystacks.jsonl"
        file.write_text("".join(json.dumps(line) + "\n" for line in lines))
        for round_ in range(args.rounds):
            sides: list[tuple[str, Any]] = [("import-none", lambda: import_seconds(file, "none", folder))]
            for name, model in models.items():
                sides.append((f"raw-{name}", lambda model=model: raw_seconds(model, texts)))
                sides.append((f"import-{name}", lambda name=name: import_seconds(file, name, folder)))
            for side, run in sides:
                seconds = run()
                best[side] = min(best.get(side, seconds), seconds)
                log(f"  round {round_ + 1}: {side} {seconds:.1f} s")

    figures: dict[str, Any] = {"questions": args.questions, "turns": len(lines), "longer_turns": longer,
                               "windows": len(texts), "keyword_only_import_s": round(best["import-none"], 1)}
    print(f"{'model':<12} {'raw s':>7} {'turns/s':>8} {'windows/s':>10} {'import s':>9} {'turns/s':>8} {'raw/import':>11}")
    for name in args.models:
        raw, imported = best[f"raw-{name}"], best[f"import-{name}"]
        print(f"{name:<12} {raw:>7.1f} {len(lines) / raw:>8.0f} {len(texts) / raw:>10.0f} {imported:>9.1f}"
              f" {len(lines) / imported:>8.0f} {raw / imported:>11.2f}")
        figures[name] = {"raw_s": round(raw, 1), "raw_turns_per_s": round(len(lines) / raw),
                         "raw_windows_per_s": round(len(texts) / raw), "import_s": round(imported, 1),
                         "import_turns_per_s": round(len(lines) / imported), "raw_over_import": round(raw / imported, 3)}
    print(f"keyword-only import: {best['import-none']:.1f} s")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
