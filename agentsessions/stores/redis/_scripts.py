"""The Lua scripts of the Redis store: each atomic step is one of them, run whole by the server.

Redis runs a script to its end with no other command in between, so each script reads and
writes a session's keys as one step; nothing is read in Python and written back. Keys (all
under the store's prefix ``P``; ``<id>`` is the session id's ``encode_text`` bytes):

- ``P s:<id>``: the record, a hash. ``rev`` the revision (``-`` until the first save),
  ``u`` the index stamp (16 decimal digits of ``updated_at`` in microseconds; all zeros
  until the first save), ``st`` the run state (absent until the first claim), ``tok`` the
  fencing token, ``h`` the holder, ``lm`` the lease in microseconds, ``x`` when the lease
  expires (microseconds), ``c`` ``1`` when a cancel was asked, ``n`` the nonce of the claim
  that made the token, ``o`` ``1`` when that claim took over a lapsed lease (for its retry),
  ``ap`` the calls of the latest wait for approval (``agentsessions.approvals``' JSON text)
  and ``pa`` how many are undecided, ``ad`` the earliest undecided deadline (microseconds;
  empty for none). ``a<seq>``: the token after which a pending steer sent
  with ``if_busy`` ``"queue"`` or ``"interrupt"`` may be taken (only a later claim takes
  it); absent for any other steer, and deleted with the steer by the save that takes it.
  ``md`` the metadata: its pairs, each the JSON text of ``[key, value]``, sorted and joined
  by newlines (JSON text holds no raw newline); absent when there is none. ``pv`` the
  preview (``kit.summary.preview`` of the transcript, set by every script that writes one)
  and ``us`` the usage (``kit.summary``'s JSON text, which ``SAVE_RUN`` folds a run's usage
  into); absent until the first save that sets them.
- ``P m:<id>``: the transcript, a list of ``dump_message`` bodies, one per message.
- ``P q:<id>``: the pending steers, a sorted set scored by seq; each member is the seq in
  16 digits, the adding call's 8-byte nonce, then the text: equal texts stay distinct, and
  a member names its seq.
- ``P k:<id>``: the steer keys kept while the session lives, a hash from each key (its
  ``encode_text`` bytes) to the SHA-256 of its steer's text.
- ``P t:<nonce>``: what one ``take_steers`` call took, kept for a minute for its retry.
- ``P sessions``: every record, a sorted set of score 0 whose members are ``u`` followed by
  the id: by lexicographic order, that is (updated_at, id), which ``sessions()`` pages
  through newest first with exclusive bounds, each session once.
- ``P p:<pair>``: the sessions holding one metadata pair (``<pair>`` as in ``md``), a sorted
  set like ``P sessions``, kept in step with it by every script that moves a session there:
  listing one user's sessions pages through that user's set alone.
- ``P counters``: a hash with the ``tokens`` and ``steers`` counters, never reset by delete.

Times come from the server's ``TIME``, one clock for every replica.

Retries: redis-py retries a command after a connection error or a timeout (10 times by
default), also when the server ran it and only the reply was lost. Every script is safe to
run twice: a save or fork recognises its own new revision, a claim its nonce, a steer its
nonce among the pending ones, a take its stash. Only ``delete`` answers ``False`` when its
first run already deleted. A stamp of 16 digits
covers microseconds since 1970 until the year 2286.
"""

from __future__ import annotations

