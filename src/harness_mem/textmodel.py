"""Deprecated: moved to :mod:`harness_mem.providers.textmodel` (this alias goes in the next release)."""

from ._moved import forward

__getattr__ = forward(__name__, "harness_mem.providers.textmodel")
