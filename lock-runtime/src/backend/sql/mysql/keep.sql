-- A release with `min_hold_ms`: the row stays until then under the owner's released mark,
-- which no renewal of the owner's matches.
UPDATE {locks}
SET owner = ?, expires_at = UTC_TIMESTAMP(6) + INTERVAL ? * 1000 MICROSECOND
WHERE name = ? AND owner = ?
