-- The single-flight value left for a lock key (see result_publish.lua), as kept: `<token>
-- <value>`, or false when none is; {2} if the result key holds something else than a string.
-- KEYS[1] the result key.
local found = redis.call('TYPE', KEYS[1]).ok
if found ~= 'string' and found ~= 'none' then
  return {2}
end
return redis.call('GET', KEYS[1])
