"""Deprecated: moved to :mod:`harness_mem.redaction` (this alias goes in the next release)."""

from ._moved import forward

__getattr__ = forward(__name__, "harness_mem.redaction")
