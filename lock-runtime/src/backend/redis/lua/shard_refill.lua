-- Take marks of exhausted shards out (see shard_mark.lua): ARGV[1]'s, or every one when it is
-- ''.
-- KEYS[1] the shards marked exhausted (a set)
-- Returns how many marks were taken out, or {2, why} if the set holds something else (left as
-- it is).
local foreign = foreign_exhausted(KEYS[1])
if foreign then
  return {2, foreign}
end
if ARGV[1] == '' then
  return redis.call('DEL', KEYS[1])
end
return redis.call('SREM', KEYS[1], ARGV[1])
