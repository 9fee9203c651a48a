//! Connecting to Valkey and the Lua scripts that make reads single round trips.

use std::path::PathBuf;
use std::time::Duration;

use fred::prelude::*;
use fred::types::{MultipleKeys, MultipleValues};

use crate::address_policy::AddressPolicy;
use crate::error::{Error, Result};
use crate::record::MemberRecord;

/// How to reach Valkey: see [`connect_with`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValkeyOptions {
    /// Commands (and connecting) time out after this long (1 ms..=1 h;
    /// default 2 s).
    pub command_timeout: Duration,
    /// PEM file of the CA that signs the server's certificate, for
    /// `rediss://` URLs; `None` trusts the system's roots.
    pub ca_file: Option<PathBuf>,
}

impl Default for ValkeyOptions {
    fn default() -> Self {
        Self {
            command_timeout: Duration::from_secs(2),
            ca_file: None,
        }
    }
}

/// Whether `url` asks for TLS (`rediss://`, `valkeys://` and their cluster /
/// sentinel forms).
fn wants_tls(url: &str) -> bool {
    let scheme = url.split_once("://").map_or("", |(s, _)| s);
    let scheme = scheme.to_ascii_lowercase();
    scheme.starts_with("rediss") || scheme.starts_with("valkeys")
}

/// `url` with its TLS scheme replaced by the plain one (`rediss-cluster://`
/// → `redis-cluster://`), so fred parses it without building its own TLS
/// connector (which would use rustls' process-wide provider, ambiguous when
/// several are compiled in); the TLS connector is then set explicitly.
fn plain_scheme(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let lower = scheme.to_ascii_lowercase();
            let plain = if let Some(suffix) = lower.strip_prefix("rediss") {
                format!("redis{suffix}")
            } else if let Some(suffix) = lower.strip_prefix("valkeys") {
                format!("valkey{suffix}")
            } else {
                lower
            };
            format!("{plain}://{rest}")
        }
        None => url.to_owned(),
    }
}

/// Connects a fred [`Client`] to `url` (`redis://host:port[/db]`, or
/// `rediss://` for TLS) and waits until it is connected. Commands time out
/// after `command_timeout` (1 ms..=1 h); a lost connection is re-established
/// forever with exponential backoff (100 ms up to 5 s). Same as
/// [`connect_with`] with the system's CA roots.
///
/// Any other fred client configuration works too: `Member` and `Registry`
/// take a ready [`Client`].
pub async fn connect(url: &str, command_timeout: Duration) -> Result<Client> {
    connect_with(
        url,
        &ValkeyOptions {
            command_timeout,
            ..ValkeyOptions::default()
        },
    )
    .await
}

/// Connects like [`connect`], with `options`.
///
/// `rediss://` (and `valkeys://`) URLs always use TLS (rustls, server
/// certificate verified against `options.ca_file` or the system roots);
/// if TLS cannot be set up the call fails: it never falls back to
/// plaintext. A `ca_file` with a plaintext URL is refused as a
/// configuration mistake.
///
/// ```no_run
/// use coordinator::{ValkeyOptions, connect_with};
///
/// # async fn demo() -> Result<(), coordinator::Error> {
/// let valkey = connect_with(
///     "rediss://:secret@valkey.internal:6380",
///     &ValkeyOptions { ca_file: Some("/etc/valkey/ca.pem".into()), ..ValkeyOptions::default() },
/// )
/// .await?;
/// # Ok(()) }
/// ```
pub async fn connect_with(url: &str, options: &ValkeyOptions) -> Result<Client> {
    let command_timeout = options.command_timeout;
    if command_timeout < Duration::from_millis(1) || command_timeout > Duration::from_secs(3600) {
        return Err(Error::InvalidConfig(format!(
            "command timeout must be within 1 ms..=1 h, got {command_timeout:?}"
        )));
    }
    let mut config = Config::from_url(&plain_scheme(url))?;
    if wants_tls(url) {
        let tls = crate::tls::client_config(options.ca_file.as_deref())?;
        config.tls = Some(fred::types::config::TlsConnector::from(tls).into());
    } else if options.ca_file.is_some() {
        return Err(Error::InvalidConfig(
            "a CA file is set but the Valkey URL is not rediss://".into(),
        ));
    }
    if wants_tls(url) != config.uses_tls() {
        return Err(Error::InvalidConfig(
            "the Valkey URL asks for TLS but the client would connect in plaintext".into(),
        ));
    }
    let client = Builder::from_config(config)
        .with_performance_config(|p| p.default_command_timeout = command_timeout)
        .with_connection_config(|c| {
            c.connection_timeout = command_timeout;
            c.tcp = TcpConfig {
                nodelay: Some(true),
                ..Default::default()
            };
        })
        .set_policy(ReconnectPolicy::new_exponential(0, 100, 5_000, 2))
        .build()?;
    client.init().await?;
    Ok(client)
}

