//! The Lua scripts of the subscription map and the broadcast: each one
//! atomic step on Valkey's clock (`TIME`), run with `EVALSHA` (reloaded on
//! `NOSCRIPT`).
//!
//! Deadlines are milliseconds on Valkey's clock; an entry whose deadline
//! has passed is never counted or listed, and every script that touches a
//! destination's entries first removes the expired ones and moves the
//! key's own expiry to its latest deadline, so the key disappears with its
//! last entry.

use bytes::Bytes;
use coordinator::{DestinationId, MemberId};
use fred::prelude::*;
use ttl_storage::kit::valkey::Script;

use crate::error::{Error, Result};
use crate::event::Position;
use crate::keys::EventKeys;

/// Lua shared by the scripts: `now` (ms) and `gen_now` (µs, as text).
const CLOCK: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local gen_now = t[1] .. string.format('%06d', tonumber(t[2]))
local function renew(subs, member, ttl)
  redis.call('ZREMRANGEBYSCORE', subs, '-inf', now)
  redis.call('ZADD', subs, now + ttl, member)
  local top = redis.call('ZRANGE', subs, -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', subs, top[2])
end
"#;

/// `KEYS`: (subscribers, counter, channel) per destination; `ARGV`:
/// member id, TTL ms. Adds or renews the member's entry, creates the
/// numbering if missing and publishes a mark of where it stands.
const ENTER: &str = r#"
for i = 1, #KEYS, 3 do
  renew(KEYS[i], ARGV[1], tonumber(ARGV[2]))
  redis.call('HSETNX', KEYS[i + 1], 'gen', gen_now)
  local v = redis.call('HMGET', KEYS[i + 1], 'gen', 'seq')
  redis.call('SPUBLISH', KEYS[i + 2], 'mk1\n' .. v[1] .. '\n' .. (v[2] or '0'))
end
return #KEYS / 3
"#;

/// `KEYS`: subscribers per destination; `ARGV`: member id, TTL ms.
const RENEW: &str = r#"
for i = 1, #KEYS do
  renew(KEYS[i], ARGV[1], tonumber(ARGV[2]))
end
return #KEYS
"#;

/// `KEYS[1]`: subscribers; `ARGV[1]`: member id. Removes its entry.
const LEAVE: &str = r#"
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if top[2] then
  redis.call('PEXPIREAT', KEYS[1], top[2])
end
return 1
"#;

/// `KEYS`: counter, subscribers, channel; `ARGV`: the event's tail
/// (sent time, publisher), payload. Numbers the event and publishes it;
/// answers generation, number, subscribed pods, pods reached.
const PUBLISH: &str = r#"
redis.call('HSETNX', KEYS[1], 'gen', gen_now)
local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
local gen = redis.call('HGET', KEYS[1], 'gen')
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local pods = redis.call('ZCARD', KEYS[2])
local reached = redis.call('SPUBLISH', KEYS[3],
  'ev1\n' .. gen .. '\n' .. seq .. '\n' .. ARGV[1] .. ARGV[2])
return {gen, seq, pods, reached}
"#;

/// `KEYS[1]`: subscribers. The ids with a live entry.
const LIVE: &str = r#"
return redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf')
"#;

/// Destinations per script call (three keys each).
pub(crate) const CHUNK: usize = 256;

/// What a publish did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PublishReply {
    pub(crate) position: Position,
    pub(crate) pods: u64,
    pub(crate) reached: u64,
}

/// The scripts, hashed once.
pub(crate) struct Scripts {
    enter: Script,
    renew: Script,
    leave: Script,
    publish: Script,
    live: Script,
}

fn script(body: &str) -> Script {
    Script::from_lua(format!("{CLOCK}{body}"))
}

/// Whose entries of the subscription map a script writes, and through
/// what: the connection, the key layout, the member and how long its
/// entries live.
pub(crate) struct Entries<'a> {
    pub(crate) client: &'a Client,
    pub(crate) keys: &'a EventKeys,
    pub(crate) member: &'a MemberId,
    pub(crate) ttl_ms: u64,
}

/// Runs `script` over `dests`, [`CHUNK`] destinations a call, with the keys
/// `keys_of` names for each and the arguments `of.member`, `of.ttl_ms`.
async fn per_chunk(
    script: &Script,
    of: &Entries<'_>,
    dests: &[DestinationId],
    keys_of: impl Fn(&DestinationId) -> Vec<String>,
) -> Result<()> {
    for chunk in dests.chunks(CHUNK) {
        let k: Vec<String> = chunk.iter().flat_map(&keys_of).collect();
        let _: Value = script
            .run(
                of.client,
                k,
                vec![of.member.as_str().to_owned(), of.ttl_ms.to_string()],
            )
            .await?;
    }
    Ok(())
}

