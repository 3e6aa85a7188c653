-- Last step of a renewal of shares: each marker lasts at least as long as the grants renewed
-- (its clock read later than theirs), so that a mutex never takes a name over while a share
-- of it is live. `{grants}` as in lock_markers.sql, the renewed ones.
WITH x (name, owner, token, ttl) AS (
    VALUES {grants}
), longest AS (
    SELECT name, max(ttl) AS ttl FROM x GROUP BY name
)
UPDATE {locks} AS l
SET expires_at = GREATEST(l.expires_at, clock_timestamp() + longest.ttl * INTERVAL '1 millisecond')
FROM longest WHERE l.name = longest.name AND l.owner = {marker}
