"""Validity checks that tell a real identifier from a number of the same shape.

A regex can say "sixteen digits" but not "a card number": most digit runs in chat and logs are
order numbers, timestamps or ids. These functions apply the rules the issuers themselves use
(check digits, registry lengths, never-issued ranges, a real birth date) to a candidate the
detectors have already found. They are pure functions of a string, public so that tests and
benchmarks can generate valid and invalid values with the same rules.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from types import MappingProxyType

__all__ = [
    "IBAN_LENGTHS", "aadhaar_ok", "au_tfn_ok", "br_cpf_ok", "ca_sin_ok", "card_ok", "cn_id_ok", "de_tax_id_ok",
    "dk_cpr_ok", "es_dni_ok", "fr_insee_ok", "iban_ok", "it_fiscal_code_ok", "kr_rrn_ok", "luhn_ok", "mx_curp_ok",
    "nl_bsn_ok", "pl_pesel_ok", "se_personnummer_ok", "ssn_ok", "verhoeff_ok",
]  # fmt: skip


def luhn_ok(digits: str) -> bool:
    """The Luhn (mod 10) check of a string of ASCII digits."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def card_ok(digits: str) -> bool:
    """A payment card number (ASCII digits only): 13 to 19 of them, Luhn-valid."""
    return 13 <= len(digits) <= 19 and luhn_ok(digits)


# Lengths from the SWIFT IBAN registry; an unknown country is not an IBAN.
IBAN_LENGTHS: Mapping[str, int] = MappingProxyType(
    {
        "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22,
        "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DK": 18, "DO": 28,
        "EE": 20, "EG": 29, "ES": 24, "FI": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23,
        "GL": 18, "GR": 27, "GT": 28, "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26,
        "IT": 27, "JO": 30, "KW": 30, "KZ": 20, "LB": 28, "LC": 32, "LI": 21, "LT": 20, "LU": 20,
        "LV": 21, "MC": 27, "MD": 24, "ME": 22, "MK": 19, "MR": 27, "MT": 31, "MU": 30, "NL": 18,
        "NO": 15, "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "SA": 24,
        "SC": 31, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "ST": 25, "SV": 28, "TL": 23, "TN": 24,
        "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20,
    }
)  # fmt: skip


def iban_ok(iban: str) -> bool:
    """Registry length and the ISO 13616 mod-97 check of an IBAN (spaces and dashes ignored, any case)."""
    compact = iban.replace(" ", "").replace("-", "").upper()
    if IBAN_LENGTHS.get(compact[:2]) != len(compact) or not (compact.isascii() and compact.isalnum()):
        return False
    rearranged = compact[4:] + compact[:4]
    return int("".join(str(int(ch, 36)) for ch in rearranged)) % 97 == 1


def ssn_ok(value: str) -> bool:
    """A US Social Security number written AAA-GG-SSSS (any one-character separator) that was issuable."""
    # Area 000, 666 and 9xx, group 00 and serial 0000 are never issued (the SSN regex already
    # refuses an area starting with 9).
    return value[:3] not in ("000", "666") and value[4:6] != "00" and value[7:] != "0000"


_CN_ID_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
_CN_ID_CHECK = "10X98765432"


def cn_id_ok(value: str) -> bool:
    """The ISO 7064 mod 11-2 check character and the birth date of an 18-character CN ID."""
    if len(value) != 18 or not (value[:17].isascii() and value[:17].isdigit()):
        return False
    total = sum(int(ch) * w for ch, w in zip(value[:17], _CN_ID_WEIGHTS, strict=True))
    if _CN_ID_CHECK[total % 11] != value[17].upper():
        return False
    try:
        _dt.date(int(value[6:10]), int(value[10:12]), int(value[12:14]))
    except ValueError:
        return False
    return True


# ---- national identity and tax numbers ----------------------------------------------------------
# Each takes the value as the detectors found it, separators (spaces, dots, dashes) included, and
# says whether it is one that could have been issued. Where a number has no check digit (a Danish
# CPR number since 2007, a Korean RRN since 2020), the birth date it starts with is what is checked.


def _compact(value: str) -> str:
    return "".join(ch for ch in value if ch.isalnum()).upper()


def _date_ok(year: int, month: int, day: int) -> bool:
    try:
        _dt.date(year, month, day)
    except ValueError:
        return False
    return True


def ca_sin_ok(value: str) -> bool:
    """A Canadian Social Insurance Number: nine digits, Luhn-valid, not starting with 8 (never issued)."""
    digits = _compact(value)
    return len(digits) == 9 and digits.isdigit() and digits[0] != "8" and luhn_ok(digits)


