-- The entry counters of 0014 name a group's role and redactions in namespace_state's key (a
-- speaker's name, or its pseudonym): stored text, kept out of the planner's statistics like the
-- rest of it (0011, which left `key` alone when it held only names the code chose).
ALTER TABLE namespace_state ALTER COLUMN key SET STATISTICS 0;
SELECT pg_clear_attribute_stats(current_schema()::text, 'namespace_state', 'key', false);
