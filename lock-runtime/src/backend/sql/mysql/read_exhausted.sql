-- The shards of the name's segmented locks marked exhausted, read by an acquire of one under
-- the fence and marker locks (a mark or refill takes the fence lock too). A plain read, in the
-- read view the lock row's read took after the fence lock: it sees every mark and refill
-- committed before. Parameter: the name.
SELECT shard FROM {exhausted} WHERE name = ?
