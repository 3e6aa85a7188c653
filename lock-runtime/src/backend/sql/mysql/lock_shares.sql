-- Second step of a renewal of shares: locks the grants still held as granted (same owner,
-- same token, not released, not expired), read on their latest version, and returns them
-- with their slots (checked against the slot each renewal names). `{grants}` as in
-- lock_markers.sql.
SELECT CONVERT(s.name USING utf8mb4), CAST(s.owner AS CHAR), s.token, s.slot
FROM {shares} AS s JOIN ({grants}) AS x
    ON s.name = x.name AND s.owner = x.owner AND s.token = x.token
WHERE s.state = 'held' AND s.expires_at > UTC_TIMESTAMP(6)
FOR UPDATE
