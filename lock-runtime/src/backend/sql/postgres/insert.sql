INSERT INTO {locks} (name, owner, token, expires_at)
VALUES ($1, $2, $3, clock_timestamp() + $4::BIGINT * INTERVAL '1 millisecond')
