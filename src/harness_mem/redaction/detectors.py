"""What to look for: the :class:`Detector` and :class:`Rule` types and the built-in detectors.

A detector finds one kind of value (``EMAIL``, ``CREDIT_CARD``, ``SECRET`` …) through one or more
rules; each rule is a compiled regex plus an optional *locate* function that turns a match into the
span of the value, or rejects it (a failed checksum from :mod:`.checksums`, a version number shaped
like an IP address). :func:`default_detectors` returns the built-in set; what is done with a
finding is the policy's business (:mod:`.policy`), and applying both to text the redactor's
(:mod:`.redactor`).

**Boundaries are lookarounds, not ``\\b``.** In Python's ``re`` a Han character is a word character,
so ``\\b`` does not fire between "机" and "1" in "手机13800138000", and a ``\\b``-anchored phone pattern
finds nothing there. Every detector instead states its boundary in ASCII terms, e.g. "no ASCII
letter or digit right before" (``(?<![0-9A-Za-z])``): CJK text glued to a number or an address is
then a boundary, while "ID4111…" or the middle of a longer number is not. Patterns are compiled
with ``re.ASCII`` so that ``\\d`` means 0-9.

**Speed, and no catastrophic backtracking.** ``re`` scans fast (in C) for a pattern's first
character or literal prefix, and enters its matcher only there, so:

* every pattern starts with a literal or a character class, and its "nothing before me" lookbehind
  comes *after* that first character (``[2-6](?<![0-9A-Za-z][2-6])…``, ``sk-(?<!…sk-)…``). The
  lookbehind rejects a start in the middle of a run at once, which is also what keeps the patterns
  linear: "sk-sk-sk-…" or a 100 kB word is not rescanned from every position;
* patterns anchor on rare characters where they can and find the rest in Python: an e-mail is
  matched from its "@" (or a full-width "＠"), an IPv6 address from its first colon, "199元" from its
  currency word, a "password=…" from its "=", each then walking back a few characters;
* card, CN ID, SSN and phone rules share one prefilter pass that finds runs of nine or more
  digits, and run only inside those windows;
* quantifiers are bounded, and possessive where what follows cannot match what they consume.

Cheap gates (``"@" in text``) skip whole detectors on the short texts that make up most writes,
and :func:`might_hold_pii` skips all of them at once on text with no digit, "@" or key marker.
Checksums (Luhn, mod-97, ISO 7064), registry lengths and small context rules weed out look-alikes
that a regex cannot; where a checksum fails, the search restarts inside the rejected match so a
look-alike cannot hide a real value that starts within it.

Everything a detector holds (patterns, locate functions, gates, normalizers) is a module-level
function or a small class, so a redactor pickles and can be sent to import worker processes.
"""

from __future__ import annotations

import functools
import ipaddress
import math
import re
import string
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from .checksums import IBAN_LENGTHS, card_ok, cn_id_ok, iban_ok, ssn_ok
from .code_values import is_code
from .national_ids import NATIONAL_ID_WORDS, NATIONAL_IDS
from .provider_keys import (
    DISCORD_TOKEN,
    PROVIDER_KEYS,
    PROVIDER_NEEDLES,
    TELEGRAM_BOT_TOKEN,
    TERRAFORM_TOKEN,
    locate_discord_token,
    locate_telegram_bot_token,
    locate_terraform_token,
)

__all__ = ["Detector", "Locate", "Rule", "WindowCache", "default_detectors", "might_hold_pii", "unchanged"]

# A locate function turns a match into the (start, end) of the value, or None to reject it.
Locate = Callable[[re.Match[str]], "tuple[int, int] | None"]


def unchanged(value: str) -> str:
    """The identity: the form a value is hashed in when its detector names no other."""
    return value


# Full-width digits (U+FF10-FF19, typed with a CJK input method) as ASCII ones.
_FULLWIDTH_DIGITS = str.maketrans("０１２３４５６７８９", "0123456789")


def _digits(value: str) -> str:
    # Full-width digits count as the ASCII ones, so "４１１１…" hashes as "4111…" does.
    return "".join(ch for ch in value.translate(_FULLWIDTH_DIGITS) if ch.isdigit())


def _alnum_upper(value: str) -> str:
    return "".join(ch for ch in value if ch.isalnum()).upper()


WindowCache = dict[re.Pattern[str], list[tuple[int, int]]]
# Past the end of a window a match may still read its last character ("…002X") and look ahead two.
_WINDOW_SLACK = 4


# Windows of a prefilter (a pattern there only to skip text no value can be in) are merged across
# gaps up to this size: no value lies in a gap, so one search over both windows finds what two
# would, for less fixed cost. (Not every ``within`` is a prefilter: a cookie pair must be inside
# its header.)
_MERGE_GAPS: dict[re.Pattern[str], int] = {}


def _windows(within: re.Pattern[str], text: str, cache: WindowCache | None) -> list[tuple[int, int]]:
    """The spans of ``within`` in ``text``, computed once per text when a cache is given."""
    if cache is not None and within in cache:
        return cache[within]
    gap = _MERGE_GAPS.get(within)
    if gap is None:
        windows = [m.span() for m in within.finditer(text)]
    else:
        windows = []
        for m in within.finditer(text):
            start, end = m.span()
            if windows and start - windows[-1][1] <= gap:
                windows[-1] = (windows[-1][0], end)
            else:
                windows.append((start, end))
    if cache is not None:
        cache[within] = windows
    return windows


def _overlapping(pattern: re.Pattern[str], text: str, pos: int, endpos: int) -> Iterator[re.Match[str]]:
    """Every match, each search restarting one character after the previous match's start."""
    search = pattern.search
    while (match := search(text, pos, endpos)) is not None:
        yield match
        pos = match.start() + 1


@dataclass(frozen=True)
class Rule:
    """One regex of a detector and how its matches become value spans.

    Without ``locate`` the span is the ``value`` group when the pattern has one and it took part,
    else the whole match. With it, ``locate(match)`` returns the span or None (a failed checksum,
    a version number shaped like an address) and may reach outside the match: the e-mail rule
    matches from the "@" and walks back over the local part.

    With ``within`` (a cheaper regex), the pattern only runs inside that regex's matches (plus a
    few characters of lookahead): several rules share one pass that finds where they can match.

    With ``overlapping``, the search restarts one character after the start of each match instead
    of after its end, so a look-alike that fails its checksum ("1234 4111 1111 1111 1111" read
    from the "1234") cannot hide a real value that starts inside it.

    With ``skip_inside_value``, a match that starts inside the value just found is not looked at:
    a credential's value may itself hold "pw=" text, and goes with the value anyway. This keeps
    "pw=pw=pw=…" from being read from every "=", each time up to the longest value.
    """

    pattern: re.Pattern[str]
    locate: Locate | None = None
    within: re.Pattern[str] | None = None
    overlapping: bool = False
    skip_inside_value: bool = False

    def __post_init__(self) -> None:
        # Looked up once: a pattern's groupindex is a new mapping on every access.
        object.__setattr__(self, "_has_value", "value" in self.pattern.groupindex)

    def spans(self, text: str, cache: WindowCache | None = None) -> list[tuple[int, int]]:
        """The (start, end) of every valid value in ``text``; ``cache`` shares ``within`` passes."""
        out: list[tuple[int, int]] = []
        if self.within is None:
            self._collect(text, 0, len(text), out)
            return out
        size = len(text)
        for a, b in _windows(self.within, text, cache):
            self._collect(text, a, min(size, b + _WINDOW_SLACK), out)
        return out

    def _collect(self, text: str, pos: int, endpos: int, out: list[tuple[int, int]]) -> None:
        """Append the spans of the valid values between ``pos`` and ``endpos`` to ``out``."""
        # One loop, no generators: this runs for every rule on every text written, most often
        # finding nothing, so its fixed cost is what counts.
        locate = self.locate
        has_value: bool = self._has_value  # type: ignore[attr-defined]
        skip = self.skip_inside_value
        resume = -1
        if self.overlapping:
            matches: Iterable[re.Match[str]] = _overlapping(self.pattern, text, pos, endpos)
        else:
            matches = self.pattern.finditer(text, pos, endpos)
        for match in matches:
            if skip and match.start() < resume:
                continue
            if locate is not None:
                span = locate(match)
                if span is None:
                    continue
            elif has_value and match.start("value") >= 0:
                span = match.span("value")
            else:
                span = match.span()
            if span[1] > span[0]:
                out.append(span)
                resume = span[1]


@dataclass(frozen=True)
class Detector:
    """Finds one kind of value.

    :param kind: upper-case kind, also the label (``EMAIL`` → ``<EMAIL>``).
    :param rules: the regexes (with their checks) whose matches are candidates.
    :param priority: breaks ties between equally long candidates at the same place (lower wins).
    :param secret: the value is a credential: never partially masked, never hashed.
    :param normalize: the form a value is hashed in, so "4111 1111 …" and "41111…" link.
    :param gate: a cheap test on the whole text; when it fails the rules are not run.
    """

    kind: str
    rules: tuple[Rule, ...]
    priority: int = 50
    secret: bool = False
    normalize: Callable[[str], str] = unchanged
    gate: Callable[[str], bool] | None = None

    def spans(self, text: str, cache: WindowCache | None = None) -> list[tuple[int, int]]:
        """The (start, end) of every value of this kind in ``text`` (may overlap)."""
        if len(self.rules) == 1:
            return self.rules[0].spans(text, cache)
        return [span for rule in self.rules for span in rule.spans(text, cache)]


def _compile(pattern: str, flags: int = 0) -> re.Pattern[str]:
    return re.compile(pattern, re.ASCII | flags)


class _whole_if:  # noqa: N801 -- used like the function it replaces; a class so that it pickles
    """A locate function that keeps the whole match when ``check(matched text)`` holds."""

    __slots__ = ("check",)

    def __init__(self, check: Callable[[str], bool]) -> None:
        self.check = check

    def __call__(self, match: re.Match[str]) -> tuple[int, int] | None:
        return match.span() if self.check(match.group()) else None


