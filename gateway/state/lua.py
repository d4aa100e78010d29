"""Lua scripts run inside Redis, so each multi-step operation is atomic across every replica.

Key layout (all under `llmgw:`; the `{…}` hash tag keeps one key's buckets in one Redis Cluster slot):
  llmgw:rl:{<key>}:rpm:<minute>        requests counted in that fixed minute
  llmgw:rl:{<key>}:tpm:<minute>        tokens counted in that fixed minute
  llmgw:spend:{<key>}:<period id>      USD spent in a UTC day (2024-05-31) or month (2024-05)
  llmgw:spend-seeded:<period id>       set once the period's spend counters were seeded from the ledger
  llmgw:cache:<sha256>                 a cached response body (plain SET with PX, no script needed)
  llmgw:owner:{<response id>}          who created a response id (plain SET with PX)
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

# KEYS: the tpm bucket the reservation was counted in. ARGV: actual - reserved.
# A bucket that already expired is left alone: it no longer limits anyone, and recreating it would
# leave a key without TTL. The count never goes below zero (a reservation made before a Redis restart).
SETTLE_TOKENS = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local v = redis.call('INCRBY', KEYS[1], ARGV[1])
if v < 0 then
  redis.call('SET', KEYS[1], 0, 'KEEPTTL')
  v = 0
end
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
