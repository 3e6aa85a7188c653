-- The lock table (a row per held lock) and the fences (a fencing counter per name that
-- outlives the lock's row). Statements run in order, in one transaction, when the tables
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
    token BIGINT NOT NULL,
    released_by TEXT,
    released_until TIMESTAMPTZ
)
