"""A million entries on a laptop: a synthetic chat-memory corpus with LoCoMo planted in it, and its import.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_scale.py --n 100000
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_scale.py --n 1000000 --db /tmp/scale-1m.db --keep
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_scale.py --n 1000000 --db /tmp/scale-1m.db --reuse --json

The corpus (:func:`generate`, seeded, streamed: a million turns in seconds) looks like chat memory:
- words drawn from a Zipf law (rank r has weight 1 / (r + 2.7)^1.15) over a vocabulary of common English
  function words first, then everyday content words (so questions about LoCoMo's topics also match
  filler turns), then tens of thousands of pronounceable pseudo-words (the long tail of names,
  identifiers and typos);
- about N/50 sessions, log-normal in length (median ~33 turns, some in the hundreds), each an agent
  session (user, assistant, sometimes tool) or a chat between two named speakers (none of them a speaker
  of the dev conversations, so a question naming a LoCoMo speaker is not matched by role on filler);
- turns of log-normal length (median 18 words, tool output longer, a few past 100), sessions spread
  over 2022-01 to 2024-03, turns seconds to minutes apart.

Planting: every turn of the LoCoMo dev conversations (read at run time from ``--data``, never
copied into the project) goes in as its own session with its own ids, roles and timestamps, at its
place in time among the filler. :func:`planted_questions` gives their questions with the evidence
entry ids and the conversation's session ids, for recall measured over the whole store and within
the conversation (``session_prefix="conv-26:"``).

Import (:func:`measure_import`): N entries (filler and planted together) written as JSON Lines and
imported keyword-only the way ``harness-mem import`` does (``import_jsonl``, its worker process
included), against the raw engine in the same run as ``bench_store.py`` defines it (the same lines
parsed with ``json.loads``, then the rows harness_mem stored and the same FTS5 texts inserted with
``executemany`` into the same schema, in one transaction); and the file's bytes and bytes per entry.

The built file is kept with ``--db PATH --keep``; ``--reuse`` opens it again without importing when
its side file (``PATH.corpus.json``) records the same n, seed and generator. Recall at scale opens it
with :func:`open_built` and asks :func:`planted_questions`; :func:`main` prints one table of
:func:`table_rows`, which those measurements extend.

Semantic and hybrid recall (``--vectors``, :func:`measure_vector_recall`): a second store, beside
``--db`` (``NAME-vectors.db``), holds the same corpus with a vector per entry, written through the
store (``import_jsonl`` into a store with an embedder). The embedder is bench-only
(``bench/synthetic_embedder.py``, name ``bench-synthetic-minilm``): the real MiniLM vector for every
planted LoCoMo turn and every question (computed once, cached beside the store), and for the filler a
synthetic vector near a real MiniLM vector of filler text, so every figure of that table is on partly
synthetic vectors. Each question is asked with its vector (``query_vector=``: embedding not timed)
for semantic, hybrid and keyword recall, over the whole store, one session and its conversation,
against vec0's exact KNN over the same stored vectors (latency and top-10 agreement); fresh processes
time the first result and report their peak RSS::

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_scale.py --n 1000000 --db /tmp/scale-1m.db --keep --vectors
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_store import COLUMNS, index_texts, percentile, raw_import  # noqa: E402
from tune_hybrid import CATEGORIES, DEFAULT_DATA, load  # noqa: E402

from harness_mem.db import driver  # noqa: E402
from harness_mem.jsonl import import_jsonl  # noqa: E402
from harness_mem.store import MemoryStore  # noqa: E402

#: Bumped whenever the corpus a (n, seed) gives changes: a kept file of another version is rebuilt.
GENERATOR = 1
DEFAULT_SEED = 7
START = datetime(2022, 1, 1, tzinfo=UTC)
SPAN_SECONDS = (datetime(2024, 3, 1, tzinfo=UTC) - START).total_seconds()

# ---------------------------------------------------------------------------------------- words

# The most frequent English words, roughly in order of frequency: they take the top Zipf ranks.
FUNCTION_WORDS = """
the i to and a you it of is that in we this for be on not with have do was are my so but just at can
what if me they it's i'm don't your as all like about be there from or an he know get one will would
out up think no yes he's she was were how when had her his them their our us been more some could
go then really because that's did now here very got well good time which who see also any want
well going make even right into than too way back over only other people new its much where thing
things need why still these those said say by off let let's i'll we're you're can't didn't should
""".split()

# Everyday content words: conversation topics, work and agent-session vocabulary. They follow the
# function words in rank, so each appears thousands of times in a million turns.
CONTENT_WORDS = """
work job team project meeting deadline manager office boss colleague career interview promotion salary
family kids son daughter mom dad parents brother sister wife husband friend friends baby dog cat pet
school class teacher student homework exam college university degree study research paper book books
read reading write writing story poem novel library art painting paint drawing draw sculpture museum
gallery photo photos camera picture music song songs guitar piano violin concert band singing dance
dancing movie movies film show series game games play playing soccer football basketball tennis
running run marathon hiking hike camping camp trip travel vacation beach mountain lake river forest
park garden plants flowers tree trees sunrise sunset weather rain snow summer winter spring autumn
food cooking cook recipe dinner lunch breakfast coffee tea cake bread pizza pasta salad restaurant
kitchen house home apartment room bedroom car bike bus train flight airport hotel city town country
health doctor hospital sick medicine exercise gym yoga workout sleep tired stress anxiety therapy
support group community volunteer charity church festival party birthday wedding anniversary
holiday christmas gift gifts shopping clothes shoes money budget rent bills bank savings
computer phone laptop app website email message internet online video podcast blog post
code bug fix test tests deploy release build branch merge commit review error errors log logs server
database query index cache latency timeout retry queue worker job cron schedule config settings
password token auth login session user users account customer ticket incident alert dashboard
report metric metrics plan roadmap feature features issue issues design api service services cluster
docker container image backup restore migration schema table file files folder script function
python javascript rust golang java sql linux terminal shell command output input install update
version upgrade staging production rollback canary pipeline ci build_failed flaky checkout payment
invoice refund order shipping delivery package price discount coupon subscription trial plan
happy sad excited proud grateful nervous worried angry calm busy free ready sure sorry glad
great nice cool awesome amazing beautiful hard easy important different favorite favourite
love like enjoy hope wish feel felt remember forget learn learned teach taught help helped try tried
started start finish finished open opened close closed bought buy sold sell moved move visit visited
week weekend month year today tomorrow yesterday morning evening night day days weeks months years
adopt adopted shelter animal animals horse horses bird birds fish ocean sea island boat sailing
pottery ceramics knitting sewing crafts woodworking baking gardening fishing climbing surfing
skiing skating cycling swimming journal diary meditation mindfulness self care wellness
transgender lgbtq pride identity acceptance counseling mental career change mentor mentoring
conference speech talk presentation slides workshop course lesson tutorial guide docs readme
""".split()

SYLLABLES_START = "b c d f g h j k l m n p r s t v w z b d k l m n p r s t br dr gr pl st tr ch sh".split()
SYLLABLES_VOWEL = "a e i o u a e i o u a e o ai ee oo ou y".split()
SYLLABLES_END = ["", "", "", "", "", "", "n", "r", "s", "t", "l", "m", "nd", "st", "x", "ng"]

# Speakers of the named chats: common first names, none of them a speaker of the LoCoMo dev set.
NAMES = """
Alice Bob Carol Dave Erin Frank Grace Heidi Ivan Judy Karl Laura Mallory Nina Oscar Peggy Quentin Rupert
Sybil Trent Ursula Victor Wendy Xavier Yvonne Zack Aaron Bella Cedric Diana Elena Felix Greta Hugo Iris
Jasper Kira Leon Mira Noah Olga Pablo Rosa Sven Tara Umar Vera Walt Yara Zoe Liam Emma Olivia Ethan
""".split()

ZIPF_SHIFT, ZIPF_EXPONENT = 2.7, 1.15
WORD_LENGTH_MEDIAN, WORD_LENGTH_SIGMA = 18, 0.55
TOOL_LENGTH_MEDIAN, TOOL_LENGTH_SIGMA = 40, 0.8
MAX_WORDS = 600
SESSION_MEAN, SESSION_SIGMA = 50, 0.9
NAMED_SESSION_SHARE = 0.3
CHUNK_SESSIONS = 200  # sessions generated per numpy batch


def pseudo_words(count: int, rng: np.random.Generator, taken: set[str]) -> list[str]:
    """``count`` distinct pronounceable made-up words (one to three syllables), none in ``taken``."""
    found: list[str] = []
    seen = set(taken)
    while len(found) < count:
        batch = count - len(found) + 64
        parts = [rng.integers(0, len(p), size=(batch, 3)) for p in (SYLLABLES_START, SYLLABLES_VOWEL, SYLLABLES_END)]
        syllables = rng.choice([1, 2, 3], p=[0.3, 0.5, 0.2], size=batch)
        for i in range(batch):
            word = "".join(SYLLABLES_START[parts[0][i, j]] + SYLLABLES_VOWEL[parts[1][i, j]] + SYLLABLES_END[parts[2][i, j]]
                           for j in range(syllables[i]))
            if len(word) > 2 and word not in seen:
                seen.add(word)
                found.append(word)
                if len(found) == count:
                    break
    return found


@functools.cache
def vocabulary(seed: int, size: int = 30_000) -> tuple[str, ...]:
    """The ranked vocabulary: function words, then content words (shuffled), then pseudo-words."""
    rng = np.random.default_rng([seed, 1])
    function = list(dict.fromkeys(FUNCTION_WORDS))
    content = [w for w in dict.fromkeys(CONTENT_WORDS) if w not in set(function)]
    content = [content[i] for i in rng.permutation(len(content))]
    head = function + content
    return (*head, *pseudo_words(size - len(head), rng, set(head)))


def zipf_weights(size: int) -> np.ndarray:
    """Each rank's share of the words: 1 / (rank + ZIPF_SHIFT) ** ZIPF_EXPONENT, normalised."""
    weights = 1.0 / (np.arange(1, size + 1) + ZIPF_SHIFT) ** ZIPF_EXPONENT
    return weights / weights.sum()


