-- An episode's row names its entry by (namespace, id). When `promote` moves the entry into another
-- namespace, the row moves with it in the same transaction; the link is checked at commit, once both
-- have moved, instead of between the two updates.
ALTER TABLE episodes ALTER CONSTRAINT episodes_namespace_entry_id_fkey DEFERRABLE INITIALLY IMMEDIATE;
