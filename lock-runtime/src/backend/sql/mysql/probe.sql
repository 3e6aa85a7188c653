-- Fails when a table is missing, or lacks a column the backend uses.
SELECT l.name, l.owner, l.token, l.expires_at, f.name, f.token, f.released_by, f.released_until
FROM {locks} AS l CROSS JOIN {fences} AS f WHERE 1 = 0