# Shared by every script: the server's clock, integer formatting (Lua numbers are doubles;
# tostring would write 1.7e+15), and the index upkeep.
_COMMON = """
local NEVER = '0000000000000000'
local function now_micros()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function int(n) return string.format('%.0f', n) end
-- Makes the record of a session that has none: never saved, never claimed, listed last.
local function ensure(rec, index, id)
  if redis.call('HSETNX', rec, 'rev', '-') == 1 then
    redis.call('HSET', rec, 'u', NEVER)
    redis.call('ZADD', index, 0, NEVER .. id)
  end
end
-- The metadata pairs' index keys: the store's prefix is the index key without 'sessions'.
local function pair_keys(index, md)
  local keys = {}
  if md then
    local prefix = string.sub(index, 1, -9)
    for pair in string.gmatch(md, '[^\\n]+') do keys[#keys + 1] = prefix .. 'p:' .. pair end
  end
  return keys
end
-- Sets updated_at to now and moves the session to its new place in the index and its pairs' indexes.
local function touch(rec, index, id, now)
  local r = redis.call('HMGET', rec, 'u', 'md')
  local old = r[1]
  local stamp = string.format('%016.0f', now)
  redis.call('HSET', rec, 'u', stamp)
  for _, key in ipairs({index, unpack(pair_keys(index, r[2]))}) do
    if old then redis.call('ZREM', key, old .. id) end
    redis.call('ZADD', key, 0, stamp .. id)
  end
end
-- The pending steers, oldest first, each member followed by its after-token ('0' for any run).
local function pending_steers(steers, rec)
  local out = {}
  for _, member in ipairs(redis.call('ZRANGE', steers, 0, -1)) do
    out[#out + 1] = member
    out[#out + 1] = redis.call('HGET', rec, 'a' .. int(tonumber(string.sub(member, 1, 16)))) or '0'
  end
  return out
end
-- Replaces the list after its first `keep` items by ARGV[first..], in chunks (unpack has a limit).
local function write(list, keep, first)
  if keep == 0 then redis.call('DEL', list) else redis.call('LTRIM', list, 0, keep - 1) end
  for i = first, #ARGV, 1000 do
    redis.call('RPUSH', list, unpack(ARGV, i, math.min(i + 999, #ARGV)))
  end
end
-- kit.summary.fold_usage in Lua: the usage text after a save under token ARGV[2] (decimal) whose
-- run has used ARGV[at..at+3] so far; nil when the stored text is not one this version reads.
-- Written by hand, not by cjson.encode: the same JSON text as Python's, digits and all. Lua's
-- doubles keep a run's counts (below 2**53: kit.arguments) and the total while it stays below
-- 2**53 tokens exactly.
local function counts(list)
  if type(list) ~= 'table' or #list ~= 4 then return false end
  for i = 1, 4 do
    local v = list[i]
    if type(v) ~= 'number' or v < 0 or v ~= math.floor(v) then return false end
  end
  return true
end
local function fold_usage(stored, at)
  local before, token, last = {0, 0, 0, 0}, nil, {0, 0, 0, 0}
  if stored and stored ~= '' then
    local ok, u = pcall(cjson.decode, stored)
    if not ok or type(u) ~= 'table' or not counts(u.before) or not counts(u.run) then return nil end
    if type(u.token) ~= 'number' or u.token ~= math.floor(u.token) then return nil end
    before, token, last = u.before, u.token, u.run
  end
  if token ~= tonumber(ARGV[2]) then
    for i = 1, 4 do before[i] = before[i] + last[i] end
  end
  local run = table.concat({ARGV[at], ARGV[at + 1], ARGV[at + 2], ARGV[at + 3]}, ',')
  for i = 1, 4 do before[i] = int(before[i]) end
  return '{"token":' .. ARGV[2] .. ',"run":[' .. run .. '],"before":[' .. table.concat(before, ',') .. ']}'
end
-- Whether a save may keep `keep` stored messages: only if the revision it knew is still stored.
-- ARGV[at] is that revision ('' when it knew none: then it sends every message).
local function kept(stored, at)
  if ARGV[at] == '' then return 0 end
  if stored ~= ARGV[at] then return nil end
  return tonumber(ARGV[at + 1])
end
"""

# KEYS: record, messages, index. ARGV: id, preview, known revision, keep, new revision, bodies...
# Returns 1, or 0 (nothing written) when the known revision is no longer stored.
SAVE = (
    _COMMON
    + """
local stored = redis.call('HGET', KEYS[1], 'rev')
if stored == ARGV[5] then return 1 end  -- this save, retried after its reply was lost
local keep = kept(stored, 3)
if keep == nil then return 0 end
write(KEYS[2], keep, 6)
redis.call('HSET', KEYS[1], 'rev', ARGV[5], 'pv', ARGV[2])
touch(KEYS[1], KEYS[3], ARGV[1], now_micros())
return 1
"""
)

