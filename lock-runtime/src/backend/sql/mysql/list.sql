-- Every live grant: name, owner, token, microseconds left, the name's fencing counter.
SELECT CONVERT(l.name USING utf8mb4), CAST(l.owner AS CHAR), l.token,
    TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), l.expires_at), f.token
FROM {locks} AS l LEFT JOIN {fences} AS f ON f.name = l.name
WHERE l.expires_at > UTC_TIMESTAMP(6)
