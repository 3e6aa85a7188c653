-- Deletes some of the single-flight values that lapsed (the oldest, a few at a time; run at
-- READ COMMITTED, as forget_releases.sql, so that it locks only the rows it deletes).
DELETE FROM {results} WHERE kept_until <= UTC_TIMESTAMP(6) ORDER BY kept_until LIMIT 32
