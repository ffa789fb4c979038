"""The Lua scripts of the Redis store: one script per operation, each over one session's hash-tagged keys.

Every script starts with the shared prelude (`PRELUDE`): the tenant check and the format guard
that every operation runs atomically with its own work.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

__all__ = [
    "APPEND",
    "APPEND_WITH_STATE",
    "ARCHIVE",
    "AUDIT",
    "COUNT",
    "CREATE",
    "DELETE",
    "DELETE_IDLE",
    "GET",
    "GET_MESSAGE",
    "GET_SNAPSHOT",
    "LIST_SNAPSHOTS",
    "LIST_STATES",
    "LOAD",
    "LOAD_STATE",
    "LOCK_HOLDER",
    "PRELUDE",
    "PUT_SNAPSHOT",
    "READ_AUDIT",
    "RENEW_LOCK",
    "RESTORE_STATE",
    "SAVE_STATE",
    "TOUCH",
    "TRY_LOCK",
    "UNLOCK",
    "Script",
]


@dataclass(frozen=True, slots=True)
class Script:
    """A Lua script: its source (the prelude, then its body) and the SHA1 EVALSHA names it by."""

    source: str
    sha: str


def _script(body: str) -> Script:
    """The script of ``body`` after the shared prelude."""
    source = PRELUDE + body
    return Script(source=source, sha=hashlib.sha1(source.encode()).hexdigest())


# KEYS: the nine session keys in _SUFFIXES order. ARGV[1] now, ARGV[2] ttl in ms (0: none),
# ARGV[3] newest readable format, ARGV[4] the tenant the caller names ('' for any), then the
# operation's own arguments. Replies start with a status: 0 ok, -1 no such session (or one of
# another tenant: the caller cannot tell the two apart), -2 a format field that is not a number,
# > 0 the session's (too new) format.
PRELUDE = """
local function owned()
  if ARGV[4] == '' then return true end
  return redis.call('HGET', KEYS[1], 'tenant') == ARGV[4]
end
local function guard()
  local fmt = redis.call('HGET', KEYS[1], 'format')
  if not fmt or not owned() then return -1 end
  fmt = tonumber(fmt)
  if not fmt then return -2 end
  if fmt > tonumber(ARGV[3]) then return fmt end
  return 0
end
local function refresh()
  local last = tonumber(redis.call('HGET', KEYS[1], 'last_active') or '0') or 0
  if tonumber(ARGV[1]) > last then redis.call('HSET', KEYS[1], 'last_active', ARGV[1]) end
  local ttl = tonumber(ARGV[2])
  if ttl > 0 then
    for i = 1, 8 do redis.call('PEXPIRE', KEYS[i], ttl) end
  end
end
local function stop_of(count, start, limit)
  local stop = count - 1
  if limit >= 0 and start + limit - 1 < stop then stop = start + limit - 1 end
  return stop
end
"""

CREATE = _script("""
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'tenant', ARGV[5], 'created_at', ARGV[6], 'last_active', ARGV[7],
    'model', ARGV[8], 'window', ARGV[9], 'metadata', ARGV[10], 'format', ARGV[11])
  refresh()
end
return {0, redis.call('HGETALL', KEYS[1]), redis.call('LLEN', KEYS[3])}
""")
GET = _script("""
if redis.call('EXISTS', KEYS[1]) == 0 or not owned() then return {-1} end
return {0, redis.call('HGETALL', KEYS[1]), redis.call('LLEN', KEYS[3])}
""")
TOUCH = _script("""
local g = guard() if g ~= 0 then return {g} end
refresh()
return {0}
""")
ARCHIVE = _script("""
local g = guard() if g ~= 0 then return {g} end
redis.call('HSETNX', KEYS[1], 'archived_at', ARGV[1])
return {0}
""")
DELETE = _script("""
if redis.call('EXISTS', KEYS[1]) == 0 or not owned() then return {-1} end
local tenant = redis.call('HGET', KEYS[1], 'tenant')
for i = 1, #KEYS do redis.call('DEL', KEYS[i]) end
return {0, tenant}
""")
DELETE_IDLE = _script("""
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1} end
if redis.call('HEXISTS', KEYS[1], 'archived_at') == 1 then return {0, 0} end
local last = tonumber(redis.call('HGET', KEYS[1], 'last_active') or '')
if not last or last >= tonumber(ARGV[5]) then return {0, 0} end
local tenant = redis.call('HGET', KEYS[1], 'tenant')
for i = 1, #KEYS do redis.call('DEL', KEYS[i]) end
return {0, 1, tenant}
""")
# ARGV[5]: the transcript length the caller expects (-1: any); at another length nothing is written
# and the reply is {0, -1, length}.
APPEND = _script("""
local g = guard() if g ~= 0 then return {g} end
local n = redis.call('LLEN', KEYS[3])
local expected = tonumber(ARGV[5])
if expected >= 0 and n ~= expected then return {0, -1, n} end
local added = 0
for i = 6, #ARGV, 2 do
  if redis.call('HSETNX', KEYS[2], ARGV[i], n) == 1 then
    redis.call('RPUSH', KEYS[3], ARGV[i + 1])
    n = n + 1
    added = added + 1
  end
