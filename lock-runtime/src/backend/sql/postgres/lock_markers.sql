-- First step of a renewal of shares, in its transaction: locks the live markers of the names
-- (in name order, as every renewal does), so that no acquire or release of those names runs
-- until the commit, and returns their names. A name whose marker is gone or expired has no
-- live share. `{grants}` is a VALUES list of (name, owner, token, ttl in ms).
WITH x (name, owner, token, ttl) AS (
    VALUES {grants}
)
SELECT l.name FROM {locks} AS l
WHERE l.owner = {marker} AND l.expires_at > clock_timestamp()
    AND l.name IN (SELECT name FROM x)
ORDER BY l.name
FOR UPDATE
