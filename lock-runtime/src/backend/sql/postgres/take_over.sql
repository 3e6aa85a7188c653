-- A new grant in place of an expired one: the condition is checked again on the row's
-- latest version, so a renewal that committed meanwhile keeps it.
UPDATE {locks}
SET owner = $1, token = $2, expires_at = clock_timestamp() + $3::BIGINT * INTERVAL '1 millisecond'
WHERE name = $4 AND expires_at <= clock_timestamp()