# The boundary used everywhere: the value does not continue an ASCII word or number. A number also
# does not continue into a decimal or dotted tail: "16015341702.10.9" is not a phone number.
_NO_ALNUM_AFTER = r"(?![0-9A-Za-z])"
_NUMBER_END = r"(?![0-9A-Za-z])(?!\.[0-9])"
_ALNUM = frozenset(string.ascii_letters + string.digits)
_DIGIT_RE = re.compile(r"[0-9]")


# Card, CN ID, SSN and most phone numbers have nine digits or more in a row, with at most a few
# separators between them: spaces, dots, dashes, slashes or underscores, or the narrow spaces that
# typesetting puts into long numbers (no-break U+00A0, thin U+2009, narrow no-break U+202F); up to
# three at a time, for a card written "4111 - 1111 - …". One pass finds such runs; those rules run
# only inside them, instead of each entering the matcher at every digit of the text.
_LONG_NUMBER = _compile(r"[0-9](?<![0-9A-Za-z][0-9])(?:[ .\-/_\u00a0\u2009\u202f]{0,3}+[0-9]){8,}")
# Every value the window rules take is nine digits or more joined by these separators, so it lies
# inside one window.
_MERGE_GAPS[_LONG_NUMBER] = 256


def _said_before(words: re.Pattern[str], text: str, start: int, width: int) -> bool:
    """True when ``words`` (a pattern ending in ``\\Z``) ends in the ``width`` characters before ``start``."""
    return words.search(text, max(0, start - width), start) is not None


@functools.lru_cache(maxsize=2)
def _lower(text: str) -> str:
    """``text.lower()``, kept for the text being scrubbed: the prescreen and three gates need it, and
    lowering text with CJK in it costs more than the substring tests that follow. (The last two
    texts stay referenced until others replace them.)"""
    return text.lower()


def _has_digit(text: str) -> bool:
    return _DIGIT_RE.search(text) is not None


def _contains_any(text: str, needles: Iterable[str]) -> bool:
    """True when one of ``needles`` occurs in ``text``."""
    # A plain loop on purpose: on the short texts of a write, any() over a generator costs more
    # than the substring searches themselves.
    for needle in needles:  # noqa: SIM110
        if needle in text:
            return True
    return False


class _has_any:  # noqa: N801 -- used like the function it replaces; a class so that it pickles
    """A gate that passes when any of ``needles`` occurs in the text."""

    __slots__ = ("needles",)

    def __init__(self, *needles: str) -> None:
        self.needles = needles

    def __call__(self, text: str) -> bool:
        return _contains_any(text, self.needles)


class _has_match:  # noqa: N801 -- used like a function; a class so that it pickles
    """A gate that passes when ``pattern`` matches somewhere in the text."""

    __slots__ = ("pattern",)

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern = pattern

    def __call__(self, text: str) -> bool:
        return self.pattern.search(text) is not None


# The gate of the rules that run only inside long-number windows: one object, so that a redactor
# tests it once per text for all of them.
_has_long_number = _has_match(_LONG_NUMBER)


# -- e-mail: matched from the "@" (rare, so ``re`` skips to it in C), local part found walking back.
# Addresses may be internationalised (RFC 6531): "josé@example.com", "info@bücher.de", "用户@例子.中国".
# A domain label is letters and digits of any script with inner hyphens; the top-level label is
# ASCII letters, a punycode "xn--" label, or non-ASCII letters. An ASCII top-level label ends where
# CJK text is glued to it ("a@b.com谢谢"), which is why the three are told apart.
_EMAIL_LABEL = r"[^\W_](?:(?:[^\W_]|-){0,61}[^\W_])?"
_EMAIL_DOMAIN = re.compile(
    rf"[@＠]{_EMAIL_LABEL}(?:\.{_EMAIL_LABEL})*\."
    r"(?:[A-Za-z]{2,24}(?![A-Za-z0-9\-])|xn--[A-Za-z0-9\-]{1,59}(?![A-Za-z0-9\-])|[^\W\dA-Za-z_]{2,24}(?![^\W_]|-))"
)
_LOCAL_CHARS = frozenset(string.ascii_letters + string.digits + "._%+-")
_MAX_LOCAL = 64
# From the CJK radicals on, scripts are written without spaces between words (Han, kana, Hangul…).
_UNSPACED_SCRIPTS = 0x2E80
_URL_USERINFO_BEFORE = re.compile(r"://[^\s/@]*:\Z")


def _local_char(ch: str) -> bool:
    # An ASCII local-part character, or a letter or digit of a script written with spaces between
    # words (accented Latin, Greek, Cyrillic…): "josé", "zoë", "иван".
    return ch in _LOCAL_CHARS or (127 < ord(ch) < _UNSPACED_SCRIPTS and ch.isalnum())


def _email_key(value: str) -> str:
    """The form an address is hashed in: lower case, a full-width "＠" (a CJK input method's) as "@"."""
    return value.replace("＠", "@").lower()


def _quoted_local_start(text: str, at: int) -> int | None:
    """Where a quoted local part ending right before ``at`` starts (its opening quote), if there is one.

    RFC 5321 allows any printable text in quotes: ``"ann smith"@example.com``. Inside an escaped
    JSON string (``\\"ann smith\\"@…``) the backslash before the opening quote goes with it.
    """
    opening = text.rfind('"', max(0, at - 2 - _MAX_LOCAL), at - 1)
    if opening < 0 or opening == at - 2 or "\n" in text[opening:at]:
        return None
    if opening > 0 and text[opening - 1] == "\\" and text[at - 2] == "\\":
        return opening - 1
    return opening


def _locate_email(match: re.Match[str]) -> tuple[int, int] | None:
    text, at = match.string, match.start()
    if at > 1 and text[at - 1] == '"':
        quoted = _quoted_local_start(text, at)
        return None if quoted is None else (quoted, match.end())
    start = at
    while start > 0 and _local_char(text[start - 1]):
        start -= 1
        if at - start > _MAX_LOCAL:
            return None
    if start == at and not match.group()[1:].isascii():  # [1:]: the domain, without a full-width "＠"
        # "用户@例子.中国": a local part in a script written without spaces is read back to the last
        # non-letter, and only before a non-ASCII domain; "联系我a@b.com" keeps "联系我".
        while start > 0 and ord(text[start - 1]) >= _UNSPACED_SCRIPTS and text[start - 1].isalnum():
            start -= 1
            if at - start > _MAX_LOCAL:
                return None
    while start < at and text[start] == ".":  # a local part does not start with a dot
        start += 1
    if start == at:
        return None
    # "https://user:pass@host.com" is a password in a URL (SECRET), not an e-mail address.
    if start and text[start - 1] == ":" and _URL_USERINFO_BEFORE.search(text, max(0, start - 300), start):
        return None
    return start, match.end()


# Addresses written so that scrapers miss them: "john(at)example(dot)com", "john [at] example [dot]
# com", or URL-encoded "jane%40example.com". Matched from the "(at)" or "%40", the local part found
# walking back as for a plain address.
def _spelled(word: str) -> str:
    """``word`` in brackets of any kind, with spaces around: " [at] ", "(dot)", "{ at }"."""
    return rf"[ \t]*[(\[{{<][ \t]*(?i:{word})[ \t]*[)\]}}>][ \t]*"


_OBFUSCATED_DOT = rf"(?:\.|{_spelled('dot')})"
# The match starts at the bracket (or "%"); spaces before it are skipped walking back.
_EMAIL_OBFUSCATED = _compile(
    rf"(?:[(\[{{<][ \t]*(?i:at)[ \t]?[)\]}}>][ \t]*|%40)"
    rf"{_EMAIL_LABEL}(?:{_OBFUSCATED_DOT}{_EMAIL_LABEL}){{0,8}}{_OBFUSCATED_DOT}[A-Za-z]{{2,24}}(?![A-Za-z0-9\-])"
)
# What the gate looks for (in lower case): "at" and its closing bracket, at most one space between.
_EMAIL_OBFUSCATED_NEEDLES = ("at)", "at]", "at}", "at>", "at )", "at ]", "at }", "at >", "%40")


def _locate_obfuscated_email(match: re.Match[str]) -> tuple[int, int] | None:
    text, at = match.string, match.start()
    while at > 0 and text[at - 1] in " \t" and text[at] != "%":
        at -= 1
    start = at
    while start > 0 and text[start - 1] in _LOCAL_CHARS:
        start -= 1
        if at - start > _MAX_LOCAL:
            return None
    while start < at and text[start] == ".":
        start += 1
    return None if start == at else (start, match.end())


def _obfuscated_email_gate(text: str) -> bool:
    closed = ")" in text or "]" in text or "}" in text or ">" in text or "%40" in text
    return closed and _contains_any(_lower(text), _EMAIL_OBFUSCATED_NEEDLES)


