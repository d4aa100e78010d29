"""Lua scripts run inside Redis, so each multi-step operation is atomic across every replica.

Key layout (all under `llmgw:`; the `{…}` hash tag keeps one key's buckets in one Redis Cluster slot):
  llmgw:rl:{<key>}:rpm:<minute>        requests counted in that fixed minute
  llmgw:rl:{<key>}:tpm:<minute>        tokens counted in that fixed minute
  llmgw:spend:{<key>}:<period id>      USD spent in a UTC day (2024-05-31) or month (2024-05)
  llmgw:spend-seeded:<period id>       set once the period's spend counters were seeded from the ledger
  llmgw:cache:{<tenant>}:<sha256>      a cached response body (PX), written by CACHE_SET with the two below
  llmgw:cached:{<tenant>}              the tenant's cached answers by time written (a sorted set)
  llmgw:cached-bytes:{<tenant>}        their sizes, and `:total` (a hash)
  llmgw:owner:{<response id>}          who created a response id (plain SET with PX)
  llmgw:owned:{<tenant>}               the tenant's response ids by time recorded (a sorted set, OWN_RESPONSE)
  llmgw:owned-items:{<tenant>}         the tenant's output item ids by expiry (a sorted set, OWN_RESPONSE, OWNED_ITEMS)
  llmgw:served:{<model name>}          the models an upstream-reported model name reached (a set)
"""

from __future__ import annotations

# KEYS: rpm current, rpm previous, tpm current, tpm previous.
# ARGV: rpm limit ("" = none), tpm limit ("" = none), token cost, previous-minute weight, ttl seconds.
# The comparison mirrors gateway.state.window.fits operand for operand (both are IEEE doubles), so the
# memory and Redis backends decide alike. Returns {allowed, rpm cur, rpm prev, tpm cur, tpm prev}, the
# counts read before counting, from which the caller computes Retry-After.
CHECK_REQUEST = """
local function count(k) return tonumber(redis.call('GET', k) or '0') end
local rpm = tonumber(ARGV[1])
local tpm = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local w = tonumber(ARGV[4])
local ttl = tonumber(ARGV[5])
local rc, rp, tc, tp = count(KEYS[1]), count(KEYS[2]), count(KEYS[3]), count(KEYS[4])
local function fits(cur, prev, c, limit) return limit > 0 and prev * w + cur + c <= limit end
local ok = true
if rpm and not fits(rc, rp, 1, rpm) then ok = false end
if tpm and not fits(tc, tp, cost, tpm) then ok = false end
if ok then
  if rpm then
    redis.call('INCR', KEYS[1])
    redis.call('EXPIRE', KEYS[1], ttl)
  end
  if tpm then
    redis.call('INCRBY', KEYS[3], cost)
    redis.call('EXPIRE', KEYS[3], ttl)
  end
end
return {ok and 1 or 0, rc, rp, tc, tp}
"""

# KEYS: a rate bucket. ARGV: what to add (negative: a reservation's surplus, or a refused request's count,
# taken back from the bucket it was counted in), ttl seconds.
# Taking back from a bucket that already expired does nothing: it no longer limits anyone. Adding (the
# tokens an answer used beyond its reservation, in the minute it ended) makes the bucket if need be, with
# the TTL the check gives it. The count never goes below zero (a reservation made before a Redis restart).
SETTLE_TOKENS = """
local delta = tonumber(ARGV[1])
if delta < 0 and redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local v = redis.call('INCRBY', KEYS[1], delta)
if v < 0 then
  redis.call('SET', KEYS[1], 0, 'KEEPTTL')
  v = 0
end
if redis.call('TTL', KEYS[1]) < 0 then redis.call('EXPIRE', KEYS[1], ARGV[2]) end
return v
"""

# KEYS: the spend key of one period. ARGV: usd to add, ttl seconds. Returns the new total (a string).
ADD_SPEND = """
local v = redis.call('INCRBYFLOAT', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[2])
return v
"""

# KEYS: the spend key of one period. ARGV: the ledger's spend of that period (usd), ttl seconds.
# Raised to the ledger's figure, never lowered: what the counter holds already was counted by the
# replicas that spent it, so a seed never counts it twice (docs/keys-teams-spend.md, Budgets).
SEED_SPEND = """
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) > cur then
  redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
  return 1
end
return 0
"""

