"""Guessing a pseudonym from a copy of the file, with no identity key (issue #38).

Run from the repository root::

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_pseudonym_guesses.py
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_pseudonym_guesses.py --guesses 20000

Two stores, each with one entry whose session is a phone number: an older one (keyed by the secret
in its file alone, made as older versions made it) and a new one (keyed again outside the file,
:mod:`harness_mem.pseudonyms`). Each file is copied into a directory of its own and attacked the way
anyone holding the copy could: read ``settings.redaction.secret``, then sweep phone numbers through
the project's own :meth:`~harness_mem.redaction.Redactor.pseudonymise`, in order from ``+44 20 7946
0000`` and then the neighbouring exchanges, until one gives a stored pseudonym. The identity key is
in a config directory the attack never reads.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path

from harness_mem.redaction import Redactor
from harness_mem.store import MemoryStore

PHONE = "+44 20 7946 0958"


def make(path: Path, *, older: bool) -> None:
    MemoryStore(path, embedder=None).close()
    if older:  # what older versions wrote: no mark that the pseudonyms are keyed outside
        with sqlite3.connect(path) as conn:
            conn.execute("DELETE FROM settings WHERE key = 'pseudonyms.keyed'")
    with MemoryStore(path, embedder=None, rekey=False) as store:
        store.add("called about the invoice", session=PHONE)


def guesses(limit: int) -> list[str]:
    exchanges = [6, 5, 7, 4, 8, 3, 9, 2, 1, 0]
    return [f"+44 20 794{d} {n:04d}" for d in exchanges for n in range(10_000)][:limit]


def attack(path: Path, limit: int) -> str:
    copy = path.parent / "copy" / path.name
    copy.parent.mkdir()
    shutil.copy(path, copy)
    with sqlite3.connect(copy) as conn:
        [(secret,)] = conn.execute("SELECT value FROM settings WHERE key = 'redaction.secret'").fetchall()
        stored = {row[0] for row in conn.execute("SELECT session FROM entries")}
    redactor = Redactor.default(secret=secret)
    began = time.perf_counter()
    for tries, guess in enumerate(guesses(limit), 1):
        if redactor.pseudonymise(guess).text in stored:
            return f"found {guess} after {tries:,} guesses in {time.perf_counter() - began:.2f} s"
    return f"nothing after {limit:,} guesses in {time.perf_counter() - began:.2f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--guesses", type=int, default=100_000)
    args = parser.parse_args()
    import os

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["HARNESS_MEM_CONFIG"] = str(Path(tmp) / "config")  # the key lives here, never read by the attack
        for name, older in (("older", True), ("new", False)):
            folder = Path(tmp) / name
            folder.mkdir()
            make(folder / "memory.db", older=older)
            print(f"{name} store: {attack(folder / 'memory.db', args.guesses)}")


if __name__ == "__main__":
    main()