# -- phones
# The grouped formats that start with a digit are one regex with a named branch each, run inside
# the long number windows; no two branches can match at the same place, so none hides another.
# (One regex instead of four: each rule run costs a few microseconds on every text with a digit.)
#   cn: China mobile, 1[3-9] + 9 digits, plain or 3-4-4 (spaces, dashes or dots); this is the one
#       that hides behind CJK text.
_CN_MOBILE = (
    r"1(?<![0-9A-Za-z]1)(?<![0-9]\.1)[3-9][0-9](?:[0-9]{8}|(?P<cn_sep>[ .\-])[0-9]{4}(?P=cn_sep)[0-9]{4})"
    + _NUMBER_END
)
#   nanp: North American, 415-555-2671, 415.555.2671, 1-415-555-2671 (one separator throughout).
_NANP = (
    r"[1-9](?<![0-9A-Za-z][1-9])(?<![0-9][.\-][1-9])"
    r"(?:(?<=1)(?P<nanp_cc>[ .\-])[2-9][0-9]{2}(?P=nanp_cc)|(?<=[2-9])[0-9]{2}(?P<nanp_sep>[ .\-]))"
    r"[2-9][0-9]{2}(?:(?P=nanp_cc)|(?P=nanp_sep))[0-9]{4}(?![0-9A-Za-z])(?![.\-][0-9])"
)
#   trunk: national numbers dialled with the trunk prefix 0, in groups: UK "020 7946 0958",
#       "07700 900123"; DE "030 12345678", "0151 23456789", "030/12345678"; JP "03-1234-5678",
#       "090-1234-5678"; FR "01 23 45 67 89", "06.12.34.56.78"; CN "010-12345678", "0755-1234-5678".
#       One shape covers them: "0" and one to four more digits (the area or mobile prefix), then
#       groups of 2-8 digits joined by one separator throughout, 10-12 digits in all
#       (_trunk_ok). The leading group has two digits at least, so an ISBN-10 "0-306-40615-2" is
#       not one; dates have too few digits.
_TRUNK = (
    r"0(?<![0-9A-Za-z]0)(?<![0-9][.,\-/]0)[1-9][0-9]{0,3}(?P<trunk_sep>[ .\-/])[0-9]{2,8}"
    r"(?:(?P=trunk_sep)[0-9]{2,8}){0,3}" + _NUMBER_END + r"(?!(?P=trunk_sep)[0-9])"
)
#   exit: international with the "00" exit code instead of a plus: "0044 20 7946 0958", "0086 138
#       0013 8000". The first group is "00" and a real country code (_country_code_ok), and a
#       separator follows it, so "0012-3456-7890" and "00123456789" are not numbers dialled abroad.
_EXIT_00 = (
    r"0(?<![0-9A-Za-z]0)(?<![0-9][.,\-/]0)0(?P<cc>[1-9][0-9]{0,2})(?P<exit_sep>[ .\-])[0-9]{1,12}"
    r"(?:(?P=exit_sep)[0-9]{1,8}){0,5}" + _NUMBER_END + r"(?!(?P=exit_sep)[0-9])"
)
_PHONE_DIGITS = _compile(rf"(?P<cn>{_CN_MOBILE})|(?P<nanp>{_NANP})|(?P<trunk>{_TRUNK})|(?P<exit>{_EXIT_00})")
# ITU country codes: 1 and 7; the two-digit ones; and the zones whose codes have three digits.
_CC_ONE = frozenset({"1", "7"})
_CC_TWO = frozenset(
    "20 27 30 31 32 33 34 36 39 40 41 43 44 45 46 47 48 49 51 52 53 54 55 56 57 58 60 61 62 63 64 65 66 81 82 84 86"
    " 90 91 92 93 94 95 98".split()
)
_CC_THREE_ZONES = frozenset("21 22 23 24 25 26 28 29 35 37 38 42 50 59 67 68 69 80 85 87 88 89 96 97 99".split())


def _country_code_ok(cc: str) -> bool:
    if len(cc) == 1:
        return cc in _CC_ONE
    if len(cc) == 2:
        return cc in _CC_TWO
    return cc[:2] in _CC_THREE_ZONES


def _trunk_ok(value: str, sep: str) -> bool:
    size = len(_digits(value))
    if size == 9:
        # A short subscriber number behind a short area code: Berlin "030 123456", Cologne "0221
        # 12345". Only as two groups, the second of five digits or more.
        area, _, subscriber = value.partition(sep)
        return sep != "." and sep not in subscriber and len(area) <= 5 and len(subscriber) >= 5
    if not 10 <= size <= 12:
        return False
    # A slash splits an area code from the rest ("030/12345678"), never more; dotted numbers come
    # in three groups or more ("06.12.34.56.78"), unlike a decimal or a version.
    if sep == "/":
        return value.count("/") == 1
    return sep != "." or value.count(".") >= 2


def _locate_phone_digits(match: re.Match[str]) -> tuple[int, int] | None:
    if match.start("cn") >= 0 or match.start("nanp") >= 0:
        return match.span()
    value = match.group()
    if match.start("trunk") >= 0:
        return match.span() if _trunk_ok(value, match.group("trunk_sep")) else None
    cc = match.group("cc")
    national = len(_digits(value)) - 2 - len(cc)
    return match.span() if _country_code_ok(cc) and 6 <= national <= 15 - len(cc) else None


# A bare run of digits is a phone number only after a phone word ("call", "tel", "mobile", "电话"…,
# at most 16 characters before it with no digit or line break between): a US number "4155550123"
# (area code and exchange 2-9, optionally "1" in front) or a national one "02079460958". Without
# such a word ten digits are as likely an order number, an id or a timestamp, and are left alone
# (ten digits starting with 1 are Unix timestamps until 2033, and no area code starts with 1). The
# rule has a detector of its own, gated on those words.
_BARE_PHONE = _compile(r"[0-9](?<![0-9A-Za-z][0-9])(?<![0-9][.,\-/][0-9])[0-9]{9,11}" + _NUMBER_END)
_BARE_PHONE_SHAPE = re.compile(r"1?[2-9][0-9]{2}[2-9][0-9]{6}|0[1-9][0-9]{8,10}")
_PHONE_WORD_LIST = ("phone", "tel", "mobile", "mob", "cell", "call", "fax", "sms", "text", "whatsapp", "ph")
_PHONE_WORDS = re.compile(
    rf"(?:(?i:(?<![a-z])(?:{'|'.join(_PHONE_WORD_LIST)})(?:[ .]*(?:no|nr|number|#))?(?![a-z]))"
    r"|电话|手机|電話)[^0-9\n]{0,16}\Z"
)


def _locate_bare_phone(match: re.Match[str]) -> tuple[int, int] | None:
    if _BARE_PHONE_SHAPE.fullmatch(match.group()) is None:
        return None
    return match.span() if _said_before(_PHONE_WORDS, match.string, match.start(), 40) else None


def _phone_word_gate(text: str) -> bool:
    return _contains_any(_lower(text), _PHONE_WORD_LIST) or _contains_any(text, ("电话", "手机", "電話"))


# International with a plus: 7-15 digits (E.164) with single separators between them: a space,
# dot or dash, or a parenthesis with at most one of those beside it ("+1 (415) 555-2671",
# "+44 (0)20 7946 0958"). Two spaces end the number: they must not bridge into the next word.
_PHONE_INTL = _compile(
    r"\+(?<![0-9A-Za-z+]\+)[1-9](?:(?:[ .\-]|[ .\-]?\(|\)[ .\-]?)?[0-9]){6,14}" + _NUMBER_END
)
# The area code in parentheses: North American "(415) 555-2671", or a trunk prefix "(020) 7946
# 0958", "(03) 1234-5678" (10-12 digits, as above).
_PHONE_PAREN = _compile(
    r"\((?<![0-9A-Za-z]\()(?:[2-9][0-9]{2}\)[ .\-]?[2-9][0-9]{2}[ .\-][0-9]{4}(?![0-9A-Za-z])(?![.\-][0-9])"
    r"|(?P<trunk>0[1-9][0-9]{0,3}\)[ \-]?[0-9]{2,8}(?:[ \-][0-9]{2,8}){0,3}" + _NUMBER_END + r"(?![ \-][0-9])))"
)


def _locate_phone_paren(match: re.Match[str]) -> tuple[int, int] | None:
    if match.start("trunk") >= 0 and not 10 <= len(_digits(match.group())) <= 12:
        return None
    return match.span()


_ISO_DATE_SHAPE = re.compile(r"\+?[0-9]{4}-[0-9]{2}-[0-9]{2}")


def _not_a_date(value: str) -> bool:
    # "+2024-05-01" has the digits of a phone number; a date shape is not one.
    return _ISO_DATE_SHAPE.fullmatch(value) is None


# -- payment cards: 13-19 digits, plain or grouped (4-4-4-4, 4-4-4-4-3 for a 19-digit UnionPay card,
# Amex 4-6-5, Diners 4-6-4), Luhn-valid. Groups are joined by one separator throughout: a space,
# dash, dot or underscore, or a narrow space of typeset text (U+00A0, U+2009, U+202F).
# The first digit is 2-6 (Mastercard 2/5, Amex 3, Visa 4, Discover/UnionPay 6): this also keeps
# millisecond Unix timestamps (13 digits starting with 1 until 2033) out.
_CARD = _compile(
    r"[2-6](?<![0-9A-Za-z][2-6])(?<![0-9][.,\-][2-6])"  # not inside a longer number ("2026-05-23…")
    r"(?:[0-9]{12,18}"
    r"|[0-9]{3}(?P<sep>[ .\-_\u00a0\u2009\u202f])[0-9]{4}(?P=sep)[0-9]{4}(?P=sep)[0-9]{1,4}(?:(?P=sep)[0-9]{1,3})?"
    r"|[0-9]{3}[ \-][0-9]{6}[ \-][0-9]{4,5})" + _NUMBER_END
)


# Cards written less tidily: separators mixed ("4111-1111 1111-1111"), doubled ("4111--1111--…") or
# slashes ("4111/1111/1111/1111"), one to three of them in each gap. Only the card layouts (4-4-4-4,
# 4-4-4-4-3, Amex 4-6-5, Diners 4-6-4) and only from an issuer's prefix (_issuer_ok): loose gaps
# also join things that are not cards ("seasons 2019-2020 2021-2022"), and Luhn alone passes one in
# ten. Dots and underscores are not among them: a dot beside other separators reads as a decimal
# or a version ("5200.0000 0000-0007"), an underscore as part of a name.
_CARD_GAP = r"[ \-/\u00a0\u2009\u202f]{1,3}+"
_CARD_LOOSE = _compile(
    r"[2-6](?<![0-9A-Za-z][2-6])(?<![0-9][.,\-/][2-6])(?<!/[2-6])[0-9]{3}"
    rf"(?:{_CARD_GAP}[0-9]{{4}}{_CARD_GAP}[0-9]{{4}}{_CARD_GAP}[0-9]{{4}}(?:{_CARD_GAP}[0-9]{{3}}(?![0-9]))?"
    rf"|{_CARD_GAP}[0-9]{{6}}{_CARD_GAP}[0-9]{{4,5}})" + _NUMBER_END + r"(?!/)"
)
# Full-width digits, plain or in groups of four joined by spaces (ASCII or ideographic U+3000) or
# dashes (ASCII or full-width U+FF0D).
_FULLWIDTH_GAP = "[ \u3000\\-\uff0d]{1,2}+"
_CARD_FULLWIDTH = re.compile(
    "[２-６](?<![０-９][２-６])(?:[０-９]{12,18}"
    f"|[０-９]{{3}}{_FULLWIDTH_GAP}[０-９]{{4}}{_FULLWIDTH_GAP}[０-９]{{4}}{_FULLWIDTH_GAP}[０-９]{{1,4}}"
    f"(?:{_FULLWIDTH_GAP}[０-９]{{1,3}})?)(?![０-９0-9])"
)
_FULLWIDTH_DIGIT = re.compile("[０-９]")


