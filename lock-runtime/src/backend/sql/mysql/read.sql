-- The name's latest token (NULL: no fence row) and grant, if any: owner, token, and
-- microseconds left on the database's clock (zero or less: expired). Parameters: the name,
-- twice. A plain read: its snapshot is taken here, after the fence row lock (the first read
-- of the transaction), so it sees every commit of an earlier holder of that lock; it takes no
-- gap lock, which would make inserts of neighbouring names deadlock.
SELECT (SELECT token FROM {fences} WHERE name = ?), CAST(l.owner AS CHAR), l.token,
    TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), l.expires_at)
FROM (SELECT 1) AS one LEFT JOIN {locks} AS l ON l.name = ?
