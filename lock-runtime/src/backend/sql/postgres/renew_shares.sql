-- Third step of a renewal of shares: renews the grants locked by lock_shares.sql whose
-- marker lock_markers.sql locked. `{grants}` as there.
WITH x (name, owner, token, ttl) AS (
    VALUES {grants}
)
UPDATE {shares} AS s
SET expires_at = clock_timestamp() + x.ttl * INTERVAL '1 millisecond'
FROM x WHERE s.name = x.name AND s.owner = x.owner AND s.token = x.token