def _issuer_ok(digits: str) -> bool:
    """The number starts as some issuer's cards do, at a length that issuer uses."""
    size, two, three, four = len(digits), int(digits[:2]), int(digits[:3]), int(digits[:4])
    if size == 15:
        return two in (34, 37)  # Amex
    if size == 14:
        return two in (30, 36, 38, 39)  # Diners
    return (
        digits[0] == "4"  # Visa
        or 51 <= two <= 55 or 2221 <= four <= 2720  # Mastercard
        or two in (35, 62, 65) or four == 6011 or 644 <= three <= 649  # JCB, UnionPay, Discover
    )


def _locate_loose_card(match: re.Match[str]) -> tuple[int, int] | None:
    digits = _digits(match.group())
    return match.span() if card_ok(digits) and _issuer_ok(digits) else None


def _locate_fullwidth_card(match: re.Match[str]) -> tuple[int, int] | None:
    return match.span() if card_ok(_digits(match.group())) else None


def _fullwidth_digit_gate(text: str) -> bool:
    return not text.isascii() and _FULLWIDTH_DIGIT.search(text) is not None


def _locate_card(match: re.Match[str]) -> tuple[int, int] | None:
    text, (start, end) = match.string, match.span()
    value = match.group()
    if match.group("sep") == "_" and "_" in text[max(0, start - 1) : start] + text[end : end + 1]:
        return None  # "IMG_2024_0501_1230_4567_x": part of a name, not a card written with underscores
    if card_ok(_digits(value)):
        return start, end
    # "4111 1111 1111 1111 2 items": the last short group may not belong to the card.
    cut = len(value.rstrip(string.digits)) - 1
    if cut > 0 and card_ok(_digits(value[:cut])):
        return start, start + cut
    return None


# -- IBAN: country, check digits, BBAN; plain or in groups of four joined by spaces or dashes, in
# upper or lower case (not mixed); the registry length and mod-97 == 1 decide. The match starts at
# the check digits (digits are rarer than letters of either case, so ``re`` enters the matcher less
# often) and the country letters are checked looking back.
_IBAN = _compile(
    r"[0-9](?<=[A-Za-z]{2}[0-9])(?<![0-9A-Za-z][A-Za-z]{2}[0-9])[0-9]"
    r"(?P<sep>[ \-]?)[A-Za-z0-9]{4}(?:(?P=sep)[A-Za-z0-9]{4}){1,6}(?:(?P=sep)[A-Za-z0-9]{1,3})?" + _NO_ALNUM_AFTER
)


def _locate_iban(match: re.Match[str]) -> tuple[int, int] | None:
    # The country fixes the length, so "GB82 WEST 1234 5698 7654 32 OK" is cut after "32" (the
    # regex took " OK" as one more group).
    start = match.start() - 2
    value, sep = match.string[start : match.end()], match.group("sep")
    length = IBAN_LENGTHS.get(value[:2].upper())
    if length is None:
        return None
    seen = 0
    for i, ch in enumerate(value):
        if ch != sep:
            seen += 1
        if seen == length:
            end = i + 1
            break
    else:
        return None
    if end < len(value) and (not sep or value[end] != sep):
        return None  # the IBAN would end inside a group
    iban = value[:end]
    if not (iban.isupper() or iban.islower()):
        return None  # "Gb82 West …" is not how an IBAN is written
    if iban.islower():
        # Lower case lets words through ("at12 this that with from" has the shape of an AT IBAN):
        # a real BBAN is mostly digits.
        bban = _alnum_upper(iban)[4:]
        if sum(ch.isdigit() for ch in bban) * 2 < len(bban):
            return None
    return (start, start + end) if iban_ok(iban) else None


# -- US Social Security number: AAA-GG-SSSS (spaced, dashed or dotted), without the never-issued
# ranges; or nine bare digits right after "SSN" or "social security" (nine digits alone are far
# more often something else).
_SSN = _compile(
    r"[0-8](?<![0-9A-Za-z][0-8])(?<![0-9][.\-][0-8])[0-9]{2}(?P<sep>[ .\-])[0-9]{2}(?P=sep)[0-9]{4}"
    r"(?![0-9A-Za-z])(?!(?P=sep)[0-9])"
)
# The bare form has a detector of its own, gated on the words.
_SSN_BARE = _compile(r"[0-8](?<![0-9A-Za-z][0-8])(?<![0-9][.,\-/][0-8])[0-9]{8}" + _NUMBER_END)
_SSN_WORDS = re.compile(
    r"(?:(?i:(?<![a-z])(?:ssns?|ss#|social[\s_\-]*security(?:[\s_\-]*(?:numbers?|num|no|nr|#))?)(?![a-z]))"
    r"|社会安全号码?|社會安全號碼?)[^0-9\n]{0,16}\Z"
)
_SSN_GATE_WORDS = ("ssn", "ss#", "social", "社会安全", "社會安全")


def _ssn_word_gate(text: str) -> bool:
    return _contains_any(_lower(text), _SSN_GATE_WORDS)


def _locate_bare_ssn(match: re.Match[str]) -> tuple[int, int] | None:
    value = match.group()
    if not ssn_ok(f"{value[:3]}-{value[3:5]}-{value[5:]}"):
        return None
    return match.span() if _said_before(_SSN_WORDS, match.string, match.start(), 48) else None


# -- passport numbers: six to nine letters and digits right after "passport" ("passport number
# X1234567", "Passport No.: 123456789", "护照号码 E12345678"). Passports have no check digit outside
# their machine-readable line and no shape of their own, so the word is what tells one.
_PASSPORT_VALUE = (
    r"(?:[.:：#]?+[ \t]+(?i:is))?[ \t]*+[.:：#=]{0,2}+[ \t]*+(?P<value>[A-Za-z0-9]{6,9})(?![0-9A-Za-z])"
)
_PASSPORT = _compile(
    r"[Pp](?<![A-Za-z][Pp])(?i:assport)(?![A-Za-z])(?:[ \t]*+(?i:number|num|no|nr|id)(?![A-Za-z]))?"
    + _PASSPORT_VALUE
)
_PASSPORT_CJK = _compile(r"(?:护照|護照)(?:号码?|號碼?)?" + _PASSPORT_VALUE)
_PASSPORT_MIN_DIGITS = 5


def _locate_passport(match: re.Match[str]) -> tuple[int, int] | None:
    text, (start, end) = match.string, match.span("value")
    value = text[start:end]
    if text[start - 1] in _ALNUM:
        return None  # "passportX1234567" is one word
    if sum(ch.isdigit() for ch in value) < _PASSPORT_MIN_DIGITS or not (value.isupper() or value.islower()
                                                                         or value.isdigit()):
        return None
    return start, end


def _passport_gate(text: str) -> bool:
    return "assport" in _lower(text) or _contains_any(text, ("护照", "護照"))


# -- China resident identity number: region, birth date, sequence, ISO 7064 mod 11-2 check char;
# plain, or written 6-8-4 with spaces or dashes ("110101 19900307 123X").
_CN_ID = _compile(
    r"[1-8](?<![0-9A-Za-z][1-8])[0-9]{5}(?P<sep>[ \-]?)(?:18|19|20)[0-9]{2}(?:0[1-9]|1[0-2])"
    r"(?:0[1-9]|[12][0-9]|3[01])(?P=sep)[0-9]{3}[0-9Xx]" + _NUMBER_END
)


# What every short national number taken on its shape holds: a capital then two digits (a National
# Insurance number, a NIE, a codice fiscale, a CURP, a PAN), or seven digits and a capital (a DNI).
_has_short_national_id = _has_match(_compile(r"[A-Z](?:[ \-]?[0-9]){2}|[0-9]{7}-?[A-Z]"))


# Every number taken after its name has eight digits at least, one separator at most between two.
_EIGHT_DIGITS = _compile(r"[0-9](?:[ .\-]?[0-9]){7}")


def _national_id_word_gate(text: str) -> bool:
    return _EIGHT_DIGITS.search(text) is not None and _contains_any(_lower(text), NATIONAL_ID_WORDS)


def _cn_id_written_ok(value: str) -> bool:
    return cn_id_ok(value.replace(" ", "").replace("-", ""))


# -- IP addresses
# IPv4: exactly four dot-separated octets 0-255 without leading zeros, not inside a longer dotted
# run ("1.2.3.4.5"), not glued to a letter ("v1.2.3.4") and not after a version word (below).
_IPV4 = _compile(
    r"[0-9](?<![0-9A-Za-z][0-9])(?<![0-9]\.[0-9])[0-9]{0,2}(?:\.[0-9]{1,3}){3}(?![0-9A-Za-z])(?!\.[0-9])"
)
# A glued "v1.2.3.4" is already excluded by the boundary; a detached "v" is not a version word.
_VERSION_BEFORE = re.compile(
    r"(?:(?<![A-Za-z])(?:version|ver|release|rel|rev|revision|build)|版本号?)[\s.:=#]{0,3}\Z", re.IGNORECASE
)


def _locate_ipv4(match: re.Match[str]) -> tuple[int, int] | None:
    if match.group().startswith("127.") or match.group() == "0.0.0.0":
        return None  # loopback and "every interface": a note about a local server, nobody's address
    for octet in match.group().split("."):
        if int(octet) > 255 or (len(octet) > 1 and octet[0] == "0"):
            return None
    # "version 2.10.4.1", "rev: 1.0.0.3": 16 characters hold the longest word, its separators and
    # the character before it (so "server 10.0.0.1" is not read as "ver").
    start = match.start()
    if _VERSION_BEFORE.search(match.string, max(0, start - 16), start):
        return None
    return match.span()


