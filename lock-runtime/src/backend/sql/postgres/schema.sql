-- The lock table (a row per held lock), the fences (a fencing counter per name that outlives
-- the lock's row), and the releases (each owner's release, remembered for a resend of it that
-- may follow a lost reply; the backend deletes those that lapsed); the results table is
-- results_schema.sql's. Statements run in order, in one transaction, when the tables
-- are missing; the advisory lock serialises processes that start at once (PostgreSQL's
-- CREATE TABLE IF NOT EXISTS can fail when two run together).
SELECT pg_advisory_xact_lock(hashtext('fencelock schema {locks}'));
CREATE TABLE IF NOT EXISTS {locks} (
    name TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    token BIGINT NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);
CREATE TABLE IF NOT EXISTS {fences} (
    name TEXT PRIMARY KEY,
    token BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS {releases} (
    owner TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    remembered_until TIMESTAMPTZ NOT NULL
);
CREATE INDEX IF NOT EXISTS {releases_until} ON {releases} (remembered_until)
