-- Every live grant of a shared kind (held, or kept by min_hold_ms): name, then as
-- read_shares.sql.
SELECT name, owner, kind, asked, slot, token, state,
    (EXTRACT(EPOCH FROM expires_at - clock_timestamp()) * 1000000)::BIGINT
FROM {shares} WHERE state <> 'waiting' AND expires_at > clock_timestamp()
