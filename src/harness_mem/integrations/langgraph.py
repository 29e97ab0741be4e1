"""LangGraph's long-term memory on a harness-mem store: :class:`HarnessMemStore`, a ``BaseStore``.

::

    store = HarnessMemStore(MemoryStore("agent.db"))   # or HarnessMemStore("agent.db")
    graph = builder.compile(store=store)

How an item is kept: one entry (kind ``note``, source ``langgraph``) per (namespace, key).

- **Namespace.** The tuple is written as a path, each label followed by ``/`` (a ``/`` or ``\\`` in
  a label escaped with ``\\``), behind ``langgraph:``: ``("users", "ada")`` is ``langgraph:users/ada/``.
  That path is the entry's ``session`` (so ``list_namespaces`` reads the distinct sessions), and the
  path of every leading part is one of its tags (``langgraph:users/``, ``langgraph:users/ada/``,
  and ``langgraph`` for the empty prefix), so a prefix search is a tag filter answered in SQL.
  Tags, not a session prefix: tags and sessions are identity values the redactor pseudonymises
  whole, and an equality lookup pseudonymises its key the same way, so a prefix holding an e-mail
  still finds its items, where a prefix cut out of a longer pseudonymised string might not. ``/``
  rather than ``.`` (which LangGraph forbids in a label, so it needs no escape) because the
  e-mail detector reads dots back into an address's local part: a key ``ada@example.com`` after
  ``users.bob.`` would swallow the path into its pseudonym, where ``/`` stops it.
- **Key.** The entry id is the session path followed by the key, so ids (unique per store
  namespace) never clash between two namespaces sharing a key; a search gives the key back as
  the id without that path.
- **Value.** The dict itself is the entry's ``metadata`` (so ``filter`` is a metadata filter on
  its fields, answered in SQL) and the entry's content is its indexed text: the whole value as
  JSON, or with ``index=[fields]`` those fields' texts. The redactor scrubs the content (labels);
  a value's strings and ints that it changes (an e-mail, a phone number, an int that reads as one)
  are stored as their pseudonyms with the raw values sealed, and come back as they were put
  (:func:`harness_mem.rows.stored_metadata`).
- **Times.** ``created_at`` is kept from the first put of the key (a put replaces the entry,
  ``on_conflict="replace"``, and is given the old entry's ``created_at``); ``updated_at`` is the
  entry's, moved by each put.
- **TTL.** ``ttl`` (minutes) is the entry's ``ttl_days``; a read that refreshes renews it. Expired
  items are never returned or listed (``omit_expired`` always holds); the store deletes them once a
  day on open, or on :meth:`HarnessMemStore.sweep_ttl`.

What differs from LangGraph's own stores, on purpose or for now:

- A ``query`` is a harness-mem recall (hybrid with an embedder, keyword without), so only matching
  items come back, ranked; ``InMemoryStore`` without embeddings ignores the query and lists every
  item unscored.
- **A score is on LangGraph's scale.** With an embedder it is the query's cosine similarity to the
  item (best of its passages), the number an embedding ``InMemoryStore`` gives with the same model,
  so a threshold picked for it keeps the same items; the order is still hybrid's, so a score may
  rise down the list. harness-mem's own calibrated score (:mod:`harness_mem.scores`: 0.5 reads like
  an answer) puts a correct paraphrase that shares no word with the query near 0.05, below any
  threshold a LangGraph user would pick for cosines of 0.2-0.3. A keyword-only store has no
  cosine, and scores with the calibrated one.
- ``index=False`` (or fields that give no text) keeps the item out of every query search, by meaning
  and by keyword alike; ``get`` and a search without a query still find it (an embedding
  ``InMemoryStore`` adds such items unscored after the scored ones).
- Filters compare as JSON does (``True`` is not ``1``; strings by code point, never as numbers), a
  dotted filter key names a nested field, and a list is not a filter value. A value the redactor
  changes is looked for by its pseudonym (so the raw value finds it; a range on it means nothing).
- A search without a query lists items in creation order (the first put of each key).
- Labels and keys that the redactor changes (a phone number as a label, an e-mail as a key; an
  e-mail cannot be a label, LangGraph refuses its dots) are stored as their pseudonyms and come
  back from ``search`` and ``list_namespaces`` as they were put, opened with the store's identity
  key (:mod:`harness_mem.identities`); where the key is missing, as the pseudonyms
  (``<PHONE:…>``, ``<EMAIL:…>``), which match conditions on the raw labels all the same.
- A batch runs its reads first, then its writes (the last put of a key wins) in one transaction,
  as LangGraph's stores do; the embedder, when there is one, runs inside that transaction.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Literal

import anyio.to_thread
from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    get_text_at_path,
    tokenize_path,
    validate_op_namespace,
)

from ..errors import InvalidInputError, NotFoundError
from ..models import Entry, Hit
from ..sessions import MAX_PAGE
from ..store import MemoryStore

__all__ = ["MARK", "UNINDEXED", "HarnessMemStore", "decode_namespace", "encode_namespace"]

#: The tag every item carries, the head of its session path, and its entries' source.
MARK = "langgraph"
#: The tag of an item written with ``index=False``: no query search returns it.
UNINDEXED = "langgraph:unindexed"
_HEAD = MARK + ":"
_MINUTES_PER_DAY = 1440.0


def encode_namespace(namespace: Sequence[str]) -> str:
    """A namespace as its session path: ``("users", "ada")`` → ``langgraph:users/ada/``.

    Each label ends with ``/``, so the path of a prefix is a prefix of the path (``a/`` never
    starts ``ab/``), and a ``/`` or ``\\`` inside a label is escaped with ``\\``."""
    return _HEAD + "".join(label.replace("\\", "\\\\").replace("/", "\\/") + "/" for label in namespace)


def decode_namespace(path: str) -> tuple[str, ...]:
    """The namespace of a session path (:func:`encode_namespace` read back)."""
    labels: list[str] = []
    label: list[str] = []
    escaped = False
    for char in path.removeprefix(_HEAD):
        if escaped:
            label.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "/":
            labels.append("".join(label))
            label = []
        else:
            label.append(char)
    return tuple(labels)


class HarnessMemStore(BaseStore):
    """A LangGraph ``BaseStore`` whose items are entries of a harness-mem :class:`MemoryStore`.

    :param store: the store to keep items in, or its path (then this opens it, and :meth:`close`
        closes it).
    :param index_fields: what the content of an item put with ``index=None`` is: its texts at
        these paths (LangGraph's path syntax; ``"$"``, the default, is the whole value as JSON).
    :param ttl: LangGraph's TTL settings: ``default_ttl`` (minutes) for puts that name none and
        ``refresh_on_read`` for reads that do not say (the base class applies both).
    """

    supports_ttl: bool = True

    def __init__(self, store: MemoryStore | str | os.PathLike[str], *, index_fields: Sequence[str] = ("$",),
                 ttl: TTLConfig | None = None) -> None:
        self.owns_store = not isinstance(store, MemoryStore)
        #: The harness-mem store the items are entries of.
        self.store: MemoryStore = MemoryStore(store) if not isinstance(store, MemoryStore) else store
        if isinstance(index_fields, str) or not index_fields:
            raise InvalidInputError("index_fields is a list of paths, such as ['$'] or ['text']")
        self.index_fields = tuple(index_fields)
        self.ttl_config = ttl
        # One SQLite connection, one caller at a time: abatch's worker threads, sync callers and any
        # other adapter on the same store alike.
        self.lock = self.store.lock

    def close(self) -> None:
        """Close the harness-mem store if this opened it."""
        if self.owns_store:
            self.store.close()

    def sweep_ttl(self) -> int:
        """Delete expired entries now (every namespace of the file); returns how many went."""
        with self.lock:
            return self.store.purge_expired()

    # ---- batches -------------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run the operations: reads first, in order, then the writes (the last put of each key)."""
        ops = list(ops)
        for op in ops:
            validate_op_namespace(op)
            if isinstance(op, PutOp) and not op.namespace:
                raise InvalidNamespaceError("Namespace cannot be empty.")
        results: list[Result] = []
        puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        with self.lock:
            for op in ops:
                if isinstance(op, GetOp):
                    results.append(self._get(op))
                elif isinstance(op, SearchOp):
                    results.append(self._search(op))
                elif isinstance(op, ListNamespacesOp):
                    results.append(self._list_namespaces(op))
                elif isinstance(op, PutOp):
                    puts[(tuple(op.namespace), op.key)] = op
                    results.append(None)
                else:
                    raise ValueError(f"Unknown operation type: {type(op)}")
            if puts:
                self._write(list(puts.values()))
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`batch` in a worker thread, so the event loop never waits on the file."""
        ops = list(ops)
        return await anyio.to_thread.run_sync(self.batch, ops)

    # ---- the operations --------------------------------------------------------------------------

    def _refresh(self, asked: bool) -> bool:
        return asked and not self.store.read_only

    def _get(self, op: GetOp) -> Item | None:
        try:
            entry = self.store.get(encode_namespace(op.namespace) + op.key, refresh_ttl=self._refresh(op.refresh_ttl))
        except NotFoundError:
            return None
        if MARK not in entry.tags:
            return None  # an entry someone else wrote under an id that looks like ours
        created, updated = _times(entry)
        return Item(value=entry.metadata, key=op.key, namespace=tuple(op.namespace),
                    created_at=created, updated_at=updated)

    def _search(self, op: SearchOp) -> list[SearchItem]:
        if op.limit <= 0:
            return []
        prefix = encode_namespace(op.namespace_prefix) if op.namespace_prefix else MARK
        filters: dict[str, Any] = {"tags": [prefix], "metadata": _metadata_filter(op.filter)}
        refresh = self._refresh(op.refresh_ttl)
        if op.query:
            # explain: each hit's cosine, the score a LangGraph user compares (see the module docstring)
            hits = self.store.recall(op.query, op.limit, offset=op.offset, exclude_tags=[UNINDEXED],
                                     refresh_ttl=refresh, explain=True, **filters)
            return [_search_item(hit.entry, _similarity(hit)) for hit in hits]
        entries = self.store.list(limit=op.limit, offset=op.offset, refresh_ttl=refresh, **filters)
        return [_search_item(entry, None) for entry in entries]

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        given = list(op.match_conditions or ())
        # A namespace read back without the identity key holds its labels' pseudonyms: the
        # conditions are tried as given and with their labels as stored.
        stored = [MatchCondition(c.match_type, tuple(self._stored_label(label) for label in c.path)) for c in given]
        found: set[tuple[str, ...]] = set()
        offset = 0
        while True:
            page = self.store.sessions(limit=MAX_PAGE, offset=offset)
            for summary in page:
                if not summary.session.startswith(_HEAD):
                    continue
                namespace = decode_namespace(summary.session)
                if not (all(_matches(c, namespace) for c in given) or all(_matches(c, namespace) for c in stored)):
                    continue
                # sessions() counts expired entries until they are purged; an item must be live.
                if self.store.count(session=summary.session, tags=[MARK]):
                    found.add(namespace if op.max_depth is None else namespace[: op.max_depth])
            if len(page) < MAX_PAGE:
                break
            offset += MAX_PAGE
        return sorted(found)[op.offset: op.offset + op.limit]

    def _stored_label(self, label: str) -> str:
        """A label of a match condition as a stored namespace holds it (its pseudonym, when the
        redactor changes it), so that a condition on an e-mail label still matches."""
        return label if label == "*" else (self.store.scope.key(label) or label)

    def _write(self, puts: list[PutOp]) -> None:
        with self.store.transaction():
            items: list[dict[str, Any]] = []
            for op in puts:
                path = encode_namespace(op.namespace)
                entry_id = path + op.key
                if op.value is None:
                    self.store.delete(entry_id)
                    continue
                try:
                    first: datetime | None = self.store.get(entry_id).created_at
                except NotFoundError:
                    first = None
                value = dict(op.value)
                content, indexed = self._content(value, op.index)
                tags = [MARK, *(encode_namespace(op.namespace[:depth]) for depth in range(1, len(op.namespace) + 1))]
                if not indexed:
                    tags.append(UNINDEXED)
                items.append({
                    "content": content, "kind": "note", "session": path, "tags": tags, "source": MARK,
                    "metadata": value, "id": entry_id, "created_at": first,
                    "ttl_days": op.ttl / _MINUTES_PER_DAY if op.ttl is not None else None,
                })
            if items:
                self.store.add_many(items, on_conflict="replace")

    def _content(self, value: dict[str, Any], index: Literal[False] | list[str] | None) -> tuple[str, bool]:
        """The entry's text and whether a query may find it: the indexed fields' texts, or (with
        ``index=False`` or fields that hold no text) the whole value as JSON, unsearchable."""
        whole = json.dumps(value, sort_keys=True, ensure_ascii=False)
        if index is False:
            return whole, False
        texts: list[str] = []
        for path in self.index_fields if index is None else index:
            texts += get_text_at_path(value, path if path == "$" else tokenize_path(path))
        text = "\n".join(texts)
        return (text, True) if text.strip() else (whole, False)


def _times(entry: Entry) -> tuple[datetime, datetime]:
    return entry.created_at, entry.updated_at or entry.created_at


def _similarity(hit: Hit) -> float:
    """The hit's cosine similarity to the query (what an embedding ``InMemoryStore`` scores), or
    its calibrated score where recall compared no vectors (a keyword-only store)."""
    cosine = (hit.components or {}).get("semantic", {}).get("score")
    return hit.score if cosine is None else float(cosine)


def _search_item(entry: Entry, score: float | None) -> SearchItem:
    session = entry.session or _HEAD
    key = entry.id.removeprefix(session)  # stored id and session carry the same pseudonyms
    created, updated = _times(entry)
    return SearchItem(namespace=decode_namespace(session), key=key, value=entry.metadata,
                      created_at=created, updated_at=updated, score=score)


def _metadata_filter(spec: dict[str, Any] | None) -> dict[str, Any] | None:
    """LangGraph's filter as harness-mem's metadata filter: the same shape (``{"field": value}``,
    ``{"field": {"$gt": 3}}``, nested dicts), so this only refuses what the latter cannot say."""
    if not spec:
        return None
    if not isinstance(spec, dict):
        raise InvalidInputError("a search filter is a dict of fields to values or to {operator: value}")

    def check(value: Any, where: str) -> None:
        if isinstance(value, list | tuple):
            raise InvalidInputError(f"search filter {where}: a list is not a filter value (compare its items one by one)")
        if isinstance(value, dict):
            for key, inner in value.items():
                if key != "$in":  # $in takes a list of values, and harness-mem answers it
                    check(inner, f"{where}.{key}")

    for field, wanted in spec.items():
        check(wanted, str(field))
    return spec


def _matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    """Whether a namespace meets a prefix or suffix condition (``*`` matches any one label)."""
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    labels = namespace[: len(path)] if condition.match_type == "prefix" else namespace[len(namespace) - len(path):]
    return all(wanted in ("*", label) for wanted, label in zip(path, labels, strict=True))
