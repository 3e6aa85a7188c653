-- A release with `min_hold_ms`: the share stays until then, as `kept`, which no renewal
-- matches. Parameters: keep ms, name, owner.
UPDATE {shares}
SET state = 'kept', expires_at = clock_timestamp() + $1::BIGINT * INTERVAL '1 millisecond'
WHERE name = $2 AND owner = $3