/// A Lua script run with `EVALSHA`, falling back to `EVAL` once on `NOSCRIPT`.
pub(crate) struct Script {
    lua: &'static str,
    sha: String,
}

impl Script {
    fn new(lua: &'static str) -> Self {
        Self {
            lua,
            sha: fred::util::sha1_hash(lua),
        }
    }

    /// Runs the script; the returned count is the round trips it took.
    pub(crate) async fn run<R, K, V>(&self, client: &Client, keys: K, args: V) -> Result<(R, u64)>
    where
        R: FromValue,
        K: Into<MultipleKeys> + Send,
        V: TryInto<MultipleValues> + Send,
        V::Error: Into<fred::error::Error> + Send,
    {
        let keys: MultipleKeys = keys.into();
        let args: MultipleValues = args.try_into().map_err(Into::into)?;
        match client
            .evalsha::<R, _, _, _>(self.sha.as_str(), keys.clone(), args.clone())
            .await
        {
            Err(e) if e.details().starts_with("NOSCRIPT") => {
                Ok((client.eval(self.lua, keys, args).await?, 2))
            }
            other => Ok((other?, 1)),
        }
    }
}

/// Reads a destination set and the records of its members in one step.
/// Dead members are removed from the set when at least one member is live.
/// KEYS: destination set. ARGV: member key prefix, prune flag ("1"/"0").
/// Reply: `[total, ndead, dead..., (id, address, load)...]`.
const RESOLVE: &str = r#"
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
end
if ARGV[2] == '1' and #live > 0 and #dead > 0 then
  redis.call('SREM', KEYS[1], unpack(dead))
