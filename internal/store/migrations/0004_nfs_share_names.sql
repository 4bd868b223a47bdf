-- Volumes served over NFS by network and shareName (index volume.nfsShareName):
-- a network's Ganesha serves every project's exports under /<shareName>. Nothing
-- changes in the tables; the migration's Go hook indexes the rows already stored.
SELECT 1;
