-- Every live grant: name, owner, token, microseconds left, the name's fencing counter.
SELECT l.name, l.owner, l.token,
    (EXTRACT(EPOCH FROM l.expires_at - clock_timestamp()) * 1000000)::BIGINT, f.token
FROM {locks} AS l LEFT JOIN {fences} AS f ON f.name = l.name
WHERE l.expires_at > clock_timestamp()
