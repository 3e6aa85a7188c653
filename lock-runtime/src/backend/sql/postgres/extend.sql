-- Renews each grant still held as granted (same owner, same token, not expired); returns
-- the renewed ones. `{grants}` is a VALUES list of (name, owner, token, ttl in ms).
UPDATE {locks} AS l
SET expires_at = clock_timestamp() + x.ttl * INTERVAL '1 millisecond'
FROM (VALUES {grants}) AS x (name, owner, token, ttl)
WHERE l.name = x.name AND l.owner = x.owner AND l.token = x.token
    AND l.expires_at > clock_timestamp()
RETURNING l.name, l.owner, l.token
