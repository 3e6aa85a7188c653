-- Deletes some of the single-flight values that lapsed (the oldest, a few at a time).
DELETE FROM {results} WHERE name IN (
    SELECT name FROM {results} WHERE kept_until <= clock_timestamp()
    ORDER BY kept_until LIMIT 32
)