# KEYS: the served name's set. ARGV: the member ([model, configured upstream name] as JSON), ttl ms, the
# most members kept. Added unless the set is full; the TTL counts from the last record, so a name still
# being answered under stays (docs/agents.md, "Names the gateway gave back").
ADD_SERVED_NAME = """
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 and redis.call('SCARD', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('SADD', KEYS[1], ARGV[1])
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 0
"""

# KEYS: the tenant's response ids (a sorted set, scored by the time recorded: microseconds of Redis's
# clock, the same clock for every replica), the tenant's output item ids (a sorted set, scored by their
# expiry, on the same clock). ARGV: the response id, its ttl ms, the most ids a tenant keeps, the most
# items a tenant keeps, then the response's output item ids, if any. Counts the id (those recorded over a
# ttl ago are forgotten: their records expired) and returns those over the bound, oldest first, whose
# records the caller deletes: a record lives under its id's own tag, since a lookup knows the id and not its
# owner, so in a Redis Cluster it is in another slot than this set (docs/responses-bridge.md, Ownership).
# The items are counted in the same call (same tag, no other round trip): the expired ones forgotten, and
# those over the items' bound (the tenant's oldest) dropped.
OWN_RESPONSE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - ttl * 1000)
redis.call('ZADD', KEYS[1], now, ARGV[1])
local over = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[3])
local dropped = {}
if over > 0 then
  local popped = redis.call('ZPOPMIN', KEYS[1], over)
  for i = 1, #popped, 2 do dropped[#dropped + 1] = popped[i] end
end
if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
if #ARGV > 4 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  for i = 5, #ARGV do redis.call('ZADD', KEYS[2], now + ttl * 1000, ARGV[i]) end
  local extra = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[4])
  if extra > 0 then redis.call('ZPOPMIN', KEYS[2], extra) end
  if redis.call('PTTL', KEYS[2]) < ttl then redis.call('PEXPIRE', KEYS[2], ttl) end
end
return dropped
"""

# KEYS: the tenant's output item ids (OWN_RESPONSE's second key). ARGV: item ids. Returns the position
# (from 1) of the first that is not the tenant's (never recorded, dropped, or past its expiry on Redis's
# clock), or 0 when every one is.
OWNED_ITEMS = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
for i = 1, #ARGV do
  local expiry = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if not expiry or tonumber(expiry) <= now then return i end
end
return 0
"""

# KEYS: the answer's key, the tenant's cached answers (a sorted set of cache keys, scored by the time
# written: microseconds of Redis's clock), their sizes (a hash of cache key -> bytes, and `:total`, which
# no sha256 hex digest is). ARGV: the cache key, the answer, ttl ms, the most answers and bytes a tenant
# keeps, the prefix of the tenant's answers' keys (their tag is the tenant's: one slot). Stores the answer,
# then drops the tenant's oldest answers (with one ttl for all, the first to expire anyway) until both
# bounds hold. A few of those written over a ttl ago (expired) are forgotten at each write; the others
# are the first dropped.
CACHE_SET = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local ttl = tonumber(ARGV[3])
local function drop(member)
  local size = redis.call('HGET', KEYS[3], member)
  if size then
    redis.call('HDEL', KEYS[3], member)
    redis.call('HINCRBY', KEYS[3], ':total', -tonumber(size))
  end
  redis.call('ZREM', KEYS[2], member)
  redis.call('DEL', ARGV[6] .. member)
end
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now - ttl * 1000, 'LIMIT', 0, 16)
for _, m in ipairs(expired) do drop(m) end
drop(ARGV[1])
redis.call('SET', KEYS[1], ARGV[2], 'PX', ttl)
redis.call('ZADD', KEYS[2], now, ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], #ARGV[2])
local total = redis.call('HINCRBY', KEYS[3], ':total', #ARGV[2])
while redis.call('ZCARD', KEYS[2]) > tonumber(ARGV[4]) or total > tonumber(ARGV[5]) do
  local oldest = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  if not oldest then break end
  drop(oldest)
  total = tonumber(redis.call('HGET', KEYS[3], ':total') or '0')
end
for i = 2, 3 do
  if redis.call('PTTL', KEYS[i]) < ttl then redis.call('PEXPIRE', KEYS[i], ttl) end
end
return 0
"""
