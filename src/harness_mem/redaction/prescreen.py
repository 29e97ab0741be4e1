"""A cheap proof that an identifier holds nothing a built-in detector could find.

Identity fields (an entry's id, session, role and tags; a run's and a job's id) are pseudonymised
(:meth:`~harness_mem.redaction.Redactor.pseudonymise`), and caller-given ids are mostly unique, so the
redactor's cache does not help: every one went through the whole detector table. Most are short runs
of letters, digits, "_" and "-" ("t1234", "run-7f3a", "s_42"), in which almost no detector can match.
:func:`identifier_is_clean` says so in a few C-level checks, and the redactor then skips the table.

**The argument, detector by detector** (the default table, :func:`.detectors.default_detectors`).
A value is cleared only when every character is an ASCII letter, a digit, "_" or "-". Then:

* needs a character outside that alphabet, so cannot match: PRIVATE_KEY (" PRIVATE KEY"), JWT ("."),
  the Slack webhook ("."), the provider tokens with a "." or ":" in them (SendGrid, Vault, Doppler,
  Dynatrace, Google access tokens, Telegram, Terraform, Discord), every SECRET rule (":", "=", "：",
  a space or tab, "'", "/", "<" or CJK), cookies (":"), EMAIL ("@", or the brackets and "%" of an
  obfuscated one), full-width cards, PASSPORT in CJK, PHONE with "+" or "(", IPv4 ("."), IPv6 (":"),
  MONEY after a currency sign and the CJK currency words;
* a MySQL password "-pS3cret" needs "mysql" before it on its line and a space (or the start) right
  before its "-", so cannot match either; a value starting with "-" is still never cleared;
* PASSPORT: needs the word ("assport"), looked for;
* every rule that runs inside the long-number windows (CN_ID, CREDIT_CARD, SSN, PHONE digits and
  bare PHONE and SSN): a window is nine digits joined by at most three separators at a time, which
  in this alphabet are "_" and "-": looked for (:data:`_LONG_NUMBER`);
* IBAN: two letters, two digits, then (after at most one "-") four letters or digits: looked for;
* NATIONAL_ID: the numbers with nine digits or more lie in the long-number windows above; of the
  shorter ones, an 8-digit TFN needs its word ("tfn", looked for), and the rest have seven digits and
  a capital (a DNI, a NIE), two capitals and three pairs of digits (a National Insurance number),
  four capitals and four digits (a PAN, a CURP), or six capitals, two digits or omocode letters and
  a month letter (a codice fiscale): looked for (:data:`_SHORT_NATIONAL_ID`);
* MONEY with a currency code ("USD100", "100USD"): the codes, looked for;
* API_KEY with a provider prefix: the prefixes (:data:`.provider_keys.PROVIDER_NEEDLES`), looked
  for in values of 15 characters or more (the shortest key, "xoxb-" and ten more, has 15); the AWS
  secret key: 40 characters in a row, so a value that long is never cleared.

**Checked against the table.** That argument holds for the table it was made for. :data:`REVIEWED`
is that table's fingerprint (each detector's kind and its rules' patterns and windows, the only things
the argument reads); when :func:`.detectors.default_detectors` no longer has it (a detector added, a
pattern changed), :func:`identifier_is_clean` clears nothing, so redaction stays complete and only
gets slower, and ``tests/mem/test_prescreen.py`` fails until the argument is reviewed and the
fingerprint updated. The same tests run every detector's own positive examples, in identifier form,
past the prescreen.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

from .detectors import Detector, default_detectors
from .provider_keys import PROVIDER_NEEDLES

__all__ = ["REVIEWED", "identifier_is_clean", "reviewed", "table_fingerprint"]

#: The fingerprint (:func:`table_fingerprint`) of the default detector table the argument above was
#: made for.
REVIEWED = "55df7cf685c725a0"

_ALPHABET = re.compile(r"[A-Za-z0-9_\-]*")
# What the detectors that can match in that alphabet need: a long-number window (nine digits, "_" and
# "-" between them), the start of an IBAN, a currency code. (Three searches cost less than one
# alternation, which ``re`` tries at every position.)
_LONG_NUMBER = re.compile(r"[0-9](?:[_\-]{0,3}[0-9]){8}")
_IBAN_START = re.compile(r"[A-Za-z]{2}[0-9]{2}-?[A-Za-z0-9]{4}")
_CURRENCY_CODE = re.compile(r"USD|CNY|EUR|RMB|HKD|JPY|GBP|INR|AUD|CAD|CHF|SGD|KRW|TWD")
_SHORT_NATIONAL_ID = re.compile(
    r"[0-9]{7}-?[A-Z]|[A-Z]{2}(?:-?[0-9]{2}){3}|[A-Z]{4}[0-9]{4}|[A-Z]{6}[0-9LMNP-V]{2}[ABCDEHLMPRST]"
)
# Every literal a provider token holds that can be written in the alphabet, and the length of the
# shortest key.
_KEY_PREFIXES = tuple(needle for needle in PROVIDER_NEEDLES if _ALPHABET.fullmatch(needle))
_SHORTEST_KEY = 15
_AWS_SECRET_CHARS = 40


def table_fingerprint(detectors: Iterable[Detector]) -> str:
    """A short digest of what the argument depends on: each detector's kind, its rules' patterns
    (with their flags) and the windows they run in, in table order."""
    parts: list[str] = []
    for detector in detectors:
        parts.append(detector.kind)
        for rule in detector.rules:
            within = rule.within.pattern if rule.within is not None else ""
            parts.append(f"{rule.pattern.flags}\x1f{rule.pattern.pattern}\x1f{within}")
    return hashlib.sha256("\x1e".join(parts).encode()).hexdigest()[:16]


def reviewed() -> bool:
    """Whether the default detector table is the one the argument was made for."""
    return _REVIEWED_NOW


_REVIEWED_NOW = table_fingerprint(default_detectors()) == REVIEWED


def identifier_is_clean(value: str) -> bool:
    """True only when no default detector can find anything in ``value`` (False says nothing).

    For identifiers: anything but letters, digits, "_" and "-" is left to the detectors.
    """
    if not _REVIEWED_NOW or not value.isascii():
        return False
    if not value.isalnum() and _ALPHABET.fullmatch(value) is None:  # isalnum: "_" or "-" aside
        return False
    lowered = value.lower()
    if "assport" in lowered or "tfn" in lowered or value.startswith("-"):
        return False
    if (
        _LONG_NUMBER.search(value) is not None
        or _IBAN_START.search(value) is not None
        or _CURRENCY_CODE.search(value) is not None
        or _SHORT_NATIONAL_ID.search(value) is not None
    ):
        return False
    size = len(value)
    if size < _SHORTEST_KEY:
        return True
    if size >= _AWS_SECRET_CHARS:
        return False
    for prefix in _KEY_PREFIXES:  # noqa: SIM110 -- a plain loop: cheaper than all() over a generator
        if prefix in value:
            return False
    return True
