-- The single-flight value left for a lock key (see result_publish.lua), as kept: `<token>
-- <value>`, or false when none is.
-- KEYS[1] the result key.
return redis.call('GET', KEYS[1])
