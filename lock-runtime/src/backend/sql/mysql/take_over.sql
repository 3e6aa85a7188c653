-- A new grant in place of an expired one: an UPDATE reads the row's latest version, so a
-- renewal that committed meanwhile keeps it.
UPDATE {locks}
SET owner = ?, token = ?, expires_at = UTC_TIMESTAMP(6) + INTERVAL ? * 1000 MICROSECOND
WHERE name = ? AND expires_at <= UTC_TIMESTAMP(6)
