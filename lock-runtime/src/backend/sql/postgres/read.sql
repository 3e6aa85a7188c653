-- The name's latest token (NULL: no fence row) and grant, if any: owner, token, and
-- microseconds left on the database's clock (zero or less: expired). Parameters: the name,
-- twice.
SELECT (SELECT token FROM {fences} WHERE name = $1), l.owner, l.token,
    (EXTRACT(EPOCH FROM l.expires_at - clock_timestamp()) * 1000000)::BIGINT
FROM (SELECT 1) AS one LEFT JOIN {locks} AS l ON l.name = $2
