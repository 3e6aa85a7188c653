-- Last step of a renewal of shares: each marker lasts at least as long as the grants renewed
-- (its clock read by a later statement than theirs), so that a mutex never takes a name over
-- while a share of it is live. `{grants}` as in lock_markers.sql, the renewed ones.
-- The grants drive the join, each row found by its primary key (STRAIGHT_JOIN, FORCE INDEX):
-- a plan that scans the table (MariaDB's, on small tables) would lock every row it reads at
-- REPEATABLE READ, and wait for and block the calls of other names.
UPDATE (SELECT g.name, MAX(g.ttl) AS ttl FROM ({grants}) AS g GROUP BY g.name) AS x
STRAIGHT_JOIN {locks} AS l FORCE INDEX (PRIMARY) ON l.name = x.name
SET l.expires_at = GREATEST(l.expires_at, UTC_TIMESTAMP(6) + INTERVAL x.ttl * 1000 MICROSECOND)
WHERE l.owner = {marker}
