"""Redaction throughput: how many MB/s of chat transcript the Redactor scrubs.

The input is a synthetic transcript (deterministic for a seed): English and Chinese chat turns,
code, shell output, dates, versions, hashes and UUIDs (the look-alikes that must be left alone),
with personal data and secrets sprinkled into about one turn in five. Two ways of scrubbing it
are timed:

* ``messages`` — one ``scrub`` call per turn, as the store's write path does it;
* ``document`` — one ``scrub`` call over the whole transcript.

MB are megabytes of UTF-8 (10**6 bytes). Run::

    .venv/bin/python bench/bench_redact.py                  # 20 MB, a table
    .venv/bin/python bench/bench_redact.py --mb 5 --json    # machine-readable
    .venv/bin/python bench/bench_redact.py --per-detector   # where the time goes
"""

from __future__ import annotations

import argparse
import json
import random
import string
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from harness_mem.redaction import Redactor, cn_id_ok, iban_ok, luhn_ok

WORDS = (
    "the agent should retry the request after the cache warms up and then compare results with "
    "yesterday run because latency regressed on the staging cluster when we enabled batching for "
    "embeddings also please check memory usage of the worker pool before merging this change into "
    "main we decided to keep sqlite as the default backend and move vectors into the same file"
).split()
HAN = "我们今天讨论了数据库迁移方案以及缓存策略请在合并之前检查内存使用情况下周再继续优化检索质量和延迟问题"
CJK_PUNCT = "，。；：！？"
CODE = (
    "def scrub(text: str) -> str:\n    return redactor.scrub(text).text\n",
    "$ git log --oneline | head -3\n3f2a9c1 Fix race in compaction\n8d1e0b7 Add FTS index\n",
    "for i in range(10):\n    total += values[i] * 2\n",
    "ERROR 2024-05-01T12:30:00Z worker-3 timeout after 30.5s (attempt 2/5)\n",
    "pip install harness-mem==0.1.0 numpy==1.26.4 # python 3.11.7\n",
    "awk '{print $1}' access.log | sort | uniq -c | sort -rn | head\n",
)


def _order_number(r: random.Random) -> str:
    """16 digits that fail the Luhn check: an order number, not a card."""
    while True:
        digits = str(r.randint(10**15, 10**16 - 1))
        if not luhn_ok(digits):
            return digits


NOISE: tuple[Callable[[random.Random], str], ...] = (
    lambda r: f"{r.randint(2020, 2026)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}",
    lambda r: f"v{r.randint(0, 9)}.{r.randint(0, 20)}.{r.randint(0, 30)}",
    lambda r: f"{r.randint(0, 9)}.{r.randint(0, 20)}.{r.randint(0, 30)}",
    lambda r: str(r.randint(1_600_000_000, 1_800_000_000)),
    lambda r: str(r.randint(1_600_000_000_000, 1_800_000_000_000)),
    lambda r: "".join(r.choice("0123456789abcdef") for _ in range(40)),
    lambda r: "".join(r.choice("0123456789abcdef") for _ in range(7)),
    lambda r: f"{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:{r.randint(0, 59):02d}",
    lambda r: "-".join("".join(r.choice("0123456789abcdef") for _ in range(n)) for n in (8, 4, 4, 4, 12)),
    lambda r: f"order #{_order_number(r)}",
    lambda r: f"{r.randint(1, 999)}.{r.randint(0, 99)}%",
)


def _luhn_card(r: random.Random) -> str:
    body = "4" + "".join(r.choice(string.digits) for _ in range(14))
    check = next(d for d in string.digits if luhn_ok(body + d))
    digits = body + check
    return r.choice((digits, " ".join(digits[i : i + 4] for i in range(0, 16, 4))))


def _iban(r: random.Random) -> str:
    bban = "".join(r.choice(string.digits) for _ in range(18))
    check = next(f"{c:02d}" for c in range(2, 99) if iban_ok(f"DE{c:02d}{bban}"))
    return f"DE{check}{bban}"


def _cn_id(r: random.Random) -> str:
    body = f"110105{r.randint(1950, 2005)}{r.randint(1, 12):02d}{r.randint(1, 28):02d}{r.randint(0, 999):03d}"
    return next(body + c for c in "0123456789X" if cn_id_ok(body + c))


PII: tuple[Callable[[random.Random], str], ...] = (
    lambda r: f"{r.choice(WORDS)}.{r.choice(WORDS)}@example.com",
    lambda r: f"1{r.choice('3456789')}{r.randint(0, 999_999_999):09d}",
    lambda r: f"+44 20 {r.randint(1000, 9999)} {r.randint(1000, 9999)}",
    lambda r: f"({r.randint(200, 999)}) {r.randint(200, 999)}-{r.randint(0, 9999):04d}",
    _luhn_card,
    _iban,
    _cn_id,
    lambda r: f"{r.randint(1, 665):03d}-{r.randint(1, 99):02d}-{r.randint(1, 9999):04d}",
    lambda r: f"10.{r.randint(0, 255)}.{r.randint(0, 255)}.{r.randint(1, 254)}",
    lambda r: "sk-proj-" + "".join(r.choice(string.ascii_letters + string.digits) for _ in range(40)),
    lambda r: "AKIA" + "".join(r.choice(string.ascii_uppercase + string.digits) for _ in range(16)),
    lambda r: f"password={''.join(r.choice(string.ascii_letters) for _ in range(10))}",
    lambda r: f"¥{r.randint(1, 9999)}",
    lambda r: f"{r.randint(1, 999)}元",
)


