-- The results: the value a single-flight call (`action = Share`) left under a name, until it
-- lapses. Created with the lock tables, or on the first value kept by a client of a database
-- whose tables an earlier version created (the connect check does not ask for it); in one
-- transaction, serialised as schema.sql's.
SELECT pg_advisory_xact_lock(hashtext('fencelock schema {locks}'));
CREATE TABLE IF NOT EXISTS {results} (
    name TEXT PRIMARY KEY,
    token BIGINT NOT NULL,
    value TEXT NOT NULL,
    kept_until TIMESTAMPTZ NOT NULL
);
CREATE INDEX IF NOT EXISTS {results_until} ON {results} (kept_until)