# IPv6: matched from its first colon (rare in prose, so ``re`` skips to it), taking the whole run
# of hex digits, colons and dots possessively (one linear scan, no backtracking); the first group is
# found walking back, and ``ipaddress`` is the judge.
_IPV6_MAX = 45  # "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255" minus its first group
# A second colon within five characters is required here, so "http:" and "12:30" never reach Python.
_IPV6 = _compile(rf":[0-9A-Fa-f.]{{0,4}}+:[0-9A-Fa-f:.]{{0,{_IPV6_MAX - 5}}}+")
_HEX = frozenset(string.hexdigits)
_GROUP_SPLIT = re.compile(r"[:.]")


def _locate_ipv6(match: re.Match[str]) -> tuple[int, int] | None:
    text, colon, end = match.string, match.start(), match.end()
    if end < len(text) and (text[end] in _ALNUM or text[end] in ":."):
        return None  # glued to a word, or a run too long to be one address
    start = colon
    while start > 0 and text[start - 1] in _HEX:
        start -= 1
        if colon - start > 4:
            return None
    if start == colon and not text.startswith("::", colon):
        # "who:2001:db8::1", "ip:fe80::1": the first colon belongs to the word before the address.
        start = colon + 1
    elif start and (text[start - 1] in _ALNUM or text[start - 1] in ":."):
        return None
    value = text[start:end].rstrip(".")  # "… at fe80::1." ends a sentence
    colons = value.count(":")
    # Quick reject first: "12:30:45" (a time) has neither "::" nor seven colons.
    if colons < 2 or ("::" not in value and colons < 6):
        return None
    if not _ipv6_ok(value):
        # A colon used as punctuation: "fe80::1: unreachable", "2001:db8::: that one".
        if not (value.endswith(":") and _ipv6_ok(value[:-1])):
            return None
        value = value[:-1]
    address = ipaddress.IPv6Address(value)
    if address.is_loopback or address.is_unspecified or (
        address.ipv4_mapped is not None and (address.ipv4_mapped.is_loopback or address.ipv4_mapped.is_unspecified)
    ):
        return None  # "0:0:0:0:0:0:0:1", "::ffff:127.0.0.1": this machine, as in IPv4
    if "::" in value:
        # "::1" and "a[1::2]" (a Python slice) parse as addresses; a real one has more to it.
        groups = [g for g in _GROUP_SPLIT.split(value) if g]
        if len(groups) < 3 and all(len(g) < 4 for g in groups):
            return None
    return start, start + len(value)


def _ipv6_ok(value: str) -> bool:
    try:
        ipaddress.IPv6Address(value)
    except ValueError:
        return False
    return True


def _normalize_ip(value: str) -> str:
    return str(ipaddress.ip_address(value))


# -- secrets
# Provider tokens (their formats are in :mod:`.provider_keys`), and a Slack incoming webhook (or
# workflow trigger) URL, whose path after the host is the credential.
_SLACK_WEBHOOK = _compile(
    r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<value>[A-Za-z0-9_\-]{6,}+(?:/[A-Za-z0-9_\-]{6,}+){1,3})"
)
_API_KEY_PREFIXES = (*PROVIDER_NEEDLES, "hooks.slack.com")

# Most prefixes hold "_" or "-": those are looked for only in text that has one.
_PREFIXES_UNDERSCORE = tuple(p for p in _API_KEY_PREFIXES if "_" in p)
_PREFIXES_DASH = tuple(p for p in _API_KEY_PREFIXES if "-" in p and "_" not in p)
_PREFIXES_DOT = tuple(p for p in _API_KEY_PREFIXES if "." in p and "-" not in p and "_" not in p)
_PREFIXES_PLAIN = tuple(p for p in _API_KEY_PREFIXES if not any(ch in p for ch in "-_."))


class _has_any_with:  # noqa: N801 -- used like a function; a class so that it pickles
    """A gate that passes when ``text`` holds ``mark`` (when given) and one of ``needles``."""

    __slots__ = ("mark", "needles")

    def __init__(self, mark: str, needles: tuple[str, ...]) -> None:
        self.mark = mark
        self.needles = needles

    def __call__(self, text: str) -> bool:
        return (not self.mark or self.mark in text) and _contains_any(text, self.needles)


def _provider_key_detectors() -> tuple[Detector, ...]:
    """The provider formats as four detectors, by the separator their needles hold ("_", "-", "."
    or none), each gated on its own needles: "key-value" runs the dash formats, not all sixty."""
    rules: dict[str, list[Rule]] = {}
    extra = {
        "hooks.slack.com": Rule(_SLACK_WEBHOOK),
        ":AA": Rule(TELEGRAM_BOT_TOKEN, locate_telegram_bot_token),
        ".atlasv1.": Rule(TERRAFORM_TOKEN, locate_terraform_token),
    }
    for needle, pattern in PROVIDER_KEYS:
        rules.setdefault(needle, []).append(Rule(pattern))
    for needle, rule in extra.items():
        rules.setdefault(needle, []).append(rule)
    groups = (("_", _PREFIXES_UNDERSCORE), ("-", _PREFIXES_DASH), (".", _PREFIXES_DOT), ("", _PREFIXES_PLAIN))
    return tuple(
        Detector("API_KEY", tuple(rule for needle in needles for rule in rules[needle]), priority=2, secret=True,
                 gate=_has_any_with(mark, needles))
        for mark, needles in groups
    )


# An AWS secret access key is 40 characters of base64 with no prefix of its own. It is taken only
# with context: an access key id (AKIA…, ASIA…) within 256 characters, or "aws … secret" right
# before it ("aws_secret_access_key …", "AWS Secret Access Key: …"); and only when it mixes upper
# case, lower case and digits (a 40-character git SHA is lower-case hex).
_AWS_SECRET = _compile(r"[A-Za-z0-9/+](?<![A-Za-z0-9/+][A-Za-z0-9/+])[A-Za-z0-9/+]{39}(?![A-Za-z0-9/+=])")
_AWS_KEY_ID = _compile(r"(?:AKIA|ASIA)[A-Z0-9]{16}")
_AWS_SECRET_WORDS = re.compile(r"(?i:aws)[^\n]{0,24}(?i:secret)[^\n]{0,32}\Z")
_AWS_CONTEXT = 256


def _locate_aws_secret(match: re.Match[str]) -> tuple[int, int] | None:
    value, text, (start, end) = match.group(), match.string, match.span()
    if value.isupper() or value.islower() or not _has_digit(value):
        return None
    if _said_before(_AWS_SECRET_WORDS, text, start, 64):
        return start, end
    if _AWS_KEY_ID.search(text, max(0, start - _AWS_CONTEXT), end + _AWS_CONTEXT) is not None:
        return start, end
    return None


def _aws_gate(text: str) -> bool:
    return "AKIA" in text or "ASIA" in text or (
        _contains_any(text, ("aws", "AWS", "Aws")) and _contains_any(text, ("ecret", "ECRET"))
    )


def _discord_gate(text: str) -> bool:
    # Two dots and a digit (the prescreen's own test) at least; the pattern itself enters at every
    # "M", "N" and "O".
    return text.count(".") >= 2 and _has_digit(text)


# header.payload.signature, each base64url; header and payload are JSON objects, so both start "eyJ".
_JWT = _compile(r"eyJ(?<![A-Za-z0-9_\-]eyJ)[A-Za-z0-9_\-]{5,}+\.eyJ[A-Za-z0-9_\-]{5,}+\.[A-Za-z0-9_\-]*+")
_PEM_LABEL = r"[A-Z0-9 ]* PRIVATE KEY(?: BLOCK)?-----"
_PRIVATE_KEY = _compile(
    rf"-----BEGIN{_PEM_LABEL}"
    # The body cannot contain "-----", and is taken possessively: from each BEGIN the scan stops at
    # the next run of dashes, so many BEGIN lines cannot make it quadratic.
    rf"(?:(?:[^-]|-(?!----)){{0,20000}}+-----END{_PEM_LABEL}"
    # A key cut off before its END line is still a key: take its headers and base64 body.
    r"|(?:\s|\\[rn])*+(?:[A-Za-z\-]+:[^\n]*\n)*(?:(?:\s|\\[rn])*[A-Za-z0-9+/=]{16,})*)"
)
# key = value, where the key names a credential; only the value is redacted. The regex finds only
# the ":", "：" or "=" after a character that can end a key (the last letter of a keyword, a quote,
# a space); the key is checked looking back, then the value is read forward. The key must end with a keyword: "max_tokens=5",
# "token_count: 3" and "secretary: Bob" are left alone. A value stops at CJK text: "密码：hunter2，谢谢".
_ASSIGNMENT = _compile(r"[:=：](?<=[dDeEtTnNyYlLsSwW\"' \t码令钥牌][:=：])")
_ASSIGNMENT_VALUE = _compile(
    r"[ \t]*+(?:(?i:bearer|basic)[ \t]+(?P<auth>[A-Za-z0-9\-._~+/]{8,}=*)"
    # A quoted value runs to its closing quote, escaped quotes included ('"ab\"cd\"ef"'); one whose
    # backslashes do not pair up that way ends at the next quote.
    r"|\"(?P<dq>(?:[^\"\\\n]|\\.){1,512}+)\"|\"(?P<dq_raw>[^\"\n]{1,512})\""
    r"|'(?P<sq>(?:[^'\\\n]|\\.){1,512}+)'|'(?P<sq_raw>[^'\n]{1,512})'"
    r"|(?P<bare>[^\s\"',;&<>=\u3000-\u303f\u3400-\u9fff\uff00-\uffef]"
    r"[^\s\"',;&<>\u3000-\u303f\u3400-\u9fff\uff00-\uffef]{0,511}))"
)
_KEYWORDS = (
    "password", "passwd", "passphrase", "pwd", "secret", "token", "apikey", "credential", "credentials",
    "authorization", "密码", "口令", "密钥", "令牌", *(f"{a}{sep}{b}" for a, b in (
        ("secret", "key"), ("api", "key"), ("access", "key"), ("private", "key"), ("client", "secret"),
    ) for sep in ("_", "-", "")),
)  # fmt: skip
# "pass" and "pw" name a credential only as a whole word ("DB_PASS=", "dbPw=", not "bypass=" or
# "npw="), assigned with "=" or as a quoted key ('"pass": …'): "pass: 3" in a test report is a count.
_SHORT_KEYWORDS = ("pass", "pw")
_ASSIGNMENT_GROUPS = ("auth", "dq", "dq_raw", "sq", "sq_raw", "bare")
# Values that say there is no credential, or point at one kept elsewhere: "token=true", "secret:
# none", "password: ${DB_PASSWORD}", "api_key: <your key>", "password: ********" (this also keeps a
# second pass over redacted text from finding "<SECRET>").
_NOT_CREDENTIALS = frozenset({
    "true", "false", "null", "none", "nil", "undefined", "yes", "no", "on", "off", "empty", "unset", "n/a",
    "required", "optional", "redacted",
})  # fmt: skip
_TEMPLATE = re.compile(r"\{\{[^{}\n]{0,256}\}\}")
_REFERENCE = re.compile(
    r"\$\{[A-Za-z_][A-Za-z0-9_]*\}|\$[A-Z_][A-Z0-9_]*|\{\{[^{}]*\}\}|<[^<>]*>|%\([A-Za-z_][A-Za-z0-9_]*\)s|\*+|•+"
)


