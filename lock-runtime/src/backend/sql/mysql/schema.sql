-- The lock table (a row per held lock), the fences (a fencing counter per name that outlives
-- the lock's row), and the releases (each owner's release, remembered for a resend of it that
-- may follow a lost reply; the backend deletes those that lapsed); the results table is
-- results_schema.sql's. Names compare byte for byte (VARBINARY): `Stock` and `stock`,
-- or `a` and `a `, are different locks. Statements run in order when the tables are missing.
CREATE TABLE IF NOT EXISTS {locks} (
    name VARBINARY(1024) NOT NULL PRIMARY KEY,
    owner VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    token BIGINT NOT NULL,
    expires_at DATETIME(6) NOT NULL
) ENGINE = InnoDB;
CREATE TABLE IF NOT EXISTS {fences} (
    name VARBINARY(1024) NOT NULL PRIMARY KEY,
    token BIGINT NOT NULL
) ENGINE = InnoDB;
CREATE TABLE IF NOT EXISTS {releases} (
    owner VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY,
    name VARBINARY(1024) NOT NULL,
    remembered_until DATETIME(6) NOT NULL,
    INDEX (remembered_until)
) ENGINE = InnoDB
