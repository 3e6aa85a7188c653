-- Clears marks of the name's exhausted shards, under its fence lock: the shard's, or every
-- one when the shard is negative. Parameters: the name, the shard (twice).
DELETE FROM {exhausted} WHERE name = ? AND (? < 0 OR shard = ?)
