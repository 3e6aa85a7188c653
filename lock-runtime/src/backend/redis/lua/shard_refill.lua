-- Take marks of exhausted shards out (see shard_mark.lua): ARGV[1]'s, or every one when it is
-- ''.
-- KEYS[1] the shards marked exhausted (a set)
-- Returns how many marks were taken out.
if ARGV[1] == '' then
  return redis.call('DEL', KEYS[1])
end
return redis.call('SREM', KEYS[1], ARGV[1])
