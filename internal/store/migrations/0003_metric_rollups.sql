-- 5-minute metrics rollups (internal/metrics), one row per volume and bucket,
-- outside the resources table: series is the volume's storage key, start the
-- Unix second the bucket starts, data the encoded summary. Rows older than the
-- retention are deleted by start.
CREATE TABLE metric_rollups (
    series TEXT NOT NULL,
    start  INTEGER NOT NULL,
    data   BLOB NOT NULL,
    PRIMARY KEY (series, start)
) WITHOUT ROWID;
CREATE INDEX metric_rollups_by_start ON metric_rollups (start);
