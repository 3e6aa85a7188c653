-- Second step of a renewal of shares: locks the grants still held as granted (same owner,
-- same token, not released, not expired), read on their latest version, and returns them
-- with their slots (checked against the slot each renewal names). `{grants}` as in
-- lock_markers.sql.
-- The grants drive the join, each row found by its primary key (STRAIGHT_JOIN, FORCE INDEX):
-- a plan that scans the table (MariaDB's, on small tables) would lock every row it reads, and
-- wait for and block the calls of other names. The renewal runs at READ COMMITTED, so that a
-- row not found locks no gap either.
SELECT CONVERT(s.name USING utf8mb4), CAST(s.owner AS CHAR), s.token, s.slot
FROM ({grants}) AS x STRAIGHT_JOIN {shares} AS s FORCE INDEX (PRIMARY)
    ON s.name = x.name AND s.owner = x.owner AND s.token = x.token
WHERE s.state = 'held' AND s.expires_at > UTC_TIMESTAMP(6)
FOR UPDATE