def _short_keyword_ok(key: str) -> bool:
    """True when ``key`` (as written) ends with "pass" or "pw" as a word of its own."""
    lower = key.lower()
    for word in _SHORT_KEYWORDS:
        if lower.endswith(word):
            at = len(key) - len(word)
            before = key[at - 1] if at else ""
            # No ASCII letter before it ("DB_PASS", "pw", "密码pw"), or a camel-case join ("dbPass").
            return not (before.isascii() and before.isalpha()) or (before.islower() and key[at].isupper())
    return False


def _not_a_credential(value: str) -> bool:
    return value.lower() in _NOT_CREDENTIALS or _REFERENCE.fullmatch(value) is not None


def _locate_assignment(match: re.Match[str]) -> tuple[int, int] | None:
    text, start = match.string, match.start()
    # str.endswith over a tuple runs in C: much cheaper than a regex search per ":" and "=".
    written = text[max(0, start - 24) : start].rstrip(" \t")
    quoted = written[-1:] in ("'", '"')
    written = written.rstrip("\"'")
    short = False
    if not written.lower().endswith(_KEYWORDS):
        # "pass: 3" in a test report is a count; "pw: x9!k" is a password.
        named = text[start] == "=" or quoted or written.lower().endswith("pw")
        if not (named and _short_keyword_ok(written)):
            return None
        short = True
    value = _ASSIGNMENT_VALUE.match(text, match.end())
    if value is None:
        return None
    for group in _ASSIGNMENT_GROUPS:
        if value.start(group) >= 0:
            found = value.group(group)
            if _not_a_credential(found) or (short and found.isdigit() and len(found) < 6):
                return None  # "pass=3": a count, not a PIN
            if found.startswith("{{") and _TEMPLATE.match(text, value.start(group)):
                return None  # "password: {{ vault_password }}" (the bare value stopped at its space)
            if group == "bare" and is_code(found, written):
                return None  # "password = os.environ[…]", "token: str": where it comes from, not what it is
            return value.span(group)
    return None


# A password said in words: "my password is Hunter2!", "the password is: x9$kq", "密码是hunter2".
# Prose says far more often what a password *is like* ("the password is required", "… is
# case-sensitive", "… is hashed with argon2id"), so without a colon the value is taken only when
# it cannot be a word: it has a digit or a symbol (six digits at least when it is all digits).
_SAID_VALUE = (
    r"[ \t]*+(?P<colon>[:：=]?)[ \t]*+"
    r"(?:\"(?P<dq>[^\"\n]{1,128})\"|'(?P<sq>[^'\n]{1,128})'"
    r"|(?P<bare>[^\s\"'<>\u3000-\u303f\u3400-\u9fff\uff00-\uffef]{1,128}))"
)
# Two patterns, each starting with a character class or literals that ``re`` can skip ahead to.
# "Password for the admin account is …": what it is for, up to 40 characters, may come between.
_SAID_SECRET = _compile(
    r"[Pp](?<![A-Za-z][Pp])(?i:ass(?:word|wd|phrase|code)|wd|w)"
    r"(?i:'s|(?:[ \t]+(?:for|of|to|on)[ \t]+[^\n.:=?!]{1,40}?)?[ \t]+(?:is|was))(?![A-Za-z])" + _SAID_VALUE
)
_SAID_SECRET_CJK = _compile(r"(?:密码|口令|密碼)是" + _SAID_VALUE)
_SENTENCE_END = ".,;:)]}"
_WORD_PUNCTUATION = "-'."  # inside words: "case-sensitive", "user's", "e.g."
# "the password is SHA-256 hashed", "… is argon2id-hashed": how it is kept, not what it is.
_ALGORITHM = re.compile(r"(?i:sha|md|aes|rsa|des|crc|hmac|bcrypt|scrypt|argon|pbkdf|blake|ripemd)[\w\-]*")


def _locate_said_secret(match: re.Match[str]) -> tuple[int, int] | None:
    text = match.string
    if match.start("bare") >= 0:
        start, end = match.span("bare")
        while end > start and text[end - 1] in _SENTENCE_END:  # "… is hunter2." ends a sentence
            end -= 1
        bare = True
    else:
        start, end = match.span("dq") if match.start("dq") >= 0 else match.span("sq")
        bare = False
    value = text[start:end]
    if not value or _not_a_credential(value) or (value.isdigit() and len(value) < 6):
        return None  # "password is: none", "the password is 8 characters"
    if bare and not match.group("colon"):
        if len(value) < 4 or all(ch.isalpha() or ch in _WORD_PUNCTUATION for ch in value):
            return None
        if _ALGORITHM.fullmatch(value):
            return None
    return start, end


# A user and a password given together: "login admin / S3cr3t!", "creds are admin:Hunter2024!",
# "login: ops:x9!kq", a .netrc line "machine h login bob password Xy7!". The user has a letter (so
# "login 10:30:00" is a time); after "/" or ":" the value is taken only when it cannot be a word or a
# path (as a password said without a colon), after "password" whatever it is.
_LOGIN_PAIR = _compile(
    r"[LlCc](?<![A-Za-z][LlCc])(?i:og[ \-]?in|reds?|redentials)(?![A-Za-z])"
    r"(?:[ \t]+(?i:is|are|was|were|as))?[ \t]*+[:=]?[ \t]*+(?P<user>[A-Za-z0-9._@+\-]{1,64}+)"
    r"(?:[ \t]*/[ \t]*|:|(?P<word>[ \t]+(?i:password|passwd|pass)[ \t]+))(?P<value>[^\s\"'<>]{1,128})"
)
_LOGIN_GATE_WORDS = ("login", "log in", "log-in", "cred", "curl", "--user", "mysql", "mariadb", "--password")


def _password_like(value: str) -> bool:
    """A value said without a colon that cannot be a word: a digit or a symbol in it, six digits at
    least when it is all digits, four characters at least."""
    if len(value) < 4 or all(ch.isalpha() or ch in _WORD_PUNCTUATION for ch in value):
        return False
    return not (value.isdigit() and len(value) < 6)


def _trimmed_value(match: re.Match[str], group: str) -> tuple[int, int]:
    text, (start, end) = match.string, match.span(group)
    while end > start and text[end - 1] in _SENTENCE_END:  # "… admin:Hunter2024!." ends a sentence
        end -= 1
    return start, end


def _locate_login_pair(match: re.Match[str]) -> tuple[int, int] | None:
    user = match.group("user")
    if not any(ch.isalpha() for ch in user):
        return None
    start, end = _trimmed_value(match, "value")
    value = match.string[start:end]
    if not value or _not_a_credential(value):
        return None
    if match.start("word") < 0 and ("/" in value or not _password_like(value)):
        return None  # "login page / settings", "login route /api/v1/login"
    return start, end


# Passwords on a command line: "curl -u admin:S3cret", "curl --user 'deploy:Ab12'", "mysql -u root
# -pS3cretPw9", "docker login --password Xy7!kq". "-u" is taken only after curl or wget on its line
# ("git push -u origin", "docker run -u 1000:1000" are not logins), "-p" only after mysql.
_COMMAND_PASSWORD = _compile(
    r"-(?<![^\s]-)(?:(?:-user(?:[ \t]+|=)|u[ \t]*)[\"']?(?P<user>[^\s:\"'/]{1,64}+):(?P<value>[^\s\"'@]{1,128}+)"
    r"|p(?P<mysql>[^\s\"'\-][^\s\"']{0,127}+)|-password[ \t]+(?P<flag>[^\s\"'\-][^\s\"']{0,127}+))"
)


_COMMAND_REACH = 256


def _command_before(text: str, at: int, names: tuple[str, ...]) -> bool:
    """Whether one of ``names`` (lower case) is in the 256 characters of ``at``'s line before it.
    (Bounded: a line of a million "curl -u a:" is not read again for each.)"""
    before = text[max(0, at - _COMMAND_REACH) : at]
    return _contains_any(before[before.rfind("\n") + 1 :].lower(), names)


def _locate_command_password(match: re.Match[str]) -> tuple[int, int] | None:
    text, at = match.string, match.start()
    if match.start("mysql") >= 0:
        if not _command_before(text, at, ("mysql", "mariadb")):
            return None
        span = match.span("mysql")
    elif match.start("flag") >= 0:
        span = match.span("flag")
        if not _password_like(text[span[0] : span[1]]):
            return None
    else:
        if text.startswith("-u", at) and not _command_before(text, at, ("curl", "wget")):
            return None
        span = match.span("value")
        if text[span[0] : span[1]].isdigit():
            return None
    return None if _not_a_credential(text[span[0] : span[1]]) else span


def _command_gate(text: str) -> bool:
    return _contains_any(_lower(text), _LOGIN_GATE_WORDS)


