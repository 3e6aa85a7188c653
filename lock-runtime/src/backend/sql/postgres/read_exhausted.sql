-- The shards of the name's segmented locks marked exhausted, read by an acquire of one under
-- the fence and marker locks (a mark or refill takes the fence lock too). Parameter: the name.
SELECT shard FROM {exhausted} WHERE name = $1
