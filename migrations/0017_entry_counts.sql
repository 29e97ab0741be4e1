-- What the health page and `stats` count, kept as the entries change instead of counted by reading
-- every entry (at a million entries a count took 10 s, and every write made the next view count
-- again). One counter a namespace and group of entries alike in what is counted: the key is the
-- JSON array [kind, role, redactions, forgotten] (role and redactions null where NULL), so a write
-- changes one counter. Every row of `entries` is counted, expired ones too: a reader takes off
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
SELECT namespace, json_array(kind, role, redactions, forgotten_at IS NOT NULL), count(*)
FROM entries GROUP BY 1, 2;

-- Taken off before a row goes or changes (its old values), added after it came or changed. A
-- counter that reaches zero goes: its key holds a namespace and a role, which may be an identity's
-- pseudonym, and must leave the file with the last entry that had them (forget, purge, rekey).
CREATE TRIGGER entry_counts_added AFTER INSERT ON entries BEGIN
    INSERT INTO entry_counts (namespace, key, value)
    VALUES (NEW.namespace, json_array(NEW.kind, NEW.role, NEW.redactions, NEW.forgotten_at IS NOT NULL), 1)
    ON CONFLICT (namespace, key) DO UPDATE SET value = value + 1;
END;

CREATE TRIGGER entry_counts_removed AFTER DELETE ON entries BEGIN
    UPDATE entry_counts SET value = value - 1
    WHERE namespace = OLD.namespace AND key = json_array(OLD.kind, OLD.role, OLD.redactions, OLD.forgotten_at IS NOT NULL);
    DELETE FROM entry_counts
    WHERE namespace = OLD.namespace AND key = json_array(OLD.kind, OLD.role, OLD.redactions, OLD.forgotten_at IS NOT NULL)
      AND value = 0;
END;

CREATE TRIGGER entry_counts_changed AFTER UPDATE OF namespace, kind, role, redactions, forgotten_at ON entries BEGIN
    UPDATE entry_counts SET value = value - 1
    WHERE namespace = OLD.namespace AND key = json_array(OLD.kind, OLD.role, OLD.redactions, OLD.forgotten_at IS NOT NULL);
    DELETE FROM entry_counts
    WHERE namespace = OLD.namespace AND key = json_array(OLD.kind, OLD.role, OLD.redactions, OLD.forgotten_at IS NOT NULL)
      AND value = 0;
    INSERT INTO entry_counts (namespace, key, value)
    VALUES (NEW.namespace, json_array(NEW.kind, NEW.role, NEW.redactions, NEW.forgotten_at IS NOT NULL), 1)
    ON CONFLICT (namespace, key) DO UPDATE SET value = value + 1;
END;