end
refresh()
return {0, added}
""")
# APPEND's arguments, then ARGV[6] the number of message arguments that follow it (id, body pairs), then
# the state slot, its body and the writer's token. The slot is saved over whatever version it holds
# (last writer wins), in the same script as the append: one round trip for a turn and its figures.
APPEND_WITH_STATE = _script("""
local g = guard() if g ~= 0 then return {g} end
local n = redis.call('LLEN', KEYS[3])
local expected = tonumber(ARGV[5])
if expected >= 0 and n ~= expected then return {0, -1, n} end
local last = 6 + tonumber(ARGV[6])
local added = 0
for i = 7, last, 2 do
  if redis.call('HSETNX', KEYS[2], ARGV[i], n) == 1 then
    redis.call('RPUSH', KEYS[3], ARGV[i + 1])
    n = n + 1
    added = added + 1
  end
end
local slot = ARGV[last + 1]
local current = tonumber(redis.call('HGET', KEYS[5], 'v:' .. slot) or '0')
if current then
  redis.call('HSET', KEYS[4], slot, ARGV[last + 2])
  redis.call('HSET', KEYS[5], 'v:' .. slot, current + 1, 't:' .. slot, ARGV[last + 3])
end
refresh()
return {0, added}
""")
LOAD = _script("""
local g = guard() if g ~= 0 then return {g} end
local start = tonumber(ARGV[5])
local stop = stop_of(redis.call('LLEN', KEYS[3]), start, tonumber(ARGV[6]))
if stop < start then return {0, {}} end
return {0, redis.call('LRANGE', KEYS[3], start, stop)}
""")
COUNT = _script("""
local g = guard() if g ~= 0 then return {g} end
return {0, redis.call('LLEN', KEYS[3])}
""")
GET_MESSAGE = _script("""
local g = guard() if g ~= 0 then return {g} end
local seq = redis.call('HGET', KEYS[2], ARGV[5])
if not seq then return {0} end
return {0, seq, redis.call('LINDEX', KEYS[3], seq)}
""")
LOAD_STATE = _script("""
local g = guard() if g ~= 0 then return {g} end
local body = redis.call('HGET', KEYS[4], ARGV[5]) or false
return {0, redis.call('HGET', KEYS[5], 'v:' .. ARGV[5]) or '0', body}
""")
# The writer's token makes a retried save (after a dropped connection) recognize its own success.
SAVE_STATE = _script("""
local g = guard() if g ~= 0 then return {g} end
local slot = ARGV[5]
local stored = redis.call('HGET', KEYS[5], 'v:' .. slot) or '0'
local current = tonumber(stored)
if not current then return {0, 0, stored} end
local expected = tonumber(ARGV[7])
if current ~= expected then
  if current == expected + 1 and redis.call('HGET', KEYS[5], 't:' .. slot) == ARGV[8] then return {0, 1, current} end
  return {0, 0, current}
end
redis.call('HSET', KEYS[4], slot, ARGV[6])
redis.call('HSET', KEYS[5], 'v:' .. slot, current + 1, 't:' .. slot, ARGV[8])
refresh()
return {0, 1, current + 1}
""")
RESTORE_STATE = _script("""
local g = guard() if g ~= 0 then return {g} end
redis.call('HSET', KEYS[4], ARGV[5], ARGV[6])
redis.call('HSET', KEYS[5], 'v:' .. ARGV[5], ARGV[7])
refresh()
return {0}
""")
LIST_STATES = _script("""
local g = guard() if g ~= 0 then return {g} end
return {0, redis.call('HGETALL', KEYS[4]), redis.call('HGETALL', KEYS[5])}
""")
PUT_SNAPSHOT = _script("""
local g = guard() if g ~= 0 then return {g} end
redis.call('HSET', KEYS[6], ARGV[5], ARGV[6])
redis.call('HSET', KEYS[7], ARGV[5], ARGV[7])
refresh()
return {0}
""")
GET_SNAPSHOT = _script("""
local g = guard() if g ~= 0 then return {g} end
local data = redis.call('HGET', KEYS[6], ARGV[5])
if not data then return {0} end
return {0, data, redis.call('HGET', KEYS[7], ARGV[5]) or '{}'}
""")
LIST_SNAPSHOTS = _script("""
local g = guard() if g ~= 0 then return {g} end
return {0, redis.call('HKEYS', KEYS[6])}
""")
AUDIT = _script("""
local g = guard() if g ~= 0 then return {g} end
redis.call('RPUSH', KEYS[8], ARGV[5])
refresh()
return {0}
""")
READ_AUDIT = _script("""
local g = guard() if g ~= 0 then return {g} end
local start = tonumber(ARGV[5])
local stop = stop_of(redis.call('LLEN', KEYS[8]), start, tonumber(ARGV[6]))
if stop < start then return {0, {}} end
return {0, redis.call('LRANGE', KEYS[8], start, stop)}
""")
TRY_LOCK = _script("""
local g = guard() if g ~= 0 then return {g} end
if redis.call('SET', KEYS[9], ARGV[5], 'NX', 'PX', ARGV[6]) then return {0, 1} end
return {0, 0}
""")
RENEW_LOCK = _script("""
if redis.call('GET', KEYS[9]) ~= ARGV[5] then return {0, 0} end
redis.call('PEXPIRE', KEYS[9], ARGV[6])
return {0, 1}
""")
LOCK_HOLDER = _script("""
local owner = redis.call('GET', KEYS[9])
if not owner then return {0} end
return {0, owner, redis.call('PTTL', KEYS[9])}
""")
UNLOCK = _script("""
if redis.call('GET', KEYS[9]) == ARGV[5] then redis.call('DEL', KEYS[9]) end
return {0}
""")
