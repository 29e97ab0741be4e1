"""Sync across machines: the log of operations a store exchanges with its other devices.

What travels is an append-only log of immutable, content-addressed operations
(:mod:`~harness_mem.sync.operations`), stamped by a hybrid logical clock
(:mod:`~harness_mem.sync.clock`) and written by the storage seam in the same transaction as the write
they record (:mod:`~harness_mem.sync.outbox`). The design, and what each part is held to:
``docs/design/sync.md``.
"""
