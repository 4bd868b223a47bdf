-- Finished operations by end time and audit entries by time (indexes
-- operation.done and audit.time): the retention deletes only what expired,
-- without decoding every record. Nothing changes in the tables; the migration's
-- Go hook indexes the rows already stored.
SELECT 1;
