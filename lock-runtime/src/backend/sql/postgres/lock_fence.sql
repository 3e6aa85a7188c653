-- Takes the name's fence row lock (creating the row on first use), which every acquire and
-- release of the name holds until it commits. Parameters: name, then 1 for an acquire (three
-- times), which draws a token: the counter plus one, or the database clock's microseconds if
-- greater, so a token no grant has had and greater than every earlier one, even after the
-- fence row was pruned (while the clock never steps back); 0 for a release, which leaves the
-- counter as it is.
INSERT INTO {fences} AS f (name, token)
VALUES ($1, $2 * (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::BIGINT)
ON CONFLICT (name) DO UPDATE
SET token = GREATEST(f.token + $3, $4 * (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::BIGINT)
