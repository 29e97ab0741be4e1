"""Applying detectors and a policy to text: the :class:`Redactor` and what it returns.

A :class:`Redactor` is a list of detectors (what to look for, :mod:`.detectors`) and a policy
(what to do with each kind found, :mod:`.policy`). ``scrub(text)`` returns a :class:`Redaction`:
the rewritten text, the spans it touched (character offsets into the input), whether the policy
blocked the text, and per-kind counts; ``scrub_value`` does the same for every string inside a
nested value such as metadata. Values are never recorded anywhere, only their kinds.

**Keyed pseudonyms.** ``Action.HASH`` replaces a value with ``<KIND:hhhhhhhhhhhh>``: the first 48 bits
of HMAC-SHA256 under a per-database secret, over a normalised value (digits of a card, lower-cased
e-mail), so the same person links across entries without the value being recoverable. A short or
unkeyed hash could be reversed by trying every phone number or card number; without the key,
guessing is useless. No secret given means a random one per Redactor (stable within it). Secrets
(API keys, passwords, tokens) are never hashed: a low-entropy password could still be guessed by
someone holding the key, so HASH falls back to a label for them, and MASK hides them completely.

**Keyed outside the store.** A store's ``secret`` lives in its file, so on its own it keys nothing
a copy cannot reverse. A store's redactor also has an ``outer`` key, kept where the identity key is
(see :mod:`harness_mem.pseudonyms`): the digest is then HMAC(outer, kind + the in-file digest), and
the in-file secret is only a salt. The outer key is asked for on the first pseudonym, and a redactor
whose store's key is not here refuses (:class:`~harness_mem.errors.IdentityKeyError`).

**Identifiers.** ``pseudonymise(value)`` is the rule for fields that are looked up by equality (ids,
sessions, roles, namespaces): every sensitive span becomes its keyed pseudonym whatever the policy
says, so two sessions never merge under one label, a lookup by the raw value finds the row by
pseudonymising its key the same way, and a stored value passed back in maps to itself.

**Overlaps.** Detectors can match overlapping text ("api_key: sk-…" is both an assignment and a key).
Candidates are sorted by start, then longest first, then detector priority, and accepted greedily
when they do not overlap an accepted one: deterministic, whatever order detectors ran in. A span
whose action is KEEP never shields another: KEEP candidates only fill gaps left by the redacting
ones, so a "$4111111111111111" kept as money cannot hide a card.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..errors import InvalidInputError
from .detectors import Detector, Rule, WindowCache, default_detectors, might_hold_pii, unchanged
from .policy import Action, Policy
from .prescreen import identifier_is_clean

__all__ = ["Redaction", "Redactor", "ScrubbedValue", "Span", "cut_point", "mask", "outer_digest"]

# A masked secret shows no length either.
_SECRET_MASK = "********"
# Values this short are masked completely: the last four of eight characters is half the value.
_SHORT_VALUE = 8
# Characters MASK leaves in place, so that a masked card still reads "**** **** **** 1111".
_MASK_SEPARATORS = frozenset(" -")
_HASH_HEX_CHARS = 12  # 48 bits
# A pseudonym as :meth:`Redactor.pseudonym` writes it: never scanned again.
_PSEUDONYM = re.compile(r"<[A-Z][A-Z0-9_]*:[0-9a-f]{12}>")
# How many identifiers a redactor remembers the pseudonyms of, and the longest it remembers.
_CACHED_PSEUDONYMS = 4096
_CACHED_CHARS = 256


# ---- results -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Span:
    """One redacted (or kept) value: its kind, its place in the input text, what was done."""

    kind: str
    start: int
    end: int
    action: Action


@dataclass(frozen=True)
class Redaction:
    """The result of :meth:`Redactor.scrub`."""

    text: str
    spans: tuple[Span, ...] = ()
    blocked: bool = False

    @property
    def counts(self) -> dict[str, int]:
        """How many values of each kind were redacted (KEEP spans are not counted)."""
        counts: dict[str, int] = {}
        for span in self.spans:
            if span.action is not Action.KEEP:
                counts[span.kind] = counts.get(span.kind, 0) + 1
        return counts

    @property
    def changed(self) -> bool:
        """True when the text differs from the input (some span was not KEEP)."""
        return any(span.action is not Action.KEEP for span in self.spans)


class ScrubbedValue(NamedTuple):
    """The result of :meth:`Redactor.scrub_value`; unpacks as ``(value, counts, blocked)``."""

    value: Any
    counts: dict[str, int]
    blocked: bool


# ---- masking -----------------------------------------------------------------------------------


def mask(value: str, keep: int = 4) -> str:
    """Stars for every character but the last ``keep``; spaces and dashes stay.

    A value of eight characters or fewer is masked completely: showing four of them would reveal
    half of it, so only longer values keep their last ``keep`` characters.
    """
    maskable = sum(1 for ch in value if ch not in _MASK_SEPARATORS)
    shown = keep if maskable > _SHORT_VALUE else 0
    out: list[str] = []
    remaining = maskable
    for ch in value:
        if ch in _MASK_SEPARATORS:
            out.append(ch)
            continue
        out.append(ch if remaining <= shown else "*")
        remaining -= 1
    return "".join(out)


# ---- the redactor ------------------------------------------------------------------------------


class _Step(NamedTuple):
    position: int
    detector: Detector
    gate: Callable[[str], bool] | None
    action: Action
    keep: bool

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def outer_digest(key: bytes, kind: str, digest: str) -> str:
    """A pseudonym's digest keyed outside the store: HMAC(key, kind + the in-file-keyed digest).

    Computed from the in-file digest alone, so a store's pseudonyms can be keyed again (see
    :mod:`harness_mem.pseudonyms`) without the raw values behind them.
    """
    return hmac.new(key, f"{kind}\x00{digest}".encode(), hashlib.sha256).hexdigest()[:_HASH_HEX_CHARS]


@dataclass(frozen=True)
class _Refusal:
    """The outer key of a redactor whose store's key was not found: asking for it raises again."""

    error: type[InvalidInputError]
    message: str

    def __call__(self) -> bytes:
        raise self.error(self.message)