@functools.cache
def zipf_table(size: int, slots: int = 1 << 24) -> np.ndarray:
    """A table of word ranks, each filling its share of ``slots``: a uniform draw of a slot is a Zipf
    draw of a word (a gather per word instead of a binary search). The rarest of 30,000 words still
    get about 30 slots, so rounding moves their share by a few percent at most."""
    counts = np.maximum(1, np.rint(zipf_weights(size) * slots)).astype(np.int64)
    return np.repeat(np.arange(size, dtype=np.uint16 if size <= 1 << 16 else np.uint32), counts)


# --------------------------------------------------------------------------------------- planted


@dataclass(frozen=True)
class PlantedQuestion:
    """A LoCoMo question over turns planted in the corpus."""

    qid: str
    conversation: str
    question: str
    category: str
    evidence: tuple[str, ...]  # entry ids, as stored
    sessions: tuple[str, ...]  # the conversation's session ids, as stored

    @property
    def session_prefix(self) -> str:
        """The filter that keeps recall within the conversation (``recall(..., session_prefix=…)``)."""
        return self.conversation + ":"


def planted_turns(data: Path = DEFAULT_DATA, conversations: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """The LoCoMo turns to plant, as import lines, grouped by session in time order (the loader's
    ids, roles and texts; each session's timestamp, in UTC)."""
    corpus = load(data)
    turns = [t for t in corpus.turns if conversations is None or t.conversation in conversations]
    order = sorted(range(len(turns)), key=lambda i: (turns[i].date, turns[i].session, i))
    return [{"id": turns[i].id, "text": turns[i].text, "role": turns[i].role, "session": turns[i].session,
             "timestamp": turns[i].date.isoformat() + "Z"} for i in order]


def planted_questions(data: Path = DEFAULT_DATA, conversations: Sequence[str] | None = None) -> list[PlantedQuestion]:
    """The LoCoMo questions whose evidence is planted, with the evidence entry ids and the session
    ids of their conversation."""
    corpus = load(data)
    sessions: dict[str, list[str]] = {}
    for t in corpus.turns:
        if t.session not in sessions.setdefault(t.conversation, []):
            sessions[t.conversation].append(t.session)
    return [
        PlantedQuestion(q.qid, q.conversation, q.text, CATEGORIES[q.category],
                        tuple(corpus.turns[i].id for i in q.evidence), tuple(sessions[q.conversation]))
        for q in corpus.questions if conversations is None or q.conversation in conversations
    ]


# -------------------------------------------------------------------------------------- the corpus


def _session_lengths(total: int, rng: np.random.Generator) -> list[int]:
    """Log-normal session lengths (mean SESSION_MEAN turns) adding up to ``total``."""
    mu = math.log(SESSION_MEAN) - SESSION_SIGMA**2 / 2
    lengths: list[int] = []
    left = total
    while left > 0:
        drawn = np.clip(np.rint(rng.lognormal(mu, SESSION_SIGMA, size=max(16, left // SESSION_MEAN + 1))), 2, 2000)
        for n in drawn.astype(int).tolist():
            n = min(n, left)
            lengths.append(n)
            left -= n
            if not left:
                break
    return lengths


def generate(n: int, seed: int = DEFAULT_SEED, *, planted: Sequence[dict[str, Any]] = ()) -> Iterator[dict[str, Any]]:
    """``n`` turns as import lines (id, text, role, session, timestamp): filler sessions in time
    order, with the ``planted`` turns (whole sessions, in time order) each at its place in time.
    ``n`` counts both; the same (n, seed, planted) gives the same turns.

    Sessions are drawn a chunk at a time with numpy (lengths, roles, word counts, words, times),
    then turned into rows: a million turns take seconds, and memory stays that of one chunk."""
    rng = np.random.default_rng([seed, 2])
    words = np.array(vocabulary(seed), dtype=object)
    table = zipf_table(len(words))
    lengths = _session_lengths(max(0, n - len(planted)), rng)
    starts = np.sort(rng.uniform(0, SPAN_SECONDS, size=len(lengths)))
    # When each planted turn happened, in seconds after START (its place among the filler sessions).
    plant_times = [(datetime.fromisoformat(t["timestamp"].replace("Z", "+00:00")) - START).total_seconds()
                   for t in planted]
    plant_at = 0  # the next planted turn to emit
    start_ms = np.datetime64(START.replace(tzinfo=None), "ms")
    turn = 0
    for first in range(0, len(lengths), CHUNK_SESSIONS):
        chunk = lengths[first:first + CHUNK_SESSIONS]
        turns = sum(chunk)
        named = (rng.random(len(chunk)) < NAMED_SESSION_SHARE).tolist()
        speakers = rng.integers(0, len(NAMES), size=(len(chunk), 2)).tolist()
        tool = (rng.random(turns) < 0.2).tolist()  # an assistant turn followed by a tool's output
        roles: list[str] = []
        for s, length in enumerate(chunk):
            if named[s]:  # two different speakers, taking turns
                a = speakers[s][0]
                b = (a + 1 + speakers[s][1] % (len(NAMES) - 1)) % len(NAMES)
                roles += [NAMES[a] if i % 2 == 0 else NAMES[b] for i in range(length)]
                continue
            previous = "assistant"  # an agent session opens with the user
            for i in range(length):
                role = ("tool" if previous == "assistant" and i and tool[len(roles)] else
                        "assistant" if previous in ("user", "tool") else "user")
                roles.append(role)
                previous = role
        is_tool = np.array([r == "tool" for r in roles])
        sizes = np.where(is_tool, rng.lognormal(math.log(TOOL_LENGTH_MEDIAN), TOOL_LENGTH_SIGMA, size=turns),
                         rng.lognormal(math.log(WORD_LENGTH_MEDIAN), WORD_LENGTH_SIGMA, size=turns))
        counts = np.clip(np.rint(sizes), 1, MAX_WORDS).astype(np.int64)
        tokens = words[table[rng.integers(0, len(table), size=int(counts.sum()))]].tolist()
        ends = np.cumsum(counts).tolist()
        begins = [0, *ends[:-1]]
        questions = (rng.random(turns) < 0.15).tolist()
        # Turn times: the session's start, then gaps of about 45 s (exponential) between its turns.
        gaps = rng.exponential(45.0, size=turns)
        elapsed = np.cumsum(gaps) - gaps
        session_of = np.repeat(np.arange(len(chunk)), chunk)
        firsts = np.cumsum(chunk) - np.array(chunk)
        clock = starts[first + session_of] + elapsed - elapsed[firsts][session_of]
        stamps = np.datetime_as_string(start_ms + (clock * 1000).astype("timedelta64[ms]")).tolist()
        for s, (length, at) in enumerate(zip(chunk, firsts.tolist(), strict=True)):
            while plant_at < len(planted) and plant_times[plant_at] <= starts[first + s]:
                yield planted[plant_at]
                plant_at += 1
            session = f"s{first + s}"
            for i in range(at, at + length):
                text = " ".join(tokens[begins[i]:ends[i]])
                yield {"id": f"g{turn}", "text": text[0].upper() + text[1:] + ("?" if questions[i] else "."),
                       "role": roles[i], "session": session, "timestamp": stamps[i] + "Z"}
                turn += 1
    yield from planted[plant_at:]


def write_jsonl(path: Path, rows: Iterator[dict[str, Any]]) -> int:
    """Write ``rows`` as JSON Lines; returns how many."""
    count = 0
    with path.open("w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False))
            out.write("\n")
            count += 1
    return count


# ------------------------------------------------------------------------------------ build, reuse


def meta_path(db: Path) -> Path:
    return Path(f"{db}.corpus.json")


def built_meta(db: Path) -> dict[str, Any] | None:
    """What the side file says the built store at ``db`` holds (None without one or without the file)."""
    try:
        return json.loads(meta_path(db).read_text()) if db.exists() else None  # type: ignore[no-any-return]
    except (OSError, ValueError):
        return None


def remove_db(db: Path) -> None:
    for suffix in ("", "-wal", "-shm", ".corpus.json"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)


def file_bytes(db: Path) -> int:
    return sum(Path(f"{db}{suffix}").stat().st_size for suffix in ("", "-wal") if Path(f"{db}{suffix}").exists())


def build_corpus(n: int, seed: int, db: Path, *, data: Path = DEFAULT_DATA, conversations: Sequence[str] | None = None,
                 reuse: bool = True, work: Path | None = None) -> dict[str, Any]:
    """The store at ``db`` holding the corpus of (n, seed) with LoCoMo planted, built unless ``reuse``
    finds it there already. Returns the side file's record plus, when it imported, the timings:
    ``generate_seconds`` (writing the JSON Lines), ``import_seconds``, and the lines' path in
    ``jsonl`` (under ``work``, a temporary folder by default; the caller removes it)."""
    planted = planted_turns(data, conversations)
    wanted = {"n": n, "seed": seed, "generator": GENERATOR, "conversations": sorted(conversations or []) or "all",
              "planted_turns": len(planted)}
    meta = built_meta(db)
    if reuse and meta is not None and {k: meta.get(k) for k in wanted} == wanted:
        return {**meta, "reused": True}
    remove_db(db)
    work = work or Path(tempfile.mkdtemp(prefix="bench-scale-"))
    lines = work / "corpus.jsonl"
    started = time.perf_counter()
    written = write_jsonl(lines, generate(n, seed, planted=planted))
    generated = time.perf_counter() - started
    with MemoryStore(db, embedder=None) as store, lines.open("rb") as source:
        started = time.perf_counter()
        report = import_jsonl(store, source)
        imported = time.perf_counter() - started
        assert report.added == written and not report.errors, report.errors[:3]
        sessions = store.db.execute("SELECT count(DISTINCT session) FROM entries").fetchone()[0]
    meta = {**wanted, "entries": written, "sessions": sessions, "file_bytes": file_bytes(db)}
    meta_path(db).write_text(json.dumps(meta, indent=2))
    return {**meta, "reused": False, "generate_seconds": generated, "import_seconds": imported, "jsonl": lines}


def open_built(db: Path, **store_args: Any) -> MemoryStore:
    """The built store, keyword-only unless ``store_args`` say otherwise (recall measurements)."""
    if built_meta(db) is None:
        raise FileNotFoundError(f"no built corpus at {db} (run bench_scale.py --db {db} --keep first)")
    return MemoryStore(db, **{"embedder": None, **store_args})


def measure_import(n: int, seed: int, db: Path, *, data: Path = DEFAULT_DATA, reuse: bool = False,
                   raw: bool = True) -> dict[str, Any]:
    """Build (or reuse) the store and, when it was imported here, time the raw engine on the same rows."""
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        built = build_corpus(n, seed, db, data=data, reuse=reuse, work=Path(tmp))
        result = {k: v for k, v in built.items() if k != "jsonl"}
        entries = built["entries"]
        result["bytes_per_entry"] = round(built["file_bytes"] / entries, 1)
        if built["reused"]:
            return result
        result["generate_rows_per_s"] = round(entries / built["generate_seconds"])
        result["import_rows_per_s"] = round(entries / built["import_seconds"])
        if not raw:
            return result
        lines = built["jsonl"].read_text(encoding="utf-8").splitlines()
        with MemoryStore(db, embedder=None, read_only=True) as store:
            stored = store.db.execute(f"SELECT {COLUMNS} FROM entries ORDER BY pk").fetchall()
        with_parse, insert_only = raw_import(Path(tmp) / "raw.db", lines, stored, index_texts(stored))
        raw_bytes = file_bytes(Path(tmp) / "raw.db")
    result.update({
        "raw_seconds": with_parse,
        "raw_rows_per_s": round(entries / with_parse),
        "raw_insert_only_rows_per_s": round(entries / insert_only),
        "import_ratio": round(with_parse / built["import_seconds"], 3),
        "import_ratio_insert_only": round(insert_only / built["import_seconds"], 3),
        "raw_file_bytes": raw_bytes,
    })
    return result


# ------------------------------------------------------------------- vectors: semantic and hybrid recall
#
# A store with vectors, built apart from the keyword-only one (its own file, beside it), and the
# semantic, hybrid and filtered recall measured on it against vec0's exact KNN over the same vectors.
# The filler's vectors are synthetic (bench/synthetic_embedder.py); the planted turns' and the
# questions' are the real model's.

VECTOR_ANCHORS = 4000  # real vectors of filler texts the synthetic ones are drawn around
EXACT_SAMPLES = 30  # questions timed against the exact KNN (a second or more each at 1M)


def vector_db(db: Path) -> Path:
    """Where the store with vectors goes, beside the keyword-only one at ``db``."""
    return db.with_name(f"{db.stem}-vectors{db.suffix}")


def remove_vector_db(db: Path) -> None:
    for suffix in ("", "-wal", "-shm", ".corpus.json", ".minilm.npy", ".minilm.json", ".questions.npy",
                   ".questions.json"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)


def anchor_texts(seed: int, count: int = VECTOR_ANCHORS) -> list[str]:
    """What the store would embed for ``count`` filler turns spread over a corpus of 40 × count."""
    from harness_mem.passages import embedding_text

    rows = generate(40 * count, seed)
    return [embedding_text(row["text"], row["role"]) for i, row in enumerate(rows) if i % 40 == 0][:count]


def vector_embedder(db: Path, seed: int, data: Path = DEFAULT_DATA) -> Any:
    """The bench's embedder for the store at ``db``: real MiniLM vectors for the planted turns,
    synthetic ones around real filler vectors for the rest (computed once, cached beside ``db``)."""
    from synthetic_embedder import SyntheticMiniLM, model_fingerprint, real_vectors

    from harness_mem.passages import embedding_text

    planted = [embedding_text(t["text"], t["role"]) for t in planted_turns(data)]
    anchors = anchor_texts(seed)
    started = time.perf_counter()
    vectors = real_vectors(Path(f"{db}.minilm.npy"), anchors + planted)
    embedder = SyntheticMiniLM(vectors[:len(anchors)], dict(zip(planted, vectors[len(anchors):], strict=True)),
                               model_fingerprint())
    embedder.setup_seconds = time.perf_counter() - started
    return embedder


def build_vector_corpus(n: int, seed: int, db: Path, *, data: Path = DEFAULT_DATA, reuse: bool = True,
                        raw: bool = True) -> dict[str, Any]:
    """The store at ``db`` holding the corpus of (n, seed) with a vector per entry, written through the
    store (``import_jsonl`` into ``MemoryStore(db, embedder=…)``), unless ``reuse`` finds it built.

    Returns the side file's record plus, when it imported: ``import_seconds``, ``embed_seconds`` (the
    embedder's share), and with ``raw`` the same vectors inserted into the same vec0 table by
    ``executemany`` alone (``raw_vec0_seconds``), the floor of the vector half of a write."""
    embedder = vector_embedder(db, seed, data)
    planted = planted_turns(data)
    wanted = {"n": n, "seed": seed, "generator": GENERATOR, "conversations": "all", "planted_turns": len(planted),
              "vectors": embedder.fingerprint}
    meta = built_meta(db)
    if reuse and meta is not None and {k: meta.get(k) for k in wanted} == wanted:
        return {**meta, "reused": True, "embedder": embedder}
    for suffix in ("", "-wal", "-shm", ".corpus.json"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    timed_embed = _TimedEmbedder(embedder)
    with tempfile.TemporaryDirectory(prefix="bench-scale-vec-") as tmp:
        lines = Path(tmp) / "corpus.jsonl"
        written = write_jsonl(lines, generate(n, seed, planted=planted))
        with MemoryStore(db, embedder=timed_embed) as store, lines.open("rb") as source:
            started, cpu = time.perf_counter(), time.process_time()
            report = import_jsonl(store, source)
            imported, imported_cpu = time.perf_counter() - started, time.process_time() - cpu
            assert report.added == written and not report.errors, report.errors[:3]
            sessions = store.db.execute("SELECT count(DISTINCT session) FROM entries").fetchone()[0]
        raw_seconds = raw_vec0_insert(lines, embedder, Path(tmp) / "raw.db") if raw else None
    assert embedder.real_given == len(planted), (embedder.real_given, len(planted))  # every planted turn: real
    meta = {**wanted, "entries": written, "sessions": sessions, "file_bytes": file_bytes(db),
            "real_vectors": embedder.real_given, "synthetic_vectors": embedder.synthetic_given}
    meta_path(db).write_text(json.dumps(meta, indent=2))
    result = {**meta, "reused": False, "embedder": embedder, "import_seconds": imported,
              "import_cpu_seconds": imported_cpu, "embed_seconds": timed_embed.seconds}
    if raw_seconds is not None:
        result["raw_vec0_seconds"] = raw_seconds
    return result


class _TimedEmbedder:
    """An embedder with the time spent in its ``embed`` counted (same identity)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.seconds = inner, 0.0
        self.name, self.dim, self.fingerprint = inner.name, inner.dim, inner.fingerprint

    def embed(self, texts: Sequence[str]) -> Any:
        started = time.perf_counter()
        try:
            return self.inner.embed(texts)
        finally:
            self.seconds += time.perf_counter() - started


def raw_vec0_insert(lines: Path, embedder: Any, path: Path, batch: int = 5000) -> float:
    """Seconds to insert the vectors of ``lines`` into a vec0 table declared as the store declares it,
    with ``executemany`` and the store's quantisation, in one transaction (embedding not counted)."""
    from harness_mem.db import connect, write_transaction
    from harness_mem.passages import embedding_text
    from harness_mem.vectors import pack_signs, quantize, session_key

    conn = connect(path).conn
    conn.execute("CREATE VIRTUAL TABLE v USING vec0(namespace text partition key, kind text, session_key integer,"
                 f" created_at integer, embedding int8[{embedder.dim}] distance_metric=cosine,"
                 f" bits bit[{embedder.dim}])")
    spent = 0.0
    with write_transaction(conn), lines.open(encoding="utf-8") as source:
        pk = 0
        while True:
            rows = [json.loads(line) for _, line in zip(range(batch), source, strict=False)]
            if not rows:
                break
            vectors = embedder.synthetic([embedding_text(r["text"], r["role"]) for r in rows])
            started = time.perf_counter()
            scaled, signs = quantize(vectors), pack_signs(vectors)
            conn.executemany(
                "INSERT INTO v (rowid, namespace, kind, session_key, created_at, embedding, bits)"
                " VALUES (?, 'default', 'turn', ?, ?, vec_int8(?), vec_bit(?))",
                [(pk + i + 1, session_key(r["session"]), i, scaled[i].tobytes(), signs[i].tobytes())
                 for i, r in enumerate(rows)])
            spent += time.perf_counter() - started
            pk += len(rows)
    conn.close()
    return spent


def question_vectors(db: Path, questions: Sequence[PlantedQuestion]) -> npt.NDArray[np.float32]:
    """The real model's vectors of the questions, as recall embeds them (``embed_queries``: the
    speaker names the store knows taken out), cached beside ``db``."""
    from harness_mem.providers.embeddings import MiniLMEmbedder

    path = Path(f"{db}.questions.npy")
    side = path.with_suffix(".json")
    model = MiniLMEmbedder()
    wanted = {"model": model.fingerprint, "texts": [q.question for q in questions]}
    if path.exists() and side.exists() and json.loads(side.read_text(encoding="utf-8")) == wanted:
        return np.load(path)  # type: ignore[no-any-return]
    with MemoryStore(db, embedder=model, read_only=True) as store:
        vectors = store.embed_queries(wanted["texts"])
    np.save(path, vectors)
    side.write_text(json.dumps(wanted), encoding="utf-8")
    return vectors


def _timed(call: Callable[[], Any]) -> tuple[float, float, Any]:
    """(wall ms, CPU ms of this process, result) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    value = call()
    return (time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000, value


def _latency(samples: list[tuple[float, float]]) -> dict[str, float]:
    walls, cpus = [w for w, _ in samples], [c for _, c in samples]
    return {"p50_ms": round(float(np.median(walls)), 2), "p95_ms": round(percentile(walls, 0.95), 2),
            "cpu_p50_ms": round(float(np.median(cpus)), 2)}


def _recall_at(hits: Sequence[str], evidence: Sequence[str]) -> float:
    return len(set(hits) & set(evidence)) / len(evidence)


def measure_vectors(db: Path, embedder: Any, questions: Sequence[PlantedQuestion], vectors: npt.NDArray[np.float32],
                    *, k: int = 10, exact_samples: int = EXACT_SAMPLES) -> dict[str, Any]:
    """Semantic, hybrid and filtered recall over the store with vectors at ``db``, every question
    asked with its real vector (``query_vector=``: the embedding is not timed), beside vec0's exact
    KNN over the same stored vectors, in this process (warm: the first query, which loads the sign
    bits, is timed apart by :func:`measure_first_result`)."""
    result: dict[str, Any] = {}
    with open_built(db, embedder=embedder) as store:
        index = store.storage.vector_index()
        ns = store.namespace
        store.recall(questions[0].question, k=k, mode="semantic", query_vector=vectors[0])  # loads the bits
        every = range(len(questions))
        step = max(1, len(questions) // exact_samples)
        sampled = list(every)[::step][:exact_samples]
        exact, fast, agree, agree_conversation = [], [], [], []
        conversations = {q.conversation: [pk for (pk,) in store.db.execute(
            "SELECT pk FROM entries WHERE session LIKE ?", (q.session_prefix + "%",))] for q in questions}
        for i in sampled:
            wall, cpu, truth = _timed(lambda i=i: index.exact_knn(vectors[i], k, ns))
            exact.append((wall, cpu))
            wall, cpu, found = _timed(lambda i=i: index.search(vectors[i], k, ns))
            fast.append((wall, cpu))
            agree.append(len({pk for pk, _ in found} & {pk for pk, _ in truth}) / max(1, len(truth)))
            # Within the conversation: the search over its entries against all of them rescored.
            pks = conversations[questions[i].conversation]
            within = {pk for pk, _ in index.search(vectors[i], k, ns, candidates=pks)}
            agree_conversation.append(len(within & {pk for pk, _ in index.rescore(vectors[i], pks, k)}) / k)
        result["exact"] = _latency(exact)
        result["search"] = _latency(fast)  # the index alone, on the same questions
        result["agreement"] = round(float(np.mean(agree)), 4)
        result["agreement_min"] = round(float(np.min(agree)), 2)
        result["agreement_conversation"] = round(float(np.mean(agree_conversation)), 4)
        result["exact_samples"] = len(sampled)
        runs: dict[str, Callable[[int], dict[str, Any]]] = {
            "semantic": lambda i: {"mode": "semantic"},
            "hybrid": lambda i: {"mode": "hybrid"},
            "keyword": lambda i: {"mode": "keyword"},
            "semantic_session": lambda i: {"mode": "semantic", "session": _evidence_session(store, questions[i])},
            "hybrid_session": lambda i: {"mode": "hybrid", "session": _evidence_session(store, questions[i])},
            "semantic_conversation": lambda i: {"mode": "semantic", "session_prefix": questions[i].session_prefix},
            "hybrid_conversation": lambda i: {"mode": "hybrid", "session_prefix": questions[i].session_prefix},
        }
        for name, arguments in runs.items():
            samples, recalls = [], []
            for i in every:
                args = arguments(i)
                wall, cpu, hits = _timed(lambda i=i, args=args: store.recall(  # type: ignore[misc]
                    questions[i].question, k=k, query_vector=vectors[i], **args))
                samples.append((wall, cpu))
                recalls.append(_recall_at([h.entry.id for h in hits], questions[i].evidence))
            result[name] = {**_latency(samples), f"r@{k}": round(float(np.mean(recalls)), 4)}
    return result


class _Identity:
    """The recorded model's identity without the model: every query comes with its vector."""

    def __init__(self, name: str, dim: int, fingerprint: str) -> None:
        self.name, self.dim, self.fingerprint = name, dim, fingerprint

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        raise AssertionError("the probe passes every query's vector: nothing is embedded")


def _peak_rss_mb() -> float:
    """This process's peak resident memory in MB: VmHWM (Linux), which starts afresh at exec, unlike
    ``getrusage``'s ru_maxrss, which a child started by fork inherits from its parent's peak."""
    import resource

    try:
        status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
        return round(int(status["VmHWM"].split()[0]) / 1024, 1)
    except (OSError, KeyError, ValueError):
        return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _read_bytes() -> int:
    """Bytes this process has read through read(2) so far, page cache hits included (Linux)."""
    try:
        return int(dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())["rchar"])
    except (OSError, KeyError, ValueError):
        return -1


def probe_first_result(db: Path, first: str, queries: int = 40) -> dict[str, Any]:
    """Run in a fresh process (see :func:`measure_first_result`): open the store, time the first
    recall (``first``: a mode, or ``bits`` for the sign-bit load alone), then a mix of recalls, and
    report the process's peak RSS."""
    started = time.perf_counter()
    meta = built_meta(db)
    assert meta is not None
    texts = json.loads(Path(f"{db}.questions.json").read_text(encoding="utf-8"))["texts"]
    vectors = np.load(Path(f"{db}.questions.npy"))
    identity = _Identity("bench-synthetic-minilm", vectors.shape[1], meta["vectors"])
    out: dict[str, Any] = {}
    read_before = _read_bytes()
    wall, cpu, store = _timed(lambda: MemoryStore(db, embedder=identity))
    out["open_ms"], out["open_cpu_ms"] = round(wall, 1), round(cpu, 1)
    if first == "bits":
        index = store.storage.vector_index()
        wall, cpu, _ = _timed(lambda: index._namespace_bits(store.namespace))
    else:
        wall, cpu, _ = _timed(lambda: store.recall(texts[0], k=10, mode=first, query_vector=vectors[0]))
    out["first_ms"], out["first_cpu_ms"] = round(wall, 1), round(cpu, 1)
    out["first_at"] = time.time()  # the parent counts from the process's start to here
    out["first_read_mb"] = round((_read_bytes() - read_before) / 1e6, 1)
    out["since_start_ms"] = round((time.perf_counter() - started) * 1000, 1)
    out["rss_after_first_mb"] = _peak_rss_mb()
    mixes: list[dict[str, Any]] = [{"mode": "semantic"}, {"mode": "hybrid"}, {"mode": "semantic", "session_prefix": "conv-26:"},
                                   {"mode": "hybrid", "session_prefix": "conv-30:"}, {"mode": "keyword"}]
    after: list[tuple[float, float]] = []
    for n in range(1, queries + 1):
        i = n % len(texts)
        wall, cpu, _ = _timed(lambda i=i, n=n: store.recall(texts[i], k=10, query_vector=vectors[i], **mixes[n % len(mixes)]))
        after.append((wall, cpu))
    out["next"] = _latency(after)
    store.close()
    out["max_rss_mb"] = _peak_rss_mb()
    return out


def measure_first_result(db: Path) -> dict[str, Any]:
    """Time to the first result in fresh processes: the first query semantic, hybrid, or the sign-bit
    load alone; each process's peak RSS after a mix of recalls. The process start is counted from the
    parent (imports included).

    The first process after a build or a measurement in this one finds part of the file out of the
    OS page cache and pays to read it back (``semantic_cold``); the others measure a fresh process
    on a file the OS still holds, the usual case of an agent's next command."""
    results: dict[str, Any] = {}
    for first, name in (("semantic", "semantic_cold"), ("semantic", "semantic"), ("hybrid", "hybrid"), ("bits", "bits")):
        code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import bench_scale;"
                " from pathlib import Path;"
                " print(json.dumps(bench_scale.probe_first_result(Path(sys.argv[2]), sys.argv[3])))")
        launched = time.time()
        done = subprocess.run([sys.executable, "-c", code, str(Path(__file__).resolve().parent), str(db), first],
                              capture_output=True, text=True, check=False)
        if done.returncode:
            raise RuntimeError(f"the first-result probe failed: {done.stderr.strip()[-2000:]}")
        probe = json.loads(done.stdout.strip().splitlines()[-1])
        results[name] = {**probe, "process_ms": round((probe.pop("first_at") - launched) * 1000, 1)}
    return results


def measure_vector_recall(n: int, seed: int, db: Path, *, data: Path = DEFAULT_DATA, reuse: bool = False,
                          raw: bool = True, exact_samples: int = EXACT_SAMPLES,
                          questions: Sequence[PlantedQuestion] | None = None) -> dict[str, Any]:
    """Build (or reuse) the store with vectors at ``db``, then measure recall on it (every planted
    question, or ``questions``), warm in this process and cold in fresh ones."""
    built = build_vector_corpus(n, seed, db, data=data, reuse=reuse, raw=raw)
    embedder = built.pop("embedder")
    every = planted_questions(data)
    vectors = question_vectors(db, every)  # all of them, once: the cache holds the whole set
    asked = {q.qid for q in (every if questions is None else questions)}
    vectors = vectors[[i for i, q in enumerate(every) if q.qid in asked]]
    questions = [q for q in every if q.qid in asked]
    result: dict[str, Any] = {"build": built, "questions": len(questions)}
    result.update(measure_vectors(db, embedder, questions, vectors, exact_samples=exact_samples))
    result["first_result"] = measure_first_result(db)
    return result


def vector_table_rows(v: dict[str, Any]) -> list[tuple[str, str]]:
    """The rows of the vector measurements (:func:`measure_vector_recall`)."""
    def ms(m: dict[str, Any]) -> str:
        return f"{m['p50_ms']:,.1f} ms p50 ({m['cpu_p50_ms']:,.1f} ms CPU), p95 {m['p95_ms']:,.0f} ms"

    def ratio(a: dict[str, Any], b: dict[str, Any]) -> str:
        return f"{a['p50_ms'] / b['p50_ms']:.2f}× (CPU {a['cpu_p50_ms'] / max(b['cpu_p50_ms'], 1e-9):.2f}×)"

    b, first = v["build"], v["first_result"]
    rows = [("vectors", f"SYNTHETIC for the {b['synthetic_vectors']:,} filler turns (bench/synthetic_embedder.py:"
             f" real MiniLM vectors of filler texts plus noise); real MiniLM for the {b['real_vectors']:,} planted"
             f" turns and the {v['questions']:,} questions — every figure below is on these vectors")]
    if b["reused"]:
        rows.append(("build with vectors", "reused the built file"))
    else:
        rows.append(("build with vectors", f"{b['import_seconds']:.0f} s ({b['import_cpu_seconds']:.0f} s CPU here),"
                     f" {b['entries'] / b['import_seconds']:,.0f} rows/s through import_jsonl; of it the embedder"
                     f" {b['embed_seconds']:.0f} s" + (f"; the same vectors into vec0 alone {b['raw_vec0_seconds']:.0f} s"
                                                      if "raw_vec0_seconds" in b else "")))
    rows.append(("file with vectors", f"{b['file_bytes'] / 1e6:,.0f} MB, {b['file_bytes'] / b['entries']:,.0f} B per entry"))
    rows += [
        ("exact KNN (vec0)", ms(v["exact"]) + f" over {v['exact_samples']} questions"),
        ("semantic search", ms(v["search"]) + f" = {ratio(v['search'], v['exact'])} of exact, same questions"),
        ("semantic recall", ms(v["semantic"]) + f" = {v['exact']['p50_ms'] / v['semantic']['p50_ms']:.0f}× faster"
         f" than exact (goal ≥ 20×)"),
        ("top-10 agreement", f"{v['agreement']:.3f} with exact (lowest {v['agreement_min']:.1f}; goal ≥ 0.95);"
         f" within the conversation {v['agreement_conversation']:.3f}"),
        ("hybrid recall", ms(v["hybrid"]) + " (goal p50 ≤ 60 ms); keyword alone " + ms(v["keyword"])),
        ("semantic, one session", ms(v["semantic_session"]) + " = " + ratio(v["semantic_session"], v["semantic"])
         + " of unfiltered (goal ≤ 1)"),
        ("hybrid, one session", ms(v["hybrid_session"]) + " = " + ratio(v["hybrid_session"], v["hybrid"]) + " of unfiltered"),
        ("semantic, conversation", ms(v["semantic_conversation"]) + " = "
         + ratio(v["semantic_conversation"], v["semantic"]) + " of unfiltered"),
        ("hybrid, conversation", ms(v["hybrid_conversation"]) + " = " + ratio(v["hybrid_conversation"], v["hybrid"])
         + " of unfiltered"),
        ("R@10 (whole store)", f"semantic {v['semantic']['r@10']:.3f}, hybrid {v['hybrid']['r@10']:.3f},"
         f" keyword {v['keyword']['r@10']:.3f}"),
        ("R@10 (conversation)", f"semantic {v['semantic_conversation']['r@10']:.3f},"
         f" hybrid {v['hybrid_conversation']['r@10']:.3f}"),
        ("R@10 (evidence session)", f"semantic {v['semantic_session']['r@10']:.3f},"
         f" hybrid {v['hybrid_session']['r@10']:.3f}"),
    ]
    for name, label in (("semantic_cold", "first semantic, cold"), ("semantic", "first semantic"), ("hybrid", "first hybrid")):
        f = first[name]
        rows.append((label, f"{f['first_ms']:,.0f} ms ({f['first_cpu_ms']:,.0f} ms CPU, {f['first_read_mb']:,.0f} MB"
                     f" read) after opening in {f['open_ms']:,.0f} ms; {f['process_ms'] / 1000:.1f} s from the process's"
                     " start (interpreter and imports included)"))
    bits = first["bits"]
    rows.append(("  sign-bit load", f"{bits['first_ms']:,.0f} ms ({bits['first_cpu_ms']:,.0f} ms CPU), {bits['first_read_mb']:,.0f} MB read"))
    rows.append(("max RSS recalling", f"{max(f['max_rss_mb'] for f in first.values()):,.0f} MB after the first query and"
                 f" {40} more of every mode (goal ≤ 600 MB)"))
    return rows


# ------------------------------------------------------------------------------------------ report


# ---------------------------------------------------------------------------------- keyword recall


def _percentiles(seconds: Sequence[float]) -> tuple[float, float]:
    ordered = sorted(seconds)
    return ordered[len(ordered) // 2] * 1e3, ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))] * 1e3


def _evidence_session(store: MemoryStore, q: PlantedQuestion) -> str | None:
    entry = store.get(q.evidence[0])
    return entry.session if entry is not None else None


def measure_keyword(db: Path, questions: Sequence[PlantedQuestion], *, k: int = 10) -> dict[str, Any]:
    """Keyword recall over the built store: every planted question asked over the whole store and
    within its conversation (``session_prefix``), by the default ranking (bm25.py) and by exact
    BM25 (FTS5 scoring every match), with latency (wall and CPU) and R@10 on the evidence turns; and
    each question within the one session holding its first evidence turn.

    The two rankings alternate question by question, so load on the machine falls on both alike.
    """
    found: dict[str, int] = {}
    wall: dict[str, list[float]] = {}
    cpu: dict[str, float] = {}
    wanted = 0
    with open_built(db, read_only=True) as store:
        store.recall("warm up the page cache", k=k, mode="keyword")
        for q in questions:
            wanted += len(q.evidence)
            session = _evidence_session(store, q)
            runs: list[tuple[str, dict[str, Any]]] = [
                ("fast", {}), ("exact", {"exact": True}),
                ("fast in conversation", {"session_prefix": q.session_prefix}),
                ("exact in conversation", {"session_prefix": q.session_prefix, "exact": True}),
            ]
            if session is not None:
                runs.append(("fast in session", {"session": session}))
            for name, options in runs:
                started, started_cpu = time.perf_counter(), time.process_time()
                hits = store.recall(q.question, k=k, mode="keyword", **options)
                wall.setdefault(name, []).append(time.perf_counter() - started)
                cpu[name] = cpu.get(name, 0.0) + time.process_time() - started_cpu
                found[name] = found.get(name, 0) + len({h.entry.id for h in hits} & set(q.evidence))
    result: dict[str, Any] = {"questions": len(questions), "evidence": wanted}
    for name, times in wall.items():
        p50, p95 = _percentiles(times)
        key = name.replace(" ", "_")
        result[f"{key}_p50_ms"], result[f"{key}_p95_ms"] = round(p50, 2), round(p95, 2)
        result[f"{key}_cpu_ms"] = round(cpu[name] / len(times) * 1e3, 2)
        if not name.endswith("session"):
            result[f"{key}_recall_at_{k}"] = round(found[name] / wanted, 4)
    return result


def keyword_rows(kw: dict[str, Any]) -> list[tuple[str, str]]:
    """Table rows for :func:`measure_keyword`'s result."""
    return [
        ("keyword recall", f"p50 {kw['fast_p50_ms']:.1f} ms, p95 {kw['fast_p95_ms']:.1f} ms, mean CPU {kw['fast_cpu_ms']:.1f} ms"
         f" (goal p50 ≤ 25, p95 ≤ 100)"),
        ("  exact BM25", f"p50 {kw['exact_p50_ms']:.1f} ms, p95 {kw['exact_p95_ms']:.1f} ms, mean CPU {kw['exact_cpu_ms']:.1f} ms"),
        ("keyword R@10", f"{kw['fast_recall_at_10']:.4f} (exact {kw['exact_recall_at_10']:.4f}; goal within .005)"
         f" over {kw['questions']:,} questions"),
        ("  in the conversation", f"{kw['fast_in_conversation_recall_at_10']:.4f}"
         f" (exact {kw['exact_in_conversation_recall_at_10']:.4f})"),
        ("filtered keyword", f"conversation p50 {kw['fast_in_conversation_p50_ms']:.1f} ms, one session p50"
         f" {kw['fast_in_session_p50_ms']:.1f} ms (unfiltered {kw['fast_p50_ms']:.1f}; goal ≤ unfiltered)"),
    ]


def table_rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    """The printed table, a (measure, value) pair a line; recall measurements add their own rows."""
    rows = [("entries", f"{result['entries']:,} in {result['sessions']:,} sessions"
             f" ({result['planted_turns']:,} planted LoCoMo turns, seed {result['seed']})")]
    if result["reused"]:
        rows.append(("import", "reused the built file (no import)"))
    else:
        rows.append(("generate", f"{result['generate_seconds']:.1f} s, {result['generate_rows_per_s']:,} rows/s"))
        rows.append(("import (keyword-only)", f"{result['import_seconds']:.1f} s, {result['import_rows_per_s']:,} rows/s"))
        if "raw_rows_per_s" in result:
            rows.append(("raw engine", f"{result['raw_seconds']:.1f} s, {result['raw_rows_per_s']:,} rows/s"
                         f" (insert alone {result['raw_insert_only_rows_per_s']:,} rows/s)"))
            rows.append(("ours / raw", f"{result['import_ratio']:.2f} (against the insert alone"
                         f" {result['import_ratio_insert_only']:.2f}; goal ≥ 0.50)"))
    rows.append(("file", f"{result['file_bytes'] / 1e6:,.1f} MB, {result['bytes_per_entry']:,.0f} B per entry"
                 + (f" (raw engine's file {result['raw_file_bytes'] / 1e6:,.1f} MB)" if "raw_file_bytes" in result else "")))
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=100_000, help="entries in the store, planted turns included")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the locomo-dev folder (default: %(default)s)")
    parser.add_argument("--db", type=Path, help="where to build the store (default: a temporary file)")
    parser.add_argument("--keep", action="store_true", help="keep the built store at --db")
    parser.add_argument("--reuse", action="store_true", help="use the store at --db when it holds this n and seed")
    parser.add_argument("--no-raw", dest="raw", action="store_false", help="skip the raw engine's import")
    parser.add_argument("--keyword", action="store_true", help="measure keyword recall on the planted questions")
    parser.add_argument("--questions", type=int, help="ask only the first N planted questions")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--vectors", action="store_true",
                        help="also build a store with (partly synthetic) vectors beside --db and measure semantic,"
                             " hybrid and filtered recall on it against vec0's exact KNN")
    parser.add_argument("--exact-samples", type=int, default=EXACT_SAMPLES,
                        help="questions timed against the exact KNN with --vectors (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.n < 1:
        parser.error("--n must be at least 1")
    if (args.keep or args.reuse) and args.db is None:
        parser.error("--keep and --reuse need --db PATH")
    if args.db is not None and args.db.exists() and built_meta(args.db) is None:
        parser.error(f"{args.db} exists and was not built here — remove it or choose another --db")
    if not (args.data / "locomo_turns.jsonl").exists():
        parser.error(f"no locomo_turns.jsonl in {args.data}")

    with tempfile.TemporaryDirectory(prefix="bench-scale-db-") as tmp:
        db = args.db or Path(tmp) / "scale.db"
        result = {"sqlite": f"{driver().sqlite_version} ({driver().__name__})",
                  **measure_import(args.n, args.seed, db, data=args.data, reuse=args.reuse, raw=args.raw)}
        questions = planted_questions(args.data)[: args.questions]
        if args.keyword:
            result["keyword"] = measure_keyword(db, questions)
        if args.vectors:
            with_vectors = vector_db(db)
            result["vectors"] = measure_vector_recall(args.n, args.seed, with_vectors, data=args.data, reuse=args.reuse,
                                                      raw=args.raw, exact_samples=args.exact_samples, questions=questions)
            if not args.keep and not result["vectors"]["build"]["reused"]:
                remove_vector_db(with_vectors)
        if not args.keep and args.db is not None and not result["reused"]:
            remove_db(db)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"harness-mem at scale — SQLite {result['sqlite']}")
    rows = table_rows(result) + (keyword_rows(result["keyword"]) if "keyword" in result else [])
    for name, value in rows:
        print(f"  {name:<24} {value}")
    if "vectors" in result:
        print("  semantic and hybrid recall (every question asked with its vector: the embedding is not timed)")
        for name, value in vector_table_rows(result["vectors"]):
            print(f"  {name:<24} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
