"""Redaction throughput: how many MB/s of chat transcript the Redactor scrubs, and its share of an import.

The input is a synthetic transcript (deterministic for a seed) of English and Chinese chat turns.
Technical turns carry code, shell output, config lines, dates, versions, hashes, UUIDs, ISBNs,
prices and order numbers (the look-alikes that must be left alone), and one turn in five carries
a planted value of one of the kinds the built-in detectors know. Two corpora (``--corpus``):

* ``chat`` (default) — three turns in five are plain conversation, one in five technical, one in
  five technical with a planted value: a realistic mix for an agent's memory;
* ``dense`` — every turn technical, look-alikes in every part: a stress test for the detectors.

Two ways of scrubbing are timed:

* ``messages`` — one ``scrub`` call per turn, as the store's write path does it;
* ``document`` — one ``scrub`` call over the whole transcript.

``leaked`` counts planted values whose raw text survives the ``messages`` pass (a detector's
recall on this corpus, not only its speed).

With ``--import``, the same turns are also written to a fresh store file through
``MemoryStore(..., embedder=None).add_many`` twice, with the default redactor and with
``redactor=None``. Redaction's share of import time is the time inside the redactor (a stopwatch
around each call) over the redacted import's time; the goal is at most 20%. Then the same turns go
through ``import_jsonl`` with one worker process preparing them (parse, check, redact) while the
main one writes, the way ``harness-mem import`` takes a large file: there the figure is the wall
time redaction adds, (redacted − unredacted) / redacted.

MB are megabytes of UTF-8 (10**6 bytes). Run::

    .venv/bin/python bench/bench_redact.py                  # 20 MB, a table
    .venv/bin/python bench/bench_redact.py --mb 5 --json    # machine-readable
    .venv/bin/python bench/bench_redact.py --per-detector   # where the time goes
    .venv/bin/python bench/bench_redact.py --mb 5 --import  # and redaction's share of an import
    .venv/bin/python bench/bench_redact.py --corpus dense   # the stress corpus
    .venv/bin/python bench/bench_redact.py --cases          # leaks and false positives on the tables

``--cases`` reads the realistic table (bench/data/redaction_cases.jsonl, written by
make_redaction_cases.py): how many of its secrets and PII leak (a raw part survives) or are found
as another kind, and how many of its harmless lines are changed, with each policy; then it stops.
"""

from __future__ import annotations

import argparse
import json
import random
import string
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness_mem.jsonl import import_jsonl
from harness_mem.redaction import Redactor, cn_id_ok, iban_ok, luhn_ok
from harness_mem.store import MemoryStore

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
    # config and code with credential-ish names whose values are not credentials
    "max_tokens=4096\ntoken=true\nkey=value\nsecret: none\nsort_key = created_at\n",
    '{"use_auth": false, "tokenizer": "bert-base-uncased", "cache_key": "user:42:profile"}\n',
    "headers = {'Accept': 'application/json', 'X-Request-Id': request_id}\n",
    "keyboard_layout: qwerty\nmonkey_patch = True\npass_rate: 0.97\n",
)
ALNUM = string.ascii_letters + string.digits


def _random(r: random.Random, n: int, alphabet: str = ALNUM) -> str:
    return "".join(r.choice(alphabet) for _ in range(n))


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
    lambda r: f"order {r.randint(2_000_000_000, 9_999_999_999)}",  # ten digits, no phone context
    lambda r: f"{r.randint(1, 999)}.{r.randint(0, 99)}%",
    lambda r: f"ISBN 978-{r.randint(0, 9)}-{r.randint(100, 999)}-{r.randint(10000, 99999)}-{r.randint(0, 9)}",
    lambda r: f"{r.randint(1, 999)}.{r.randint(0, 99):02d} EUR" if r.random() < 0.5 else f"€{r.randint(1, 999)}",
)


def _luhn(body: str) -> str:
    return body + next(d for d in string.digits if luhn_ok(body + d))


def _luhn_card(r: random.Random) -> str:
    digits = _luhn("4" + "".join(r.choice(string.digits) for _ in range(14)))
    return r.choice((digits, " ".join(digits[i : i + 4] for i in range(0, 16, 4))))


def _odd_card(r: random.Random) -> str:
    """A card grouped with dots, a no-break or thin space, or underscores; or a 19-digit UnionPay."""
    if r.random() < 0.25:
        digits = _luhn("62" + "".join(r.choice(string.digits) for _ in range(16)))
        return " ".join(digits[i : i + 4] for i in range(0, 19, 4))
    digits = _luhn("5" + "".join(r.choice(string.digits) for _ in range(14)))
    return r.choice(".\u00a0\u2009\u202f_").join(digits[i : i + 4] for i in range(0, 16, 4))


