-- One acquire attempt in one statement (one round trip). Parameters: name, owner, lease ms.
-- `fence` takes the name's fence row lock first, as every acquire and release does, and
-- draws a token as lock_fence.sql does (greater than every earlier one of the name); `granted` then inserts the lock row, takes over an expired one, or refreshes
-- the caller's own (keeping its token; a lease is never shortened). ON CONFLICT sees the
-- row's latest version, whatever the statement's snapshot. "Now" is the statement's start:
-- earlier than the grant, so an expiry is never set later than the caller counts on.
-- Returns the granted token (NULL: held by another), the latest token drawn, the holder's
-- microseconds left as of the snapshot (a hint), and its owner (the shares' marker, when the
-- name is held by a shared kind: the caller refuses such a key).
WITH fence AS (
    INSERT INTO {fences} AS f (name, token)
    VALUES ($1, (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::BIGINT)
    ON CONFLICT (name) DO UPDATE
    SET token = GREATEST(f.token + 1, (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::BIGINT)
    RETURNING f.token
), granted AS (
    INSERT INTO {locks} AS l (name, owner, token, expires_at)
    SELECT $1, $2, fence.token,
        statement_timestamp() + $3::BIGINT * INTERVAL '1 millisecond'
    FROM fence
    ON CONFLICT (name) DO UPDATE SET
        token = CASE WHEN l.expires_at > statement_timestamp()
            THEN l.token ELSE EXCLUDED.token END,
        expires_at = CASE WHEN l.expires_at > statement_timestamp()
            THEN GREATEST(l.expires_at, EXCLUDED.expires_at) ELSE EXCLUDED.expires_at END,
        owner = EXCLUDED.owner
    WHERE l.owner = EXCLUDED.owner OR l.expires_at <= statement_timestamp()
    RETURNING l.token
)
SELECT
    (SELECT token FROM granted),
    (SELECT token FROM fence),
    (SELECT (EXTRACT(EPOCH FROM expires_at - statement_timestamp()) * 1000000)::BIGINT
        FROM {locks} WHERE name = $1),
    (SELECT owner FROM {locks} WHERE name = $1)
