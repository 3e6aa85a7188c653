-- Remembers the owner's release of a share, for a resend of it that may follow a lost reply
-- (a mutex's release does it in release.sql). Parameters: owner, name, how long (ms). An
-- owner token names one acquisition, so one name; the name is written again all the same,
-- should a caller reuse an owner for another name.
INSERT INTO {releases} (owner, name, remembered_until)
VALUES ($1, $2, clock_timestamp() + $3::BIGINT * INTERVAL '1 millisecond')
ON CONFLICT (owner) DO UPDATE SET name = EXCLUDED.name,
    remembered_until = EXCLUDED.remembered_until
