-- Remembers the owner's release, for a resend of it that may follow a lost reply.
-- Parameters: owner, name, how long (ms). An owner token names one acquisition, so one name;
-- the name is written again all the same, should a caller reuse an owner for another name.
INSERT INTO {releases} (owner, name, remembered_until)
VALUES (?, ?, UTC_TIMESTAMP(6) + INTERVAL ? * 1000 MICROSECOND)
ON DUPLICATE KEY UPDATE name = VALUES(name), remembered_until = VALUES(remembered_until)