# KEYS: record, messages, index, steers. ARGV: id, token, end ('' keeps the hold),
# unless_steered ('1'), preview, usage ('1' then the run's four counts, or '0' and four
# empty strings to leave it), n, the n taken seqs, known revision, keep, new revision, bodies...
# Returns {-1} when the claim is superseded, {0} when the known revision is gone, {-2, usage}
# when the stored usage text is not one this version reads (nothing written in those three),
# {1, cancel} when saved, {2, cancel, pending...} when saved and not released because steers
# are pending (each member followed by its after-token).
SAVE_RUN = (
    _COMMON
    + """
local rec = redis.call('HMGET', KEYS[1], 'tok', 'st', 'rev', 'lm', 'c', 'us')
local n = tonumber(ARGV[11])
if rec[3] == ARGV[14 + n] and rec[1] == ARGV[2] then  -- this save, retried after its reply was lost
  if rec[2] ~= 'running' then return {1, '0'} end  -- it released
  if ARGV[3] ~= '' then return {2, rec[5], unpack(pending_steers(KEYS[4], KEYS[1]))} end
  return {1, rec[5]}
end
if rec[1] ~= ARGV[2] or rec[2] ~= 'running' then return {-1} end
local keep = kept(rec[3], 12 + n)
if keep == nil then return {0} end
local usage = nil
if ARGV[6] == '1' then
  usage = fold_usage(rec[6], 7)
  if usage == nil then return {-2, rec[6]} end
end
for i = 12, 11 + n do
  redis.call('ZREMRANGEBYSCORE', KEYS[4], ARGV[i], ARGV[i])
  redis.call('HDEL', KEYS[1], 'a' .. ARGV[i])
end
write(KEYS[2], keep, 15 + n)
local now = now_micros()
redis.call('HSET', KEYS[1], 'rev', ARGV[14 + n], 'x', int(now + tonumber(rec[4])), 'pv', ARGV[5])
if usage then redis.call('HSET', KEYS[1], 'us', usage) end
touch(KEYS[1], KEYS[3], ARGV[1], now)
if ARGV[3] == '' then return {1, rec[5]} end
if ARGV[4] == '1' and redis.call('ZCARD', KEYS[4]) > 0 then
  return {2, rec[5], unpack(pending_steers(KEYS[4], KEYS[1]))}
end
redis.call('HSET', KEYS[1], 'st', ARGV[3], 'c', '0')
return {1, '0'}
"""
)

# KEYS: record, steers, counters, index, steer keys. ARGV: id, text, nonce (8 bytes),
# steer key ('' for none), digest of the text, if_busy policy.
# Returns {stored state or '', lease expiry or '', now, outcome, holder or ''}: the state the
# steer was stored in; outcome 1 when the steer key is kept for another text, 2 when the
# policy is "reject" and a live run holds the session (then nothing was written but the
# record, which a kept key or a live run implies already), else 0. With "queue" or
# "interrupt" and a live run, the steer's after-token is the run's token (field a<seq>), and
# "interrupt" asks the run to stop (c = 1).
ADD_STEER = (
    _COMMON
    + """
ensure(KEYS[1], KEYS[4], ARGV[1])
local rec = redis.call('HMGET', KEYS[1], 'st', 'x', 'tok', 'h')
local now = now_micros()
local function state(outcome)
  return {rec[1] or '', rec[2] or '', int(now), outcome, rec[4] or ''}
end
if ARGV[4] ~= '' then
  local kept = redis.call('HGET', KEYS[5], ARGV[4])
  if kept then
    if kept == ARGV[5] then return state(0) end  -- a retry: stores nothing more
    return state(1)
  end
end
for _, member in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  if string.sub(member, 17, 24) == ARGV[3] then return state(0) end  -- this steer, retried
end
local live = rec[1] == 'running' and rec[2] and tonumber(rec[2]) > now
if live and ARGV[6] == 'reject' then return state(2) end
if ARGV[4] ~= '' then redis.call('HSET', KEYS[5], ARGV[4], ARGV[5]) end
local seq = redis.call('HINCRBY', KEYS[3], 'steers', 1)
redis.call('ZADD', KEYS[2], seq, string.format('%016d', seq) .. ARGV[3] .. ARGV[2])
if live and (ARGV[6] == 'queue' or ARGV[6] == 'interrupt') then
  redis.call('HSET', KEYS[1], 'a' .. int(seq), rec[3])
  if ARGV[6] == 'interrupt' then redis.call('HSET', KEYS[1], 'c', '1') end
end
return state(0)
"""
)

# KEYS: steers, record. Returns the pending steers, oldest first, each member followed by
# its after-token, read in one step.
PEEK_STEERS = (
    _COMMON
    + """
return pending_steers(KEYS[1], KEYS[2])
"""
)

