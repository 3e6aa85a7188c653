-- The name's shares, expired ones too: owner, kind, count asked for, slot, token, state, and
-- microseconds left on the database's clock (zero or less: expired). Parameter: the name. A
-- plain read, after lock_marker.sql: no renewal of them commits until this transaction does.
SELECT CAST(owner AS CHAR), CAST(kind AS CHAR), asked, slot, token, CAST(state AS CHAR),
    TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at)
FROM {shares} WHERE name = ?
