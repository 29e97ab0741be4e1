"""National identity and tax numbers: the shapes countries write them in, and when a shape is enough.

Each :class:`NationalId` is one country's number: a pattern for how it is written, the check that
tells an issued number from a look-alike (:mod:`.checksums`), and — for numbers that are nothing
but digits with a weak check or none — the words that must come right before it. A UK National
Insurance number ("QQ 12 34 56 C"), a codice fiscale or a CURP has a shape no other value has and
is taken on its own; nine digits that pass the Dutch eleven test are far more often an order
number, so a BSN is taken only after "BSN" or "burgerservicenummer".

The patterns keep to the rules of :mod:`.detectors`: ASCII boundaries ("no letter or digit right
before", stated as a lookbehind after the first character so that ``re`` rejects a start inside a
run at once), bounded quantifiers, nothing that backtracks.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from .checksums import (
    aadhaar_ok,
    au_tfn_ok,
    br_cpf_ok,
    ca_sin_ok,
    de_tax_id_ok,
    dk_cpr_ok,
    es_dni_ok,
    fr_insee_ok,
    it_fiscal_code_ok,
    kr_rrn_ok,
    mx_curp_ok,
    nl_bsn_ok,
    pl_pesel_ok,
    se_personnummer_ok,
)

__all__ = ["NATIONAL_IDS", "NATIONAL_ID_WORDS", "NationalId"]

_END = r"(?![0-9A-Za-z])"
_SEP = r"[ .\-]?"


def _digits_first(body: str) -> re.Pattern[str]:
    """A number that starts with a digit, not inside a longer number or word."""
    return re.compile(rf"[0-9](?<![0-9A-Za-z][0-9])(?<![0-9][.,\-/][0-9]){body}{_END}", re.ASCII)


def _letters_first(first: str, body: str) -> re.Pattern[str]:
    return re.compile(rf"{first}(?<![0-9A-Za-z]{first}){body}{_END}", re.ASCII)


@dataclass(frozen=True)
class NationalId:
    """One country's number. ``words`` (a regex, matched case-insensitively) must end within a few
    characters before the number when given; without it the shape and check are enough."""

    name: str
    pattern: re.Pattern[str]
    check: Callable[[str], bool]
    words: re.Pattern[str] | None = None
    #: Every value has nine digits or more, one separator (space, dot or dash) at most between two:
    #: the detectors then run the pattern only inside their long-number windows.
    long_number: bool = False

    def __call__(self, match: re.Match[str]) -> tuple[int, int] | None:
        """The locate function of the number's rule."""
        if not self.check(match.group()):
            return None
        start = match.start()
        if self.words is not None and self.words.search(match.string, max(0, start - 64), start) is None:
            return None
        return match.span()


def _said(words: str) -> re.Pattern[str]:
    # The words, then at most 24 characters with no digit or line break ("number:", "is", "nº").
    return re.compile(rf"(?i:(?<![a-z])(?:{words})(?![a-z]))[^0-9\n]{{0,24}}\Z")


def _shape_is_enough(value: str) -> bool:
    """The check of a number with no check digit whose shape no other value has."""
    return True


def _nir_cpf_or_rrn_ok(value: str) -> bool:
    return fr_insee_ok(value) or br_cpf_ok(value) or kr_rrn_ok(value)


def _kr_rrn_unchecked(value: str) -> bool:
    return kr_rrn_ok(value, checked=False)


#: What the number's name is written as, for every number that needs it: the detectors' gate looks
#: for these (lower case) before running those rules.
NATIONAL_ID_WORDS = (
    "sin", "social insurance", "nas", "assurance sociale", "steuer", "idnr", "tax", "tin", "aadha", "uid",
    "आधार", "cpf", "bsn", "burgerservice", "sofi", "personnummer", "personnr", "pnr", "samordningsnummer",
    "tfn", "cpr", "pesel", "rrn", "resident registration", "주민", "identifikationsnummer", "national id",
)  # fmt: skip

