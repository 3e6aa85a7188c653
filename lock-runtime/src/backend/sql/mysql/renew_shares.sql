-- Third step of a renewal of shares: renews the grants locked by lock_shares.sql whose
-- marker lock_markers.sql locked. `{grants}` as there.
UPDATE {shares} AS s JOIN ({grants}) AS x
    ON s.name = x.name AND s.owner = x.owner AND s.token = x.token
SET s.expires_at = UTC_TIMESTAMP(6) + INTERVAL x.ttl * 1000 MICROSECOND
