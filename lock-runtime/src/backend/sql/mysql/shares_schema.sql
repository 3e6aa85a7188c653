-- The shares: a row per grant of a shared kind (read/write locks, semaphores, segmented locks)
-- and per waiting writer's place in line, by name and owner: its kind (`r`, `w`, `s`, `g`) and
-- the count it asked for (0 for readers and writers), its permit or shard (slot, 0 for readers
-- and writers), its fencing token (drawn from the name's fence, as a mutex's), its state
-- (`held`; `kept`: released, and kept by min_hold_ms until it expires; `waiting`: a writer's
-- place, until it lapses) and its expiry. While a grant of a name is live, the lock table
-- holds a marker row for the name (owner `:shared`), which lasts at least as long as every
-- live grant: the mutex sees the key held. Then the exhausted shards of segmented locks, a row
-- per name and shard marked, until refilled. Created with the lock tables, or on the first
-- shared acquire (or mark, or refill) of a client of a database whose tables an earlier
-- version created (as results_schema.sql): where only the exhausted shards' table is missing,
-- on the first use of segmented locks.
CREATE TABLE IF NOT EXISTS {shares} (
    name VARBINARY(1024) NOT NULL,
    owner VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    kind VARCHAR(1) CHARACTER SET ascii NOT NULL,
    asked BIGINT NOT NULL,
    slot BIGINT NOT NULL,
    token BIGINT NOT NULL,
    state VARCHAR(8) CHARACTER SET ascii NOT NULL,
    expires_at DATETIME(6) NOT NULL,
    PRIMARY KEY (name, owner)
) ENGINE = InnoDB;
CREATE TABLE IF NOT EXISTS {exhausted} (
    name VARBINARY(1024) NOT NULL,
    shard BIGINT NOT NULL,
    PRIMARY KEY (name, shard)
) ENGINE = InnoDB
