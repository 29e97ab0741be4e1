-- Entries of a kind other than turns, newest first, a page at a time (the browser's facts page):
-- without it a kind that is rare among many turns is found by walking every entry of the namespace.
-- Partial, so that it is never a candidate for a query about turns (a session's turns, the turn
-- before another): only a query that says `kind <> 'turn'` in so many words can use it.
CREATE INDEX entries_by_kind ON entries (namespace, kind, created_at) WHERE kind <> 'turn';
