-- First step of a renewal, in its transaction: locks the rows of the grants still held as
-- granted (same owner, same token, not expired) that no other session holds locked
-- (`{skip_locked}` is SKIP LOCKED: a MySQL attempt reads a held row without locking it, so
-- only a stuck session holds one). A row another session holds is skipped, not waited for:
-- it costs only its own lease (see extended.sql). `{grants}` is a derived table of (name,
-- owner, token, ttl in ms).
-- The grants drive the join, each row found by its primary key (STRAIGHT_JOIN, FORCE INDEX):
-- a plan that scans the table (MariaDB's, on small tables) would lock every row it reads at
-- REPEATABLE READ, and wait for and block the calls of other names.
SELECT CONVERT(l.name USING utf8mb4), CAST(l.owner AS CHAR), l.token
FROM ({grants}) AS x STRAIGHT_JOIN {locks} AS l FORCE INDEX (PRIMARY)
    ON l.name = x.name AND l.owner = x.owner AND l.token = x.token
WHERE l.expires_at > UTC_TIMESTAMP(6)
FOR UPDATE {skip_locked}