impl Scripts {
    pub(crate) fn new() -> Self {
        Self {
            enter: script(ENTER),
            renew: script(RENEW),
            leave: script(LEAVE),
            publish: script(PUBLISH),
            live: script(LIVE),
        }
    }

    /// Adds or renews the member's entries for `dests` and publishes a
    /// mark on each destination's channel.
    pub(crate) async fn enter(&self, of: &Entries<'_>, dests: &[DestinationId]) -> Result<()> {
        let keys = of.keys;
        per_chunk(&self.enter, of, dests, |d| {
            vec![keys.subscribers(d), keys.counter(d), keys.channel(d)]
        })
        .await
    }

    /// Renews the member's entries for `dests`.
    pub(crate) async fn renew(&self, of: &Entries<'_>, dests: &[DestinationId]) -> Result<()> {
        let keys = of.keys;
        per_chunk(&self.renew, of, dests, |d| vec![keys.subscribers(d)]).await
    }

    /// Removes `member`'s entry for `dest`.
    pub(crate) async fn leave(
        &self,
        client: &Client,
        keys: &EventKeys,
        dest: &DestinationId,
        member: &MemberId,
    ) -> Result<()> {
        let _: Value = self
            .leave
            .run(client, vec![keys.subscribers(dest)], vec![member.as_str()])
            .await?;
        Ok(())
    }

    /// Numbers `payload` and publishes it on `dest`'s channel.
    pub(crate) async fn publish(
        &self,
        client: &Client,
        keys: &EventKeys,
        dest: &DestinationId,
        tail: String,
        payload: Bytes,
    ) -> Result<PublishReply> {
        let reply: Vec<Value> = self
            .publish
            .run(
                client,
                vec![
                    keys.counter(dest),
                    keys.subscribers(dest),
                    keys.channel(dest),
                ],
                vec![Value::from(tail), Value::Bytes(payload)],
            )
            .await?;
        parse_publish(&reply)
    }

    /// The members with a live entry for `dest`.
    pub(crate) async fn live(
        &self,
        client: &Client,
        keys: &EventKeys,
        dest: &DestinationId,
    ) -> Result<Vec<MemberId>> {
        let ids: Vec<String> = self
            .live
            .run(client, vec![keys.subscribers(dest)], Vec::<String>::new())
            .await?;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            match MemberId::new(id) {
                Ok(id) => out.push(id),
                Err(err) => tracing::warn!(%dest, %err, "ignoring a malformed subscription entry"),
            }
        }
        Ok(out)
    }
}

/// `{gen, seq, pods, reached}` from the publish script.
fn parse_publish(reply: &[Value]) -> Result<PublishReply> {
    let bad = || Error::Protocol(format!("publish answered {reply:?}"));
    let [generation, seq, pods, reached] = reply else {
        return Err(bad());
    };
    let number = |v: &Value| -> Result<u64> {
        match v {
            Value::Integer(i) => u64::try_from(*i).map_err(|_| bad()),
            other => other.as_str().and_then(|s| s.parse().ok()).ok_or_else(bad),
        }
    };
    Ok(PublishReply {
        position: Position {
            generation: number(generation)?,
            seq: number(seq)?,
        },
        pods: number(pods)?,
        reached: number(reached)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publish_replies_are_checked() {
        let ok = parse_publish(&[
            Value::from("1795793102724544"),
            Value::Integer(3),
            Value::Integer(2),
            Value::Integer(1),
        ]);
        assert_eq!(
            ok.ok(),
            Some(PublishReply {
                position: Position {
                    generation: 1_795_793_102_724_544,
                    seq: 3
                },
                pods: 2,
                reached: 1
            })
        );
        for bad in [
            vec![],
            vec![Value::Integer(1); 3],
            vec![
                Value::from("x"),
                Value::Integer(1),
                Value::Integer(1),
                Value::Integer(1),
            ],
            vec![
                Value::Integer(1),
                Value::Integer(-1),
                Value::Integer(1),
                Value::Integer(1),
            ],
        ] {
            assert!(
                matches!(parse_publish(&bad), Err(Error::Protocol(_))),
                "{bad:?}"
            );
        }
    }
}
