-- The name's grant, if any: owner, token, and microseconds left on the database's clock
-- (zero or less: expired).
SELECT owner, token, (EXTRACT(EPOCH FROM expires_at - clock_timestamp()) * 1000000)::BIGINT
FROM {locks} WHERE name = $1
