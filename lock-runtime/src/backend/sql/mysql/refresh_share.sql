-- The holder of a share asks again: its lease runs at least `ttl` from now (never shortened).
-- Parameters: lease ms, name, owner.
UPDATE {shares}
SET expires_at = GREATEST(expires_at, UTC_TIMESTAMP(6) + INTERVAL ? * 1000 MICROSECOND)
WHERE name = ? AND owner = ?
