-- Fails when a table is missing, or lacks a column the backend uses.
SELECT l.name, l.owner, l.token, l.expires_at, f.name, f.token, r.owner, r.name,
    r.remembered_until
FROM {locks} AS l CROSS JOIN {fences} AS f CROSS JOIN {releases} AS r WHERE 1 = 0
