-- The name's shares, expired ones too: owner, kind, count asked for, slot, token, state, and
-- microseconds left on the database's clock (zero or less: expired). Parameter: the name.
SELECT owner, kind, asked, slot, token, state,
    (EXTRACT(EPOCH FROM expires_at - clock_timestamp()) * 1000000)::BIGINT
FROM {shares} WHERE name = $1
