"""Redaction: PII and secrets replaced before anything is written.

- :class:`Redactor` — detectors and a policy applied to text (``redactor``); the store runs one on
  every write path;
- :class:`Policy` and :class:`Action` — what to do with each kind of finding (label, mask, hash,
  block, keep);
- :class:`RedactingMemory` (scrub, never drop) and :class:`GuardedMemory` (scrub, block, drop
  near-duplicates) wrap any :class:`~harness_mem.Memory` (``guarded``).
"""

from .guarded import GuardedMemory, RedactingMemory
from .redactor import (
    SECRET_KINDS,
    Action,
    Detector,
    Policy,
    Redaction,
    Redactor,
    Rule,
    ScrubbedValue,
    Span,
    cn_id_ok,
    default_detectors,
    iban_ok,
    luhn_ok,
    mask,
)

__all__ = [
    "SECRET_KINDS",
    "Action",
    "Detector",
    "GuardedMemory",
    "Policy",
    "RedactingMemory",
    "Redaction",
    "Redactor",
    "Rule",
    "ScrubbedValue",
    "Span",
    "cn_id_ok",
    "default_detectors",
    "iban_ok",
    "luhn_ok",
    "mask",
]
