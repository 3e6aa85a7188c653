-- The holder of a share asks again: its lease runs at least `ttl` from now (never shortened).
-- Parameters: lease ms, name, owner.
UPDATE {shares}
SET expires_at = GREATEST(expires_at, clock_timestamp() + $1::BIGINT * INTERVAL '1 millisecond')
WHERE name = $2 AND owner = $3
