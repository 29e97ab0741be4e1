-- What the health page and `stats` count, kept as the entries change instead of counted by reading
-- every entry (at a million entries a count took 10 s, and every write made the next view count
-- again). One row a namespace and key: 'entries', 'forgotten', 'kind:<kind>', 'role:<role>',
-- 'unredacted' (stored with redaction off) and 'redacted:<TYPE>' (the sum of an entry's
-- `redactions` counts). Every row of `entries` is counted, expired ones too: a reader takes off
-- those expired since, found through entries_by_expiry (expiry needs no write to happen).
-- Triggers keep it, in the transaction of the statement that changed the entry, whichever path
-- changed it (write, forget, purge, gc, import, sync, reindex).
CREATE TABLE entry_counts (
    namespace TEXT NOT NULL,
    key TEXT NOT NULL,
    value INTEGER NOT NULL,
    PRIMARY KEY (namespace, key)
) WITHOUT ROWID;

INSERT INTO entry_counts (namespace, key, value)
SELECT namespace, key, sum(n) FROM (
    SELECT namespace, 'entries' AS key, 1 AS n FROM entries
    UNION ALL SELECT namespace, 'forgotten', 1 FROM entries WHERE forgotten_at IS NOT NULL
    UNION ALL SELECT namespace, 'kind:' || kind, 1 FROM entries
    UNION ALL SELECT namespace, 'role:' || role, 1 FROM entries WHERE role IS NOT NULL
    UNION ALL SELECT namespace, 'unredacted', 1 FROM entries WHERE redactions IS NULL
    UNION ALL SELECT e.namespace, 'redacted:' || j.key, CAST(j.value AS INTEGER)
        FROM entries e, json_each(e.redactions) j
        WHERE e.redactions IS NOT NULL AND json_type(e.redactions) = 'object' AND j.type IN ('integer', 'real')
) GROUP BY namespace, key;

-- An entry's keys and how much it adds to each: a view the triggers read with its pk, so the
-- three triggers share one definition of what is counted.
CREATE VIEW entry_count_keys AS
    SELECT pk, namespace, 'entries' AS key, 1 AS n FROM entries
    UNION ALL SELECT pk, namespace, 'forgotten', 1 FROM entries WHERE forgotten_at IS NOT NULL
    UNION ALL SELECT pk, namespace, 'kind:' || kind, 1 FROM entries
    UNION ALL SELECT pk, namespace, 'role:' || role, 1 FROM entries WHERE role IS NOT NULL
    UNION ALL SELECT pk, namespace, 'unredacted', 1 FROM entries WHERE redactions IS NULL
    UNION ALL SELECT e.pk, e.namespace, 'redacted:' || j.key, CAST(j.value AS INTEGER)
        FROM entries e, json_each(e.redactions) j
        WHERE e.redactions IS NOT NULL AND json_type(e.redactions) = 'object' AND j.type IN ('integer', 'real');

-- Taken off before a row goes or changes (while it can still be read), added after it came or changed.
CREATE TRIGGER entry_counts_added AFTER INSERT ON entries BEGIN
    INSERT INTO entry_counts (namespace, key, value)
    SELECT namespace, key, n FROM entry_count_keys WHERE pk = NEW.pk
    ON CONFLICT (namespace, key) DO UPDATE SET value = value + excluded.value;
END;

CREATE TRIGGER entry_counts_removed BEFORE DELETE ON entries BEGIN
    INSERT INTO entry_counts (namespace, key, value)
    SELECT namespace, key, -n FROM entry_count_keys WHERE pk = OLD.pk
    ON CONFLICT (namespace, key) DO UPDATE SET value = value + excluded.value;
END;

CREATE TRIGGER entry_counts_changing BEFORE UPDATE OF namespace, kind, role, redactions, forgotten_at ON entries BEGIN
    INSERT INTO entry_counts (namespace, key, value)
    SELECT namespace, key, -n FROM entry_count_keys WHERE pk = OLD.pk
    ON CONFLICT (namespace, key) DO UPDATE SET value = value + excluded.value;
END;

CREATE TRIGGER entry_counts_changed AFTER UPDATE OF namespace, kind, role, redactions, forgotten_at ON entries BEGIN
    INSERT INTO entry_counts (namespace, key, value)
    SELECT namespace, key, n FROM entry_count_keys WHERE pk = NEW.pk
    ON CONFLICT (namespace, key) DO UPDATE SET value = value + excluded.value;
END;
