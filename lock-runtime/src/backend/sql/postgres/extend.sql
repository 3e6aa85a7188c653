-- Renews each grant still held as granted (same owner, same token, not expired); returns those
-- renewed (1). The rows are locked first, waiting for another session's lock (a contender's
-- attempt holds the row for a moment: its ON CONFLICT locks it) up to a short lock wait; when
-- one is held longer, the batch is sent again with `{skip_locked}` as SKIP LOCKED: the rows
-- nobody else holds are renewed, and those live whose row another session holds are returned
-- with 0 (unknown: asked again by the next round), so a stuck row costs only its own lease.
-- The others are gone, another's, or expired. `{grants}` is a VALUES list of (name, owner,
-- token, ttl in ms).
WITH x (name, owner, token, ttl) AS (
    VALUES {grants}
), free AS (
    SELECT l.name FROM {locks} AS l
    JOIN x ON l.name = x.name AND l.owner = x.owner AND l.token = x.token
    FOR UPDATE OF l {skip_locked}
), renewed AS (
    UPDATE {locks} AS l
    SET expires_at = clock_timestamp() + x.ttl * INTERVAL '1 millisecond'
    FROM x
    WHERE l.name = x.name AND l.owner = x.owner AND l.token = x.token
        AND l.expires_at > clock_timestamp() AND l.name IN (SELECT name FROM free)
    RETURNING l.name, l.owner, l.token
)
SELECT name, owner, token, 1::BIGINT FROM renewed
UNION ALL
SELECT l.name, l.owner, l.token, 0::BIGINT FROM {locks} AS l
JOIN x ON l.name = x.name AND l.owner = x.owner AND l.token = x.token
WHERE l.name NOT IN (SELECT name FROM free) AND l.expires_at > clock_timestamp()
