-- One release in one statement (one round trip). Parameters: name, owner, keep ms
-- (`min_hold_ms`, 0: none), the owner's released mark, how long the release is remembered
-- (ms), the notification channel. `fence` takes the name's fence row lock first, as every
-- acquire and release does (a pruned fence row is not needed); the owner's live row is then
-- deleted (announced to the listeners at commit) or, with a keep, kept under the released
-- mark until then, and either way the release is remembered for the owner, for a resend of
-- it that may follow a lost reply. A few remembered releases that lapsed are deleted (rows
-- another release deletes at the same time are skipped). Returns whether this statement
-- released the grant, and whether it was released before (kept under the mark, or
-- remembered): the kept row read with the rows locked, so on its latest version, whatever the
-- statement's snapshot (a resend follows its first send's end: the backend settles calls).
WITH fence AS (
    SELECT name FROM {fences} WHERE name = $1 FOR UPDATE
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
    INSERT INTO {releases} (owner, name, remembered_until)
    SELECT $2, $1, statement_timestamp() + $5::BIGINT * INTERVAL '1 millisecond'
    FROM (SELECT token FROM released UNION ALL SELECT token FROM kept) AS done
    ON CONFLICT (owner) DO UPDATE SET name = EXCLUDED.name,
        remembered_until = EXCLUDED.remembered_until
    RETURNING 1
), remembered_before AS (
    SELECT 1 FROM {releases}
    WHERE owner = $2 AND name = $1 AND remembered_until > statement_timestamp()
), forgotten AS (
    DELETE FROM {releases} WHERE owner IN (
        SELECT owner FROM {releases}
        WHERE remembered_until <= statement_timestamp() AND owner <> $2
        ORDER BY remembered_until LIMIT 4 FOR UPDATE SKIP LOCKED
    )
    RETURNING 1
), announced AS (
    SELECT pg_notify($6, 'released ' || token || E'\n' || $1) FROM released
)
SELECT
    (SELECT count(*) FROM released) + (SELECT count(*) FROM kept)
        + 0 * (SELECT count(*) FROM remembered) + 0 * (SELECT count(*) FROM forgotten)
        + 0 * (SELECT count(*) FROM announced),
    (SELECT count(*) FROM kept_before) + (SELECT count(*) FROM remembered_before)
