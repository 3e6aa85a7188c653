-- Keeps a single-flight value under a name, in place of the one kept (the caller checked,
-- under the name's fence row lock, that its grant holds the name and that no later value is
-- kept). Parameters: name, then token, value and how long it is kept in ms, twice (for the
-- insert and for the update: `VALUES()` is deprecated in MySQL).
INSERT INTO {results} (name, token, value, kept_until)
VALUES (?, ?, ?, UTC_TIMESTAMP(6) + INTERVAL ? * 1000 MICROSECOND)
ON DUPLICATE KEY UPDATE
token = ?, value = ?, kept_until = UTC_TIMESTAMP(6) + INTERVAL ? * 1000 MICROSECOND