class Redactor:
    """Finds sensitive values with its detectors and rewrites them as its policy says.

    Use :meth:`default` for transcripts (never blocks) and :meth:`hygiene` for long-term memory.
    ``secret`` keys the HASH pseudonyms; pass the per-database secret so pseudonyms are stable
    across processes. Without one, a random key is made and pseudonyms are stable only within
    this Redactor. ``outer`` (bytes, or a function giving them on first use) keys them again with
    a key kept outside the store (:func:`outer_digest`); the store's redactor has one. A function
    may give None (keyed by ``secret`` alone, an older store's way) or raise (no pseudonym can be
    made here).
    """

    def __init__(
        self,
        policy: Policy | None = None,
        *,
        secret: bytes | str | None = None,
        detectors: Iterable[Detector] | None = None,
        outer: bytes | Callable[[], bytes | None] | None = None,
    ) -> None:
        self.policy = policy if policy is not None else Policy.default()
        if secret is None:
            secret = os.urandom(32)
        self._key = secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)
        if not self._key:
            raise InvalidInputError("the redaction secret is empty — pass None to generate one")
        self._outer = outer
        self._detectors: list[Detector] = list(default_detectors() if detectors is None else detectors)
        # The prescreen knows only the built-in detectors' needs: custom ones switch it off.
        self._prescreen: Callable[[str], bool] | None = might_hold_pii if detectors is None else None
        self._plan: tuple[Policy, int, tuple[_Step, ...]] | None = None
        # Identifiers repeat (a session has many turns, a run many transitions): their pseudonyms are
        # remembered, for the policy they were made under.
        self._pseudonyms: dict[str, Redaction] = {}
        self._pseudonyms_policy: Policy | None = None

    @classmethod
    def default(cls, secret: bytes | str | None = None, *, outer: bytes | Callable[[], bytes | None] | None = None) -> Redactor:
        """The transcript redactor: labels, masks cards, keeps money, never blocks."""
        return cls(Policy.default(), secret=secret, outer=outer)

    @classmethod
    def hygiene(cls, secret: bytes | str | None = None, *, outer: bytes | Callable[[], bytes | None] | None = None) -> Redactor:
        """The long-term-memory redactor: money and secrets block the write."""
        return cls(Policy.hygiene(), secret=secret, outer=outer)

    def _outer_key(self) -> bytes | None:
        if callable(self._outer):
            # Raises when the store's key is not here (IdentityKeyError), and again next time; None
            # (no outer key: an older store's redactor, checking it still is one) is asked again too.
            found = self._outer()
            if found is None:
                return None
            self._outer = found
        return self._outer

    def __getstate__(self) -> dict[str, Any]:
        # An import's worker processes get the outer key, not the function that finds it; a key
        # that cannot be found travels as the refusal it gives.
        state = dict(vars(self))
        if callable(self._outer):
            try:
                state["_outer"] = self._outer_key()
            except InvalidInputError as exc:
                state["_outer"] = _Refusal(type(exc), str(exc))
        return state

    def __repr__(self) -> str:
        return f"Redactor(policy={self.policy.name!r}, kinds={list(self.kinds)!r})"

    @property
    def detectors(self) -> tuple[Detector, ...]:
        return tuple(self._detectors)

    @property
    def kinds(self) -> tuple[str, ...]:
        """Every kind this redactor can find, in detector order."""
        return tuple(dict.fromkeys(d.kind for d in self._detectors))

    def add_detector(
        self,
        name: str,
        pattern: str | re.Pattern[str],
        action: Action = Action.LABEL,
        *,
        priority: int = 100,
        secret: bool = False,
    ) -> Redactor:
        """Add a regex detector labelled ``<NAME>`` whose matches get ``action``; returns self.

        :param name: letters, digits and underscores; upper-cased into the kind.
        :param pattern: a regex (string or compiled); a named group ``value`` narrows the span.
        :param priority: tie-break against other detectors (built-ins use 0–11; lower wins).
        :param secret: treat matches as credentials (never partially masked or hashed).
        """
        if not _NAME.fullmatch(name):
            raise InvalidInputError(
                f"detector name {name!r} must be letters, digits and underscores (it becomes the label)"
            )
        try:
            compiled = re.compile(pattern) if isinstance(pattern, str) else pattern
        except re.error as exc:
            raise InvalidInputError(f"detector {name!r} has an invalid regex: {exc}") from None
        kind = name.upper()
        self._detectors.append(Detector(kind, (Rule(compiled),), priority=priority, secret=secret))
        self._prescreen = None
        self._pseudonyms = {}
        self.policy = self.policy.with_action(kind, action)
        return self

    def set_action(self, kind: str, action: Action) -> Redactor:
        """Change what happens to ``kind``; returns self."""
        self.policy = self.policy.with_action(kind, action)
        return self

    def pseudonym(self, kind: str, value: str, normalize: Callable[[str], str] = unchanged) -> str:
        """The HASH replacement for ``value``: ``<KIND:`` + 48 bits of a keyed HMAC + ``>``."""
        message = f"{kind}\x00{normalize(value)}".encode()
        digest = hmac.new(self._key, message, hashlib.sha256).hexdigest()[:_HASH_HEX_CHARS]
        if self._outer is not None:
            outer = self._outer_key()
            if outer is not None:
                digest = outer_digest(outer, kind, digest)
        return f"<{kind}:{digest}>"

    def scrub(self, text: str) -> Redaction:
        """Detect, resolve overlaps, and rewrite ``text`` as the policy says."""
        if not isinstance(text, str):
            raise InvalidInputError(f"scrub takes a str, not {type(text).__name__}")
        accepted = self._accepted(text)
        if not accepted:
            return Redaction(text)
        pieces: list[str] = []
        spans: list[Span] = []
        cursor = 0
        blocked = False
        for start, neg_end, _priority, index, action in accepted:
            end = -neg_end
            detector = self._detectors[index]
            pieces.append(text[cursor:start])
            pieces.append(self._render(detector, action, text[start:end]))
            spans.append(Span(detector.kind, start, end, action))
            blocked = blocked or action is Action.BLOCK
            cursor = end
        pieces.append(text[cursor:])
        return Redaction("".join(pieces), tuple(spans), blocked)

    def cut_point(self, text: str, limit: int) -> int:
        """Where to cut ``text`` to keep at most ``limit`` characters without going through a value
        this redactor finds: ``limit``, or the start of the value that straddles it (``len(text)``
        when the text is no longer than ``limit``).

        For a cut made before the text is redacted (a tool error quoting its arguments, a server's
        error message, an episode's task): a card, an address or a key cut in half leaves a head
        that no detector recognises afterwards ("4111 1111 1111", "ada.lovelace@"), and a value cut
        off from what marks it ("<password>s3cret</pass", a URL's password without its "@") is no
        longer one, so the redaction that runs when the text is written could not take it. Moved to
        the value's start, the cut keeps a value whole and recognisable or drops it whole. Only the text up to ``limit`` and
        :data:`CUT_LOOKAHEAD` characters after it is read.
        """
        if limit >= len(text):
            return len(text)
        cut = max(limit, 0)
        values = [(start, -neg_end) for start, neg_end, *_, action in self._accepted(text[: cut + CUT_LOOKAHEAD])
                  if action is not Action.KEEP and start < cut]
        while values:
            # The kept text must still show each value whole and as a value: one cut through, or cut
            # off from what marks it (a tag's close, a URL's "@"), would be missed by the redaction
            # that runs on the kept text. The cut moves to the first such value's start, and the
            # values before it are checked again against the shorter text.
            kept = {(start, -neg_end) for start, neg_end, *_, action in self._accepted(text[:cut])
                    if action is not Action.KEEP}
            lost = [start for start, end in values if (start, end) not in kept]
            if not lost:
                return cut
            cut = min(lost)
            values = [(start, end) for start, end in values if start < cut]
        return cut

    def _steps(self) -> tuple[_Step, ...]:
        """Each detector with its gate and the action the current policy gives its kind."""
        # Worked out once per policy (set_action and add_detector make a new one), not per text.
        plan = self._plan
        if plan is None or plan[0] is not self.policy or plan[1] != len(self._detectors):
            policy = self.policy
            steps = tuple(
                _Step(index, detector, detector.gate, action, action is Action.KEEP)
                for index, detector in enumerate(self._detectors)
                for action in (policy.action_for(detector.kind),)
            )
            plan = self._plan = (policy, len(self._detectors), steps)
        return plan[2]

    def pseudonymise(self, value: str) -> Redaction:
        """``value`` as an identifier is stored: every sensitive span replaced by its keyed pseudonym.

        For identity fields (an entry's id, session, role and namespace; a run's and a job's id),
        which are looked up by equality, so a label would merge two sessions into one. Whatever
        the policy says (label, mask, hash or block; a credential included), each span that would
        be redacted becomes ``<KIND:hhhhhhhhhhhh>`` (:meth:`pseudonym`); KEEP spans stay. The same
        value always maps to the same text under one key, so a lookup by the raw value applies
        this method to its key and finds the row. Pseudonyms already in ``value`` are left as they
        are, and the result is a fixed point: ``pseudonymise(pseudonymise(v).text).text`` equals
        ``pseudonymise(v).text``, so a stored id passed back in finds itself. Never blocks.
        Spans carry offsets into the text of the pass that found them (one pass in practice).
        """
        if not isinstance(value, str):
            raise InvalidInputError(f"pseudonymise takes a str, not {type(value).__name__}")
        if self._pseudonyms_policy is not self.policy:
            self._pseudonyms, self._pseudonyms_policy = {}, self.policy
        found = self._pseudonyms.get(value)
        if found is not None:
            return found
        if self._prescreen is not None and identifier_is_clean(value):  # most ids: no detector can match
            if len(self._pseudonyms) >= _CACHED_PSEUDONYMS:
                self._pseudonyms.clear()
            found = self._pseudonyms[value] = Redaction(value)
            return found
        spans: list[Span] = []
        text = value
        while True:  # a pass replaces raw characters by tokens, so passes end (after one, in practice)
            pieces: list[str] = []
            cursor = 0
            for token in [*_PSEUDONYM.finditer(text), None]:
                gap_end = token.start() if token is not None else len(text)
                pieces.append(self._pseudonymise_gap(text[cursor:gap_end], spans))
                if token is not None:
                    pieces.append(token.group())
                    cursor = token.end()
            new_text = "".join(pieces)
            if new_text == text:
                break
            text = new_text
        found = Redaction(text, tuple(spans))
        if len(value) <= _CACHED_CHARS:
            if len(self._pseudonyms) >= _CACHED_PSEUDONYMS:
                self._pseudonyms.clear()
            self._pseudonyms[value] = found
        return found

    def _pseudonymise_gap(self, gap: str, spans: list[Span]) -> str:
        pieces: list[str] = []
        cursor = 0
        for start, neg_end, _priority, index, action in self._accepted(gap):
            if action is Action.KEEP:
                continue
            end = -neg_end
            detector = self._detectors[index]
            pieces.append(gap[cursor:start])
            pieces.append(self.pseudonym(detector.kind, gap[start:end], detector.normalize))
            spans.append(Span(detector.kind, start, end, Action.HASH))
            cursor = end
        pieces.append(gap[cursor:])
        return "".join(pieces)

    def _accepted(self, text: str) -> list[tuple[int, int, int, int, Action]]:
        """The spans to act on, in text order: ``(start, -end, priority, detector index, action)``."""
        if not text or (self._prescreen is not None and not self._prescreen(text)):
            return []
        gates: dict[Callable[[str], bool], bool] = {}
        windows: WindowCache = {}
        active: list[tuple[int, int, int, int, Action]] = []  # (start, -end, priority, index, action)
        kept: list[tuple[int, int, int, int, Action]] = []
        for index, detector, gate, action, keep in self._steps():
            if gate is not None:
                passed = gates.get(gate)
                if passed is None:
                    passed = gates[gate] = gate(text)
                if not passed:
                    continue
            bucket = kept if keep else active
            priority = detector.priority
            for start, end in detector.spans(text, windows):
                bucket.append((start, -end, priority, index, action))
        if not active and not kept:
            return []
        accepted = _greedy(active, [])
        if kept:
            # KEEP spans never shield a redacting one: they only fill what is left.
            accepted = sorted(accepted + _greedy(kept, accepted), key=lambda c: c[0])
        return accepted

    def _render(self, detector: Detector, action: Action, value: str) -> str:
        if action is Action.KEEP:
            return value
        if action is Action.MASK:
            return _SECRET_MASK if detector.secret else mask(value)
        if action is Action.HASH and not detector.secret:
            return self.pseudonym(detector.kind, value, detector.normalize)
        return f"<{detector.kind}>"

    def scrub_value(self, value: Any) -> ScrubbedValue:
        """Scrub every string inside ``value`` (dicts, lists, tuples, sets, nested), e.g. metadata.

        Strings and dict keys are scrubbed; an int is scrubbed as its decimal text and becomes
        the redacted string only when something was found in it (a phone number stored as a
        number); other values pass through. Returns ``(new_value, counts, blocked)``.
        """
        counts: dict[str, int] = {}
        blocked = False

        def text(s: str) -> str:
            nonlocal blocked
            red = self.scrub(s)
            for kind, n in red.counts.items():
                counts[kind] = counts.get(kind, 0) + n
            blocked = blocked or red.blocked
            return red.text

        def walk(obj: Any) -> Any:
            if isinstance(obj, str):
                return text(obj)
            if isinstance(obj, bool) or obj is None or isinstance(obj, float):
                return obj
            if isinstance(obj, int):
                red = text(str(obj))
                return obj if red == str(obj) else red
            if isinstance(obj, Mapping):
                out: dict[Any, Any] = {}
                for key, item in obj.items():
                    new_key = walk(key) if isinstance(key, str) else key
                    # Two keys redacted to the same label must not overwrite each other.
                    base, n = new_key, 2
                    while new_key in out:
                        new_key, n = f"{base}#{n}", n + 1
                    out[new_key] = walk(item)
                return out
            if isinstance(obj, tuple):
                return tuple(walk(item) for item in obj)
            if isinstance(obj, (set, frozenset)):
                return type(obj)(walk(item) for item in obj)
            if isinstance(obj, Sequence) and not isinstance(obj, (bytes, bytearray)):
                return [walk(item) for item in obj]
            return obj

        new_value = walk(value)
        return ScrubbedValue(new_value, counts, blocked)


