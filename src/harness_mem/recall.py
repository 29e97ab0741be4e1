"""Recall: the keyword, semantic and hybrid rankings of one store, and the hits they make.

:class:`Recall` is what :meth:`MemoryStore.recall <harness_mem.store.MemoryStore.recall>` runs. Each
mode is a ranking of internal pks:

- keyword: BM25 over the context index (``keyword.py`` makes the query's terms, so no query can
  be a syntax error; ``bm25.py`` ranks over what the engine's keyword index answers);
- semantic: cosine similarity through the engine's vector index, filters applied before the top-k
  cut, then best-of each candidate's passages (``passages.py``: a long entry's later windows);
- hybrid: every candidate of either ranking gets both features, then ``fusion.py`` scores them.

Only the final top ``k`` are read back as entries (a rerank reads its 30, and they are reused). A
query's embedding is cached per store: agents ask the same thing repeatedly.
"""

from __future__ import annotations

import json
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from . import fusion, keyword, passages, scores, sourced
from .bm25 import KeywordIndex
from .decisions import states_decision
from .errors import EmbedderError, InvalidInputError, MissingVectorsWarning
from .filters import Filters, Selection, make_filters
from .models import Entry, Hit, counted, now_ms
from .passages import Scored
from .providers.embeddings import giving_vectors
from .providers.reference import INSTALL_HINT
from .rerank import RERANK_DEPTH, PieceCache, TokenEmbedder, maxsim
from .rows import entry_from_row
from .storage import Scope, Storage

Mode = Literal["keyword", "semantic", "hybrid"]

QUERY_CACHE_SIZE = 256
# The most hits one recall returns: far more than any prompt holds, and well inside SQLite's integers.
MAX_RECALL_K = 1_000_000


