//! Lua scripts on Valkey / Redis, run with `EVALSHA` and sent whole with
//! `EVAL` when the server answers `NOSCRIPT` (its script cache was flushed,
//! or it restarted or failed over). `NOSCRIPT` proves the server did not
//! run the script, so sending it again is safe, writes included. The one
//! helper of the Valkey driver, the coordinator and its cluster events
//! (feature `kit-valkey`).
//!
//! ```no_run
//! # async fn demo(client: &fred::prelude::Client) -> Result<(), fred::error::Error> {
//! use ttl_storage::kit::valkey::Script;
//!
//! let incr = Script::new("return redis.call('INCR', KEYS[1])");
//! let (n, round_trips): (i64, u64) = incr.run_counted(client, "hits", Vec::<String>::new()).await?;
//! assert!(n >= 1 && (round_trips == 1 || round_trips == 2));
//! # Ok(()) }
//! ```

use std::borrow::Cow;

use fred::{
    error::Error,
    interfaces::LuaInterface,
    prelude::Client,
    types::{FromValue, MultipleKeys, MultipleValues},
};

/// A Lua script and its SHA-1, computed once.
#[derive(Debug, Clone)]
pub struct Script {
    lua: Cow<'static, str>,
    sha: String,
}

impl Script {
    /// A script from a constant.
    pub fn new(lua: &'static str) -> Self {
        Self::hashed(Cow::Borrowed(lua))
    }

    /// A script built at run time (say, a shared prelude and a body).
    pub fn from_lua(lua: String) -> Self {
        Self::hashed(Cow::Owned(lua))
    }

    fn hashed(lua: Cow<'static, str>) -> Self {
        let sha = fred::util::sha1_hash(&lua);
        Script { lua, sha }
    }

    /// The script's SHA-1, as `EVALSHA` names it.
    pub fn sha(&self) -> &str {
        &self.sha
    }

    /// Runs the script on `keys` with `args`.
    pub async fn run<R, K, V>(&self, client: &Client, keys: K, args: V) -> Result<R, Error>
    where
        R: FromValue,
        K: Into<MultipleKeys> + Send,
        V: TryInto<MultipleValues> + Send,
        V::Error: Into<Error> + Send,
    {
        Ok(self.run_counted(client, keys, args).await?.0)
    }

    /// Runs the script; also returns the round trips it took (1, or 2 when
    /// the server did not have it cached).
    pub async fn run_counted<R, K, V>(
        &self,
        client: &Client,
        keys: K,
        args: V,
    ) -> Result<(R, u64), Error>
    where
        R: FromValue,
        K: Into<MultipleKeys> + Send,
        V: TryInto<MultipleValues> + Send,
        V::Error: Into<Error> + Send,
    {
        let keys: MultipleKeys = keys.into();
        let args: MultipleValues = args.try_into().map_err(Into::into)?;
        match client
            .evalsha::<R, _, _, _>(self.sha.as_str(), keys.clone(), args.clone())
            .await
        {
            Err(err) if err.details().starts_with("NOSCRIPT") => {
                tracing::debug!(sha = %self.sha, "script not cached on the server; sending it");
                Ok((client.eval(self.lua.as_ref(), keys, args).await?, 2))
            }
            other => Ok((other?, 1)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sha_is_that_of_the_text() {
        // SHA-1 of "return 1", as `SCRIPT LOAD` answers it.
        let script = Script::new("return 1");
        assert_eq!(script.sha(), "e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
        assert_eq!(Script::from_lua("return 1".to_string()).sha(), script.sha());
    }
}
