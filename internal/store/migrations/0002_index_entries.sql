-- Index entries: what the write checks and the controller look up without decoding
-- every document. The store fills them on every Put from a per-kind extractor
-- (index.go) and drops them with the document; the migration's Go hook indexes the
-- rows already stored. idx names the index, key what it is looked up by; value and
-- num carry what the lookup returns or sums (num keeps integers exact).
CREATE TABLE index_entries (
    kind  TEXT NOT NULL,
    name  TEXT NOT NULL,
    idx   TEXT NOT NULL,
    key   TEXT NOT NULL,
    value TEXT NOT NULL DEFAULT '',
    num   NUMERIC NOT NULL DEFAULT 0
);
CREATE INDEX index_entries_by_key ON index_entries (idx, key, num, name);
CREATE INDEX index_entries_by_doc ON index_entries (kind, name);
