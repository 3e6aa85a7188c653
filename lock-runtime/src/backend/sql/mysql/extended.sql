-- When lock_grants.sql skipped rows: the grants live as granted as this transaction sees them
-- (a consistent read, which waits for no lock). Those it could not lock are unknown, asked
-- again by the next round; the others are gone, another's, or expired.
SELECT CONVERT(l.name USING utf8mb4), CAST(l.owner AS CHAR), l.token
FROM {locks} AS l JOIN ({grants}) AS x
    ON l.name = x.name AND l.owner = x.owner AND l.token = x.token
WHERE l.expires_at > UTC_TIMESTAMP(6)
