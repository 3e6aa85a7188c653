-- The name's grant, if any: owner, token, and microseconds left on the database's clock
-- (zero or less: expired).
SELECT CAST(owner AS CHAR), token, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at)
FROM {locks} WHERE name = ?
