INSERT INTO {locks} (name, owner, token, expires_at)
VALUES (?, ?, ?, UTC_TIMESTAMP(6) + INTERVAL ? * 1000 MICROSECOND)
