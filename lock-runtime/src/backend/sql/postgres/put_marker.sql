-- The name's marker: the lock table's row while shares of the name are live, lasting as long
-- as the longest of them (a mutex sees the key held). Written under the name's fence and lock
-- row locks, by a caller that found the row free, expired or a marker. Parameters: name, the
-- latest share's token, how long the marker lasts (µs).
INSERT INTO {locks} (name, owner, token, expires_at)
VALUES ($1, {marker}, $2, clock_timestamp() + $3::BIGINT * INTERVAL '1 microsecond')
ON CONFLICT (name) DO UPDATE SET owner = EXCLUDED.owner, token = EXCLUDED.token,
    expires_at = EXCLUDED.expires_at
