-- First step of a renewal of shares, in its transaction: locks the live markers of the names
-- (in name order, as every renewal does), so that no acquire or release of those names runs
-- until the commit, and returns their names. A name whose marker is gone or expired has no
-- live share. `{grants}` is a derived table of (name, owner, token, ttl in ms).
SELECT CONVERT(l.name USING utf8mb4) FROM {locks} AS l
WHERE l.owner = {marker} AND l.expires_at > UTC_TIMESTAMP(6)
    AND l.name IN (SELECT x.name FROM ({grants}) AS x)
ORDER BY l.name
FOR UPDATE
