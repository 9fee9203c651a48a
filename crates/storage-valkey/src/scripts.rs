//! The Lua scripts of compare-and-swap, compare-and-delete and the entry
//! read, run with
//! `EVALSHA` and re-sent with `EVAL` when the server answers `NOSCRIPT`.

use fred::{
    prelude::{Client, LuaInterface},
    types::Value,
};

/// Replaces the value `ARGV[1]` by `ARGV[2]` and restarts the TTL at
/// `ARGV[3]` milliseconds (`0`: no expiry). A missing or expired key reads
/// as `false`, which never equals a string. Reply: 1 swapped, 0 not.
pub(crate) const CAS: &str = r#"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
if ARGV[3] == '0' then
  redis.call('SET', KEYS[1], ARGV[2])
else
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
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

/// A script and its SHA-1, computed once.
#[derive(Debug, Clone)]
pub(crate) struct Script {
    lua: &'static str,
    sha: String,
}

impl Script {
    pub(crate) fn new(lua: &'static str) -> Self {
        Script {
            lua,
            sha: fred::util::sha1_hash(lua),
        }
    }

    /// Runs the script on one key.
    pub(crate) async fn run(
        &self,
        client: &Client,
        key: &str,
        args: Vec<Value>,
    ) -> Result<Value, fred::error::Error> {
        self.run_keys(client, vec![key.to_string()], args).await
    }

    /// Runs the script on `keys`. `NOSCRIPT` proves the server did not run
    /// it, so re-sending it whole is safe.
    pub(crate) async fn run_keys(
        &self,
        client: &Client,
        keys: Vec<String>,
        args: Vec<Value>,
    ) -> Result<Value, fred::error::Error> {
        match client
            .evalsha::<Value, _, _, _>(self.sha.as_str(), keys.clone(), args.clone())
            .await
        {
            Err(err) if err.details().starts_with("NOSCRIPT") => {
                tracing::debug!(sha = %self.sha, "script not cached on the server; sending it");
                client.eval::<Value, _, _, _>(self.lua, keys, args).await
            }
            other => other,
        }
    }
}
