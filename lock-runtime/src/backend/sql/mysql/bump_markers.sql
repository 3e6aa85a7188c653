-- Last step of a renewal of shares: each marker lasts at least as long as the grants renewed
-- (its clock read by a later statement than theirs), so that a mutex never takes a name over
-- while a share of it is live. `{grants}` as in lock_markers.sql, the renewed ones.
UPDATE {locks} AS l
JOIN (SELECT g.name, MAX(g.ttl) AS ttl FROM ({grants}) AS g GROUP BY g.name) AS x
    ON l.name = x.name
SET l.expires_at = GREATEST(l.expires_at, UTC_TIMESTAMP(6) + INTERVAL x.ttl * 1000 MICROSECOND)
WHERE l.owner = {marker}