end
local out = { tostring(#ids), tostring(#dead) }
for _, id in ipairs(dead) do out[#out + 1] = id end
for _, x in ipairs(live) do out[#out + 1] = x end
return out
"#;

/// Lists live members and removes the ids of dead ones from the members set.
/// KEYS: members set. ARGV: member key prefix.
/// Reply: `[npruned, (id, address, load)...]`.
const LIVE_MEMBERS: &str = r#"
local ids = redis.call('SMEMBERS', KEYS[1])
local out = { '0' }
local dead = {}
for _, id in ipairs(ids) do
  local v = redis.call('HMGET', ARGV[1] .. id, 'address', 'load')
  if v[1] then
    out[#out + 1] = id
    out[#out + 1] = v[1]
    out[#out + 1] = v[2] or '0'
  else
    dead[#dead + 1] = id
  end
end
if #dead > 0 then
  redis.call('SREM', KEYS[1], unpack(dead))
end
out[1] = tostring(#dead)
return out
"#;

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

/// The scripts, hashed once.
pub(crate) struct Scripts {
    pub(crate) resolve: Script,
    pub(crate) live_members: Script,
    pub(crate) lock: Script,
    pub(crate) register_lock: Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        Self {
            resolve: Script::new(RESOLVE),
            live_members: Script::new(LIVE_MEMBERS),
            lock: Script::new(LOCK),
            register_lock: Script::new(REGISTER_LOCK),
        }
    }
}

/// The parsed reply of [`RESOLVE`].
pub(crate) struct ResolveReply {
    /// Size of the set before pruning.
    pub(crate) total: usize,
    /// Members whose record is gone.
    pub(crate) dead: Vec<String>,
    /// Members whose record is present and valid, sorted by id.
    pub(crate) live: Vec<MemberRecord>,
}

fn count(raw: Option<&String>) -> Result<usize> {
    raw.and_then(|s| s.parse().ok())
        .ok_or_else(|| Error::Protocol("script reply without a count".into()))
}

pub(crate) fn parse_triples(raw: &[String], policy: &AddressPolicy) -> Result<Vec<MemberRecord>> {
    if !raw.len().is_multiple_of(3) {
        return Err(Error::Protocol(
            "member list is not (id, address, load)".into(),
        ));
    }
    let mut out: Vec<MemberRecord> = raw
        .chunks_exact(3)
        .filter_map(|c| MemberRecord::from_raw(&c[0], &c[1], &c[2], policy))
        .collect();
    out.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(out)
}

pub(crate) fn parse_resolve(raw: Vec<String>, policy: &AddressPolicy) -> Result<ResolveReply> {
    let total = count(raw.first())?;
    let ndead = count(raw.get(1))?;
    let dead_end = 2 + ndead;
    let dead = raw
        .get(2..dead_end)
        .ok_or_else(|| Error::Protocol("short resolve reply".into()))?
        .to_vec();
    let live = parse_triples(&raw[dead_end..], policy)?;
    Ok(ResolveReply { total, dead, live })
}

pub(crate) fn parse_live_members(
    raw: Vec<String>,
    policy: &AddressPolicy,
) -> Result<(usize, Vec<MemberRecord>)> {
    let pruned = count(raw.first())?;
    Ok((pruned, parse_triples(&raw[1..], policy)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| (*x).to_owned()).collect()
    }

    #[test]
    fn tls_schemes_are_recognised_and_parsed_as_plain() {
        for (url, tls, plain) in [
            ("rediss://:pw@h:6380/1", true, "redis://:pw@h:6380/1"),
            ("valkeys-cluster://h:1", true, "valkey-cluster://h:1"),
            ("REDISS://h", true, "redis://h"),
            ("redis://h:1", false, "redis://h:1"),
        ] {
            assert_eq!(wants_tls(url), tls, "{url}");
            assert_eq!(plain_scheme(url), plain, "{url}");
        }
    }

    #[test]
    fn resolve_reply_parses() {
        let r = parse_resolve(
            s(&[
                "3",
                "1",
                "dead",
                "b",
                "http://127.0.0.1:2",
                "4",
                "a",
                "http://127.0.0.1:1",
                "7",
            ]),
            &AddressPolicy::default(),
        )
        .unwrap();
        assert_eq!(r.total, 3);
        assert_eq!(r.dead, ["dead"]);
        let ids: Vec<_> = r.live.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids, ["a", "b"], "sorted by id");
        assert_eq!(r.live[0].load, 7);
    }

    #[test]
    fn members_with_bad_addresses_are_skipped() {
        let (_, live) = parse_live_members(
            s(&["0", "a", "ftp://x", "1", "b", "http://h:1", "2"]),
            &AddressPolicy::default(),
        )
        .unwrap();
        assert_eq!(live.len(), 1);
        assert_eq!(live[0].id.as_str(), "b");
    }

    #[test]
    fn malformed_replies_are_errors() {
        let p = AddressPolicy::default();
        assert!(parse_resolve(s(&[]), &p).is_err());
        assert!(parse_resolve(s(&["1", "5"]), &p).is_err());
        assert!(parse_live_members(s(&["0", "a", "b"]), &p).is_err());
    }
}
