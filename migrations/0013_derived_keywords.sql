-- What consolidation derives (topic segments, facts: source 'consolidation') gets a keyword index of
-- its own, so that its words never move the statistics (rows, average length, each word's count)
-- that what was said is ranked by. The derived entries a file holds already are moved there, in
-- Python, when the store next opens it: the setting below says they are still to move.
CREATE VIRTUAL TABLE derived_fts USING fts5(
    text,
    content = '',
    contentless_delete = 1,
    tokenize = 'porter unicode61 remove_diacritics 2'
);

INSERT INTO settings (key, value)
SELECT 'keywords.derived_to_move', '1'
WHERE EXISTS (SELECT 1 FROM entries WHERE source = 'consolidation');
