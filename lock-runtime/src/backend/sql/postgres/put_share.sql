-- A grant (state `held`) or a writer's place (`waiting`) for the owner, in place of its place
-- if it had one. Parameters: name, owner, kind, count asked for, slot, token, state, how long
-- it lasts (ms).
INSERT INTO {shares} AS s (name, owner, kind, asked, slot, token, state, expires_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, clock_timestamp() + $8::BIGINT * INTERVAL '1 millisecond')
ON CONFLICT (name, owner) DO UPDATE SET kind = EXCLUDED.kind, asked = EXCLUDED.asked,
    slot = EXCLUDED.slot, token = EXCLUDED.token, state = EXCLUDED.state,
    expires_at = EXCLUDED.expires_at
