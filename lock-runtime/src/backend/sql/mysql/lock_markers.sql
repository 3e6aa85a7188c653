-- First step of a renewal of shares, in its transaction: locks the live markers of the names
-- (in name order, as every renewal does: the grants come sorted by name, and are read in
-- their order), so that no acquire or release of those names runs until the commit, and
-- returns their names. A name whose marker is gone or expired has no
-- live share. `{grants}` is a derived table of (name, owner, token, ttl in ms).
-- The grants drive the join, each row found by its primary key (STRAIGHT_JOIN, FORCE INDEX):
-- a plan that scans the table (MariaDB's, on small tables) would lock every row it reads, and
-- wait for and block the calls of other names. The renewal runs at READ COMMITTED, so that a
-- row not found locks no gap either.
SELECT CONVERT(l.name USING utf8mb4)
FROM ({grants}) AS x STRAIGHT_JOIN {locks} AS l FORCE INDEX (PRIMARY) ON l.name = x.name
WHERE l.owner = {marker} AND l.expires_at > UTC_TIMESTAMP(6)
FOR UPDATE
