"""Forms the detectors used to let through (issue #24, item 9), and the near misses that must stay.

Cards with mixed, doubled or slash separators, or typed in full-width digits; an e-mail address with
a full-width "＠" or a quoted local part; a password said in a sentence; a passport number after
"passport". Each positive is redacted (its raw value gone) by both policies; each near miss is left
exactly as it was, like the false-positive table in test_redact.py.

Then the realistic table of issue #41 (bench/data/redaction_cases.jsonl, written by
bench/make_redaction_cases.py; ``bench_redact.py --cases`` reports on it): provider tokens with no
words around them, national numbers with valid checksums, passwords said plainly and in config
formats, obfuscated addresses; and the harmless lines (code assigning to a credential's name, local
servers, look-alike numbers) that must come out unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from engine_rows import stored_text
from pii import assert_absent

from harness_mem.redaction import Redactor, luhn_ok
from harness_mem.store import MemoryStore

SECRET = "detector-gaps-test-key"
CASES = [json.loads(line) for line in
         (Path(__file__).parents[2] / "bench" / "data" / "redaction_cases.jsonl").read_text("utf-8").splitlines()]
REALISTIC = [case for case in CASES if not case.get("harmless")]
HARMLESS = [case["text"] for case in CASES if case.get("harmless")]


@pytest.fixture
def red() -> Redactor:
    return Redactor.default(secret=SECRET)


@pytest.fixture
def hyg() -> Redactor:
    return Redactor.hygiene(secret=SECRET)


def full_width(digits: str) -> str:
    return digits.translate(str.maketrans("0123456789", "０１２３４５６７８９"))


# (text, the raw value that must not survive, kind)
GAPS = [
    # cards: separators mixed, doubled, slashes, spaced dashes; Luhn-valid
    ("card 4111-1111 1111-1111 thanks", "4111-1111 1111-1111", "CREDIT_CARD"),
    ("card 4111--1111--1111--1111", "4111--1111--1111--1111", "CREDIT_CARD"),
    ("card 4111/1111/1111/1111", "4111/1111/1111/1111", "CREDIT_CARD"),
    ("card 4111 - 1111 - 1111 - 1111.", "4111 - 1111 - 1111 - 1111", "CREDIT_CARD"),
    ("amex 3782/822463/10005", "3782/822463/10005", "CREDIT_CARD"),
    ("mc 5500 0055-5555 5559", "5500 0055-5555 5559", "CREDIT_CARD"),
    # cards in full-width digits, plain, grouped, glued to CJK text
    ("４１１１１１１１１１１１１１１１", "４１１１１１１１１１１１１１１１", "CREDIT_CARD"),
    ("卡号４１１１１１１１１１１１１１１１谢谢", "１１１１１１１１１１１１", "CREDIT_CARD"),
    ("卡号 ４１１１　１１１１　１１１１　１１１１", "１１１１　１１１１　１１１１", "CREDIT_CARD"),
    ("card ４１１１－１１１１－１１１１－１１１１", "１１１１－１１１１－１１１１", "CREDIT_CARD"),
    # e-mail: a full-width at sign, a quoted local part (plain and inside an escaped JSON string)
    ("ann＠example.com", "ann＠example.com", "EMAIL"),
    ("mail ann＠example.com today", "ann＠example.com", "EMAIL"),
    ('"ann smith"@example.com', '"ann smith"@example.com', "EMAIL"),
    ('to: "ann smith"@example.com, thanks', "ann smith", "EMAIL"),
    ('{"to": "\\"ann smith\\"@example.com"}', "ann smith", "EMAIL"),
    # a password said in a sentence
    ("my password is Hunter2!", "Hunter2", "SECRET"),
    ("the password is: x9$kq", "x9$kq", "SECRET"),
    ("My password is hunter2.", "hunter2", "SECRET"),
    ("wifi password was 'correct horse 42'", "correct horse 42", "SECRET"),
    ("the password is: swordfish", "swordfish", "SECRET"),
    ("pw is abc123, don't share", "abc123", "SECRET"),
    ("passcode is 482915", "482915", "SECRET"),
    ("密码是hunter2，谢谢", "hunter2", "SECRET"),
    # passport numbers after "passport"
    ("passport number X1234567", "X1234567", "PASSPORT"),
    ("passport: 123456789", "123456789", "PASSPORT"),
    ("Passport No.: 123456789 (UK)", "123456789", "PASSPORT"),
    ("her passport #C01X00T47 expires soon", "C01X00T47", "PASSPORT"),
    ("passport number is e12345678", "e12345678", "PASSPORT"),
    ("护照号码 E12345678", "E12345678", "PASSPORT"),
    ("护照：G12345678。", "G12345678", "PASSPORT"),
]


@pytest.mark.parametrize(("text", "raw", "kind"), GAPS, ids=[f"{k}:{t[:30]}" for t, _, k in GAPS])
def test_the_gaps_are_redacted(red: Redactor, hyg: Redactor, text: str, raw: str, kind: str) -> None:
    assert raw in text  # the table itself is right
    for redactor in (red, hyg):
        out = redactor.scrub(text)
        assert raw not in out.text, out.text
        assert kind in out.counts, out.counts


NEAR_MISSES = [
    # cards: Luhn fails, no issuer starts so, a path, underscores, a dotted mix, a season list
    "4111-1111 1111-1112",
    "4111--1111--1111--1112",
    "4111/1111/1111/1112",
    "seasons 2019-2020 2021-2022",
    "2019/2020/2021/2022",
    "see /data/4111/1111/1111/1111 and 4111/1111/1111/1111/index",
    "IMG_4111_1111 1111-1111.jpg",
    "5200.0000 0000-0007",
    "order 123-4567890-1234567",
    "12/05/2024 10:30",
    "４１１１１１１１１１１１１１１２",
    "１２３４５６７８",
    "第１２３章",
    # e-mail look-alikes
    'say "hi" @example.com',
    '"" @example.com',
    "@property",
    "请＠张三 看一下",
    "邮箱是＠example.com",
    # passwords described, not given
    "the password is required",
    "password is case-sensitive",
    "my password is too short",
    "the password is hashed with argon2id",
    "password is SHA-256 hashed",
    "the password is 8 characters",
    "password is at least 8 chars",
    "the password's length is 12",
    "The password is swordfish.",
    "the password is: none",
    "password is: <your password>",
    "your password is ********",
    "the pass is valid until 2026",
    "bypass is 1234567",
    "密码是必填的",
    # passports without a number
    "passport expires 2030-01-01",
    "passport photo attached",
    "passport office 1234567",
    "the passport is valid",
    "passportX1234567",
    "passport: ABCDEFGH",
    "passport: 1234",
    "passport MixEd123",
    "护照已过期",
]


@pytest.mark.parametrize("text", NEAR_MISSES)
def test_near_misses_stay_untouched(red: Redactor, hyg: Redactor, text: str) -> None:
    for redactor in (red, hyg):
        out = redactor.scrub(text)
        assert out.text == text, out.text
        assert out.spans == () and not out.blocked


def test_near_misses_in_one_transcript(red: Redactor) -> None:
    transcript = "\n".join(NEAR_MISSES)
    assert red.scrub(transcript).text == transcript


def test_loose_and_full_width_cards_are_luhn_checked(red: Redactor) -> None:
    # Every last digit of one body: only the one that passes Luhn is a card, in each writing.
    body = "411111111111111"
    for last in "0123456789":
        digits = body + last
        loose = f"{digits[:4]}-{digits[4:8]} {digits[8:12]}/{digits[12:]}"
        for text in (loose, full_width(digits)):
            assert (red.scrub(text).text != text) is luhn_ok(digits), text


def test_every_writing_of_a_card_and_an_address_links_to_one_pseudonym(red: Redactor) -> None:
    card = {red.pseudonymise(t).text for t in ("4111111111111111", "4111-1111 1111-1111", "4111/1111/1111/1111",
                                                full_width("4111111111111111"))}
    assert len(card) == 1 and card.pop().startswith("<CREDIT_CARD:")
    email = {red.pseudonymise(t).text for t in ("ann@example.com", "ann＠example.com", "ANN@Example.com")}
    assert len(email) == 1 and email.pop().startswith("<EMAIL:")


def test_masked_cards_keep_their_last_four_in_every_writing(red: Redactor) -> None:
    assert red.scrub("4111-1111 1111-1111").text == "****-**** ****-1111"
    assert red.scrub("4111--1111--1111--1111").text == "****--****--****--1111"
    assert red.scrub(full_width("4111111111111111")).text == "************１１１１"


def test_only_the_value_of_a_said_password_goes(red: Redactor) -> None:
    assert red.scrub("my password is Hunter2!").text == "my password is <SECRET>"
    assert red.scrub("My password is hunter2. Keep it safe").text == "My password is <SECRET>. Keep it safe"
    assert red.scrub("the password is: x9$kq").text == "the password is: <SECRET>"
    assert red.scrub("passport number X1234567").text == "passport number <PASSPORT>"


def test_the_new_forms_never_reach_a_store(engine_target: str) -> None:
    with MemoryStore(engine_target, embedder=None) as store:
        for i, (text, _raw, _kind) in enumerate(GAPS):
            store.add(text, session=f"s{i}", tags=[f"t{i}"])
    assert_absent([raw for _text, raw, _kind in GAPS], stored_text(engine_target))


def test_the_realistic_tables_are_large() -> None:
    assert len(REALISTIC) >= 300 and len(HARMLESS) >= 120


@pytest.mark.parametrize("case", REALISTIC, ids=[f"{c['kind']}:{c['text'][:40]}" for c in REALISTIC])
def test_realistic_secrets_and_pii_are_redacted(red: Redactor, hyg: Redactor, case: dict[str, object]) -> None:
    text, kind, secrets = str(case["text"]), str(case["kind"]), [str(s) for s in case["secrets"]]  # type: ignore[attr-defined]
    assert all(raw in text for raw in secrets)  # the table itself is right
    for redactor in (red, hyg):
        out = redactor.scrub(text)
        assert not [raw for raw in secrets if raw in out.text], out.text
        assert kind in out.counts, out.counts


@pytest.mark.parametrize("text", HARMLESS)
def test_harmless_lines_stay_untouched(red: Redactor, hyg: Redactor, text: str) -> None:
    for redactor in (red, hyg):
        out = redactor.scrub(text)
        assert out.text == text, out.text
        assert out.spans == () and not out.blocked


def test_harmless_lines_in_one_transcript(red: Redactor) -> None:
    transcript = "\n".join(HARMLESS)
    assert red.scrub(transcript).text == transcript


def test_realistic_secrets_never_reach_a_store(engine_target: str) -> None:
    with MemoryStore(engine_target, embedder=None) as store:
        store.add_many({"content": case["text"], "session": f"s{i}"} for i, case in enumerate(REALISTIC))
    assert_absent([str(raw) for case in REALISTIC for raw in case["secrets"]], stored_text(engine_target))  # type: ignore[attr-defined]
