-- Resources of every kind, stored as JSON documents of the model types. The API
-- filters, orders and pages in Go; parent lets a list read one collection.
CREATE TABLE resources (
    kind   TEXT NOT NULL,
    name   TEXT NOT NULL,
    parent TEXT NOT NULL,
    data   BLOB NOT NULL,
    PRIMARY KEY (kind, name)
);
CREATE INDEX resources_by_parent ON resources (kind, parent, name);

-- Monotonic counters (qgroup ids, export ids) that are never reused.
CREATE TABLE sequences (
    key   TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
