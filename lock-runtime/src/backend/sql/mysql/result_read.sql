-- The single-flight value kept under a name, if it has not lapsed: its token and its text.
-- Parameter: the name.
SELECT token, CAST(value AS CHAR) FROM {results}
WHERE name = ? AND kept_until > UTC_TIMESTAMP(6)
