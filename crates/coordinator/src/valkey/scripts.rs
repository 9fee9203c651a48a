//! The Lua scripts that make reads single round trips, run with `EVALSHA`.

use fred::prelude::*;

use crate::error::{Error, Result};
use crate::ids::{DestinationId, MemberId};
use crate::keys::KeySpace;

/// A Lua script run with `EVALSHA`, falling back to `EVAL` once on
/// `NOSCRIPT` (the driver kit's, shared with storage-valkey).
pub(crate) use ttl_storage::kit::valkey::Script;

/// The Lua that starts [`RESOLVE`] and [`LIVE_MEMBERS`]: splits the ids of
/// the set `KEYS[1]` into `live`, `(id, address, load)` triples of the
/// members whose record `ARGV[1] .. id` exists, and `dead`, the others.
macro_rules! split_members {
    () => {
        r#"
local ids = redis.call('SMEMBERS', KEYS[1])
local live = {}
local dead = {}
for _, id in ipairs(ids) do
  local v = redis.call('HMGET', ARGV[1] .. id, 'address', 'load')
  if v[1] then
    live[#live + 1] = id
    live[#live + 1] = v[1]
    live[#live + 1] = v[2] or '0'
  else
    dead[#dead + 1] = id
  end
end"#
    };
}

/// Reads a destination set, its epoch and the records of its members in one
/// step. Dead members are removed from the set when at least one member is
/// live (which bumps the epoch).
/// KEYS: destination set, epoch key. ARGV: member key prefix, prune flag ("1"/"0").
/// Reply: `[total, ndead, epoch, dead..., (id, address, load)...]`.
const RESOLVE: &str = concat!(
    split_members!(),
    r#"
if ARGV[2] == '1' and #live > 0 and #dead > 0 then
  redis.call('SREM', KEYS[1], unpack(dead))
  redis.call('INCR', KEYS[2])
end
local epoch = redis.call('GET', KEYS[2]) or '0'
local out = { tostring(#ids), tostring(#dead), epoch }
for _, id in ipairs(dead) do out[#out + 1] = id end
for _, x in ipairs(live) do out[#out + 1] = x end
return out
"#
);

/// Lists live members and removes the ids of dead ones from the members set.
/// KEYS: members set. ARGV: member key prefix.
/// Reply: `[npruned, (id, address, load)...]`.
const LIVE_MEMBERS: &str = concat!(
    split_members!(),
    r#"
if #dead > 0 then
  redis.call('SREM', KEYS[1], unpack(dead))
end
local out = { tostring(#dead) }
for _, x in ipairs(live) do out[#out + 1] = x end
return out
"#
);

/// Reads a lock record and its owner's member record.
/// KEYS: lock key. ARGV: member key prefix.
/// Reply: `[]` if no lock, else `[address or '', load, field, value, ...]`.
const LOCK: &str = r#"
local l = redis.call('HGETALL', KEYS[1])
if #l == 0 then return {} end
local pod = nil
for i = 1, #l, 2 do
  if l[i] == 'podId' then pod = l[i + 1] end
end
local addr, load = '', '0'
if pod then
  local v = redis.call('HMGET', ARGV[1] .. pod, 'address', 'load')
  addr = v[1] or ''
  load = v[2] or '0'
end
local out = { addr, load }
for _, x in ipairs(l) do out[#out + 1] = x end
return out
"#;

/// Writes a lock record unless another member owns that lock id.
/// KEYS: lock key. ARGV: owner id, TTL in ms, then field, value, ...
/// Reply: 1 written, 0 owned by another member.
const REGISTER_LOCK: &str = r#"
local owner = redis.call('HGET', KEYS[1], 'podId')
if owner and owner ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
local fv = {}
for i = 3, #ARGV do fv[#fv + 1] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(fv))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"#;

/// Changes a destination's pod set and bumps its epoch when the set changed,
/// atomically: first touch, failover, bind, fan-out, a member joining or
/// leaving.
/// KEYS: destination set, epoch key. ARGV: member to add ('' for none),
/// then member ids to remove.
/// Reply: the epoch after the change (unchanged when the set was).
const CHANGE_SET: &str = r#"
local changed = 0
if #ARGV > 1 then
  local gone = {}
  for i = 2, #ARGV do gone[#gone + 1] = ARGV[i] end
  changed = changed + redis.call('SREM', KEYS[1], unpack(gone))
end
if ARGV[1] ~= '' then
  changed = changed + redis.call('SADD', KEYS[1], ARGV[1])
end
if changed > 0 then
  return redis.call('INCR', KEYS[2])
end
return tonumber(redis.call('GET', KEYS[2]) or '0')
"#;

/// Claims a destination for one member only if nobody else holds it:
/// removes the members whose record is gone (read by the script itself, at
/// the moment it runs: never a list read earlier, which a member that came
/// back since would make wrong), then adds the claimer (bumping the epoch)
/// only when no member is left and the claimer's own record exists (a
/// claimer already in the set has it: won, nothing added). Two
/// coordinators racing first touch or failover thus leave exactly one
/// member in the set, and a live member (one a coordinator's address
/// policy rejects included) is never removed; the loser re-reads the set.
/// KEYS: destination set, epoch key. ARGV: member key prefix, member to add.
/// Reply: `[won (1 or 0), epoch after the call, members removed]`.
const CLAIM: &str = r#"
local ids = redis.call('SMEMBERS', KEYS[1])
local dead = {}
for _, id in ipairs(ids) do
  if redis.call('HEXISTS', ARGV[1] .. id, 'address') == 0 then
    dead[#dead + 1] = id
  end
end
if #dead > 0 then
  redis.call('SREM', KEYS[1], unpack(dead))
end
if redis.call('SISMEMBER', KEYS[1], ARGV[2]) == 1 then
  if #dead > 0 then
    return { 1, redis.call('INCR', KEYS[2]), #dead }
  end
  return { 1, tonumber(redis.call('GET', KEYS[2]) or '0'), 0 }
end
if #dead < #ids or redis.call('HEXISTS', ARGV[1] .. ARGV[2], 'address') == 0 then
  if #dead > 0 then
    return { 0, redis.call('INCR', KEYS[2]), #dead }
  end
  return { 0, tonumber(redis.call('GET', KEYS[2]) or '0'), 0 }
end
redis.call('SADD', KEYS[1], ARGV[2])
return { 1, redis.call('INCR', KEYS[2]), #dead }
"#;

/// Deregisters a destination without taking it from a live member: removes
/// the member that tore it down (`ARGV[2]`, '' for none) **only while the
/// epoch is still the one its `DELETE` was routed at** (`ARGV[3]`), and
/// the members whose record is gone; deletes the set, bumping the epoch
/// (kept, so a later binding is newer than any route before), when no
/// member is left. Live members stay (a fanned-out destination's other
/// pods, pods a coordinator's address policy rejects, and the leaver
/// itself once the set changed after the `DELETE` was routed: a pod behind
/// the fence left by itself before answering, and a claim may have bound
/// it again since, at a newer epoch it now serves).
/// KEYS: destination set, epoch key. ARGV: member key prefix, leaver id,
/// the epoch the leaver's `DELETE` was routed at.
/// Reply: `[epoch after the call, live member ids left...]`.
const UNBIND: &str = r#"
local ids = redis.call('SMEMBERS', KEYS[1])
local current = tonumber(redis.call('GET', KEYS[2]) or '0')
local routed = tonumber(ARGV[3])
local gone = {}
local live = {}
for _, id in ipairs(ids) do
  local leaver = id == ARGV[2] and routed ~= nil and routed == current
  if leaver or redis.call('HEXISTS', ARGV[1] .. id, 'address') == 0 then
    gone[#gone + 1] = id
  else
    live[#live + 1] = id
  end
end
if #gone > 0 then
  redis.call('SREM', KEYS[1], unpack(gone))
end
local epoch
if #live == 0 then
  redis.call('DEL', KEYS[1])
  epoch = redis.call('INCR', KEYS[2])
elseif #gone > 0 then
  epoch = redis.call('INCR', KEYS[2])
else
  epoch = tonumber(redis.call('GET', KEYS[2]) or '0')
end
local out = { tostring(epoch) }
for _, id in ipairs(live) do out[#out + 1] = id end
return out
"#;

/// What a pod that has no memory of a destination reads before it admits
/// a routed call for it: the destination's epoch now, and whether the pod
/// is in its set.
/// KEYS: destination set, epoch key. ARGV: member id.
/// Reply: `[epoch, member (1 or 0)]`.
const SEEN: &str = r#"
return { tonumber(redis.call('GET', KEYS[2]) or '0'), redis.call('SISMEMBER', KEYS[1], ARGV[1]) }
"#;

/// After a pod's lease ran out: re-reads the epochs of destinations, bumping
/// those whose set still holds the pod (so routes cached before the lapse
/// carry an older epoch than the pod then requires).
/// KEYS: (destination set, epoch key) pairs. ARGV: member id.
/// Reply: per pair, the epoch and whether the pod is in the set (1 or 0).
const REAFFIRM: &str = r#"
local out = {}
for i = 1, #KEYS, 2 do
  if redis.call('SISMEMBER', KEYS[i], ARGV[1]) == 1 then
    out[#out + 1] = redis.call('INCR', KEYS[i + 1])
    out[#out + 1] = 1
  else
    out[#out + 1] = tonumber(redis.call('GET', KEYS[i + 1]) or '0')
    out[#out + 1] = 0
  end
end
return out
"#;

/// Destinations per [`REAFFIRM`] run.
const REAFFIRM_BATCH: usize = 256;

/// The scripts, hashed once.
pub(crate) struct Scripts {
    pub(crate) resolve: Script,
    pub(crate) live_members: Script,
    pub(crate) lock: Script,
    pub(crate) register_lock: Script,
    pub(crate) change_set: Script,
    claim: Script,
    unbind: Script,
    seen: Script,
    reaffirm: Script,
}

/// The outcome of [`CLAIM`].
pub(crate) struct Claimed {
    /// Whether the member was added.
    pub(crate) won: bool,
    /// The epoch after the call.
    pub(crate) epoch: u64,
    /// Dead members removed.
    pub(crate) pruned: usize,
    /// Round trips taken.
    pub(crate) round_trips: u64,
}

/// An epoch from a script's integer reply.
fn epoch_from(epoch: i64) -> Result<u64> {
    u64::try_from(epoch).map_err(|_| Error::Protocol(format!("negative epoch {epoch}")))
}

impl Scripts {
    /// Runs [`CHANGE_SET`] on the pod set of `dest`: adds `add`, removes
    /// `remove`, bumps the epoch if the set changed. Returns the epoch after
    /// the change and the round trips taken.
    pub(crate) async fn change_set(
        &self,
        client: &Client,
        keys: &KeySpace,
        dest: &DestinationId,
        add: Option<&MemberId>,
        remove: &[String],
    ) -> Result<(u64, u64)> {
        let mut args = Vec::with_capacity(1 + remove.len());
        args.push(add.map_or_else(String::new, |m| m.as_str().to_owned()));
        args.extend(remove.iter().cloned());
        let (epoch, rt): (i64, u64) = self
            .change_set
            .run_counted(client, vec![keys.destination(dest), keys.epoch(dest)], args)
            .await?;
        Ok((epoch_from(epoch)?, rt))
    }

    /// Runs [`CLAIM`] on the pod set of `dest`: removes the members whose
    /// record is gone, then adds `member` only if no member is left (and
    /// its own record exists).
    pub(crate) async fn claim(
        &self,
        client: &Client,
        keys: &KeySpace,
        dest: &DestinationId,
        member: &MemberId,
    ) -> Result<Claimed> {
        let (reply, round_trips): (Vec<i64>, u64) = self
            .claim
            .run_counted(
                client,
                vec![keys.destination(dest), keys.epoch(dest)],
                vec![keys.member_prefix(), member.as_str().to_owned()],
            )
            .await?;
        let [won, epoch, pruned] = reply[..] else {
            return Err(Error::Protocol(format!("claim reply {reply:?}")));
        };
        Ok(Claimed {
            won: won == 1,
            epoch: epoch_from(epoch)?,
            pruned: usize::try_from(pruned).unwrap_or(0),
            round_trips,
        })
    }

    /// Runs [`UNBIND`] on the pod set of `dest`: removes `leaver` (a member
    /// and the epoch its `DELETE` was routed at) if the epoch has not moved
    /// since, and the dead members; deletes the set when no live member is
    /// left. Returns the epoch after the call, the live members left and the
    /// round trips.
    pub(crate) async fn unbind(
        &self,
        client: &Client,
        keys: &KeySpace,
        dest: &DestinationId,
        leaver: Option<(&MemberId, u64)>,
    ) -> Result<(u64, Vec<String>, u64)> {
        let (leaver, routed) = leaver.map_or_else(
            || (String::new(), String::new()),
            |(m, e)| (m.as_str().to_owned(), e.to_string()),
        );
        let (reply, round_trips): (Vec<String>, u64) = self
            .unbind
            .run_counted(
                client,
                vec![keys.destination(dest), keys.epoch(dest)],
                vec![keys.member_prefix(), leaver, routed],
            )
            .await?;
        let epoch = reply
            .first()
            .and_then(|e| e.parse::<u64>().ok())
            .ok_or_else(|| Error::Protocol(format!("unbind reply {reply:?}")))?;
        Ok((epoch, reply[1..].to_vec(), round_trips))
    }

    /// Runs [`SEEN`]: the epoch of `dest` now and whether `me` is in its
    /// set.
    pub(crate) async fn seen(
        &self,
        client: &Client,
        keys: &KeySpace,
        dest: &DestinationId,
        me: &MemberId,
    ) -> Result<(u64, bool)> {
        let (reply, _): (Vec<i64>, u64) = self
            .seen
            .run_counted(
                client,
                vec![keys.destination(dest), keys.epoch(dest)],
                vec![me.as_str().to_owned()],
            )
            .await?;
        let [epoch, member] = reply[..] else {
            return Err(Error::Protocol(format!("seen reply {reply:?}")));
        };
        Ok((epoch_from(epoch)?, member == 1))
    }

    /// Runs [`REAFFIRM`] for `dests` as member `me`, in batches: the epoch
    /// of each destination, bumped where `me` is still in its set, and
    /// whether it is.
    pub(crate) async fn reaffirm(
        &self,
        client: &Client,
        keys: &KeySpace,
        dests: &[DestinationId],
        me: &MemberId,
    ) -> Result<Vec<(u64, bool)>> {
        let mut epochs = Vec::with_capacity(dests.len());
        for batch in dests.chunks(REAFFIRM_BATCH) {
            let pairs: Vec<String> = batch
                .iter()
                .flat_map(|d| [keys.destination(d), keys.epoch(d)])
                .collect();
            let (got, _): (Vec<i64>, u64) = self
                .reaffirm
                .run_counted(client, pairs, vec![me.as_str().to_owned()])
                .await?;
            if got.len() != 2 * batch.len() {
                return Err(Error::Protocol("short reaffirm reply".into()));
            }
            for pair in got.chunks_exact(2) {
                epochs.push((epoch_from(pair[0])?, pair[1] == 1));
            }
        }
        Ok(epochs)
    }

    pub(crate) fn new() -> Self {
        Self {
            resolve: Script::new(RESOLVE),
            live_members: Script::new(LIVE_MEMBERS),
            lock: Script::new(LOCK),
            register_lock: Script::new(REGISTER_LOCK),
            change_set: Script::new(CHANGE_SET),
            claim: Script::new(CLAIM),
            unbind: Script::new(UNBIND),
            seen: Script::new(SEEN),
            reaffirm: Script::new(REAFFIRM),
        }
    }
}
