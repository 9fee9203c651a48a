//! The Lua scripts of the writes and the entry read, run with `EVALSHA`
//! and re-sent with `EVAL` when the server answers `NOSCRIPT`.
//!
//! Every write that gives a record a new value publishes it on the
//! storage's channel (in the same script, so in the store's order) as
//! `key NUL count NUL value` (`count` empty unless the write advanced a
//! counter); a delete publishes the bare key (keys hold no NUL). The
//! publish is a `pcall`: a user without the right to publish still writes
//! (and its followers then poll). See `crate::watch`.

/// Inserts `ARGV[1]` with a TTL of `ARGV[2]` milliseconds (`0`: no expiry)
/// if the key holds nothing, then publishes it on channel `ARGV[3]`.
/// Reply: 1 inserted, 0 not.
pub(crate) const INSERT: &str = r#"
local set
if ARGV[2] == '0' then
  set = redis.call('SET', KEYS[1], ARGV[1], 'NX')
else
  set = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
end
if not set then
  return 0
end
redis.pcall('PUBLISH', ARGV[3], KEYS[1] .. '\0\0' .. ARGV[1])
return 1
"#;

/// Replaces the value `ARGV[1]` by `ARGV[2]` and restarts the TTL at
/// `ARGV[3]` milliseconds (`0`: no expiry), publishing a new value on
/// channel `ARGV[4]` (a renewal, same value, publishes nothing). A missing
/// or expired key reads as `false`, which never equals a string. Reply: 1
/// swapped, 0 not.
pub(crate) const CAS: &str = r#"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
if ARGV[3] == '0' then
  redis.call('SET', KEYS[1], ARGV[2])
else
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
end
if ARGV[4] and ARGV[1] ~= ARGV[2] then
  redis.pcall('PUBLISH', ARGV[4], KEYS[1] .. '\0\0' .. ARGV[2])
end
return 1
"#;

/// Deletes the key if it holds `ARGV[1]`, then publishes the key's name on
/// channel `ARGV[2]` (in the same script, so atomically with the delete:
/// a subscriber that was subscribed before the delete receives it). The
/// publish is a `pcall`: a user without the right to publish on the
/// channel still deletes (its deletes wake no watcher; watchers then fall
/// back to their poll). Reply: 1 deleted, 0 not.
pub(crate) const CAD: &str = r#"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
if ARGV[2] then
  redis.pcall('PUBLISH', ARGV[2], KEYS[1])
end
return 1
"#;

/// Reads the value and its `PTTL` in one step (so both describe the same
/// record). Reply: nil when absent, else `{value, pttl}` where `pttl` is
/// the milliseconds left, or -1 for a key without expiry.
pub(crate) const ENTRY: &str = r#"
local v = redis.call('GET', KEYS[1])
if not v then
  return false
end
return {v, redis.call('PTTL', KEYS[1])}
"#;

/// `write_counted`: the record `KEYS[1]` and the counter `KEYS[2]` in one
/// script. `ARGV`: `1` when `ARGV[2]` is the value the record must hold
/// (else `0`: no live record), the old value, the new value, the TTL in
/// milliseconds (`0`: no expiry), the counter's floor and max (decimal),
/// the channel a new value is published on (with the new count).
/// The counter is decimal text and computed as text (Lua numbers are
/// doubles, tokens need 63 bits). Everything is checked before the first
/// write, so a refusal writes nothing. Reply: 0 refused, -1 the counter is
/// not a decimal number, -2 it is exhausted, else `{1, new counter}`.
pub(crate) const COUNTED: &str = r#"
local cur = redis.call('GET', KEYS[1])
if ARGV[1] == '1' then
  if cur ~= ARGV[2] then return 0 end
elseif cur then
  return 0
end
local function less(a, b)
  if #a ~= #b then return #a < #b end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return false
end
local nxt
local c = redis.call('GET', KEYS[2])
if not c then
  nxt = ARGV[5]
else
  if not string.match(c, '^%d+$') then return -1 end
  c = string.match(c, '^0*(%d-)$')
  if c == '' then c = '0' end
  if not less(c, ARGV[6]) then return -2 end
  local digits = {string.byte(c, 1, -1)}
  local i = #digits
  while i >= 1 and digits[i] == 57 do
    digits[i] = 48
    i = i - 1
  end
  if i == 0 then
    nxt = '1' .. string.char(unpack(digits))
  else
    digits[i] = digits[i] + 1
    nxt = string.char(unpack(digits))
  end
  if less(nxt, ARGV[5]) then nxt = ARGV[5] end
end
redis.call('SET', KEYS[2], nxt)
if ARGV[4] == '0' then
  redis.call('SET', KEYS[1], ARGV[3])
else
  redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[4])
end
if ARGV[7] and (ARGV[1] ~= '1' or ARGV[2] ~= ARGV[3]) then
  redis.pcall('PUBLISH', ARGV[7], KEYS[1] .. '\0' .. nxt .. '\0' .. ARGV[3])
end
return {1, nxt}
"#;

pub(crate) use ttl_storage::kit::valkey::Script;
