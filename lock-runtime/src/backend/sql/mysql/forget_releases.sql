-- Deletes a few releases no resend can ask about any more, oldest first: each release deletes
-- more than it adds while any have lapsed, so the table holds about the releases of the
-- last release memory.
DELETE FROM {releases} WHERE remembered_until <= UTC_TIMESTAMP(6)
ORDER BY remembered_until LIMIT 4
