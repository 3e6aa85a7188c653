-- Marks a shard of the name exhausted, once its holder was found holding it (under the fence
-- and marker locks); marked already, it stays so. ON DUPLICATE KEY UPDATE locks the row
-- exclusively at once (INSERT IGNORE would take a shared lock). Parameters: the name, the
-- shard.
INSERT INTO {exhausted} (name, shard) VALUES (?, ?) ON DUPLICATE KEY UPDATE shard = shard
