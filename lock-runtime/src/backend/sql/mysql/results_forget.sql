-- Deletes the single-flight values that lapsed.
DELETE FROM {results} WHERE kept_until <= UTC_TIMESTAMP(6)
