-- Runs the operations of a batch (a client's calls of one function to one server, or one
-- cluster slot, that were waiting at the same time) through `body`, the function each would
-- have called: KEYS holds each operation's keys in turn, ARGV[1] how many keys each has,
-- ARGV[2] how many arguments, and ARGV[3..] each operation's arguments in turn. Returns one
-- reply per operation, in order. An operation that fails (foreign data another program
-- wrote, a refused write) gets its error as its reply, and the next ones run as they would
-- have as calls of their own.
local function run_batch(body, KEYS, ARGV)
  local key_count, arg_count = tonumber(ARGV[1]), tonumber(ARGV[2])
  local replies = {}
  for n = 0, (#ARGV - 2) / arg_count - 1 do
    local keys, args = {}, {}
    for i = 1, key_count do
      keys[i] = KEYS[n * key_count + i]
    end
    for i = 1, arg_count do
      args[i] = ARGV[2 + n * arg_count + i]
    end
    local ran, reply = pcall(body, keys, args)
    if ran or (type(reply) == 'table' and reply.err) then
      replies[n + 1] = reply
    else
      replies[n + 1] = {err = 'ERR ' .. tostring(reply)}
    end
  end
  return replies
end
