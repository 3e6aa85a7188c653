-- After extend.sql, in its transaction: the grants it renewed (the others are gone,
-- another's, or expired, and stay so).
SELECT CONVERT(l.name USING utf8mb4), CAST(l.owner AS CHAR), l.token
FROM {locks} AS l JOIN ({grants}) AS x
    ON l.name = x.name AND l.owner = x.owner AND l.token = x.token
WHERE l.expires_at > UTC_TIMESTAMP(6)