def _iban(r: random.Random) -> str:
    bban = "".join(r.choice(string.digits) for _ in range(18))
    check = next(f"{c:02d}" for c in range(2, 99) if iban_ok(f"DE{c:02d}{bban}"))
    return f"DE{check}{bban}"


def _odd_iban(r: random.Random) -> str:
    """A GB IBAN in lower case with spaces, or upper case with dashes."""
    bban = "WEST" + "".join(r.choice(string.digits) for _ in range(14))
    iban = next(f"GB{c:02d}{bban}" for c in range(2, 99) if iban_ok(f"GB{c:02d}{bban}"))
    groups = [iban[i : i + 4] for i in range(0, 22, 4)]
    return " ".join(groups).lower() if r.random() < 0.5 else "-".join(groups)


def _cn_id(r: random.Random) -> str:
    body = f"110105{r.randint(1950, 2005)}{r.randint(1, 12):02d}{r.randint(1, 28):02d}{r.randint(0, 999):03d}"
    value = next(body + c for c in "0123456789X" if cn_id_ok(body + c))
    return value if r.random() < 0.5 else f"{value[:6]} {value[6:14]} {value[14:]}"


def _national_phone(r: random.Random) -> str:
    d = lambda n: "".join(r.choice(string.digits) for _ in range(n))  # noqa: E731
    return r.choice((
        f"020 7946 {d(4)}", f"07700 900{d(3)}", f"030 {d(8)}", f"0151 {d(8)}", f"03-{d(4)}-{d(4)}",
        f"090-{d(4)}-{d(4)}", f"01 {d(2)} {d(2)} {d(2)} {d(2)}", f"06.{d(2)}.{d(2)}.{d(2)}.{d(2)}",
        f"010-{d(8)}", f"138.{d(4)}.{d(4)}", f"0044 20 7946 {d(4)}",
    ))


def _ssn(r: random.Random, sep: str) -> str:
    return f"{r.randint(1, 665):03d}{sep}{r.randint(1, 99):02d}{sep}{r.randint(1, 9999):04d}"


# (how the value is written, the value): the value must not survive redaction. Money is kept by
# the default policy, so it is planted without a value to check.
PII: tuple[tuple[str, Callable[[random.Random], str]], ...] = (
    ("{}", lambda r: f"{r.choice(WORDS)}.{r.choice(WORDS)}@example.com"),
    ("{}", lambda r: f"{r.choice(('josé', 'zoë', 'müller'))}.{r.choice(WORDS)}@bücher.de"),
    ("{}", lambda r: f"1{r.choice('3456789')}{r.randint(0, 999_999_999):09d}"),
    ("{}", lambda r: f"+44 20 {r.randint(1000, 9999)} {r.randint(1000, 9999)}"),
    ("{}", lambda r: f"({r.randint(200, 999)}) {r.randint(200, 999)}-{r.randint(0, 9999):04d}"),
    ("{}", _national_phone),
    ("call me at {}", lambda r: f"{r.randint(201, 989)}555{r.randint(0, 9999):04d}"),
    ("{}", _luhn_card),
    ("{}", _odd_card),
    ("{}", _iban),
    ("{}", _odd_iban),
    ("{}", _cn_id),
    ("{}", lambda r: _ssn(r, "-")),
    ("{}", lambda r: _ssn(r, ".")),
    ("SSN {}", lambda r: _ssn(r, "")),
    ("{}", lambda r: f"10.{r.randint(0, 255)}.{r.randint(0, 255)}.{r.randint(1, 254)}"),
    ("{}", lambda r: "sk-proj-" + _random(r, 40)),
    ("{}", lambda r: "AKIA" + _random(r, 16, string.ascii_uppercase + string.digits)),
    ("{}", lambda r: r.choice(("hf_", "glpat-", "GOCSPX-")) + _random(r, 34)),
    ("{}", lambda r: "npm_" + _random(r, 36)),
    ("https://hooks.slack.com/services/T0A1B2C3D4/B5E6F7G8H9/{}", lambda r: _random(r, 24)),
    ("aws_secret_access_key {}", lambda r: _random(r, 40, ALNUM + "/+")),
    ("password={}", lambda r: _random(r, 10, string.ascii_letters)),
    ("pass={}", lambda r: _random(r, 10)),
    ("pw={}", lambda r: _random(r, 10)),
    ("redis://:{}@cache.internal:6379/0", lambda r: _random(r, 12)),
    ('{{"password": "{}"}}', lambda r: _random(r, 4) + '\\"' + _random(r, 6)),
    ("Cookie: session={}; theme=dark", lambda r: _random(r, 24)),
    ("MY_SERVICE_TOKEN_V2={}", lambda r: _random(r, 32)),
    ("¥{}", lambda r: ""),
    ("{}元", lambda r: ""),
)


