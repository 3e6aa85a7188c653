-- The results: the value a single-flight call (`action = Share`) left under a name, until it
-- lapses. Created with the lock tables, or on the first value kept by a client of a database
-- whose tables an earlier version created (the connect check does not ask for it).
CREATE TABLE IF NOT EXISTS {results} (
    name VARBINARY(1024) NOT NULL PRIMARY KEY,
    token BIGINT NOT NULL,
    value LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    kept_until DATETIME(6) NOT NULL,
    INDEX (kept_until)
) ENGINE = InnoDB