def de_tax_id_ok(value: str) -> bool:
    """A German Steuer-ID: eleven digits, the first not 0, one digit of the first ten used twice or
    three times and no other repeated, and the ISO 7064 MOD 11,10 check digit."""
    digits = _compact(value)
    if len(digits) != 11 or not digits.isdigit() or digits[0] == "0":
        return False
    counts = sorted((digits[:10].count(d) for d in set(digits[:10])), reverse=True)
    if counts[0] not in (2, 3) or (len(counts) > 1 and counts[1] > 1):
        return False
    product = 10
    for ch in digits[:10]:
        total = (int(ch) + product) % 10 or 10
        product = total * 2 % 11
    return (11 - product) % 10 == int(digits[10])


def fr_insee_ok(value: str) -> bool:
    """A French social security number (NIR): sex, year, month, place, order, and a key of 97."""
    compact = _compact(value)
    if len(compact) != 15 or compact[0] not in "1278":
        return False
    month = int(compact[3:5]) if compact[3:5].isdigit() else 0
    if not (1 <= month <= 12 or 20 <= month <= 42 or 50 <= month <= 99):
        return False
    # Corsica's departments 2A and 2B count as 19 and 18 in the key.
    body = compact[:13].replace("2A", "19", 1) if compact[5:7] == "2A" else compact[:13].replace("2B", "18", 1)
    if not (body.isdigit() and compact[13:].isdigit()):
        return False
    return 97 - int(body) % 97 == int(compact[13:])


_DNI_LETTERS = "TRWAGMYFPDXBNJZSQVHLCKE"


def es_dni_ok(value: str) -> bool:
    """A Spanish DNI (eight digits and a letter) or NIE (X, Y or Z, seven digits, a letter): the
    letter is the number's remainder by 23."""
    compact = _compact(value)
    if len(compact) != 9:
        return False
    number = str("XYZ".index(compact[0])) + compact[1:8] if compact[0] in "XYZ" else compact[:8]
    return number.isdigit() and _DNI_LETTERS[int(number) % 23] == compact[8]


_CF_ODD = dict(zip("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ", (
    1, 0, 5, 7, 9, 13, 15, 17, 19, 21, 1, 0, 5, 7, 9, 13, 15, 17, 19, 21, 2, 4, 18, 20, 11, 3, 6, 8, 12, 14, 16,
    10, 22, 25, 24, 23,
), strict=True))  # fmt: skip


def it_fiscal_code_ok(value: str) -> bool:
    """An Italian codice fiscale: sixteen characters whose last is the check letter of the rest."""
    compact = _compact(value)
    if len(compact) != 16 or not compact.isascii():
        return False
    total = 0
    for i, ch in enumerate(compact[:15]):
        if i % 2 == 0:  # odd positions, counting from 1
            total += _CF_ODD[ch]
        else:
            total += int(ch) if ch.isdigit() else ord(ch) - 65
    return chr(65 + total % 26) == compact[15]


