-- Deletes the single-flight values that lapsed.
DELETE FROM {results} WHERE kept_until <= clock_timestamp()
