-- Renews the grants lock_grants.sql locked (live), in its transaction: no row here
-- waits for another session. `{grants}` is a derived table of (name, owner, token, ttl in ms).
UPDATE {locks} AS l JOIN ({grants}) AS x
    ON l.name = x.name AND l.owner = x.owner AND l.token = x.token
SET l.expires_at = UTC_TIMESTAMP(6) + INTERVAL x.ttl * 1000 MICROSECOND