# Credentials in markup: an element named for one ("<password>Xk9#</password>", "<ns:apiKey>…"), or
# a .NET / Java config pair ('<add key="DbPassword" value="…"/>', '<param name="token" value="…">').
_XML_ELEMENT = _compile(
    r"<(?P<tag>[A-Za-z_][A-Za-z0-9_.:\-]{0,63}+)>[ \t]*(?P<value>[^<>\s][^<>\n]{0,255}?)[ \t]*</(?P=tag)>"
)
# The pair is matched from its rarer "value=", the name found looking back.
_CONFIG_PAIR = _compile(r"value=(?P<q>[\"'])(?P<value>[^\"'\n]{1,512}+)(?P=q)")
_CONFIG_NAME = re.compile(r"(?<![A-Za-z])(?:key|name)=(?P<q>[\"'])(?P<name>[^\"'\n<>]{1,64})(?P=q)[ \t]+\Z")


def _names_credential(name: str) -> bool:
    lower = name.lower().rsplit(":", 1)[-1]
    return lower.endswith(_KEYWORDS) or _short_keyword_ok(name)


def _locate_markup(match: re.Match[str]) -> tuple[int, int] | None:
    if "tag" in match.re.groupindex:
        name = match.group("tag")
    else:
        named = _CONFIG_NAME.search(match.string, max(0, match.start() - 80), match.start())
        if named is None:
            return None
        name = named.group("name")
    value = match.group("value")
    if not _names_credential(name) or _not_a_credential(value) or _TEMPLATE.fullmatch(value):
        return None
    return match.span("value")


# A value that looks generated, assigned to any name with a credential word in it: "SECRET_KEY_BASE=…",
# "authKeyId: …", "key=…" ("MY_SERVICE_TOKEN=…" and "apiKey" end with a keyword and are taken by
# the rule above whatever their value). Names are split into words (snake, kebab and camel case),
# so "monkey", "keyboard" and "author" do not count. _looks_random is what leaves "key=value",
# "sort_key=created_at" and "cache_key: user_42_profile" alone.
# The value is taken possessively and must end there: a run too long to be a token fails in C, and
# "=" is allowed only as base64 padding, so "pw=pw=pw=…" is not one long value read from every "=".
_ASSIGNED_TOKEN = _compile(
    r"[:=：][ \t]*+[\"'`]?(?P<value>[A-Za-z0-9][A-Za-z0-9_\-+/.~]{15,511}+={0,3}+)(?![A-Za-z0-9_\-+/.~=])"
)
_NAME_CHARS = frozenset(string.ascii_letters + string.digits + "_-.")
_NAME_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_CREDENTIAL_WORDS = frozenset({
    "key", "keys", "token", "tokens", "secret", "secrets", "password", "passwords", "passwd", "pwd", "pass",
    "passphrase", "auth", "credential", "credentials", "apikey", "authkey", "authtoken", "accesstoken",
    "accesskey", "refreshtoken", "secretkey", "privatekey", "sessionkey", "sessiontoken", "clientsecret",
    "apitoken", "apisecret", "idtoken", "signingkey", "encryptionkey", "masterkey",
})  # fmt: skip
_MIN_RANDOM = 16
_MIN_ENTROPY = 3.0  # bits per character
_MIN_SWITCHES = 0.25  # share of adjacent pairs that change class


def _assigned_name(text: str, at: int) -> str:
    """The name written before the ":" or "=" at ``at`` (spaces and a closing quote skipped)."""
    end = at
    while end > 0 and text[end - 1] in " \t":
        end -= 1
    if end > 0 and text[end - 1] in "\"'`":
        end -= 1
    start = end
    while start > 0 and end - start < 64 and text[start - 1] in _NAME_CHARS:
        start -= 1
    return text[start:end]


def _char_class(ch: str) -> int:
    if "0" <= ch <= "9":
        return 0
    if "a" <= ch <= "z":
        return 1
    if "A" <= ch <= "Z":
        return 2
    return -1


def _looks_random(value: str) -> bool:
    """Whether ``value`` reads as a generated token rather than a word, a name, a number or a version.

    It must have 16 characters or more, letters and digits, at least 3 bits of entropy per character
    (Shannon, over its own characters), and change between digit, lower and upper case in at least
    a quarter of its adjacent pairs (a capital starting a lower-case word does not count, so
    camel-case names read as smooth as words). Random base62, hex and base64 of 16 characters or
    more pass about nine times in ten; "utf8mb4_unicode_ci", "claude-3-5-sonnet-20241022",
    "release-2024-05-01" and "Password123456" do not.
    """
    size = len(value)
    if size < _MIN_RANDOM or not _has_digit(value) or not any(ch.isalpha() for ch in value):
        return False
    counts: dict[str, int] = {}
    for ch in value:
        counts[ch] = counts.get(ch, 0) + 1
    entropy = math.log2(size) - sum(n * math.log2(n) for n in counts.values()) / size
    if entropy < _MIN_ENTROPY:
        return False
    pairs = switches = 0
    previous = _char_class(value[0])
    for ch in value[1:]:
        current = _char_class(ch)
        if previous >= 0 and current >= 0:
            pairs += 1
            if current != previous and not (previous == 2 and current == 1):
                switches += 1
        previous = current
    return pairs > 0 and switches >= _MIN_SWITCHES * pairs


def _locate_assigned_token(match: re.Match[str]) -> tuple[int, int] | None:
    text, (start, end) = match.string, match.span("value")
    while end > start and text[end - 1] == ".":  # "… key=8f3kQz9LmW2xT7vB." ends a sentence
        end -= 1
    name = _assigned_name(text, match.start())
    if not any(word.lower() in _CREDENTIAL_WORDS for word in _NAME_WORDS.findall(name)):
        return None
    return (start, end) if _looks_random(text[start:end]) else None


# "Bearer <token>" outside a header; a token has a digit somewhere ("the bearer of bad news").
_BEARER = _compile(
    r"[Bb](?<![A-Za-z][Bb])(?i:earer)[ \t]+(?=[A-Za-z\-._~+/]{0,256}[0-9])(?P<value>[A-Za-z0-9\-._~+/]{12,}=*)"
)
# "scheme://user:password@host", the user possibly empty ("redis://:password@cache:6379").
_URL_CREDENTIALS = _compile(r"://[^/\s:@]{0,256}+:(?P<value>[^/\s@]{1,256}+)@")
# Cookies carry sessions: every value of a "Cookie:" header is redacted, and the cookie a
# "Set-Cookie:" header sets (not its attributes, after the first ";"). The header regex (found from
# its literal "ookie") only marks where the name=value pairs are; the pair regex runs inside.
_COOKIE_HEADERS = _compile(
    r"ookie(?<=[Cc]ookie)(?:(?<=[Ss]et-[Cc]ookie)[\"']?[ \t]*:[^\r\n;]{1,4096}"
    r"|(?<![A-Za-z0-9_\-][Cc]ookie)[\"']?[ \t]*:[^\r\n]{1,8192})"
)
_COOKIE_PAIR = _compile(
    r"[!#$%&*+.^_`|~0-9A-Za-z\-](?<![!#$%&*+.^_`|~0-9A-Za-z\-][!#$%&*+.^_`|~0-9A-Za-z\-])"
    r"[!#$%&*+.^_`|~0-9A-Za-z\-]{0,127}+=(?P<value>[^;\s\"',\\]{1,4096}+)"
)
_SECRET_WORDS = (
    "pass", "pw", "secret", "token", "key", "credential", "auth", "bearer", "cookie", "://",
    "密码", "密碼", "口令", "密钥", "令牌",
)  # fmt: skip


def _secret_gate(text: str) -> bool:
    return _contains_any(_lower(text), _SECRET_WORDS)


# -- money: a currency sign or code before the amount, or a currency word after it.
_AMOUNT = r"[0-9]*(?:[.,][0-9]+)*(?:[kKmM](?![A-Za-z])|bn(?![A-Za-z])|[万亿])?"
_CURRENCY_CODES = "USD|CNY|EUR|RMB|HKD|JPY|GBP|INR|AUD|CAD|CHF|SGD|KRW|TWD"
_MONEY_SIGN = _compile(r"[¥$€£₹￥](?<![0-9\\$][¥$€£₹￥])[ \u00a0]?[0-9]" + _AMOUNT)
_MONEY_CODE = _compile(
    rf"(?:{_CURRENCY_CODES})(?<![A-Za-z][A-Z]{{3}})[ \u00a0]?[0-9]" + _AMOUNT + _NO_ALNUM_AFTER
)
# "199元", "3万元", "100 USD": matched from the currency word, the amount found walking back.
# "元组" (tuple), "元素" (element), "元数据" (metadata), "元旦" (New Year) and the measure word in
# "3块饼干" (three biscuits) are not money.
# Every alternative starts with a literal (no nesting) so that ``re`` can skip ahead in C.
_MONEY_WORD = _compile(
    rf"(?:{_CURRENCY_CODES}|元(?![组素数旦])|块钱|块(?![\u4e00-\u9fff])"
    r"|美元|欧元|英镑|日元|港元|港币|人民币|韩元|美金)"
)
# What the money gate looks for: a superset of what the money rules can match.
_MONEY_ASCII = ("$", *_CURRENCY_CODES.split("|"))
_MONEY_UNICODE = ("¥", "€", "£", "₹", "￥", "元", "块", "币", "镑", "美金")
_SPACES = " \u00a0"
_MULTIPLIERS = "万亿千百"
_AMOUNT_CHARS = frozenset("0123456789.,")


def _locate_money_word(match: re.Match[str]) -> tuple[int, int] | None:
    text, i, end = match.string, match.start(), match.end()
    if match.group().isascii() and end < len(text) and text[end] in _ALNUM:  # "100 USDT" is not USD
        return None
    if i and text[i - 1] in _SPACES:
        i -= 1
    if i and text[i - 1] in _MULTIPLIERS:
        i -= 1
        if i and text[i - 1] in _SPACES:
            i -= 1
    amount_end = start = i
    while start and text[start - 1] in _AMOUNT_CHARS:
        start -= 1
    while start < amount_end and not text[start].isdigit():
        start += 1
    if start == amount_end or not text[amount_end - 1].isdigit():
        return None
    if start and text[start - 1] in _ALNUM:
        return None
    return start, end


_CODE_BEFORE = frozenset("{(`'\"")
_CODE_AFTER = frozenset("}`'\";)|")


