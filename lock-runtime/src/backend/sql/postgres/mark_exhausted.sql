-- Marks a shard of the name exhausted, once its holder was found holding it (under the fence
-- and marker locks); marked already, it stays so. Parameters: the name, the shard.
INSERT INTO {exhausted} (name, shard) VALUES ($1, $2) ON CONFLICT DO NOTHING
