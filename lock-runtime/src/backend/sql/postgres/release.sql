-- One release in one statement (one round trip). Parameters: name, owner, keep ms
-- (`min_hold_ms`, 0: none), the owner's released mark, how long the release is remembered
-- (ms), the notification channel. `fence` takes the name's fence row lock first, as every
-- acquire and release does (a pruned fence row is not needed); the owner's live row is then
-- deleted (announced to the listeners at commit, and remembered for a release sent again)
-- or, with a keep, kept under the released mark until then. Returns whether this statement
-- released the grant, and whether it was released before (kept under the mark, or
-- remembered): read with the rows locked, so on their latest versions, whatever the
-- statement's snapshot.
WITH fence AS (
    SELECT name, released_by, released_until FROM {fences} WHERE name = $1 FOR UPDATE
), released AS (
    DELETE FROM {locks} AS l
    WHERE l.name = $1 AND l.owner = $2 AND $3::BIGINT = 0
        AND l.expires_at > statement_timestamp() AND (SELECT count(*) FROM fence) >= 0
    RETURNING l.token
), kept AS (
    UPDATE {locks} AS l
    SET owner = $4, expires_at = statement_timestamp() + $3::BIGINT * INTERVAL '1 millisecond'
    WHERE l.name = $1 AND l.owner = $2 AND $3::BIGINT > 0
        AND l.expires_at > statement_timestamp() AND (SELECT count(*) FROM fence) >= 0
    RETURNING l.token
), kept_before AS (
    SELECT 1 FROM {locks}
    WHERE name = $1 AND owner = $4 AND expires_at > statement_timestamp()
        AND (SELECT count(*) FROM fence) >= 0
    FOR UPDATE
), remembered AS (
    UPDATE {fences} AS f
    SET released_by = $2,
        released_until = statement_timestamp() + $5::BIGINT * INTERVAL '1 millisecond'
    FROM released
    WHERE f.name = $1
    RETURNING f.name
), announced AS (
    SELECT pg_notify($6, 'released ' || token || E'\n' || $1) FROM released
)
SELECT
    (SELECT count(*) FROM released) + (SELECT count(*) FROM kept)
        + 0 * (SELECT count(*) FROM remembered) + 0 * (SELECT count(*) FROM announced),
    (SELECT count(*) FROM kept_before)
        + (SELECT count(*) FROM fence
            WHERE released_by = $2 AND released_until > statement_timestamp())
