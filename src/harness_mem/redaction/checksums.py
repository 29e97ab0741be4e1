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

__all__ = ["IBAN_LENGTHS", "card_ok", "cn_id_ok", "iban_ok", "luhn_ok", "ssn_ok"]


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
