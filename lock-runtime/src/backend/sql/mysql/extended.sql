-- When lock_grants.sql skipped rows: the grants live as granted as this transaction sees them
-- (a consistent read, which waits for no lock). Those it could not lock are unknown, asked
-- again by the next round; the others are gone, another's, or expired.
-- The grants drive the join, each row found by its primary key (STRAIGHT_JOIN, FORCE INDEX):
-- a plan that scans the table (MariaDB's, on small tables) would lock every row it reads at
-- REPEATABLE READ, and wait for and block the calls of other names.
SELECT CONVERT(l.name USING utf8mb4), CAST(l.owner AS CHAR), l.token
FROM ({grants}) AS x STRAIGHT_JOIN {locks} AS l FORCE INDEX (PRIMARY)
    ON l.name = x.name AND l.owner = x.owner AND l.token = x.token
WHERE l.expires_at > UTC_TIMESTAMP(6)
