"""Rotating a store's identity key, against writing the same store (issue #38).

Run from the repository root::

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_key_rotation.py
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_key_rotation.py --entries 50000

One SQLite store (keyword only) of ``--entries`` entries, each with an e-mail in its session, role,
id, tags and metadata (seven sessions, so a few hundred sealed identities), written in batches of
1,000; then ``rotate_identity_key()`` re-seals and re-keys it. Prints both times and their ratio
(measured in the same run, so the machine's load counts for both), and how long unwrapping a key
exported under a passphrase takes (scrypt's cost: the price of each passphrase guess).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from harness_mem.identities import IdentityKey
from harness_mem.keyfiles import unwrap_key, wrap_key
from harness_mem.store import MemoryStore

EMAIL = "ada@example.com"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=20_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["HARNESS_MEM_CONFIG"] = str(Path(tmp) / "config")
        os.environ.pop("HARNESS_MEM_IDENTITY_KEY", None)
        with MemoryStore(Path(tmp) / "memory.db", embedder=None) as store:
            started = time.perf_counter()
            for first in range(0, args.entries, 1000):
                store.add_many([{"text": f"note about zz{i}zz", "id": f"n{i}-{EMAIL}", "session": f"user{i % 7}@example.com",
                                 "role": EMAIL if i % 2 else "user", "tags": ["+44 20 7946 0958", "plain"],
                                 "metadata": {"who": f"who{i % 50}@example.com"}}
                                for i in range(first, min(first + 1000, args.entries))])
            written = time.perf_counter() - started
            started = time.perf_counter()
            done = store.rotate_identity_key()
            rotated = time.perf_counter() - started
            assert store.get(f"n3-{EMAIL}").session == "user3@example.com"
        print(f"{args.entries} entries: written in {written:.1f} s, rotated in {rotated:.1f} s"
              f" ({done.changed} rows rewritten) — rotation / writing = {rotated / written:.2f}")
    key = IdentityKey(os.urandom(32))
    wrapped = wrap_key(key, "correct horse battery staple")
    started = time.perf_counter()
    unwrap_key(wrapped, "correct horse battery staple", source="bench")
    print(f"unwrapping an exported key (scrypt n=2^15, r=8, p=1): {1000 * (time.perf_counter() - started):.0f} ms")


if __name__ == "__main__":
    main()