def _greedy(
    candidates: list[tuple[int, int, int, int, Action]],
    taken: list[tuple[int, int, int, int, Action]],
) -> list[tuple[int, int, int, int, Action]]:
    """Sorted by (start, longest, priority), the candidates that overlap nothing already accepted."""
    accepted: list[tuple[int, int, int, int, Action]] = []
    # Intervals already taken (by the redacting pass) that a KEEP candidate may not overlap.
    blocked = sorted((c[0], -c[1]) for c in taken)
    cursor = 0
    j = 0
    for cand in sorted(candidates, key=lambda c: (c[0], c[1], c[2], c[3])):
        start, end = cand[0], -cand[1]
        if start < cursor:
            continue
        while j < len(blocked) and blocked[j][1] <= start:
            j += 1
        if j < len(blocked) and blocked[j][0] < end:
            continue
        accepted.append(cand)
        cursor = end
    return accepted


#: How far past a cut :meth:`Redactor.cut_point` reads: a value straddling the cut is found whole
#: when it ends within this many characters of it (any but a long private key, which its
#: detector finds by its first lines alone).
CUT_LOOKAHEAD = 4096


@functools.cache
def _default_redactor() -> Redactor:
    return Redactor.default()


def cut_point(text: str, limit: int, redactor: Redactor | None = None) -> int:
    """:meth:`Redactor.cut_point` with ``redactor`` (its own detectors included), or with the
    default detectors when none is given (only where values are matters here, not their policy)."""
    return (redactor or _default_redactor()).cut_point(text, limit)
