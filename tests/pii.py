"""PII for the byte-level redaction proofs: generated values of every kind the default detectors cover,
a fixed table of the same kinds for the slower paths, and the readers that look for them in every
byte a store, a run or a loop left on disk."""

from __future__ import annotations

from pathlib import Path

from hypothesis import strategies as st

from harness_mem.db import driver


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


# One value of each kind, for paths too slow to run under hypothesis (orchestrator runs, agent loops).
SAMPLES: tuple[str, ...] = (
    "ada.lovelace@example.com",
    luhn("453914880343646"),                      # a card, digits only
    grouped(luhn("401288888881188"), " "),         # a card, grouped
    "AKIAIOSFODNN7EXAMPLE",                       # an AWS access key id
    "13800138000",                                # a China mobile number
    "(212) 555-0147",                             # a North American number
    "+44 20 7946 0958",                           # an international number
    iban("DE", "370400440532013000"),
    cn_id("11010519491231002"),
    "078-05-1120",                                # a US SSN
    "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
    "sk-proj-" + "Ab3dEf6hIj9lMn2pQr5tUv8xYz1bCd4fGh7jKl0n",
)


def database_files(root: Path) -> list[Path]:
    """Every SQLite database under ``root`` (the files next to a ``-wal`` or named ``*.db``)."""
    return sorted(p for p in root.rglob("*.db") if p.is_file())


def every_stored_text(db: Path) -> bytes:
    """The file, its WAL and shared memory, and every text or blob value of every table."""
    data = b"".join(p.read_bytes() for p in sorted(db.parent.iterdir()) if p.name.startswith(db.name))
    return data + table_values(db)


def table_values(db: Path) -> bytes:
    """Every text or blob value of every table (FTS shadow tables included), read without writing."""
    data = b""
    conn = driver().connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            if table.startswith("entries_vec") or table in ("entries_fts", "sqlite_sequence"):
                continue  # float vectors and the FTS table itself (its shadow tables are read)
            for row in conn.execute(f'SELECT * FROM "{table}"'):
                for value in row:
                    if isinstance(value, str):
                        data += value.encode()
                    elif isinstance(value, bytes):
                        data += value
    finally:
        conn.close()
    return data


def every_written_byte(root: Path) -> bytes:
    """Every file under ``root`` (databases with their -wal and -shm, spill files, recordings, …)
    byte for byte, then the values of every table of every database there."""
    data = b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())
    for db in database_files(root):
        data += table_values(db)
    return data


def assert_absent(values: list[str] | tuple[str, ...], data: bytes) -> None:
    lowered = data.lower()
    for value in values:
        assert value.encode() not in data, value
        assert value.lower().encode() not in lowered, value  # FTS lower-cases its tokens
