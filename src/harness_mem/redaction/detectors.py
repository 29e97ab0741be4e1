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
  matched from its "@", an IPv6 address from its first colon, "199元" from its currency word, a
  "password=…" from its "=", each then walking back a few characters;
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

import ipaddress
import re
import string
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import chain

from .checksums import IBAN_LENGTHS, card_ok, cn_id_ok, iban_ok, ssn_ok

__all__ = ["Detector", "Locate", "Rule", "WindowCache", "default_detectors", "might_hold_pii", "unchanged"]

# A locate function turns a match into the (start, end) of the value, or None to reject it.
Locate = Callable[[re.Match[str]], "tuple[int, int] | None"]


def unchanged(value: str) -> str:
    """The identity: the form a value is hashed in when its detector names no other."""
    return value


def _digits(value: str) -> str:
    return "".join(ch for ch in value if ch.isdigit())


def _alnum_upper(value: str) -> str:
    return "".join(ch for ch in value if ch.isalnum()).upper()


WindowCache = dict[re.Pattern[str], list[tuple[int, int]]]
# Past the end of a window a match may still read its last character ("…002X") and look ahead two.
_WINDOW_SLACK = 4


def _windows(within: re.Pattern[str], text: str, cache: WindowCache | None) -> list[tuple[int, int]]:
    """The spans of ``within`` in ``text``, computed once per text when a cache is given."""
    if cache is not None and within in cache:
        return cache[within]
    windows = [m.span() for m in within.finditer(text)]
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
    """

    pattern: re.Pattern[str]
    locate: Locate | None = None
    within: re.Pattern[str] | None = None
    overlapping: bool = False

    def spans(self, text: str, cache: WindowCache | None = None) -> list[tuple[int, int]]:
        """The (start, end) of every valid value in ``text``; ``cache`` shares ``within`` passes."""
        size = len(text)
        matches: Iterable[re.Match[str]]
        if self.within is None:
            matches = self._matches(text, 0, size)
        else:
            windows = _windows(self.within, text, cache)
            if not windows:
                return []
            matches = chain.from_iterable(
                self._matches(text, a, min(size, b + _WINDOW_SLACK)) for a, b in windows
            )
        out: list[tuple[int, int]] = []
        locate = self.locate
        has_value = "value" in self.pattern.groupindex
        for match in matches:
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
        return out

    def _matches(self, text: str, pos: int, endpos: int) -> Iterator[re.Match[str]]:
        if not self.overlapping:
            return self.pattern.finditer(text, pos, endpos)
        return _overlapping(self.pattern, text, pos, endpos)


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


# Card, CN ID, SSN and most phone numbers have nine digits or more in a row, with at most single
# spaces, dots or dashes between them. One pass finds such runs; those rules run only inside them,
# instead of each entering the matcher at every digit of the text.
_LONG_NUMBER = _compile(r"[0-9](?<![0-9A-Za-z][0-9])(?:[ .\-]?[0-9]){8,}")


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


# -- e-mail: matched from the "@" (rare, so ``re`` skips to it in C), local part found walking back.
_EMAIL_DOMAIN = _compile(
    r"@[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?"
    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?)*\.[A-Za-z]{2,24}(?![A-Za-z0-9\-])"
)
_LOCAL_CHARS = frozenset(string.ascii_letters + string.digits + "._%+-")
_MAX_LOCAL = 64
_URL_USERINFO_BEFORE = re.compile(r"://[^\s/@]*:\Z")


def _locate_email(match: re.Match[str]) -> tuple[int, int] | None:
    text, at = match.string, match.start()
    start = at
    while start > 0 and text[start - 1] in _LOCAL_CHARS:
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


# -- phones
# China mobile: 1[3-9] + 9 digits, plain or 3-4-4; this is the one that hides behind CJK text.
_PHONE_CN = _compile(
    r"1(?<![0-9A-Za-z]1)(?<![0-9]\.1)[3-9][0-9](?:[0-9]{8}|(?P<sep>[ \-])[0-9]{4}(?P=sep)[0-9]{4})"
    + _NUMBER_END
)
# International with a plus: 7-15 digits (E.164) with single separators between them: a space,
# dot or dash, or a parenthesis with at most one of those beside it ("+1 (415) 555-2671",
# "+44 (0)20 7946 0958"). Two spaces end the number: they must not bridge into the next word.
_PHONE_INTL = _compile(
    r"\+(?<![0-9A-Za-z+]\+)[1-9](?:(?:[ .\-]|[ .\-]?\(|\)[ .\-]?)?[0-9]){6,14}" + _NUMBER_END
)
# North American: (415) 555-2671, 415-555-2671, 415.555.2671, 1-415-555-2671 (same separator).
_PHONE_NANP_PAREN = _compile(
    r"\((?<![0-9A-Za-z]\()[2-9][0-9]{2}\)[ .\-]?[2-9][0-9]{2}[ .\-][0-9]{4}(?![0-9A-Za-z])(?![.\-][0-9])"
)
_PHONE_NANP = _compile(
    r"[1-9](?<![0-9A-Za-z][1-9])(?<![0-9][.\-][1-9])"
    r"(?:(?<=1)(?P<cc>[ .\-])[2-9][0-9]{2}(?P=cc)|(?<=[2-9])[0-9]{2}(?P<sep>[ .\-]))"
    r"[2-9][0-9]{2}(?:(?P=cc)|(?P=sep))[0-9]{4}(?![0-9A-Za-z])(?![.\-][0-9])"
)
_ISO_DATE_SHAPE = re.compile(r"\+?[0-9]{4}-[0-9]{2}-[0-9]{2}")


def _not_a_date(value: str) -> bool:
    # "+2024-05-01" has the digits of a phone number; a date shape is not one.
    return _ISO_DATE_SHAPE.fullmatch(value) is None


# -- payment cards: 13-19 digits, plain or in groups of four (Amex 4-6-5, Diners 4-6-4), Luhn-valid.
# The first digit is 2-6 (Mastercard 2/5, Amex 3, Visa 4, Discover/UnionPay 6): this also keeps
# millisecond Unix timestamps (13 digits starting with 1 until 2033) out.
_CARD = _compile(
    r"[2-6](?<![0-9A-Za-z][2-6])(?<![0-9][.,\-][2-6])"  # not inside a longer number ("2026-05-23…")
    r"(?:[0-9]{12,18}"
    r"|[0-9]{3}(?P<sep>[ \-])[0-9]{4}(?P=sep)[0-9]{4}(?P=sep)[0-9]{1,4}(?:(?P=sep)[0-9]{1,3})?"
    r"|[0-9]{3}[ \-][0-9]{6}[ \-][0-9]{4,5})" + _NUMBER_END
)


def _locate_card(match: re.Match[str]) -> tuple[int, int] | None:
    value, start = match.group(), match.start()
    if card_ok(_digits(value)):
        return match.span()
    # "4111 1111 1111 1111 2 items": the last short group may not belong to the card.
    cut = max(value.rfind(" "), value.rfind("-"))
    if cut > 0 and card_ok(_digits(value[:cut])):
        return start, start + cut
    return None


# -- IBAN: country, check digits, BBAN; upper case, plain or in groups of four; mod-97 == 1.
_IBAN = _compile(
    r"[A-Z](?<![0-9A-Za-z][A-Z])[A-Z][0-9]{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?" + _NO_ALNUM_AFTER
)


def _locate_iban(match: re.Match[str]) -> tuple[int, int] | None:
    # The country fixes the length, so "GB82 WEST 1234 5698 7654 32 OK" is cut after "32" (the
    # regex took " OK" as one more group).
    value, start = match.group(), match.start()
    length = IBAN_LENGTHS.get(value[:2])
    if length is None:
        return None
    seen = 0
    for i, ch in enumerate(value):
        if ch != " ":
            seen += 1
        if seen == length:
            end = i + 1
            if end < len(value) and value[end] != " ":
                return None  # the IBAN would end inside a group
            return (start, start + end) if iban_ok(value[:end]) else None
    return None


# -- US Social Security number: AAA-GG-SSSS (or spaced), without the never-issued ranges.
_SSN = _compile(
    r"[0-8](?<![0-9A-Za-z][0-8])(?<![0-9][.\-][0-8])[0-9]{2}(?P<sep>[ \-])[0-9]{2}(?P=sep)[0-9]{4}"
    r"(?![0-9A-Za-z])(?!(?P=sep)[0-9])"
)


# -- China resident identity number: region, birth date, sequence, ISO 7064 mod 11-2 check char.
_CN_ID = _compile(
    r"[1-8](?<![0-9A-Za-z][1-8])[0-9]{5}(?:18|19|20)[0-9]{2}(?:0[1-9]|1[0-2])(?:0[1-9]|[12][0-9]|3[01])"
    r"[0-9]{3}[0-9Xx]" + _NUMBER_END
)


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
# One regex per provider prefix: a pattern that starts with a literal string is found by ``re``'s
# fast substring search. The "not inside a longer token" lookbehind comes right *after* the prefix:
# before it, it would switch that search off; without it, "sk-sk-sk-…" would be rescanned from
# every "sk-" (quadratic).
_TOKEN_CHARS = r"[A-Za-z0-9_\-]"


def _token(prefix: str, rest: str) -> re.Pattern[str]:
    return _compile(rf"{prefix}(?<!{_TOKEN_CHARS}{prefix}){rest}(?!{_TOKEN_CHARS})")


_API_KEYS = (
    _token("sk-", r"(?:proj-|ant-)?[A-Za-z0-9_\-]{20,}"),  # OpenAI, Anthropic
    _token("sk_", r"(?:live|test)_[A-Za-z0-9]{16,}"),  # Stripe secret key
    _token("rk_", r"(?:live|test)_[A-Za-z0-9]{16,}"),  # Stripe restricted key
    _token("AKIA", r"[A-Z0-9]{16}"),  # AWS access key id
    _token("ASIA", r"[A-Z0-9]{16}"),  # AWS temporary access key id
    _token("gh[pousr]_", r"[A-Za-z0-9]{36,}"),  # GitHub tokens
    _token("github_pat_", r"[A-Za-z0-9_]{22,}"),  # GitHub fine-grained tokens
    _token("xox[abposr]-", r"[A-Za-z0-9\-]{10,}"),  # Slack
    _token("AIza", r"[0-9A-Za-z_\-]{35}"),  # Google API key
)
_API_KEY_PREFIXES = (
    "sk-", "sk_", "rk_", "AKIA", "ASIA", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "xox", "AIza",
)  # fmt: skip
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
_ASSIGNMENT = _compile(r"[:=：](?<=[dDeEtTnNyYlLsS\"' \t码令钥牌][:=：])")
_ASSIGNMENT_VALUE = _compile(
    r"[ \t]*+(?:(?i:bearer|basic)[ \t]+(?P<auth>[A-Za-z0-9\-._~+/]{8,}=*)"
    r"|\"(?P<dq>[^\"\n]{1,512})\"|'(?P<sq>[^'\n]{1,512})'"
    r"|(?P<bare>[^\s\"',;&<>=\u3000-\u303f\u3400-\u9fff\uff00-\uffef]"
    r"[^\s\"',;&<>\u3000-\u303f\u3400-\u9fff\uff00-\uffef]{0,511}))"
)
_KEYWORDS = (
    "password", "passwd", "passphrase", "pwd", "secret", "token", "apikey", "credential", "credentials",
    "authorization", "密码", "口令", "密钥", "令牌", *(f"{a}{sep}{b}" for a, b in (
        ("secret", "key"), ("api", "key"), ("access", "key"), ("private", "key"), ("client", "secret"),
    ) for sep in ("_", "-", "")),
)  # fmt: skip
_ASSIGNMENT_GROUPS = ("auth", "dq", "sq", "bare")


def _locate_assignment(match: re.Match[str]) -> tuple[int, int] | None:
    text, start = match.string, match.start()
    # str.endswith over a tuple runs in C: much cheaper than a regex search per ":" and "=".
    key = text[max(0, start - 24) : start].rstrip(" \t").rstrip("\"'").lower()
    if not key.endswith(_KEYWORDS):
        return None
    value = _ASSIGNMENT_VALUE.match(text, match.end())
    if value is None:
        return None
    for group in _ASSIGNMENT_GROUPS:
        if value.start(group) >= 0:
            return value.span(group)
    return None


# "Bearer <token>" outside a header; a token has a digit somewhere ("the bearer of bad news").
_BEARER = _compile(
    r"[Bb](?<![A-Za-z][Bb])(?i:earer)[ \t]+(?=[A-Za-z\-._~+/]{0,256}[0-9])(?P<value>[A-Za-z0-9\-._~+/]{12,}=*)"
)
_URL_CREDENTIALS = _compile(r"://[^/\s:@]{1,256}+:(?P<value>[^/\s@]{1,256}+)@")
_SECRET_WORDS = (
    "pass", "pwd", "secret", "token", "key", "credential", "authorization", "bearer", "://",
    "密码", "口令", "密钥", "令牌",
)  # fmt: skip


def _secret_gate(text: str) -> bool:
    return _contains_any(text.lower(), _SECRET_WORDS)


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


def _money_gate(text: str) -> bool:
    if _contains_any(text, _MONEY_ASCII):
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
_PRESCREEN_NEEDLES = ("-----BEGIN", *_API_KEY_PREFIXES)
_PRESCREEN_PLAIN = ("@", "::", "eyJ", "AKIA", "ASIA", "AIza", "xox")
_ASSIGNMENT_CHARS = (":", "=", "：")


def might_hold_pii(text: str) -> bool:
    """False when no built-in detector can match anything in ``text`` (a cheap test, run first)."""
    return (
        _DIGIT_RE.search(text) is not None
        # Every needle but "@", "::", "eyJ", "AKIA", "ASIA", "AIza" and "xox" holds "-" or "_".
        or (("-" in text or "_" in text) and _contains_any(text, _PRESCREEN_NEEDLES))
        or _contains_any(text, _PRESCREEN_PLAIN)
        or text.count(":") >= 7  # an IPv6 address spelled with letters a-f only
        # A credential word matters only before ":" or "=" (a bearer token has a digit, a URL
        # password an "@": both caught above).
        or (_contains_any(text, _ASSIGNMENT_CHARS) and _contains_any(text.lower(), _SECRET_WORDS))
    )


def default_detectors() -> tuple[Detector, ...]:
    """The built-in detectors, most specific first (lower priority number wins a tie)."""
    return (
        Detector("PRIVATE_KEY", (Rule(_PRIVATE_KEY),), priority=0, secret=True, gate=_has_any("-----BEGIN")),
        Detector("JWT", (Rule(_JWT),), priority=1, secret=True, gate=_has_any("eyJ")),
        Detector(
            "API_KEY",
            tuple(Rule(pattern) for pattern in _API_KEYS),
            priority=2,
            secret=True,
            gate=_has_any(*_API_KEY_PREFIXES),
        ),
        Detector(
            "SECRET",
            (Rule(_ASSIGNMENT, _locate_assignment), Rule(_BEARER), Rule(_URL_CREDENTIALS)),
            priority=3,
            secret=True,
            gate=_secret_gate,
        ),
        Detector(
            "EMAIL",
            (Rule(_EMAIL_DOMAIN, _locate_email),),
            priority=4,
            normalize=str.lower,
            gate=_has_any("@"),
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
            (Rule(_CN_ID, _whole_if(cn_id_ok), _LONG_NUMBER, overlapping=True),),
            priority=6,
            normalize=_alnum_upper,
            gate=_has_digit,
        ),
        Detector(
            "CREDIT_CARD",
            (Rule(_CARD, _locate_card, _LONG_NUMBER, overlapping=True),),
            priority=7,
            normalize=_digits,
            gate=_has_digit,
        ),
        Detector(
            "SSN",
            (Rule(_SSN, _whole_if(ssn_ok), _LONG_NUMBER, overlapping=True),),
            priority=8,
            normalize=_digits,
            gate=_has_digit,
        ),
        Detector(
            "PHONE",
            (
                Rule(_PHONE_CN, within=_LONG_NUMBER, overlapping=True),
                Rule(_PHONE_INTL, _whole_if(_not_a_date)),
                Rule(_PHONE_NANP_PAREN),
                Rule(_PHONE_NANP, within=_LONG_NUMBER, overlapping=True),
            ),
            priority=9,
            normalize=_digits,
            gate=_has_digit,
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
