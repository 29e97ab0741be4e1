-- Entries of one kind, newest first, a page at a time (the browser's facts page, a list by kind):
-- without it a kind that is rare among many turns is found by walking every entry of the namespace.
-- PostgreSQL's schema has had this index from the start.
CREATE INDEX entries_by_kind ON entries (namespace, kind, created_at);
