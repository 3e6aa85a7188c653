-- Third step of a renewal of shares: renews the grants locked by lock_shares.sql whose
-- marker lock_markers.sql locked. `{grants}` as there.
-- The grants drive the join, each row found by its primary key (STRAIGHT_JOIN, FORCE INDEX):
-- a plan that scans the table (MariaDB's, on small tables) would lock every row it reads at
-- REPEATABLE READ, and wait for and block the calls of other names.
UPDATE ({grants}) AS x STRAIGHT_JOIN {shares} AS s FORCE INDEX (PRIMARY)
    ON s.name = x.name AND s.owner = x.owner AND s.token = x.token
SET s.expires_at = UTC_TIMESTAMP(6) + INTERVAL x.ttl * 1000 MICROSECOND
