-- Who released the name last, for a while: a release sent again after its reply was lost
-- learns that the first one released it.
UPDATE {fences}
SET released_by = ?, released_until = UTC_TIMESTAMP(6) + INTERVAL ? * 1000 MICROSECOND
WHERE name = ?
