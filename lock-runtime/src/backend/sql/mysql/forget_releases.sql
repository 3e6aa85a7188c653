-- Deletes releases no resend can ask about any more, oldest first, after a release (one in
-- eight: each deletes more than the releases in between add while any have lapsed, so the
-- table holds about the releases of the last release memory). Run at READ COMMITTED, apart
-- from the release's transaction: a range delete under REPEATABLE READ would lock the gaps of
-- the time index beside other releases' fresh rows, and releases of unrelated names would
-- deadlock. One at a time in a client: two of these deadlock each other (a failure only
-- leaves the rows to the next one).
DELETE FROM {releases} WHERE remembered_until <= UTC_TIMESTAMP(6)
ORDER BY remembered_until LIMIT 32
