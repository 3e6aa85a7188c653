-- Delivered to the listeners when the transaction commits, never before.
SELECT pg_notify($1, $2)
