-- Takes the name's fence row lock (creating the row on first use), which every acquire and
-- release of the name holds until it commits. Parameters: name, then 1 for an acquire (three
-- times), which draws a token: the counter plus one, or the database clock's microseconds if
-- greater, so a token no grant has had and greater than every earlier one, even after the
-- fence row was pruned (while the clock never steps back; sessions run in UTC); 0 for a
-- release, which leaves the counter as it is. ON DUPLICATE KEY UPDATE locks the row
-- exclusively at once (INSERT IGNORE would take a shared lock, and two of them deadlock on
-- the upgrade).
INSERT INTO {fences} (name, token)
VALUES (?, ? * CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED))
ON DUPLICATE KEY UPDATE
token = GREATEST(token + ?, ? * CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED))
