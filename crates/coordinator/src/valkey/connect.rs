//! Connecting a fred client to Valkey, TLS never falling back to plaintext.

use std::path::PathBuf;
use std::time::Duration;

use fred::prelude::*;

use crate::error::{Error, Result};

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
