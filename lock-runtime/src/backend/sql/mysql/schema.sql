-- The lock table (a row per held lock) and the fences (a fencing counter per name that
-- outlives the lock's row). Names compare byte for byte (VARBINARY): `Stock` and `stock`,
-- or `a` and `a `, are different locks. Statements run in order when the tables are missing.
CREATE TABLE IF NOT EXISTS {locks} (
    name VARBINARY(1024) NOT NULL PRIMARY KEY,
    owner VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    token BIGINT NOT NULL,
    expires_at DATETIME(6) NOT NULL
) ENGINE = InnoDB;
CREATE TABLE IF NOT EXISTS {fences} (
    name VARBINARY(1024) NOT NULL PRIMARY KEY,
    token BIGINT NOT NULL,
    released_by VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    released_until DATETIME(6) NULL
) ENGINE = InnoDB