NATIONAL_IDS: tuple[NationalId, ...] = (
    # Shapes of their own: taken wherever they are written. (A National Insurance number may start
    # with any letter but D, F, I, U and V, and QQ, the prefix of the examples HMRC publishes, too.)
    NationalId(
        "UK National Insurance number",
        re.compile(
            r"[A-CEGHJ-TW-Z](?<![0-9A-Za-z][A-Z])[A-CEGHJ-NP-TW-Z](?<!BG|GB|NK|KN|TN|NT|ZZ)"
            r"(?:[0-9]{6}|(?P<sep>[ \-])[0-9]{2}(?P=sep)[0-9]{2}(?P=sep)[0-9]{2}(?P=sep)?)[A-D]" + _END,
            re.ASCII,
        ),
        _shape_is_enough,
    ),
    # Three long shapes in one pattern (one scan of the digits instead of three): a French NIR
    # "1 85 05 78 006 084 36", a Brazilian CPF "529.982.247-25", a Korean RRN "850709-1234567". Each
    # check refuses the others' lengths, so "any of the three" checks each match by its own rules.
    NationalId("French NIR, Brazilian CPF or Korean RRN", _digits_first(
        r"(?:(?<=[1278])(?P<sep> ?)[0-9]{2}(?P=sep)[0-9]{2}(?P=sep)(?:[0-9]{2}|2[AB])(?P=sep)[0-9]{3}(?P=sep)"
        r"[0-9]{3}(?P=sep)[0-9]{2}|[0-9]{2}\.[0-9]{3}\.[0-9]{3}-[0-9]{2}|[0-9]{5}-[1-8][0-9]{6})"
    ), _nir_cpf_or_rrn_ok, long_number=True),
    NationalId("Spanish DNI", _digits_first(r"[0-9]{7}-?[A-Z]"), es_dni_ok),
    NationalId("Spanish NIE", _letters_first("[XYZ]", r"-?[0-9]{7}-?[A-Z]"), es_dni_ok),
    NationalId("Italian codice fiscale", _letters_first(
        "[A-Z]", r"[A-Z]{5}[0-9LMNP-V]{2}[ABCDEHLMPRST][0-9LMNP-V]{2}[A-Z][0-9LMNP-V]{3}[A-Z]"
    ), it_fiscal_code_ok),
    NationalId("Mexican CURP", _letters_first(
        "[A-Z]", r"[AEIOUX][A-Z]{2}[0-9]{6}[HMX][A-Z]{2}[B-DF-HJ-NP-TV-Z]{3}[A-Z0-9][0-9]"
    ), mx_curp_ok),
    NationalId("Indian PAN", _letters_first("[A-Z]", r"[A-Z]{2}[PCHFATBLJG][A-Z][0-9]{4}[A-Z]"), _shape_is_enough),
    # Digits only, with a weak check or none: taken after their name.
    NationalId("South Korean RRN (since 2020)", _digits_first(r"[0-9]{5}-?[1-8][0-9]{6}"), _kr_rrn_unchecked,
               _said(r"rrn|resident registration(?: number| no\.?)?|주민등록번호|주민번호"), long_number=True),
    NationalId("Brazilian CPF", _digits_first(r"[0-9]{10}"), br_cpf_ok, _said("cpf"), long_number=True),
    NationalId("Canadian SIN", _digits_first(r"[0-9]{2}(?P<sep>[ \-]?)[0-9]{3}(?P=sep)[0-9]{3}"), ca_sin_ok,
               _said(r"sin|social insurance(?: number| no\.?)?|nas|num[ée]ro d'assurance sociale"), long_number=True),
    NationalId("German tax id", _digits_first(r"[0-9](?P<sep> ?)[0-9]{3}(?P=sep)[0-9]{3}(?P=sep)[0-9]{3}"),
               de_tax_id_ok,
               _said(r"steuer-?id|steuer-?identifikationsnummer|steuerliche identifikationsnummer|"
                     r"identifikationsnummer|idnr|tax[ \-]?id|tin"), long_number=True),
    NationalId("Indian Aadhaar", _digits_first(r"[0-9]{3}(?P<sep>[ \-]?)[0-9]{4}(?P=sep)[0-9]{4}"), aadhaar_ok,
               _said(r"aadhaa?r(?: number| no\.?| card)?|uid(?:ai)?|आधार"), long_number=True),
    NationalId("Dutch BSN", _digits_first(r"[0-9]{3}(?P<sep>[ .\-]?)[0-9]{2}(?P=sep)[0-9]{3}"), nl_bsn_ok,
               _said(r"bsn|burgerservicenummer|sofi-?nummer"), long_number=True),
    NationalId("Swedish personnummer", _digits_first(r"[0-9]{5}(?:[0-9]{2})?[\-+]?[0-9]{4}"), se_personnummer_ok,
               _said(r"personnummer|personnr|pnr|samordningsnummer")),
    NationalId("Australian TFN", _digits_first(r"[0-9]{2}(?P<sep>[ \-]?)[0-9]{3}(?P=sep)[0-9]{2,3}"), au_tfn_ok,
               _said(r"tfn|tax file number|tax file no\.?")),
    NationalId("Danish CPR number", _digits_first(r"[0-9]{5}-?[0-9]{4}"), dk_cpr_ok,
               _said(r"cpr(?:-?(?:nummer|nr\.?|number))?|personnummer"), long_number=True),
    NationalId("Polish PESEL", _digits_first(r"[0-9]{10}"), pl_pesel_ok, _said("pesel"), long_number=True),
)