def english(r: random.Random, n: int) -> str:
    words = [r.choice(WORDS) for _ in range(n)]
    for _ in range(r.randint(0, 2)):
        words.insert(r.randrange(len(words) + 1), r.choice(NOISE)(r))
    return " ".join(words) + "."


def chinese(r: random.Random, n: int) -> str:
    chars = [r.choice(HAN) for _ in range(n)]
    for _ in range(r.randint(0, 2)):
        chars.insert(r.randrange(len(chars) + 1), r.choice(NOISE)(r))
    return "".join(chars) + r.choice(CJK_PUNCT)


def message(r: random.Random) -> tuple[str, int]:
    """One chat turn (prose in either language, sometimes code) and how many values were planted."""
    parts: list[str] = []
    for _ in range(r.randint(1, 6)):
        roll = r.random()
        if roll < 0.5:
            parts.append(english(r, r.randint(6, 30)))
        elif roll < 0.85:
            parts.append(chinese(r, r.randint(8, 40)))
        else:
            parts.append(r.choice(CODE))
    planted = 0
    if r.random() < 0.2:
        value = r.choice(PII)(r)
        at = r.randrange(len(parts) + 1)
        # Half the time glued to CJK text with no space: CJK characters are word characters, so a
        # pattern anchored on \b finds no boundary there and misses the value.
        parts.insert(at, ("联系方式" + value) if r.random() < 0.5 else f"contact {value}")
        planted = 1
    return " ".join(parts), planted


def transcript(megabytes: float, seed: int) -> tuple[list[str], int]:
    """Messages until their UTF-8 size reaches ``megabytes``, and the number of planted values."""
    r = random.Random(seed)
    target = int(megabytes * 1_000_000)
    out: list[str] = []
    size = planted = 0
    while size < target:
        m, n = message(r)
        out.append(m)
        planted += n
        size += len(m.encode("utf-8")) + 1
    return out, planted


@dataclass
class Result:
    mode: str
    megabytes: float
    seconds: float
    mb_per_s: float
    texts: int
    spans: int


def run_messages(redactor: Redactor, messages: list[str], megabytes: float) -> Result:
    start = time.perf_counter()
    spans = 0
    for m in messages:
        spans += len(redactor.scrub(m).spans)
    seconds = time.perf_counter() - start
    return Result("messages", megabytes, seconds, megabytes / seconds, len(messages), spans)


def run_document(redactor: Redactor, messages: list[str], megabytes: float) -> Result:
    text = "\n".join(messages)
    start = time.perf_counter()
    spans = len(redactor.scrub(text).spans)
    seconds = time.perf_counter() - start
    return Result("document", megabytes, seconds, megabytes / seconds, 1, spans)


def per_rule(redactor: Redactor, messages: list[str]) -> list[tuple[str, float]]:
    """Seconds each rule (regex plus its checks) takes over the whole document, gates ignored."""
    text = "\n".join(messages)
    rows = []
    for detector in redactor.detectors:
        for rule in detector.rules:
            start = time.perf_counter()
            for _ in rule.spans(text):
                pass
            rows.append((f"{detector.kind} /{rule.pattern.pattern[:36]}", time.perf_counter() - start))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=20.0, help="transcript size in MB of UTF-8 (default 20)")
    parser.add_argument("--seed", type=int, default=7, help="random seed for the transcript (default 7)")
    parser.add_argument("--policy", choices=("default", "hygiene"), default="default")
    parser.add_argument("--mode", choices=("both", "messages", "document"), default="both")
    parser.add_argument("--repeat", type=int, default=1, help="take the best of N runs (default 1)")
    parser.add_argument("--per-detector", action="store_true", help="also time each rule alone")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)

    messages, planted = transcript(args.mb, args.seed)
    megabytes = sum(len(m.encode("utf-8")) + 1 for m in messages) / 1_000_000
    redactor = Redactor.default(b"bench") if args.policy == "default" else Redactor.hygiene(b"bench")
    modes = ("messages", "document") if args.mode == "both" else (args.mode,)
    runners = {"messages": run_messages, "document": run_document}
    results = []
    for mode in modes:
        runs = [runners[mode](redactor, messages, megabytes) for _ in range(max(1, args.repeat))]
        results.append(min(runs, key=lambda res: res.seconds))
    detectors = per_rule(redactor, messages) if args.per_detector else []

    if args.json:
        payload = {
            "python": sys.version.split()[0],
            "policy": args.policy,
            "planted": planted,
            "results": [asdict(res) for res in results],
            "per_rule": [{"rule": name, "seconds": secs} for name, secs in detectors],
        }
        print(json.dumps(payload, indent=2))
        return 0
    print(
        f"redaction throughput, policy={args.policy}, {megabytes:.1f} MB, {len(messages):,} messages, "
        f"{planted:,} planted values"
    )
    print(f"{'mode':<10} {'seconds':>8} {'MB/s':>7} {'texts':>9} {'spans':>8}")
    for res in results:
        print(f"{res.mode:<10} {res.seconds:>8.2f} {res.mb_per_s:>7.2f} {res.texts:>9,} {res.spans:>8,}")
    if detectors:
        print(f"\n{'rule':<54} {'seconds':>8} {'MB/s':>8}")
        for name, secs in sorted(detectors, key=lambda row: -row[1]):
            print(f"{name:<54} {secs:>8.3f} {megabytes / secs:>8.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
