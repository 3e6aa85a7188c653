-- Renews each grant still held as granted (same owner, same token, not expired) whose row no
-- other session holds locked; returns those renewed (1), and those live whose row another
-- session held locked (0: unknown, asked again by the next round), each grant on its own: a
-- row stuck behind another session's lock costs only its own lease. The others are gone,
-- another's, or expired. `{grants}` is a VALUES list of (name, owner, token, ttl in ms).
WITH x (name, owner, token, ttl) AS (
    VALUES {grants}
), free AS (
    SELECT l.name FROM {locks} AS l
    JOIN x ON l.name = x.name AND l.owner = x.owner AND l.token = x.token
    FOR UPDATE OF l SKIP LOCKED
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
