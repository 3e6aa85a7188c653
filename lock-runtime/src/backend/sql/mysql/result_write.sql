-- Keeps a single-flight value under a name, once `result_delete.sql` took the one kept out (the
-- caller checked, under the name's fence row lock, that its grant holds the name and that no
-- later value is kept). Parameters: name, token, value, how long it is kept in ms. The value
-- goes once (an upsert would send it twice, against `max_allowed_packet`).
INSERT INTO {results} (name, token, value, kept_until)
VALUES (?, ?, ?, UTC_TIMESTAMP(6) + INTERVAL ? * 1000 MICROSECOND)
