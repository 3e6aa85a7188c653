-- Renews each grant still held as granted (same owner, same token, not expired).
-- `{grants}` is a derived table of (name, owner, token, ttl in ms).
UPDATE {locks} AS l JOIN ({grants}) AS x
    ON l.name = x.name AND l.owner = x.owner AND l.token = x.token
SET l.expires_at = UTC_TIMESTAMP(6) + INTERVAL x.ttl * 1000 MICROSECOND
WHERE l.expires_at > UTC_TIMESTAMP(6)
