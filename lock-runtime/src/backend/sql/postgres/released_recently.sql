-- Whether the owner released the name lately (a release sent again after its reply was lost
-- learns that the first one released it). Parameters: owner, name.
SELECT 1::BIGINT FROM {releases}
WHERE owner = $1 AND name = $2 AND remembered_until > clock_timestamp()