def _locate_money_sign(match: re.Match[str]) -> tuple[int, int] | None:
    # "$1" in "awk '{print $1}'" is a positional parameter: under the hygiene policy calling it
    # money would block a perfectly good shell tip.
    text, start, end = match.string, match.start(), match.end()
    positional = end - start == 2 and text[start] == "$"
    code_before = start > 0 and text[start - 1] in _CODE_BEFORE
    code_after = end < len(text) and text[end] in _CODE_AFTER
    return None if positional and (code_before or code_after) else (start, end)


# One regex search for these (they start with "$" or capitals, rare in text, so ``re`` skips most
# of it in C) costs less than fifteen substring tests; needles that start with common lower-case
# letters are the other way round.
_MONEY_ASCII_RE = re.compile("|".join(re.escape(needle) for needle in _MONEY_ASCII))


def _money_gate(text: str) -> bool:
    if _MONEY_ASCII_RE.search(text) is not None:
        return True
    # Plain ASCII text without "$" or a currency code has no money in it.
    return not text.isascii() and _contains_any(text, _MONEY_UNICODE)


def _ip_gate(text: str) -> bool:
    # IPv4 needs digits and dots; IPv6 needs "::", or a digit, or (all letters a-f) seven colons.
    return "::" in text or (("." in text or ":" in text) and _has_digit(text)) or text.count(":") >= 7


# Everything a built-in detector needs to see at least one of: a digit (numbers, addresses, money),
# "@", "::", a key prefix, a PEM or JWT marker, or a credential word. Most text written to memory
# holds none of it, and these C-level substring checks are far cheaper than a dozen gate calls (or
# one regex alternation, which re tries at every position).
_PRESCREEN_NEEDLES = ("-----BEGIN", *(p for p in _API_KEY_PREFIXES if "-" in p or "_" in p))
_PRESCREEN_PLAIN = ("@", "＠", "::", "eyJ", *_PREFIXES_PLAIN)
# Where a credential word names a value: before ":" or "=". Said in a sentence, only a password is
# taken ("my password is …", "PASSWORD\tWAS …", "pw's …", "密碼是…"), and only with "pass", "pw" or "是".
_CREDENTIAL_CONTEXT = (":", "=", "：")
_SAID_PASSWORD = ("pass", "pw")
_SAID_PASSWORD_CJK = ("密码是", "口令是", "密碼是")


def might_hold_pii(text: str) -> bool:
    """False when no built-in detector can match anything in ``text`` (a cheap test, run first)."""
    return (
        _DIGIT_RE.search(text) is not None
        # _PRESCREEN_NEEDLES all hold "-" or "_"; the plain ones ("@", "AKIA", "hooks.slack.com" …) do not.
        or (("-" in text or "_" in text) and _contains_any(text, _PRESCREEN_NEEDLES))
        or _contains_any(text, _PRESCREEN_PLAIN)
        or ("." in text and _contains_any(text, _PREFIXES_DOT))
        or text.count(":") >= 7  # an IPv6 address spelled with letters a-f only
        # A credential word matters only before ":" or "=", or as a password said in words (a bearer
        # token, an AWS secret key and a passport number have a digit, a URL password an "@": all
        # caught above).
        or (_contains_any(text, _CREDENTIAL_CONTEXT) and _contains_any(_lower(text), _SECRET_WORDS))
        or _contains_any(_lower(text), _SAID_PASSWORD)
        or ("是" in text and _contains_any(text, _SAID_PASSWORD_CJK))
        or _fullwidth_digit_gate(text)  # a card typed in full-width digits
        or _command_gate(text)  # "login admin / Secret!", "curl -u admin:Secret"
        or ("</" in text and _contains_any(_lower(text), _SECRET_WORDS))  # "<token>abc</token>"
        or _obfuscated_email_gate(text)  # "john(at)example(dot)com"
    )


def default_detectors() -> tuple[Detector, ...]:
    """The built-in detectors, most specific first (lower priority number wins a tie)."""
    return (
        Detector("PRIVATE_KEY", (Rule(_PRIVATE_KEY),), priority=0, secret=True, gate=_has_any("-----BEGIN")),
        Detector("JWT", (Rule(_JWT),), priority=1, secret=True, gate=_has_any("eyJ")),
        *_provider_key_detectors(),
        # A rule that needs a rarer context than its family's gate is a detector of its own, with a
        # gate on that context: the AWS secret key (its scan enters at every letter), cookies, and
        # the bare SSN and phone numbers that only a word before them makes one.
        Detector("API_KEY", (Rule(_AWS_SECRET, _locate_aws_secret),), priority=2, secret=True, gate=_aws_gate),
        Detector(
            "API_KEY", (Rule(DISCORD_TOKEN, locate_discord_token),), priority=2, secret=True, gate=_discord_gate
        ),
        Detector(
            "SECRET",
            (
                Rule(_ASSIGNMENT, _locate_assignment, skip_inside_value=True),
                Rule(_ASSIGNED_TOKEN, _locate_assigned_token),
                Rule(_BEARER),
                Rule(_URL_CREDENTIALS),
                Rule(_SAID_SECRET, _locate_said_secret),
                Rule(_SAID_SECRET_CJK, _locate_said_secret),
                Rule(_XML_ELEMENT, _locate_markup),
                Rule(_CONFIG_PAIR, _locate_markup),
            ),
            priority=3,
            secret=True,
            gate=_secret_gate,
        ),
        Detector(
            "SECRET",
            (Rule(_LOGIN_PAIR, _locate_login_pair), Rule(_COMMAND_PASSWORD, _locate_command_password)),
            priority=3,
            secret=True,
            gate=_command_gate,
        ),
        Detector(
            "SECRET",
            (Rule(_COOKIE_PAIR, within=_COOKIE_HEADERS),),
            priority=3,
            secret=True,
            gate=_has_any("ookie"),
        ),
        Detector(
            "EMAIL",
            (Rule(_EMAIL_DOMAIN, _locate_email),),
            priority=4,
            normalize=_email_key,
            gate=_has_any("@", "＠"),
        ),
        Detector(
            "EMAIL",
            (Rule(_EMAIL_OBFUSCATED, _locate_obfuscated_email),),
            priority=4,
            normalize=_email_key,
            gate=_obfuscated_email_gate,
        ),
        Detector(
            "IBAN",
            (Rule(_IBAN, _locate_iban, overlapping=True),),
            priority=5,
            normalize=_alnum_upper,
            gate=_has_digit,
        ),
        Detector(
            "CN_ID",
            (Rule(_CN_ID, _whole_if(_cn_id_written_ok), _LONG_NUMBER, overlapping=True),),
            priority=6,
            normalize=_alnum_upper,
            gate=_has_long_number,
        ),
        Detector(
            "NATIONAL_ID",
            tuple(Rule(number.pattern, number, _LONG_NUMBER, overlapping=True)
                  for number in NATIONAL_IDS if number.words is None and number.long_number),
            priority=6,
            normalize=_alnum_upper,
            gate=_has_long_number,
        ),
        Detector(
            "NATIONAL_ID",
            tuple(Rule(number.pattern, number, overlapping=True)
                  for number in NATIONAL_IDS if number.words is None and not number.long_number),
            priority=6,
            normalize=_alnum_upper,
            gate=_has_short_national_id,
        ),
        Detector(
            "NATIONAL_ID",
            tuple(Rule(number.pattern, number, _LONG_NUMBER if number.long_number else None, overlapping=True)
                  for number in NATIONAL_IDS if number.words is not None),
            priority=6,
            normalize=_alnum_upper,
            gate=_national_id_word_gate,
        ),
        Detector(
            "CREDIT_CARD",
            (
                Rule(_CARD, _locate_card, _LONG_NUMBER, overlapping=True),
                Rule(_CARD_LOOSE, _locate_loose_card, _LONG_NUMBER, overlapping=True),
            ),
            priority=7,
            normalize=_digits,
            gate=_has_long_number,
        ),
        Detector(
            "CREDIT_CARD",
            (Rule(_CARD_FULLWIDTH, _locate_fullwidth_card, overlapping=True),),
            priority=7,
            normalize=_digits,
            gate=_fullwidth_digit_gate,
        ),
        Detector(
            "SSN",
            (Rule(_SSN, _whole_if(ssn_ok), _LONG_NUMBER, overlapping=True),),
            priority=8,
            normalize=_digits,
            gate=_has_long_number,
        ),
        Detector(
            "SSN",
            (Rule(_SSN_BARE, _locate_bare_ssn, _LONG_NUMBER, overlapping=True),),
            priority=8,
            normalize=_digits,
            gate=_ssn_word_gate,
        ),
        Detector(
            "PASSPORT",
            (Rule(_PASSPORT, _locate_passport), Rule(_PASSPORT_CJK, _locate_passport)),
            priority=8,
            normalize=_alnum_upper,
            gate=_passport_gate,
        ),
        Detector(
            "PHONE",
            (Rule(_PHONE_DIGITS, _locate_phone_digits, _LONG_NUMBER, overlapping=True),),
            priority=9,
            normalize=_digits,
            gate=_has_long_number,
        ),
        Detector(
            "PHONE",
            (Rule(_PHONE_INTL, _whole_if(_not_a_date)), Rule(_PHONE_PAREN, _locate_phone_paren)),
            priority=9,
            normalize=_digits,
            gate=_has_any("+", "("),
        ),
        Detector(
            "PHONE",
            (Rule(_BARE_PHONE, _locate_bare_phone, _LONG_NUMBER, overlapping=True),),
            priority=9,
            normalize=_digits,
            gate=_phone_word_gate,
        ),
        Detector(
            "IP_ADDRESS",
            (Rule(_IPV4, _locate_ipv4), Rule(_IPV6, _locate_ipv6)),
            priority=10,
            normalize=_normalize_ip,
            gate=_ip_gate,
        ),
        Detector(
            "MONEY",
            (Rule(_MONEY_SIGN, _locate_money_sign), Rule(_MONEY_CODE), Rule(_MONEY_WORD, _locate_money_word)),
            priority=11,
            gate=_money_gate,
        ),
    )
