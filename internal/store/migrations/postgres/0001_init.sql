-- The PostgreSQL store's schema: the SQLite store's tables (migrations/*.sql, at
-- their latest), in PostgreSQL's types. Text columns compare and order bytewise
-- (COLLATE "C"), as SQLite's do, so that names list in the same order on both;
-- index keys are bytea, since they join their parts with a NUL byte, which text
-- cannot hold.
CREATE TABLE resources (
    kind   text COLLATE "C" NOT NULL,
    name   text COLLATE "C" NOT NULL,
    parent text COLLATE "C" NOT NULL,
    data   bytea NOT NULL,
    PRIMARY KEY (kind, name)
);
CREATE INDEX resources_by_parent ON resources (kind, parent, name);

CREATE TABLE sequences (
    key   text COLLATE "C" PRIMARY KEY,
    value bigint NOT NULL
);

CREATE TABLE index_entries (
    kind  text COLLATE "C" NOT NULL,
    name  text COLLATE "C" NOT NULL,
    idx   text COLLATE "C" NOT NULL,
    key   bytea NOT NULL,
    value text COLLATE "C" NOT NULL DEFAULT '',
    num   numeric NOT NULL DEFAULT 0
);
CREATE INDEX index_entries_by_key ON index_entries (idx, key, num, name);
CREATE INDEX index_entries_by_doc ON index_entries (kind, name);

CREATE TABLE metric_rollups (
    series text COLLATE "C" NOT NULL,
    start  bigint NOT NULL,
    data   bytea NOT NULL,
    PRIMARY KEY (series, start)
);
CREATE INDEX metric_rollups_by_start ON metric_rollups (start);
