-- A grant (state `held`) or a writer's place (`waiting`) for the owner, in place of its place
-- if it had one. Parameters: name, owner, kind, count asked for, slot, token, state, how long
-- it lasts (ms).
INSERT INTO {shares} (name, owner, kind, asked, slot, token, state, expires_at)
VALUES (?, ?, ?, ?, ?, ?, ?, UTC_TIMESTAMP(6) + INTERVAL ? * 1000 MICROSECOND)
ON DUPLICATE KEY UPDATE kind = VALUES(kind), asked = VALUES(asked), slot = VALUES(slot),
    token = VALUES(token), state = VALUES(state), expires_at = VALUES(expires_at)
