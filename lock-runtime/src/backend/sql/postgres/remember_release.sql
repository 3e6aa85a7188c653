-- Who released the name last, for a while: a release sent again after its reply was lost
-- learns that the first one released it.
UPDATE {fences}
SET released_by = $1, released_until = clock_timestamp() + $2::BIGINT * INTERVAL '1 millisecond'
WHERE name = $3
