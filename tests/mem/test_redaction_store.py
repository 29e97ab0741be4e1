"""Nothing unredacted reaches the file: generated PII of every kind, written through the store's API
and the CLI import, must not appear in the database file, its -wal and -shm files, or any table
(FTS shadow tables included)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness_mem.cli import cli
from harness_mem.errors import WriteRefusedError
from harness_mem.redaction import Redactor
from harness_mem.store import MemoryStore


def luhn(body: str) -> str:
    digits = [int(d) for d in body + "0"]
    for i in range(len(digits) - 2, -1, -2):
        digits[i] = digits[i] * 2 - 9 if digits[i] * 2 > 9 else digits[i] * 2
    return body + str((10 - sum(digits) % 10) % 10)


def iban(country: str, bban: str) -> str:
    numeric = "".join(str(int(c, 36)) for c in bban + country + "00")
    return f"{country}{98 - int(numeric) % 97:02d}{bban}"


def cn_id(body17: str) -> str:
    weights = [7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2]
    return body17 + "10X98765432"[sum(int(d) * w for d, w in zip(body17, weights, strict=True)) % 11]


def grouped(value: str, sep: str) -> str:
    return sep.join(value[i:i + 4] for i in range(0, len(value), 4))


cards = st.from_regex(r"4[0-9]{14}", fullmatch=True).map(luhn)
PII = st.one_of(
    st.from_regex(r"[a-z]{3,8}\.[a-z]{2,6}@[a-z]{3,8}\.(com|org|io)", fullmatch=True),
    st.from_regex(r"1[3-9][0-9]{9}", fullmatch=True),                       # China mobile
    st.from_regex(r"\+44 20 [0-9]{4} [0-9]{4}", fullmatch=True),            # international
    st.from_regex(r"\([2-9][0-9]{2}\) [2-9][0-9]{2}-[0-9]{4}", fullmatch=True),  # North American
    cards,
    cards.map(lambda c: grouped(c, " ")),
    cards.map(lambda c: grouped(c, "-")),
    st.from_regex(r"[0-9]{18}", fullmatch=True).map(lambda b: iban("DE", b)),
    st.from_regex(r"(11|31|44)[0-9]{4}(19[5-9][0-9])(0[1-9])(1[0-9])[0-9]{3}", fullmatch=True).map(cn_id),
    st.from_regex(r"(1[0-9]{2}|5[0-9]{2})-(1[0-9])-(1[0-9]{3})", fullmatch=True),  # US SSN
    st.from_regex(r"10\.(1[0-9]{2})\.(2[0-4][0-9])\.(1[0-9]{2})", fullmatch=True),
    st.from_regex(r"2001:db8:[0-9a-f]{4}:[0-9a-f]{4}::[1-9a-f]{1,3}", fullmatch=True),
    st.from_regex(r"sk-proj-[A-Za-z0-9]{40}", fullmatch=True),
    st.from_regex(r"AKIA[A-Z0-9]{16}", fullmatch=True),
    st.from_regex(r"ghp_[A-Za-z0-9]{36}", fullmatch=True),
    st.from_regex(r"xoxb-[0-9]{11}-[0-9]{11}-[A-Za-z0-9]{24}", fullmatch=True),
    st.from_regex(r"eyJ[A-Za-z0-9_-]{20}\.eyJ[A-Za-z0-9_-]{30}\.[A-Za-z0-9_-]{43}", fullmatch=True),
)
# Latin words sit next to a value with a separator between ("call 13800138000 now": glued to a
# letter, "abc13800138000" reads as an identifier); CJK text may be glued on directly, as people write.
FILLER = st.one_of(
    st.text(alphabet="abcdefghij klmnop", min_size=0, max_size=20).map(lambda s: f" {s} "),
    st.sampled_from(" ,;:()[]\n\t\"'").map(lambda s: f" {s} "),
    st.text(alphabet="用户的联系方式是请记下手机邮箱卡号", min_size=0, max_size=8),
)


def every_stored_text(db: Path) -> bytes:
    """The file, its WAL and shared memory, and every text or blob value of every table."""
    data = b"".join(p.read_bytes() for p in sorted(db.parent.iterdir()) if p.name.startswith(db.name))
    with MemoryStore(db, embedder=None, redactor=None) as store:
        tables = [r[0] for r in store.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            if table.startswith("entries_vec"):
                continue  # float vectors: no text
            for row in store.db.execute(f'SELECT * FROM "{table}"'):
                for value in row:
                    if isinstance(value, str):
                        data += value.encode()
                    elif isinstance(value, bytes):
                        data += value
    return data


def assert_absent(values: list[str], data: bytes) -> None:
    lowered = data.lower()
    for value in values:
        assert value.encode() not in data, value
        assert value.lower().encode() not in lowered, value  # FTS lower-cases its tokens


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(PII, min_size=1, max_size=5, unique=True), before=FILLER, after=FILLER)
def test_api_writes_never_store_raw_pii(tmp_path_factory: pytest.TempPathFactory, values: list[str],
                                        before: str, after: str) -> None:
    db = tmp_path_factory.mktemp("api") / "memory.db"
    with MemoryStore(db, embedder=None) as store:
        for i, value in enumerate(values):
            store.add(f"{before}{value}{after}", role="user", session=f"s{i}", tags=[f"who:{value}"],
                      source=f"chat with {value}", metadata={"raw": value, "nested": {"list": [value]}})
        store.add_many([{"text": f"batch {value} end"} for value in values])
        assert store.count() == 2 * len(values)
    assert_absent(values, every_stored_text(db))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(PII, min_size=1, max_size=5, unique=True), before=FILLER)
def test_cli_import_never_stores_raw_pii(tmp_path_factory: pytest.TempPathFactory, values: list[str],
                                         before: str) -> None:
    directory = tmp_path_factory.mktemp("cli")
    db, source = directory / "memory.db", directory / "in.jsonl"
    source.write_text("".join(
        json.dumps({"text": f"{before}{value}", "role": "user", "session": "s", "tags": [value],
                    "metadata": {"v": value}, "extra_field": value}, ensure_ascii=False) + "\n"
        for value in values
    ), encoding="utf-8")
    result = CliRunner().invoke(cli, ["--db", str(db), "--embedder", "none", "import", str(source)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    assert_absent(values, every_stored_text(db))


def test_counts_are_recorded_per_entry_and_in_stats(store: MemoryStore) -> None:
    entry = store.add("mail ada@example.com or bob@example.org, phone 13800138000", tags=["x@y.io"])
    assert entry.redactions == {"EMAIL": 3, "PHONE": 1}
    assert store.get(entry.id).redactions == {"EMAIL": 3, "PHONE": 1}
    assert store.add("nothing sensitive here").redactions == {}
    assert store.stats()["redacted"] == {"EMAIL": 3, "PHONE": 1}


def test_turning_redaction_off_is_explicit_and_recorded(db_path: Path) -> None:
    with MemoryStore(db_path, embedder=None, redactor=None) as raw:
        entry = raw.add("ada@example.com")
        assert entry.content == "ada@example.com" and entry.redactions is None
        assert raw.stats()["written_without_redaction"] == 1


def test_the_hash_pseudonym_is_keyed_per_database_and_stable(tmp_path: Path) -> None:
    def pseudonyms(path: Path) -> list[str]:
        with MemoryStore(path, embedder=None) as store:
            secret = store.db.execute("SELECT value FROM settings WHERE key = 'redaction.secret'").fetchone()[0]
            store.redactor = Redactor.default(secret=secret).set_action("EMAIL", "hash")  # type: ignore[arg-type]
            return [store.add("write to ada@example.com").content for _ in range(2)]

    first, again = pseudonyms(tmp_path / "a.db"), pseudonyms(tmp_path / "a.db")
    other = pseudonyms(tmp_path / "b.db")
    assert first[0] == first[1] == again[0]  # the same value links across entries and opens
    assert first[0] != other[0]  # another file, another key
    assert "ada" not in first[0]


def test_a_hygiene_store_refuses_what_must_not_be_kept(db_path: Path) -> None:
    with MemoryStore(db_path, embedder=None, redactor=Redactor.hygiene()) as store:
        with pytest.raises(WriteRefusedError, match="refuses to store this entry"):
            store.add("the api_key=sk-proj-abcdefghijklmnopqrstuvwxyz123456 is live")
        assert store.count() == 0
        reported: list[int] = []
        store.add_many([{"text": "fine"}, {"text": "costs $500"}], on_invalid=lambda i, e: reported.append(i))
        assert reported == [1] and store.count() == 1


@pytest.mark.parametrize("text", [
    "released 2024-05-01T12:30:00Z as v2.10.4 (commit 3f9a2c1, 9fceb02d0ae598e95dc970b74767f19372d61af8)",
    "order 1234567890123456 shipped at 1717171717123, build 3.11.7",
    "request 550e8400-e29b-41d4-a716-446655440000 took 12:30:45",
])
def test_false_positives_stay_untouched_through_the_store(store: MemoryStore, text: str) -> None:
    entry = store.add(text)
    assert entry.content == text and entry.redactions == {}


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(PII, min_size=1, max_size=4, unique=True), before=FILLER)
def test_transcript_capture_never_stores_raw_pii(tmp_path_factory: pytest.TempPathFactory, values: list[str],
                                                 before: str) -> None:
    from harness_mem.experience.transcript import TranscriptRecorder

    db = tmp_path_factory.mktemp("transcript") / "memory.db"
    with MemoryStore(db, embedder=None) as store:
        with TranscriptRecorder(store, session="s-1") as recorder:
            for value in values:
                recorder.note_user(f"{before}{value}")
                recorder.note_tool("lookup", {"contact": value, "note": f"found {value}"})
                recorder.note_assistant(f"noted {value} ")
        assert store.count(session="s-1") == 3 * len(values)
    assert_absent(values, every_stored_text(db))
