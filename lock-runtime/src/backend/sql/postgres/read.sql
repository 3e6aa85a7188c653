-- The name's latest token and grant, if any: owner, token, and microseconds left on the
-- database's clock (zero or less: expired). No row: the name was never locked.
SELECT f.token, l.owner, l.token,
    (EXTRACT(EPOCH FROM l.expires_at - clock_timestamp()) * 1000000)::BIGINT
FROM {fences} AS f LEFT JOIN {locks} AS l ON l.name = f.name
WHERE f.name = $1
