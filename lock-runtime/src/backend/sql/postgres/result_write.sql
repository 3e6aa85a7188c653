-- Keeps a single-flight value under a name, once `result_delete.sql` took the one kept out (the
-- caller checked, under the name's fence row lock, that its grant holds the name and that no
-- later value is kept). Parameters: name, token, value, how long it is kept in ms.
INSERT INTO {results} (name, token, value, kept_until)
VALUES ($1, $2, $3, clock_timestamp() + $4::BIGINT * INTERVAL '1 millisecond')
