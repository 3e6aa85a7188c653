-- Renews the grants lock_grants.sql locked (live), in its transaction: no row here
-- waits for another session. `{grants}` is a derived table of (name, owner, token, ttl in ms).
-- The grants drive the join, each row found by its primary key (STRAIGHT_JOIN, FORCE INDEX):
-- a plan that scans the table (MariaDB's, on small tables) would lock every row it reads at
-- REPEATABLE READ, and wait for and block the calls of other names.
UPDATE ({grants}) AS x STRAIGHT_JOIN {locks} AS l FORCE INDEX (PRIMARY)
    ON l.name = x.name AND l.owner = x.owner AND l.token = x.token
SET l.expires_at = UTC_TIMESTAMP(6) + INTERVAL x.ttl * 1000 MICROSECOND
