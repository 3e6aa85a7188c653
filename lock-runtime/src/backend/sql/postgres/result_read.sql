-- The single-flight value kept under a name, if it has not lapsed: its token and its text.
-- Parameter: the name.
SELECT token, value FROM {results} WHERE name = $1 AND kept_until > clock_timestamp()
