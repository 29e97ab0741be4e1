"""The int8 recipes side by side (issue #37): batch invariance, agreement with the float model, recall.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_int8_recipes.py

For the float model and each int8 recipe of :mod:`harness_mem.providers.int8`, on the light runtime:

* batch invariance: the worst cosine between a text's vector embedded alone and in length-sorted
  batches of 16 and 64 (500 LoCoMo dev turns, every fifth);
* agreement: the cosine of each of those turns to the float model's vector (min, 1st percentile, median);
* recall of the embedding alone: R@10 and MRR@10 of each LoCoMo dev question over its own
  conversation's turns (and over the observation facts), with the difference from the float model
  and a 95% paired bootstrap interval (2,000 resamples of the questions).

The dynamic recipe is embedded one text a pass for recall (as the product runs it), the others in batches of 16.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tune_hybrid import DEFAULT_DATA  # noqa: E402

from harness_mem.providers import light  # noqa: E402
from harness_mem.providers.embeddings import MiniLMEmbedder  # noqa: E402
from harness_mem.providers.int8 import RECIPES  # noqa: E402

Vectors = npt.NDArray[np.float32]


def embed(encoder: light.OnnxEncoder, texts: Sequence[str], batch: int) -> Vectors:
    return encoder.encode(texts, batch)


def rows(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def recall(vectors: dict[str, Vectors], docs: list[dict[str, object]], questions: list[dict[str, object]],
           qvectors: Vectors) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    ids = [str(d["id"]) for d in docs]
    conversation = np.array([str(d["id"]).split(":")[0] for d in docs])
    matrix = vectors["docs"]
    hits, reciprocal = [], []
    for question, vector in zip(questions, qvectors, strict=True):
        scores = matrix @ vector
        scores[conversation != question["conversation"]] = -9.0
        top = np.argsort(-scores)[:10]
        evidence = set(question["evidence"])  # type: ignore[call-overload]
        ranks = [rank for rank, i in enumerate(top) if ids[i] in evidence]
        hits.append(1.0 if ranks else 0.0)
        reciprocal.append(1.0 / (ranks[0] + 1) if ranks else 0.0)
    return np.array(hits), np.array(reciprocal)


def interval(difference: npt.NDArray[np.float64], rng: np.random.Generator) -> tuple[float, float]:
    means = [difference[rng.integers(0, len(difference), len(difference))].mean() for _ in range(2000)]
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the locomo-dev folder (default: %(default)s)")
    parser.add_argument("--conversations", type=int, help="only the first N conversations (a quick run)")
    args = parser.parse_args()
    models = {"float": MiniLMEmbedder(runtime="onnx")} | {kind: MiniLMEmbedder(quantization=kind) for kind in RECIPES}
    encoders = {}
    for name, model in models.items():
        model.embed(["makes the export if it is missing"])
        base = model.fingerprint.removesuffix(f":{model.recipe.tag}") if model.recipe else model.fingerprint
        encoders[name] = light.OnnxEncoder(light.export_path(base, model.recipe), model.model_path)
    turns = [str(t["text"]) for t in rows(args.data / "locomo_turns.jsonl")][::5][:50 if args.conversations else 500]
    reference = embed(encoders["float"], turns, 16)
    print("batch invariance and agreement with the float model (500 LoCoMo turns):")
    for name, encoder in encoders.items():
        alone = embed(encoder, turns, 1)
        worst = min(float(np.sum(alone * embed(encoder, turns, b), axis=1).min()) for b in (16, 64))
        cosine = np.sum(alone * reference, axis=1)
        print(f"  {name:8} batched vs alone, worst {worst:.6f}; to float: min {cosine.min():.4f},"
              f" 1st pct {np.percentile(cosine, 1):.4f}, median {np.median(cosine):.4f}")
    rng = np.random.default_rng(0)
    for corpus, question_file in (("locomo_turns.jsonl", "locomo_queries.jsonl"),
                                  ("locomo_facts.jsonl", "locomo_fact_queries.jsonl")):
        docs, questions = rows(args.data / corpus), rows(args.data / question_file)
        if args.conversations:
            kept = sorted({str(q["conversation"]) for q in questions})[:args.conversations]
            docs = [d for d in docs if str(d["id"]).split(":")[0] in kept]
            questions = [q for q in questions if q["conversation"] in kept]
        found = {}
        for name, encoder in encoders.items():
            batch = 1 if name in RECIPES and not RECIPES[name].batch_invariant else 16  # type: ignore[index]
            vectors = {"docs": embed(encoder, [str(d["text"]) for d in docs], batch)}
            found[name] = recall(vectors, docs, questions, embed(encoder, [str(q["question"]) for q in questions], batch))
        print(f"\nsemantic-only recall within the conversation, {corpus} ({len(questions)} questions):")
        for name, (hits, reciprocal) in found.items():
            line = f"  {name:8} R@10 {hits.mean():.4f}  MRR@10 {reciprocal.mean():.4f}"
            if name != "float":
                difference = hits - found["float"][0]
                low, high = interval(difference, rng)
                line += f"  R@10 vs float {difference.mean():+.4f} (95% {low:+.4f} … {high:+.4f})"
            print(line)


if __name__ == "__main__":
    main()