# KEYS: steers, this call's stash. Returns the members taken, oldest first; a retry finds
# them in the stash, which expires after a minute.
TAKE_STEERS = """
if redis.call('EXISTS', KEYS[2]) == 1 then return redis.call('LRANGE', KEYS[2], 0, -1) end
local taken = redis.call('ZRANGE', KEYS[1], 0, -1)
if #taken > 0 then
  redis.call('DEL', KEYS[1])
  redis.call('RPUSH', KEYS[2], unpack(taken))
  redis.call('EXPIRE', KEYS[2], 60)
end
return taken
"""

# KEYS: index (or one metadata pair's). ARGV: max bound, min bound, page size, prefix.
# Returns {now, {member, st, h, x, c, pa, md, ad, us, pv, length, pending}...}, newest first.
PAGE = (
    _COMMON
    + """
local members = redis.call('ZRANGE', KEYS[1], ARGV[1], ARGV[2], 'BYLEX', 'REV', 'LIMIT', 0, tonumber(ARGV[3]))
local out = {int(now_micros())}
for _, member in ipairs(members) do
  local id = string.sub(member, 17)
  local r = redis.call('HMGET', ARGV[4] .. 's:' .. id, 'st', 'h', 'x', 'c', 'pa', 'md', 'ad', 'us', 'pv')
  local row = {member}
  for i = 1, 9 do row[i + 1] = r[i] or '' end
  row[11], row[12] = redis.call('LLEN', ARGV[4] .. 'm:' .. id), redis.call('ZCARD', ARGV[4] .. 'q:' .. id)
  out[#out + 1] = row
end
return out
"""
)

# KEYS: record, messages, steers, index, steer keys. ARGV: id. Returns how many keys went
# (not counting the steer keys: a session that has them has its record).
DELETE = (
    _COMMON
    + """
local r = redis.call('HMGET', KEYS[1], 'u', 'md')
if r[1] then
  for _, key in ipairs({KEYS[4], unpack(pair_keys(KEYS[4], r[2]))}) do redis.call('ZREM', key, r[1] .. ARGV[1]) end
end
redis.call('UNLINK', KEYS[5])
return redis.call('UNLINK', KEYS[1], KEYS[2], KEYS[3])  -- a long transcript is freed in the background
"""
)

# KEYS: record, index. ARGV: id, the new metadata ('' for none). Moves the session out of its
# old pairs' indexes and into the new ones', at its place in the index. Returns 1.
SET_METADATA = (
    _COMMON
    + """
ensure(KEYS[1], KEYS[2], ARGV[1])
local r = redis.call('HMGET', KEYS[1], 'u', 'md')
local member = r[1] .. ARGV[1]
for _, key in ipairs(pair_keys(KEYS[2], r[2])) do redis.call('ZREM', key, member) end
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[1], 'md')
else
  redis.call('HSET', KEYS[1], 'md', ARGV[2])
  for _, key in ipairs(pair_keys(KEYS[2], ARGV[2])) do redis.call('ZADD', key, 0, member) end
end
return 1
"""
)

# KEYS: record. Returns 1 when a live run was asked to stop.
CANCEL = (
    _COMMON
    + """
local r = redis.call('HMGET', KEYS[1], 'st', 'x')
if r[1] == 'running' and tonumber(r[2]) > now_micros() then
  redis.call('HSET', KEYS[1], 'c', '1')
  return 1
end
return 0
"""
)

# KEYS: source messages, new record, new messages, index, source record. ARGV: new id, at ('' for
# all), new revision, the source's revision read ('' for none), the preview of the messages read.
# Returns {1}, {-1} when the new id exists, {-2, length} when `at` is outside 0..length, {-3}
# when the source's revision is no longer the one read (nothing written but in the first case).
FORK = (
    _COMMON
    + """
local existing = redis.call('HGET', KEYS[2], 'rev')
if existing == ARGV[3] then return {1} end  -- this fork, retried after its reply was lost
if existing then return {-1} end
if (redis.call('HGET', KEYS[5], 'rev') or '') ~= ARGV[4] then return {-3} end
local length = redis.call('LLEN', KEYS[1])
local at = length
if ARGV[2] ~= '' then
  at = tonumber(ARGV[2])
  if at < 0 or at > length then return {-2, length} end
end
redis.call('DEL', KEYS[3])
for i = 0, at - 1, 1000 do
  redis.call('RPUSH', KEYS[3], unpack(redis.call('LRANGE', KEYS[1], i, math.min(i + 999, at - 1))))
end
redis.call('HSET', KEYS[2], 'rev', ARGV[3], 'pv', ARGV[5])
touch(KEYS[2], KEYS[4], ARGV[1], now_micros())
return {1}
"""
)

