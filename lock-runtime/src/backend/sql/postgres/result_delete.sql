-- Takes the single-flight value kept under a name out. Parameter: the name.
DELETE FROM {results} WHERE name = $1
