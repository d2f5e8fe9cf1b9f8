-- refresh.lua: a broker renews the places of its waiters on one name, all
-- in one run, every second (QUEUE_REFRESH), instead of each waiter calling
-- acquire.lua: O(log n) per waiter in the line's length n.
--
-- Uses: constants.lua, line.lua.
--
-- KEYS[1]  the line of the name: {prefix}{name}:line (see line.lua)
-- KEYS[2]  the places of the line: {prefix}{name}:until
-- ARGV[1]  how long a place lasts without being refreshed, ms
-- ARGV[2..] the tokens of this broker's waiters on the name
--
-- Returns, for each token in order, its rank in the line (0: first), or -1
-- if it has no place (it lapsed, or the store lost it): that waiter must
-- call acquire.lua again to take a new one, at the back. A token without a
-- place gets none here: only acquire.lua joins the line.
local line, places = KEYS[1], KEYS[2]
local time = redis.call('TIME')
local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
prune(line, places, now_ms)
local life = tonumber(ARGV[1])
local deadline = string.format('%d', now_ms + life)
local ranks, renewed = {}, {}
for i = 2, #ARGV do
  local rank = redis.call('ZRANK', line, ARGV[i])
  if rank and redis.call('ZSCORE', places, ARGV[i]) then
    table.insert(renewed, deadline)
    table.insert(renewed, ARGV[i])
    table.insert(ranks, rank)
  else
    table.insert(ranks, RANK_NONE)
  end
end
if #renewed > 0 then
  redis.call('ZADD', places, unpack(renewed))
  redis.call('PEXPIRE', line, life)
  redis.call('PEXPIRE', places, life)
end
return ranks