def english(r: random.Random, n: int, noise: bool = True) -> str:
    words = [r.choice(WORDS) for _ in range(n)]
    for _ in range(r.randint(0, 2) if noise else 0):
        words.insert(r.randrange(len(words) + 1), r.choice(NOISE)(r))
    return " ".join(words) + "."


def chinese(r: random.Random, n: int, noise: bool = True) -> str:
    chars = [r.choice(HAN) for _ in range(n)]
    for _ in range(r.randint(0, 2) if noise else 0):
        chars.insert(r.randrange(len(chars) + 1), r.choice(NOISE)(r))
    return "".join(chars) + r.choice(CJK_PUNCT)


def message(r: random.Random, corpus: str = "chat") -> tuple[str, str | None]:
    """One chat turn and the secret planted in it, if any.

    ``dense``: every turn is technical (prose in either language with look-alikes in every part,
    sometimes code), one in five with a planted value: a stress test for the detectors.
    ``chat``: three turns in five are plain conversation (prose without numbers, as in a chat
    corpus such as LoCoMo, where 2% of turns hold a digit), one in five is technical as above, and
    one in five is technical with a planted value.
    """
    roll = r.random()
    technical = corpus == "dense" or roll >= 0.6
    plant = roll >= 0.8 if corpus == "chat" else roll < 0.2
    parts: list[str] = []
    for _ in range(r.randint(1, 6)):
        roll = r.random()
        if roll < 0.5:
            parts.append(english(r, r.randint(6, 30), technical))
        elif roll < 0.85 or not technical:
            parts.append(chinese(r, r.randint(8, 40), technical))
        else:
            parts.append(r.choice(CODE))
    planted = None
    if plant:
        template, make = r.choice(PII)
        planted = make(r)
        value = template.format(planted or r.randint(1, 9999))
        at = r.randrange(len(parts) + 1)
        # Half the time glued to CJK text with no space: CJK characters are word characters, so a
        # pattern anchored on \b finds no boundary there and misses the value.
        parts.insert(at, ("联系方式" + value) if r.random() < 0.5 else f"contact {value}")
    return " ".join(parts), planted


def transcript(megabytes: float, seed: int, corpus: str = "chat") -> tuple[list[str], list[str | None]]:
    """Messages until their UTF-8 size reaches ``megabytes``, and each one's planted secret (or None)."""
    r = random.Random(seed)
    target = int(megabytes * 1_000_000)
    out: list[str] = []
    planted: list[str | None] = []
    size = 0
    while size < target:
        m, secret = message(r, corpus)
        out.append(m)
        planted.append(secret)
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
    leaked: int | None = None


def run_messages(redactor: Redactor, messages: list[str], megabytes: float, planted: list[str | None]) -> Result:
    start = time.perf_counter()
    outputs = [redactor.scrub(m) for m in messages]
    seconds = time.perf_counter() - start
    spans = sum(len(out.spans) for out in outputs)
    leaked = sum(1 for out, secret in zip(outputs, planted, strict=True) if secret and secret in out.text)
    return Result("messages", megabytes, seconds, megabytes / seconds, len(messages), spans, leaked)


def run_document(redactor: Redactor, messages: list[str], megabytes: float, planted: list[str | None]) -> Result:
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


class TimedRedactor:
    """A store's redactor with a stopwatch around each call, to measure redaction's share of a write.

    It keeps wall time and this process's CPU time: on a shared machine the CPU times are the
    steadier measure (other processes' load does not count in them).
    """

    def __init__(self, inner: Redactor) -> None:
        self.inner, self.seconds, self.cpu_seconds = inner, 0.0, 0.0

    def _timed(self, method: Callable[[Any], Any], value: Any) -> Any:
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            return method(value)
        finally:
            self.seconds += time.perf_counter() - wall
            self.cpu_seconds += time.process_time() - cpu

    def scrub(self, text: str) -> Any:
        return self._timed(self.inner.scrub, text)

    def scrub_value(self, value: Any) -> Any:
        return self._timed(self.inner.scrub_value, value)

    def pseudonymise(self, value: str) -> Any:
        return self._timed(self.inner.pseudonymise, value)


@dataclass
class ImportRun:
    seconds: float
    cpu_seconds: float
    redaction_seconds: float = 0.0
    redaction_cpu_seconds: float = 0.0


