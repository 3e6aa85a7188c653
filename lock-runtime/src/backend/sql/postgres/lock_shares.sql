-- Second step of a renewal of shares: locks the grants still held as granted (same owner,
-- same token, not released, not expired), read on their latest version, and returns them
-- with their slots (checked against the slot each renewal names). `{grants}` as in
-- lock_markers.sql.
WITH x (name, owner, token, ttl) AS (
    VALUES {grants}
)
SELECT s.name, s.owner, s.token, s.slot FROM {shares} AS s
JOIN x ON s.name = x.name AND s.owner = x.owner AND s.token = x.token
WHERE s.state = 'held' AND s.expires_at > clock_timestamp()
FOR UPDATE OF s
