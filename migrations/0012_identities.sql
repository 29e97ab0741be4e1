-- The raw value of each identity field the redactor changed (an id, session, role, tag or the
-- namespace holding an e-mail, say), sealed with a key that is never in this file (see
-- harness_mem/identities.py): reads put the caller's values back, the file holds none of them raw.
CREATE TABLE identities (
    namespace TEXT NOT NULL,
    stored TEXT NOT NULL,
    key_id TEXT NOT NULL,
    sealed BLOB NOT NULL,
    PRIMARY KEY (namespace, stored)
) WITHOUT ROWID;