def import_once(directory: Path, messages: list[str], *, redact: bool) -> ImportRun:
    """Write every message as a turn to a fresh file, timed (and the redactor inside it)."""
    path = directory / ("on.db" if redact else "off.db")
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    items = [
        {"content": m, "role": ("user", "assistant")[i % 2], "session": f"s{i // 40}"}
        for i, m in enumerate(messages)
    ]
    with MemoryStore(path, embedder=None, redactor="default" if redact else None) as store:
        timed = TimedRedactor(store.redactor) if store.redactor is not None else None
        if timed is not None:
            store.redactor = timed  # type: ignore[assignment]
        wall, cpu = time.perf_counter(), time.process_time()
        store.add_many(items, batch_size=5000)
        run = ImportRun(time.perf_counter() - wall, time.process_time() - cpu)
    if timed is not None:
        run.redaction_seconds, run.redaction_cpu_seconds = timed.seconds, timed.cpu_seconds
    return run


def pipeline_once(directory: Path, lines: list[str], *, redact: bool) -> float:
    """Seconds for ``import_jsonl`` of ``lines`` with one worker process preparing (parse, check,
    redact) while this one writes: the path ``harness-mem import`` takes for a large file."""
    path = directory / ("pipe-on.db" if redact else "pipe-off.db")
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    with MemoryStore(path, embedder=None, redactor="default" if redact else None) as store:
        wall = time.perf_counter()
        import_jsonl(store, lines, workers=1)
        return time.perf_counter() - wall


def pipeline_share(messages: list[str], repeat: int) -> dict[str, float]:
    """What redaction adds to the wall time of a pipelined import (best of ``repeat`` each side)."""
    lines = [
        json.dumps({"content": m, "role": ("user", "assistant")[i % 2], "session": f"s{i // 40}"})
        for i, m in enumerate(messages)
    ]
    on: list[float] = []
    off: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for attempt in range(max(1, repeat)):
            for redact in ((True, False) if attempt % 2 == 0 else (False, True)):
                (on if redact else off).append(pipeline_once(Path(tmp), lines, redact=redact))
    return {
        "pipeline_seconds": min(on),
        "pipeline_without_redaction_seconds": min(off),
        "pipeline_redaction_share": max(0.0, (min(on) - min(off)) / min(on)),
    }


def import_share(messages: list[str], repeat: int) -> dict[str, float]:
    """Redaction's share of an import, from the best of ``repeat`` rounds (the two sides interleaved)."""
    on: list[ImportRun] = []
    off: list[ImportRun] = []
    with tempfile.TemporaryDirectory() as tmp:
        for attempt in range(max(1, repeat)):
            for redact in ((True, False) if attempt % 2 == 0 else (False, True)):
                (on if redact else off).append(import_once(Path(tmp), messages, redact=redact))
    best = min(on, key=lambda run: run.cpu_seconds)
    return {
        "import_seconds": min(run.seconds for run in on),
        "import_without_redaction_seconds": min(run.seconds for run in off),
        "import_cpu_seconds": best.cpu_seconds,
        "import_without_redaction_cpu_seconds": min(run.cpu_seconds for run in off),
        "redaction_cpu_seconds": best.redaction_cpu_seconds,
        # Time inside the redactor over the redacted import's time, in CPU time (steady on a shared
        # machine) and in wall time (each from the round where the import was fastest).
        "redaction_share": best.redaction_cpu_seconds / best.cpu_seconds,
        "redaction_share_wall": min(on, key=lambda run: run.seconds).redaction_seconds / min(run.seconds for run in on),
    }


CASES = Path(__file__).parent / "data" / "redaction_cases.jsonl"


def case_report(redactor: Redactor) -> dict[str, Any]:
    """Leaks, wrong kinds and false positives of ``redactor`` on the realistic table."""
    rows = [json.loads(line) for line in CASES.read_text("utf-8").splitlines()]
    positives = [row for row in rows if not row.get("harmless")]
    harmless = [row["text"] for row in rows if row.get("harmless")]
    leaked, other_kind, changed = [], [], []
    for row in positives:
        out = redactor.scrub(row["text"])
        if any(raw in out.text for raw in row["secrets"]):
            leaked.append(row["text"])
        elif row["kind"] not in out.counts:
            other_kind.append(row["text"])
    for text in harmless:
        if redactor.scrub(text).text != text:
            changed.append(text)
    return {"positives": len(positives), "leaked": leaked, "other_kind": other_kind,
            "harmless": len(harmless), "false_positives": changed}


