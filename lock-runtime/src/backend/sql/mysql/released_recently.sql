-- Whether the owner released the name lately (a release sent again after its reply was lost
-- learns that the first one released it). Parameters: owner, name.
SELECT 1 FROM {releases}
WHERE owner = ? AND name = ? AND remembered_until > UTC_TIMESTAMP(6)
