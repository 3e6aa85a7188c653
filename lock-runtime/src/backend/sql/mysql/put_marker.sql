-- The name's marker: the lock table's row while shares of the name are live, lasting as long
-- as the longest of them (a mutex sees the key held). Written under the name's fence and lock
-- row locks, by a caller that found the row free, expired or a marker. Parameters: name, the
-- latest share's token, how long the marker lasts (µs).
INSERT INTO {locks} (name, owner, token, expires_at)
VALUES (?, {marker}, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)
ON DUPLICATE KEY UPDATE owner = VALUES(owner), token = VALUES(token),
    expires_at = VALUES(expires_at)