def print_cases(as_json: bool) -> int:
    reports = {policy: case_report(make(b"bench")) for policy, make in
               (("default", Redactor.default), ("hygiene", Redactor.hygiene))}
    if as_json:
        print(json.dumps(reports, indent=2, ensure_ascii=False))
        return 0
    for policy, report in reports.items():
        print(f"policy={policy}: {len(report['leaked'])} of {report['positives']} secrets and PII leaked, "
              f"{len(report['other_kind'])} found as another kind; {len(report['false_positives'])} of "
              f"{report['harmless']} harmless lines changed")
        for label in ("leaked", "other_kind", "false_positives"):
            for text in report[label]:
                print(f"  {label}: {text[:100]!r}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=20.0, help="transcript size in MB of UTF-8 (default 20)")
    parser.add_argument("--seed", type=int, default=7, help="random seed for the transcript (default 7)")
    parser.add_argument("--corpus", choices=("chat", "dense"), default="chat",
                        help="chat: mostly plain turns (default); dense: look-alikes in every turn")
    parser.add_argument("--policy", choices=("default", "hygiene"), default="default")
    parser.add_argument("--mode", choices=("both", "messages", "document"), default="both")
    parser.add_argument("--repeat", type=int, default=1, help="take the best of N runs (default 1)")
    parser.add_argument("--per-detector", action="store_true", help="also time each rule alone")
    parser.add_argument("--import", dest="imports", action="store_true",
                        help="also measure redaction's share of an import (add_many, redaction on and off)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--cases", action="store_true",
                        help="report leaks and false positives on bench/data/redaction_cases.jsonl, and stop")
    args = parser.parse_args(argv)
    if args.cases:
        return print_cases(args.json)

    messages, planted = transcript(args.mb, args.seed, args.corpus)
    planted_count = sum(1 for secret in planted if secret is not None)
    megabytes = sum(len(m.encode("utf-8")) + 1 for m in messages) / 1_000_000
    redactor = Redactor.default(b"bench") if args.policy == "default" else Redactor.hygiene(b"bench")
    modes = ("messages", "document") if args.mode == "both" else (args.mode,)
    runners = {"messages": run_messages, "document": run_document}
    results = []
    for mode in modes:
        runs = [runners[mode](redactor, messages, megabytes, planted) for _ in range(max(1, args.repeat))]
        results.append(min(runs, key=lambda res: res.seconds))
    detectors = per_rule(redactor, messages) if args.per_detector else []
    share = import_share(messages, args.repeat) if args.imports else None
    if share is not None:
        share.update(pipeline_share(messages, args.repeat))

    if args.json:
        payload = {
            "python": sys.version.split()[0],
            "policy": args.policy,
            "corpus": args.corpus,
            "planted": planted_count,
            "results": [asdict(res) for res in results],
            "per_rule": [{"rule": name, "seconds": secs} for name, secs in detectors],
            "import": share,
        }
        print(json.dumps(payload, indent=2))
        return 0
    print(
        f"redaction throughput, policy={args.policy}, corpus={args.corpus}, {megabytes:.1f} MB, {len(messages):,} messages, "
        f"{planted_count:,} planted values"
    )
    print(f"{'mode':<10} {'seconds':>8} {'MB/s':>7} {'texts':>9} {'spans':>8} {'leaked':>7}")
    for res in results:
        leaked = "" if res.leaked is None else f"{res.leaked:,}"
        print(f"{res.mode:<10} {res.seconds:>8.2f} {res.mb_per_s:>7.2f} {res.texts:>9,} {res.spans:>8,} {leaked:>7}")
    if share is not None:
        print(
            f"\nimport (add_many, keyword-only store), CPU seconds: {share['import_cpu_seconds']:.2f} redacted, "
            f"{share['import_without_redaction_cpu_seconds']:.2f} with redactor=None; "
            f"{share['redaction_cpu_seconds']:.2f} inside the redactor = {share['redaction_share']:.0%} of import "
            f"time (goal ≤ 20%); wall clock: {share['import_seconds']:.2f} s and "
            f"{share['import_without_redaction_seconds']:.2f} s, share {share['redaction_share_wall']:.0%}"
        )
        print(
            f"import_jsonl with a worker preparing (the path of `harness-mem import`), wall clock: "
            f"{share['pipeline_seconds']:.2f} s redacted, {share['pipeline_without_redaction_seconds']:.2f} s "
            f"with redactor=None: redaction adds {share['pipeline_redaction_share']:.0%}"
        )
    if detectors:
        print(f"\n{'rule':<54} {'seconds':>8} {'MB/s':>8}")
        for name, secs in sorted(detectors, key=lambda row: -row[1]):
            print(f"{name:<54} {secs:>8.3f} {megabytes / secs:>8.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
