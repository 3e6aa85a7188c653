-- A release with `min_hold_ms`: the row stays until then under the owner's released mark,
-- which no renewal of the owner's matches.
UPDATE {locks}
SET owner = $1, expires_at = clock_timestamp() + $2::BIGINT * INTERVAL '1 millisecond'
WHERE name = $3 AND owner = $4
