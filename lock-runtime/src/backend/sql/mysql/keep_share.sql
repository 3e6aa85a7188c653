-- A release with `min_hold_ms`: the share stays until then, as `kept`, which no renewal
-- matches. Parameters: keep ms, name, owner.
UPDATE {shares}
SET state = 'kept', expires_at = UTC_TIMESTAMP(6) + INTERVAL ? * 1000 MICROSECOND
WHERE name = ? AND owner = ?
