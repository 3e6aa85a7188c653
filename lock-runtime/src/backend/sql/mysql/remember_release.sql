-- Remembers the owner's release, for a resend of it that may follow a lost reply.
-- Parameters: owner, name, how long (ms).
INSERT INTO {releases} (owner, name, remembered_until)
VALUES (?, ?, UTC_TIMESTAMP(6) + INTERVAL ? * 1000 MICROSECOND)
ON DUPLICATE KEY UPDATE remembered_until = VALUES(remembered_until)
