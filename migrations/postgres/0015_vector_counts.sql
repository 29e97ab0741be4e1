-- Embedding coverage (entries still without a vector) kept like the other counts (0014), instead of
-- counted by reading every live entry against entry_vectors (a scan at every health view). A
-- counter 'vectors' a namespace holds how many of its entries have a vector; since forgetting an
-- entry drops its vector, the entries without one are its live entries less that counter.
--
-- entry_vectors is made when a model is first bound, not by a migration: keep_vector_counts()
-- hangs the triggers on it then (and below, on a store that has it already) and fills the counter;
-- drop_vector_counts() takes them off when the vectors are dropped. The triggers run as the owner
-- (SECURITY DEFINER), under namespace_state's row-level security like the rest.

-- A vector comes and goes with rows of entry_vectors, counted in the namespace of its entry.
CREATE FUNCTION count_added_vectors() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT
    AS $$
BEGIN
    INSERT INTO namespace_state (namespace, key, value)
    SELECT e.namespace, 'vectors', count(*) FROM added JOIN entries e ON e.pk = added.pk GROUP BY 1
    ON CONFLICT (namespace, key) DO UPDATE SET value = namespace_state.value + excluded.value;
    RETURN NULL;
END $$;

-- A vector deleted along with its entry (the foreign key's cascade) has no entry left to name its
-- namespace: the entry's own trigger, below, took it off before the entry went.
CREATE FUNCTION count_removed_vectors() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT
    AS $$
BEGIN
    INSERT INTO namespace_state (namespace, key, value)
    SELECT e.namespace, 'vectors', -count(*) FROM removed JOIN entries e ON e.pk = removed.pk GROUP BY 1
    ON CONFLICT (namespace, key) DO UPDATE SET value = namespace_state.value + excluded.value;
    RETURN NULL;
END $$;

-- Before an entry goes (a purge, gc, a sync's delete), its vector is still there to be seen.
CREATE FUNCTION count_vector_of_removed_entry() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT
    AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM entry_vectors WHERE pk = OLD.pk) THEN
        INSERT INTO namespace_state (namespace, key, value) VALUES (OLD.namespace, 'vectors', -1)
        ON CONFLICT (namespace, key) DO UPDATE SET value = namespace_state.value - 1;
    END IF;
    RETURN OLD;
END $$;

-- An entry moved to another namespace takes its vector along (it follows the pk).
CREATE FUNCTION count_vector_of_moved_entry() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT
    AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM entry_vectors WHERE pk = NEW.pk) THEN
        INSERT INTO namespace_state (namespace, key, value) VALUES (OLD.namespace, 'vectors', -1), (NEW.namespace, 'vectors', 1)
        ON CONFLICT (namespace, key) DO UPDATE SET value = namespace_state.value + excluded.value;
    END IF;
    RETURN NULL;
END $$;

-- Once, when entry_vectors exists: the triggers, and the counter of the vectors already there.
CREATE FUNCTION keep_vector_counts() RETURNS void
    LANGUAGE plpgsql SET search_path FROM CURRENT
    AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = 'entry_vectors'::regclass AND tgname = 'entry_vectors_added_counts') THEN
        RETURN;
    END IF;
    CREATE TRIGGER entry_vectors_added_counts AFTER INSERT ON entry_vectors
        REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION count_added_vectors();
    CREATE TRIGGER entry_vectors_removed_counts AFTER DELETE ON entry_vectors
        REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION count_removed_vectors();
    DROP TRIGGER IF EXISTS entries_removed_vector_counts ON entries;
    CREATE TRIGGER entries_removed_vector_counts BEFORE DELETE ON entries
        FOR EACH ROW EXECUTE FUNCTION count_vector_of_removed_entry();
    DROP TRIGGER IF EXISTS entries_moved_vector_counts ON entries;
    CREATE TRIGGER entries_moved_vector_counts AFTER UPDATE OF namespace ON entries
        FOR EACH ROW WHEN (OLD.namespace IS DISTINCT FROM NEW.namespace) EXECUTE FUNCTION count_vector_of_moved_entry();
    DELETE FROM namespace_state WHERE key = 'vectors';
    INSERT INTO namespace_state (namespace, key, value)
    SELECT e.namespace, 'vectors', count(*) FROM entry_vectors v JOIN entries e ON e.pk = v.pk GROUP BY 1;
END $$;

-- When entry_vectors is dropped (its own triggers go with it): the entries' triggers and the counter.
CREATE FUNCTION drop_vector_counts() RETURNS void
    LANGUAGE plpgsql SET search_path FROM CURRENT
    AS $$
BEGIN
    DROP TRIGGER IF EXISTS entries_removed_vector_counts ON entries;
    DROP TRIGGER IF EXISTS entries_moved_vector_counts ON entries;
    DELETE FROM namespace_state WHERE key = 'vectors';
END $$;

DO $$
BEGIN
    IF to_regclass('entry_vectors') IS NOT NULL THEN
        PERFORM keep_vector_counts();
    END IF;
END $$;