_VERHOEFF_D = (
    (0, 1, 2, 3, 4, 5, 6, 7, 8, 9), (1, 2, 3, 4, 0, 6, 7, 8, 9, 5), (2, 3, 4, 0, 1, 7, 8, 9, 5, 6),
    (3, 4, 0, 1, 2, 8, 9, 5, 6, 7), (4, 0, 1, 2, 3, 9, 5, 6, 7, 8), (5, 9, 8, 7, 6, 0, 4, 3, 2, 1),
    (6, 5, 9, 8, 7, 1, 0, 4, 3, 2), (7, 6, 5, 9, 8, 2, 1, 0, 4, 3), (8, 7, 6, 5, 9, 3, 2, 1, 0, 4),
    (9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
)
_VERHOEFF_P = (
    (0, 1, 2, 3, 4, 5, 6, 7, 8, 9), (1, 5, 7, 6, 2, 8, 3, 0, 9, 4), (5, 8, 0, 3, 7, 9, 6, 1, 4, 2),
    (8, 9, 1, 6, 0, 4, 3, 5, 2, 7), (9, 4, 5, 3, 1, 2, 6, 8, 7, 0), (4, 2, 8, 6, 5, 7, 3, 9, 0, 1),
    (2, 7, 9, 3, 8, 0, 6, 4, 1, 5), (7, 0, 4, 6, 9, 1, 3, 2, 5, 8),
)


def verhoeff_ok(digits: str) -> bool:
    """The Verhoeff check of a string of ASCII digits (its last digit the check digit)."""
    check = 0
    for i, ch in enumerate(reversed(digits)):
        check = _VERHOEFF_D[check][_VERHOEFF_P[i % 8][ord(ch) - 48]]
    return check == 0


def aadhaar_ok(value: str) -> bool:
    """An Indian Aadhaar number: twelve digits, the first 2-9, Verhoeff-valid."""
    digits = _compact(value)
    return len(digits) == 12 and digits.isdigit() and digits[0] not in "01" and verhoeff_ok(digits)


def br_cpf_ok(value: str) -> bool:
    """A Brazilian CPF: eleven digits, not all the same, with its two mod-11 check digits."""
    digits = _compact(value)
    if len(digits) != 11 or not digits.isdigit() or len(set(digits)) == 1:
        return False
    for size in (9, 10):
        total = sum(int(d) * (size + 1 - i) for i, d in enumerate(digits[:size]))
        if total * 10 % 11 % 10 != int(digits[size]):
            return False
    return True


def nl_bsn_ok(value: str) -> bool:
    """A Dutch BSN: nine digits passing the "eleven test" (the last digit weighted -1)."""
    digits = _compact(value)
    if len(digits) != 9 or not digits.isdigit() or digits == "000000000":
        return False
    total = sum(int(d) * (9 - i) for i, d in enumerate(digits[:8])) - int(digits[8])
    return total % 11 == 0


def se_personnummer_ok(value: str) -> bool:
    """A Swedish personnummer (or samordningsnummer, day + 60): [YY]YYMMDD, four digits, Luhn over
    the last ten, and a real date."""
    digits = "".join(ch for ch in value if ch.isdigit())
    if len(digits) == 12:
        century, digits = digits[:2], digits[2:]
    elif len(digits) == 10:
        century = "19"
    else:
        return False
    day = int(digits[4:6])
    day = day - 60 if day > 60 else day
    if not (_date_ok(int(century + digits[:2]), int(digits[2:4]), day) or _date_ok(2000 + int(digits[:2]),
                                                                                   int(digits[2:4]), day)):
        return False
    return luhn_ok(digits)


def au_tfn_ok(value: str) -> bool:
    """An Australian Tax File Number: eight or nine digits whose weighted sum is a multiple of 11."""
    digits = _compact(value)
    weights = {9: (1, 4, 3, 7, 5, 8, 6, 9, 10), 8: (10, 7, 8, 4, 6, 3, 5, 1)}.get(len(digits))
    if weights is None or not digits.isdigit():
        return False
    return sum(int(d) * w for d, w in zip(digits, weights, strict=True)) % 11 == 0


_CURP_VALUES = "0123456789ABCDEFGHIJKLMN\u00d1OPQRSTUVWXYZ"


def mx_curp_ok(value: str) -> bool:
    """A Mexican CURP: eighteen characters with a real birth date and the check digit of the rest."""
    compact = value.upper()
    if len(compact) != 18 or not compact[17].isdigit():
        return False
    if not (compact[4:10].isdigit() and _date_ok(2000, int(compact[6:8]), int(compact[8:10]))):
        return False
    total = 0
    for i, ch in enumerate(compact[:17]):
        at = _CURP_VALUES.find(ch)
        if at < 0:
            return False
        total += at * (18 - i)
    return (10 - total % 10) % 10 == int(compact[17])


def dk_cpr_ok(value: str) -> bool:
    """A Danish CPR number: DDMMYY and four digits, with a real date (no check digit since 2007)."""
    digits = _compact(value)
    return len(digits) == 10 and digits.isdigit() and _date_ok(2000, int(digits[2:4]), int(digits[:2]))


_PESEL_WEIGHTS = (1, 3, 7, 9, 1, 3, 7, 9, 1, 3)


def pl_pesel_ok(value: str) -> bool:
    """A Polish PESEL: YYMMDD (the month carries the century), four digits and a check digit."""
    digits = _compact(value)
    if len(digits) != 11 or not digits.isdigit():
        return False
    month = int(digits[2:4])
    century = {0: 1900, 1: 2000, 2: 2100, 3: 2200, 4: 1800}[month // 20]
    if not _date_ok(century + int(digits[:2]), month % 20, int(digits[4:6])):
        return False
    total = sum(int(d) * w for d, w in zip(digits, _PESEL_WEIGHTS, strict=False))
    return (10 - total % 10) % 10 == int(digits[10])


def kr_rrn_ok(value: str, *, checked: bool = True) -> bool:
    """A South Korean resident registration number: YYMMDD, the sex and century digit, six more;
    with ``checked``, also the check digit numbers issued before October 2020 end with."""
    digits = _compact(value)
    if len(digits) != 13 or not digits.isdigit() or digits[6] not in "12345678":
        return False
    century = 1900 if digits[6] in "1256" else 2000
    if not _date_ok(century + int(digits[:2]), int(digits[2:4]), int(digits[4:6])):
        return False
    if not checked:
        return True
    total = sum(int(d) * w for d, w in zip(digits[:12], (2, 3, 4, 5, 6, 7, 8, 9, 2, 3, 4, 5), strict=True))
    return (11 - total % 11) % 10 == int(digits[12])
