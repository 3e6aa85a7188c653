-- Every live grant of a shared kind (held, or kept by min_hold_ms): name, then as
-- read_shares.sql.
SELECT CONVERT(name USING utf8mb4), CAST(owner AS CHAR), CAST(kind AS CHAR), asked, slot,
    token, CAST(state AS CHAR), TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at)
FROM {shares} WHERE state <> 'waiting' AND expires_at > UTC_TIMESTAMP(6)