class Recall:
    """The recall half of a :class:`~harness_mem.store.MemoryStore`: rankings over its storage."""

    def __init__(self, storage: Storage, scope: Scope, shared: Sequence[str] = ()) -> None:
        self.storage = storage
        self.scope = scope
        #: Namespaces (as stored) read beside the scope's own, ranked with it in one list.
        self.shared = tuple(shared)
        self.vectors_complete = False  # every entry has a vector: known true until the file changes
        self._vectors_checked_at: tuple[int, int] | None = None
        self._vector_counts: tuple[bool, int, int] | None = None  # (bound, entries, missing) at that check
        self._query_vectors: OrderedDict[str, npt.NDArray[np.float32]] = OrderedDict()
        # One per keyword lane (see Storage.keywords): each keeps its own words' counts.
        self.keywords = KeywordIndex()
        self.derived_keywords = KeywordIndex()
        self.pieces = PieceCache()  # word pieces of what reranks read (rerank.py)

    def __call__(
        self,
        query: str,
        k: int = 10,
        mode: Mode | None = None,
        *,
        kind: str | Sequence[str] | None = None,
        role: str | None = None,
        session: str | None = None,
        session_prefix: str | None = None,
        tags: Sequence[str] | str = (),
        any_tags: Sequence[str] | str = (),
        since: str | datetime | None = None,
        until: str | datetime | None = None,
        explain: bool = False,
        query_vector: npt.NDArray[np.float32] | None = None,
        strict: bool = False,
        include_superseded: bool = False,
        exact: bool = False,
        derived: bool | None = None,
        as_of: str | datetime | None = None,
        exclude_sessions: Sequence[str] | str = (),
        exclude_kinds: Sequence[str] | str = (),
        exclude_tags: Sequence[str] | str = (),
        metadata: Mapping[str, Any] | None = None,
        rerank: bool = False,
    ) -> list[Hit]:
        """The ``k`` entries most relevant to ``query``, best first (``[]`` is not an error).

        ``mode`` is ``"keyword"`` (FTS5 BM25), ``"semantic"`` (embedding cosine) or ``"hybrid"`` (both,
        fused); the default is hybrid when the store has an embedder, else keyword. Filters apply
        before the top-``k`` cut: a filtered query still returns ``k`` hits when ``k`` entries match.
        Any text is a valid query: it is never passed raw to FTS5. ``query_vector`` is the query's
        embedding when the caller already has it (see :meth:`embed_queries`).

        While some entries have no vector yet (stored without a model), semantic and hybrid recall
        answer with the vectors there are, hybrid matching the rest by keyword, and say so with a
        :class:`MissingVectorsWarning`; ``strict=True`` refuses instead. This is checked before
        any model is loaded, and when no entry has a vector, hybrid loads none.

        On a large file, keyword ranking scores exactly only a query's rarer words and adds the
        common ones per candidate (see :mod:`harness_mem.bm25`); ``exact=True`` has FTS5 score
        every word on every match.

        ``rerank=True`` orders the top :data:`~harness_mem.rerank.RERANK_DEPTH` of any mode again by
        matching the question's word pieces against each one's (:mod:`harness_mem.rerank`): better
        first hits, at the cost of a model pass over them. It needs the embedding model.
        """
        if not isinstance(query, str):
            raise InvalidInputError("a query must be a string")
        mode = self._resolve_mode(mode)
        if isinstance(k, bool) or not isinstance(k, int) or k > MAX_RECALL_K:
            raise InvalidInputError(f"k must be a whole number of hits, at most {MAX_RECALL_K:,}, not {k!r:.40}")
        if k <= 0:
            return []
        filters = make_filters(kind, role, session, session_prefix, tags, any_tags, since, until, include_superseded,
                               derived, as_of, exclude_sessions, exclude_kinds, exclude_tags, metadata)
        if rerank:
            self._check_rerank()
        named: list[str] = []
        # Binding the model may write (an older file's upgrade): before the snapshot.
        if mode != "keyword" and not self._vectors_usable(mode, strict):
            mode = "keyword"
        pending: _Background | None = None
        if mode != "keyword" or rerank:
            named = self._named_roles(query)
        if mode != "keyword":
            asked = fusion.strip_names(query, named)
            if query_vector is None and query.strip():
                query_vector = self._query_vectors.get(asked)  # a repeated query: no thread, no model
            if query_vector is None and query.strip():
                # The query is embedded in a thread while SQLite ranks by keyword: a cold process
                # loads its model in the time the keyword index takes (both release the GIL).
                pending = _Background(self._query_vector, asked)
        # Ranking and reading the winners are several queries: one snapshot of the file for all of
        # them, so an entry deleted meanwhile by another connection cannot vanish between the two.
        try:
            with self.storage.snapshot():
                return self._hits(query, k, mode, filters, named, explain, query_vector, pending, exact, rerank)
        finally:
            if pending is not None:
                pending.join()

    def _hits(
        self,
        query: str,
        k: int,
        mode: Mode,
        filters: Filters,
        named: list[str],
        explain: bool,
        query_vector: npt.NDArray[np.float32] | None,
        pending: _Background | None = None,
        exact: bool = False,
        rerank: bool = False,
    ) -> list[Hit]:
        wanted = max(k, RERANK_DEPTH) if rerank else k  # what the ranking hands to the reranker
        terms = keyword.query_terms(query)
        if terms:  # the hits' coverage asks which terms each holds: read with their rows, where it can be
            self._keyword_lane(derived=bool(filters.derived))[1].will_hold(terms)
        sourcing = mode != "keyword" and self._ranks_with_sources(filters)
        ranking = self._ranking(query, mode, filters, named, query_vector, pending, exact,
                                max(wanted, fusion.CANDIDATES) if sourcing else wanted, whole=sourcing)
        query_vector, rankings, features, matched = (ranking.vector, ranking.rankings, ranking.features,
                                                     ranking.matched)
        ranked = ranking.ranked
        lifted: dict[int, int] = {}
        turns: _Ranking | None = None
        if sourcing:
            ranked, lifted, turns = self._with_sources(query, mode, filters, ranking, named, exact)
        ranked = ranked[:wanted]
        interactions: dict[int, float] = {}
        entries: dict[int, Entry] = {}
        if rerank:
            keyword_scores = ({pk: c.keyword for pk, c in features.items()} if mode == "hybrid"
                              else dict(rankings.get("keyword", [])))
            ranked = self._reranked(query, ranked, keyword_scores, named, matched, interactions, entries)
        ranked = ranked[:k]
        pks = [pk for pk, _ in ranked]
        entries.update(self._entries_by_pk([pk for pk in pks if pk not in entries]))
        covered = self._coverages(query, pks, filters)
        similarities = ({pk: features[pk].cosine for pk in pks if pk in features} if mode == "hybrid"
                        else dict(ranking.ranked) if mode == "semantic" else {})
        if lifted and turns is not None:
            # An entry ranked by the turn it cites is scored by that turn's evidence where it is stronger.
            by_turn = {pk: lifted[pk] for pk in pks if pk in lifted}
            turn_covered = self._coverages(query, list(set(by_turn.values())), turns.filters)
            for pk, turn in by_turn.items():
                covered[pk] = max(covered.get(pk, 0.0), turn_covered.get(turn, 0.0))
                if mode != "keyword":
                    similarities[pk] = max(similarities.get(pk, 0.0), turns.similarity(turn, mode))
        relevance = scores.calibrated(mode, pks, covered, similarities)
        positions = {name: {pk: rank for rank, (pk, _) in enumerate(order, start=1)}
                     for name, order in rankings.items()} if explain else {}
        hits = []
        for position, ((pk, order_score), score) in enumerate(zip(ranked, relevance, strict=True), start=1):
            components: dict[str, dict[str, float | int | None]] | None = None
            if explain:
                # Each retriever's rank (None: outside its list) and score; hybrid also shows the
                # speaker prior and its fused score, and scores the candidates a list missed (cosine
                # from the stored vector). Coverage is what the hit's score was calibrated from.
                components = {name: {"rank": positions[name].get(pk), "score": dict(rankings[name]).get(pk, 0.0)}
                              for name in rankings}
                if pk in lifted and turns is not None:
                    components["sources"] = {"rank": None, "score": dict(turns.ranked).get(lifted[pk], 0.0)}
                if pk in features:
                    components["keyword"]["score"] = features[pk].keyword
                    components["semantic"]["score"] = features[pk].cosine
                    components["speaker"] = {"rank": None, "score": fusion.SPEAKER_PRIOR if features[pk].named else 0.0}
                    if features[pk].decides:
                        components["decision"] = {"rank": None, "score": fusion.DECISION_PRIOR}
                    components["hybrid"] = {"rank": position, "score": order_score}
                if pk in interactions:
                    components["rerank"] = {"rank": position, "score": interactions[pk]}
                components["coverage"] = {"rank": None, "score": covered.get(pk, 0.0)}
            entry = entries[pk]
            hits.append(Hit(entry=entry, score=score, snippet=_snippet(entry.content, query, matched.get(pk)),
                            components=components))
        return hits

    def _ranking(
        self,
        query: str,
        mode: Mode,
        filters: Filters,
        named: list[str],
        query_vector: npt.NDArray[np.float32] | None,
        pending: _Background | None,
        exact: bool,
        wanted: int,
        *,
        whole: bool = False,
    ) -> _Ranking:
        """The ``wanted`` best (pk, score) of ``mode`` (``whole``: every candidate it scored)."""
        rankings: dict[str, list[tuple[int, float]]] = {}
        depth = fusion.depth(wanted) if mode == "hybrid" else wanted
        if mode in ("keyword", "hybrid"):
            # Keyword scores are cheap past the top few (FTS5 ranks every match anyway), and hybrid
            # needs them for the semantic candidates too: take them deep.
            rankings["keyword"] = self._keyword_ranking(
                query, fusion.KEYWORD_DEPTH if mode == "hybrid" else depth, filters, exact
            )
        if pending is not None:
            query_vector = pending.result()
        matched: dict[int, Scored] = {}  # the passage that won an entry's cosine, for its snippet
        if mode == "semantic" and query.strip():  # its hits' coverage weighs the words (hybrid's ranking counts them)
            index, source = self._keyword_lane(derived=bool(filters.derived))
            index.will_weigh(source, keyword.query_terms(query))
        if mode in ("semantic", "hybrid"):
            # Hybrid takes the semantic list as fusion candidates, each scored by its exact cosine:
            # it needs the near neighbours in, not their exact order (see VectorIndex.search). Both
            # modes look at the passages of up to PASSAGE_CANDIDATES more of the entries the search
            # compared by first window, so that a long entry's later window can lift it into the list.
            found = self._semantic_ranking(query, depth, filters, query_vector, exact_order=mode == "semantic",
                                           extra=passages.PASSAGE_CANDIDATES)
            if query_vector is not None:
                best = self._best_of(query_vector, dict(found), matched)
                found = sorted(best.items(), key=lambda item: (-item[1], item[0]))
            rankings["semantic"] = found[:depth]
        features: dict[int, fusion.Candidate] = {}
        if mode == "hybrid":
            assert query_vector is not None or not rankings["semantic"]
            ranked, features = self._fuse(query, rankings["keyword"], rankings["semantic"], query_vector, named,
                                          MAX_RECALL_K if whole else wanted, matched)
        else:
            ranked = rankings[mode] if whole else rankings[mode][:wanted]
        return _Ranking(filters, ranked, rankings, features, matched, query_vector)

    def _ranks_with_sources(self, filters: Filters) -> bool:
        """Whether this recall ranks summaries with their sources (sourced.py): one that may return a
        summary but no turn, by meaning (hybrid or semantic: a turn's score and a summary's are on
        one scale there; BM25 in the turns' keyword index and in the derived one are not). Where
        turns rank too (an agent's recall over every lane), a turn that matches is a hit of its
        own, not a reason to lift the summary around it."""
        if filters.derived is False or sourced.SOURCE_SHARE <= 0 or not self._sourced_kinds(filters):
            return False
        asked = [filters.kind] if isinstance(filters.kind, str) else filters.kind
        if filters.derived is None and (asked is None or "turn" in asked) and "turn" not in filters.exclude_kinds:
            return False
        return filters.derived is True or any(self.storage.has_derived(namespace) for namespace in self.namespaces)

    @staticmethod
    def _sourced_kinds(filters: Filters) -> tuple[str, ...]:
        """The kinds this recall may return that rank with their sources."""
        asked = [filters.kind] if isinstance(filters.kind, str) else filters.kind
        return tuple(kind for kind in sourced.KINDS
                     if (asked is None or kind in asked) and kind not in filters.exclude_kinds)

    def _with_sources(self, query: str, mode: Mode, filters: Filters, ranking: _Ranking, named: list[str],
                      exact: bool) -> tuple[list[tuple[int, float]], dict[int, int], _Ranking]:
        """``ranking`` with each summary ranked by the better of its own words and the turns it cites
        (see sourced.py); the entries a cited turn lifted, by that turn; the turns' ranking."""
        # The turns that could be a summary's sources: those of its sessions and times, whatever the
        # summary's own tags or metadata.
        turn_filters = filters.model_copy(update={
            "derived": False, "kind": "turn", "role": None, "tags": (), "any_tags": (), "exclude_tags": (),
            "exclude_kinds": (), "metadata": ()})
        turns = self._ranking(query, mode, turn_filters, named, ranking.vector, None, exact, fusion.CANDIDATES)
        top = turns.ranked[:fusion.CANDIDATES]
        now = now_ms()
        citing = filters.model_copy(update={"kind": self._sourced_kinds(filters)})
        citations = [pair for namespace in self.namespaces
                     for pair in self.storage.citing([pk for pk, _ in top], Selection(citing, namespace, now))]
        found = sourced.ranked_with_sources(ranking.ranked, dict(top), citations)
        return found.ranked, found.lifted_by, turns

    @property
    def namespaces(self) -> tuple[str, ...]:
        """Every namespace this recall reads, as stored: the scope's own first."""
        return (self.scope.namespace, *(n for n in self.shared if n != self.scope.namespace))

    def _coverages(self, query: str, pks: list[int], filters: Filters) -> dict[int, float]:
        """Each hit's coverage of the query's terms (see scores.py), its words weighed by how rare
        they are in the lane asked (what was said, unless only derived entries were)."""
        terms = keyword.query_terms(query)
        if not terms or not pks:
            return {}
        index, source = self._keyword_lane(derived=bool(filters.derived))
        rows, _ = source.stats()
        weights = [scores.term_weight(rows, df) for df in index.document_frequencies(source, terms, rows)]
        return {pk: scores.coverage_of(held, weights) for pk, held in source.holding(pks, terms).items()}

    def _keyword_lane(self, *, derived: bool) -> tuple[KeywordIndex, Any]:
        """A keyword lane (its df cache and its source): what consolidation derived, or the rest
        (their own statistics each, see :attr:`Storage.keywords`)."""
        return (self.derived_keywords, self.storage.derived_keywords) if derived else (self.keywords, self.storage.keywords)

    def _keyword_lanes(self, filters: Filters) -> list[tuple[KeywordIndex, Any]]:
        """The keyword lanes a recall reads: one, or both where no lane is asked and this namespace
        holds anything derived."""
        if filters.derived is not None:
            return [self._keyword_lane(derived=filters.derived)]
        if any(self.storage.has_derived(namespace) for namespace in self.namespaces):
            return [self._keyword_lane(derived=False), self._keyword_lane(derived=True)]
        return [self._keyword_lane(derived=False)]

    def _resolve_mode(self, mode: str | None) -> Mode:
        if mode is None:
            return "hybrid" if self.storage.embedder is not None else "keyword"
        if mode not in ("keyword", "semantic", "hybrid"):
            raise InvalidInputError(f"unknown recall mode {mode!r} — use keyword, semantic or hybrid")
        if mode != "keyword" and self.storage.embedder is None and self.storage.keyword_only:
            raise EmbedderError(
                f"{mode} recall needs vectors, and this store is keyword-only — give it vectors with"
                f" {giving_vectors()}, or use --mode keyword"
            )
        if mode != "keyword" and self.storage.embedder is None:
            raise EmbedderError(
                f"{mode} recall needs an embedding model and none is available"
                f" — {INSTALL_HINT}, or use --mode keyword"
            )
        return mode  # type: ignore[return-value]

    def _keyword_ranking(self, query: str, k: int, filters: Filters, exact: bool = False) -> list[tuple[int, float]]:
        """(pk, score) by BM25, best first; higher is better (see bm25.py)."""
        terms = keyword.query_terms(query)
        if not terms:
            return []
        now = now_ms()
        # Each lane and namespace ranked apart, then merged by score: a lane's statistics are the
        # same whichever namespace it ranks (all those the connection may read), so its scores compare.
        lanes = self._keyword_lanes(filters)
        rankings = [index.ranking(source, terms, k, Selection(filters, namespace, now), exact=exact)
                    for namespace in self.namespaces for index, source in lanes]
        return rankings[0] if len(rankings) == 1 else merged([hit for found in rankings for hit in found], k)

    def _fuse(
        self,
        query: str,
        keyword_ranking: list[tuple[int, float]],
        semantic_ranking: list[tuple[int, float]],
        vector: npt.NDArray[np.float32] | None,
        named: list[str],
        k: int,
        matched: dict[int, Scored],
    ) -> tuple[list[tuple[int, float]], dict[int, fusion.Candidate]]:
        """Give every candidate of either ranking both features, then score them (see fusion.py).

        Returns the top ``k`` and every candidate's features (for ``explain``); a candidate whose
        cosine came from a later passage has it in ``matched``.
        """
        keyword_scores, cosines = dict(keyword_ranking), dict(semantic_ranking)
        # Candidates: the keyword top CANDIDATES and every semantic hit. A semantic hit outside the
        # keyword ranking's KEYWORD_DEPTH scores 0 for keyword: that far down, its share is tiny.
        pks = list(dict.fromkeys([*(pk for pk, _ in keyword_ranking[: fusion.CANDIDATES]), *cosines]))
        if not pks:
            return [], {}
        uncosined = [pk for pk in pks if pk not in cosines]
        if uncosined and vector is not None:
            # The semantic list is best-of already; the keyword candidates it missed are matched here.
            cosines.update(self._best_of(vector, self.storage.cosines(vector, uncosined), matched))
        candidates = self._candidates(query, pks, keyword_scores, cosines, named)
        return fusion.fuse(candidates, k, gathering=fusion.gathers(query)), {c.pk: c for c in candidates}

    def _candidates(self, query: str, pks: list[int], keyword_scores: Mapping[int, float],
                    similarities: Mapping[int, float], named: list[str]) -> list[fusion.Candidate]:
        """The pks as fusion candidates: their keyword and semantic scores (0 where missing), whether
        the query names their speaker, their session, and whether they decide what the query asks."""
        lowered = {name.lower() for name in named}
        deciding = self._deciding(pks) if fusion.asks_decision(query) else set()
        return [fusion.Candidate(pk, keyword_scores.get(pk, 0.0), similarities.get(pk, 0.0),
                                 bool(lowered) and role is not None and role.lower() in lowered, session, pk in deciding)
                for pk, role, session in self.storage.speakers(pks)]

    def _deciding(self, pks: list[int]) -> set[int]:
        """The pks that record a decision: a fact consolidation filed as one, or a text that says one."""
        return {pk for pk, row in self.storage.rows(pks).items()
                if json.loads(row.metadata or "{}").get("fact_kind") == "decision" or states_decision(row.content)}

    def _reranked(self, query: str, ranked: list[tuple[int, float]], keyword_scores: Mapping[int, float],
                  named: list[str], matched: Mapping[int, Scored], interactions: dict[int, float],
                  entries: dict[int, Entry]) -> list[tuple[int, float]]:
        """``ranked`` with its top RERANK_DEPTH fused again, MaxSim in place of the cosine (see rerank.py);
        each reranked pk's MaxSim goes in ``interactions``, and the entries it read in ``entries``."""
        top = [pk for pk, _ in ranked[:RERANK_DEPTH]]
        if not top or not query.strip():
            return ranked
        entries.update(self._entries_by_pk(top))
        texts = []
        for pk in top:  # the window a later passage matched in, else the start the model reads
            entry, passage = entries[pk], matched.get(pk)
            content = entry.content[passage.start:passage.stop] if passage is not None else entry.content
            texts.append(passages.embedding_text(content, entry.role))
        assert isinstance(self.storage.embedder, TokenEmbedder)
        asked, *pieces = self.pieces.pieces(self.storage.embedder, [fusion.strip_names(query, named), *texts])
        interactions.update((pk, maxsim(asked, found)) for pk, found in zip(top, pieces, strict=True))
        candidates = self._candidates(query, top, keyword_scores, interactions, named)
        return fusion.fuse(candidates, len(top), gathering=fusion.gathers(query)) + ranked[RERANK_DEPTH:]

    def _check_rerank(self) -> None:
        """Refuse a rerank this store's embedder cannot make, before anything is ranked."""
        if self.storage.embedder is None:
            raise EmbedderError(
                "rerank matches word pieces with the embedding model, and this store has none"
                + (" (it is keyword-only)" if self.storage.keyword_only else f" — {INSTALL_HINT}")
            )
        if not isinstance(self.storage.embedder, TokenEmbedder):
            raise EmbedderError(f"rerank needs word-piece vectors, which the embedder"
                                f" {getattr(self.storage.embedder, 'name', 'in use')!r} does not give")

    def _best_of(self, vector: npt.NDArray[np.float32], cosines: dict[int, float],
                 matched: dict[int, Scored]) -> dict[int, float]:
        """``cosines`` (first windows) best-of each entry's passages; the passages that won go in ``matched``."""
        best = passages.best_of(cosines, self.storage.passage_cosines(vector, list(cosines)))
        matched.update((pk, passage) for pk, (_, passage) in best.items() if passage is not None)
        return {pk: cosine for pk, (cosine, _) in best.items()}

    def _named_roles(self, query: str) -> list[str]:
        """The roles (speakers) of this namespace that ``query`` names, as stored: by name, or, for a
        chat's ``user`` and ``assistant``, by its pronouns (:func:`fusion.pronoun_role`)."""
        words = fusion.role_words(query)
        if not words:
            return []
        return list(dict.fromkeys(role for namespace in self.namespaces
                                  for role in self.storage.roles_named(namespace, words)))

    def _semantic_ranking(
        self, query: str, k: int, filters: Filters, vector: npt.NDArray[np.float32] | None = None,
        exact_order: bool = True, extra: int = 0,
    ) -> list[tuple[int, float]]:
        """(pk, cosine similarity), best first, among the entries that pass ``filters``
        (``exact_order``, ``extra``: see :meth:`Storage.nearest <harness_mem.storage.Storage.nearest>`)."""
        if not query.strip():
            return []
        assert vector is not None  # the caller embedded every non-blank query
        now = now_ms()
        found = [hit for namespace in self.namespaces for hit in self.storage.nearest(
            vector, k, Selection(filters, namespace, now), exact_order=exact_order, extra=extra)]
        return found if len(self.namespaces) == 1 else merged(found, k + extra)

    def _vectors_usable(self, mode: Mode, strict: bool) -> bool:
        """Whether vectors can answer (False: none can; hybrid then runs on keywords alone).

        Entries without a vector are refused under ``strict``, else reported by a warning.
        """
        version = self.storage.data_version()
        if self.vectors_complete and self._vectors_checked_at == version:
            return True
        if self._vectors_checked_at == version and self._vector_counts is not None:
            bound, total, missing = self._vector_counts  # unchanged file: no need to count again
        else:
            bound, total, missing = self._vector_counts = self.storage.vector_counts()
        self.vectors_complete, self._vectors_checked_at = bound and missing == 0, version
        if not missing:
            return bound
        if strict or (mode == "semantic" and missing == total):
            raise EmbedderError(
                f"no vector yet for {counted(missing, 'entry', 'entries')} (stored without an embedder) — run `{REINDEX}`"
                " to embed them, or use --mode keyword"
            )
        found_by = "keyword matching alone" if mode == "hybrid" else "no semantic search"
        warnings.warn(MissingVectorsWarning(
            f"no vector yet for {missing:,} of {counted(total, 'entry', 'entries')}, so {found_by} can find them"
            f" — run `{REINDEX}`"
            " to embed them"
        ), stacklevel=4)
        return missing < total

    def _query_vector(self, query: str) -> npt.NDArray[np.float32]:
        """The query's embedding; recent ones are cached (agents ask the same thing repeatedly)."""
        cached = self._query_vectors.get(query)
        if cached is not None:
            self._query_vectors.move_to_end(query)
            return cached
        assert self.storage.embedder is not None
        vector: npt.NDArray[np.float32] = np.asarray(self.storage.embedder.embed([query])[0], dtype=np.float32)
        self._query_vectors[query] = vector
        if len(self._query_vectors) > QUERY_CACHE_SIZE:
            self._query_vectors.popitem(last=False)
        return vector

    def embed_queries(self, queries: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embeddings of many queries in one model call (to pass to :meth:`recall` as ``query_vector``).

        Each is embedded as recall would: without the speaker names it mentions (see fusion.py).
        """
        if self.storage.embedder is None:
            raise EmbedderError(f"no embedding model is available — {INSTALL_HINT}")
        return self.storage.embedder.embed([fusion.strip_names(q, self._named_roles(q)) for q in queries])

    def _entries_by_pk(self, pks: list[int]) -> dict[int, Entry]:
        return {pk: entry_from_row(row) for pk, row in self.storage.rows(pks).items()}


@dataclass(frozen=True)
class _Ranking:
    """One mode's ranking under some filters, with what it learnt on the way."""

    filters: Filters
    ranked: list[tuple[int, float]]  # (pk, score), best first
    rankings: dict[str, list[tuple[int, float]]]  # each retriever's own
    features: dict[int, fusion.Candidate]  # hybrid: every candidate's keyword and cosine
    matched: dict[int, Scored]  # the later passage that won an entry's cosine
    vector: npt.NDArray[np.float32] | None  # the query's embedding, once known

    def similarity(self, pk: int, mode: Mode) -> float:
        """The cosine this ranking knows for ``pk`` (0 when it has none)."""
        if mode == "hybrid":
            return self.features[pk].cosine if pk in self.features else 0.0
        return dict(self.ranked).get(pk, 0.0) if mode == "semantic" else 0.0


class _Background:
    """One call run in a thread; :meth:`result` waits for it and returns its value or raises its error."""

    def __init__(self, call: Callable[[str], npt.NDArray[np.float32]], argument: str) -> None:
        self._value: npt.NDArray[np.float32] | None = None
        self._error: BaseException | None = None

        def run() -> None:
            try:
                self._value = call(argument)
            except BaseException as exc:  # handed to the caller by result()
                self._error = exc

        self._thread = threading.Thread(target=run, name="harness-mem-embed", daemon=True)
        self._thread.start()

    def join(self) -> None:
        self._thread.join()

    def result(self) -> npt.NDArray[np.float32]:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._value is not None
        return self._value


REINDEX = "harness-mem reindex"


def merged(rankings: Sequence[tuple[int, float]], k: int) -> list[tuple[int, float]]:
    """The best ``k`` of (pk, score) lists ranked apart on one scale: higher first, then older."""
    return sorted(rankings, key=lambda hit: (-hit[1], hit[0]))[:k]


def _snippet(content: str, query: str, passage: Scored | None) -> str:
    """The hit's snippet: around a query word, within the passage that matched when a later one did."""
    if passage is None:
        return keyword.snippet(content, query)
    text = keyword.snippet(content[passage.start:passage.stop], query)
    return ("…" if passage.start > 0 and not text.startswith("…") else "") + text + (
        "…" if passage.stop < len(content) and not text.endswith("…") else "")


def raise_if_missing_vectors(storage: Storage) -> None:
    """Refuse semantic recall while some entries have no vector (they would silently never match)."""
    missing = storage.missing_vectors()
    if missing:
        raise EmbedderError(
            f"no vector yet for {counted(missing, 'entry', 'entries')} (stored without an embedder)"
            " — run `harness-mem reindex` to embed them, or use --mode keyword"
        )
