-- Deletes releases no resend can ask about any more, oldest first, after a share's release
-- (one in eight, as on MySQL; a mutex's release deletes a few in release.sql). Rows another
-- client deletes at the same time are skipped.
DELETE FROM {releases} WHERE owner IN (
    SELECT owner FROM {releases} WHERE remembered_until <= clock_timestamp()
    ORDER BY remembered_until LIMIT 32 FOR UPDATE SKIP LOCKED
)
