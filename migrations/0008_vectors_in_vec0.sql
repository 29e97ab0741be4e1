-- Vectors are kept once, in the vec0 table `entries_vec` (int8 vector, sign bits, and the namespace,
-- kind, session and time that filters read), which the store creates or upgrades when it first
-- binds an embedding model: its dimension is the model's. The compact copies that lived in
-- `entry_vectors` are no longer read; an older file's float32 vectors in `entries_vec` are
-- converted when the store next opens it with its model.
DROP TABLE entry_vectors;
