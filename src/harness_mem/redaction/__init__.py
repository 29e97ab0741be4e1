"""Redaction: PII and secrets replaced before anything is written.

- :class:`Redactor` — detectors and a policy applied to text, with its results :class:`Redaction`,
  :class:`Span` and :class:`ScrubbedValue` (``redactor``); the store runs one on every write path;
  :func:`cut_point` says where a text can be cut short without leaving half a value behind;
- :class:`Policy` and :class:`Action` — what to do with each kind of finding (label, mask, hash,
  block, keep) (``policy``);
- :class:`Detector` and :class:`Rule` — what to look for, and :func:`default_detectors`, the
  built-in set (``detectors``);
- :func:`luhn_ok`, :func:`iban_ok`, :func:`cn_id_ok` — the checks that tell a real identifier from
  a look-alike (``checksums``);
- :class:`RedactingMemory` (scrub, never drop) and :class:`GuardedMemory` (scrub, block, drop
  near-duplicates) wrap any :class:`~harness_mem.Memory` (``guarded``).
"""

from .checksums import cn_id_ok, iban_ok, luhn_ok
from .detectors import Detector, Rule, default_detectors
from .guarded import GuardedMemory, RedactingMemory
from .policy import SECRET_KINDS, Action, Policy
from .redactor import Redaction, Redactor, ScrubbedValue, Span, cut_point, mask

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
    "cut_point",
    "default_detectors",
    "iban_ok",
    "luhn_ok",
    "mask",
]