# KEYS: record, counters, index. ARGV: id, replica, lease in microseconds, nonce.
# Returns {token, 1 if it took over a lapsed lease else 0}, {0, holder, lease expiry} when a
# live lease holds it, {-1, state} for a state a newer version wrote (never taken over), or
# {-2, undecided} while it waits for a decision.
CLAIM = (
    _COMMON
    + """
ensure(KEYS[1], KEYS[3], ARGV[1])
local r = redis.call('HMGET', KEYS[1], 'st', 'x', 'h', 'n', 'tok', 'o', 'pa')
if r[1] == 'running' and r[4] == ARGV[4] then return {tonumber(r[5]), tonumber(r[6] or '0')} end  -- retried
local known = {running = true, finished = true, cancelled = true, failed = true, waiting = true}
if r[1] and not known[r[1]] then return {-1, r[1]} end
if r[1] == 'waiting' and r[7] ~= '0' then return {-2, r[7]} end  -- a call waits for a decision
local now = now_micros()
if r[1] == 'running' and tonumber(r[2]) > now then return {0, r[3], r[2]} end
local token = redis.call('HINCRBY', KEYS[2], 'tokens', 1)
local took = (r[1] == 'running') and 1 or 0  -- running here means its lease ran out
redis.call('HSET', KEYS[1], 'st', 'running', 'tok', token, 'h', ARGV[2], 'lm', ARGV[3],
           'x', int(now + tonumber(ARGV[3])), 'c', '0', 'n', ARGV[4], 'o', took)
return {token, took}
"""
)

# KEYS: record. ARGV: token, approvals text, undecided count, deadline. Returns 1 when the run holding
# the claim released the session waiting (also when retried), 0 (nothing written) when superseded.
WAIT = """
local r = redis.call('HMGET', KEYS[1], 'tok', 'st', 'ap')
if r[1] == ARGV[1] and r[2] == 'waiting' and r[3] == ARGV[2] then return 1 end  -- this wait, retried
if r[1] ~= ARGV[1] or r[2] ~= 'running' then return 0 end
redis.call('HSET', KEYS[1], 'st', 'waiting', 'c', '0', 'ap', ARGV[2], 'pa', ARGV[3], 'ad', ARGV[4])
return 1
"""

# KEYS: record. ARGV: the approvals text read ('' for none), the new text, undecided count, deadline.
# Returns 1 when it swapped (or a retry finds its own text), 0 when the session no longer
# waits or another decision came since the read: kit.approvals.decide reads again.
DECIDE = """
local r = redis.call('HMGET', KEYS[1], 'st', 'ap')
if r[2] == ARGV[2] then return 1 end  -- this decision, retried after its reply was lost
if r[1] ~= 'waiting' or (r[2] or '') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'ap', ARGV[2], 'pa', ARGV[3], 'ad', ARGV[4])
return 1
"""

# KEYS: record, transcript. ARGV: the approvals text read, the new text, undecided count, the
# last message's body read, its rewrite (an edited input), a new revision, the deadline. As DECIDE, and the
# wait's message (the last) rewritten with a new revision in the same step; -1 when that
# message changed since the read (kit.approvals.decide reads again).
DECIDE_EDIT = """
local r = redis.call('HMGET', KEYS[1], 'st', 'ap')
if r[2] == ARGV[2] then return 1 end  -- this decision, retried after its reply was lost
if r[1] ~= 'waiting' or (r[2] or '') ~= ARGV[1] then return 0 end
if redis.call('LINDEX', KEYS[2], -1) ~= ARGV[4] then return -1 end
redis.call('LSET', KEYS[2], -1, ARGV[5])
redis.call('HSET', KEYS[1], 'ap', ARGV[2], 'pa', ARGV[3], 'rev', ARGV[6], 'ad', ARGV[7])
return 1
"""

# KEYS: the claims' records. ARGV: their tokens. Returns per claim 0 (lost), 1 (renewed) or
# 2 (renewed, and asked to cancel).
RENEW = (
    _COMMON
    + """
local now = now_micros()
local out = {}
for i, rec in ipairs(KEYS) do
  local r = redis.call('HMGET', rec, 'tok', 'st', 'lm', 'c')
  if r[1] == ARGV[i] and r[2] == 'running' then
    redis.call('HSET', rec, 'x', int(now + tonumber(r[3])))
    out[i] = (r[4] == '1') and 2 or 1
  else
    out[i] = 0
  end
end
return out
"""
)
