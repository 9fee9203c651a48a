//! [`ConnectOptions`]: the connection options every network driver has
//! (request and connect timeouts, the TLS CA file, the key prefix), kept
//! and parsed from a URL's query once, in the manner of object_store's
//! `ClientOptions`.
//!
//! A driver's builder holds one `ConnectOptions` in a field named
//! `options`, exposes its setters with [`connect_setters!`](crate::connect_setters)
//! and checks it in `build` with [`ConnectOptions::check_timeouts`] and
//! [`ConnectOptions::prefix_is_valid`]; its URL parser hands each query
//! parameter to [`ConnectOptions::apply`] first. A driver of one server
//! (host and port) exposes those with [`server_setters!`](crate::server_setters)
//! and [`server_getters!`](crate::server_getters).

use std::{path::PathBuf, time::Duration};

use super::{UrlError, query::duration_param};

/// The default timeout of one request.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// The default timeout for opening a connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest timeout a driver accepts.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);
/// The longest key prefix, in bytes.
pub const MAX_PREFIX_LEN: usize = 256;

/// A connection option a URL may set, by its query parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Param {
    /// `timeout`: the timeout of one request (`500ms`, `5s`, ...).
    Timeout,
    /// `connect_timeout`: the timeout for opening a connection.
    ConnectTimeout,
    /// `tls_ca_file`: a PEM CA file to trust instead of the system's roots.
    TlsCaFile,
    /// `prefix`: the prefix of every key.
    Prefix,
}

impl Param {
    /// Every option, for drivers that take them all.
    pub const ALL: &'static [Param] = &[
        Param::Timeout,
        Param::ConnectTimeout,
        Param::TlsCaFile,
        Param::Prefix,
    ];

    /// The option's query parameter.
    pub fn name(self) -> &'static str {
        match self {
            Param::Timeout => "timeout",
            Param::ConnectTimeout => "connect_timeout",
            Param::TlsCaFile => "tls_ca_file",
            Param::Prefix => "prefix",
        }
    }
}

/// The connection options shared by the network drivers.
///
/// ```
/// use std::time::Duration;
/// use ttl_storage::kit::options::{ConnectOptions, Param};
///
/// let mut options = ConnectOptions::new("ttl/");
/// assert!(options.apply(Param::ALL, "timeout", "750ms").unwrap());
/// assert!(!options.apply(Param::ALL, "table", "t").unwrap());
/// assert!(options.apply(Param::ALL, "connect_timeout", "5").is_err());
/// assert_eq!(options.request_timeout, Duration::from_millis(750));
/// assert_eq!(options.prefix, "ttl/");
/// assert!(options.check_timeouts().is_ok());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectOptions {
    /// The timeout of one request.
    pub request_timeout: Duration,
    /// The timeout for opening a connection (TLS and authentication
    /// included).
    pub connect_timeout: Duration,
    /// A PEM CA file trusted for TLS instead of the system's roots.
    pub tls_ca_file: Option<PathBuf>,
    /// The prefix of every key (for drivers that have one).
    pub prefix: String,
}

impl ConnectOptions {
    /// The defaults, with `prefix` as the key prefix.
    pub fn new(prefix: &str) -> Self {
        ConnectOptions {
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            tls_ca_file: None,
            prefix: prefix.to_owned(),
        }
    }

    /// Sets the option whose query parameter is `name`, if it is one of
    /// `accepted`: `Ok(true)`; `Ok(false)` for any other name (the
    /// driver's to read or refuse); a bad value is a [`UrlError`] naming
    /// the parameter.
    pub fn apply(&mut self, accepted: &[Param], name: &str, value: &str) -> Result<bool, UrlError> {
        let Some(param) = accepted.iter().find(|p| p.name() == name) else {
            return Ok(false);
        };
        match param {
            Param::Timeout => self.request_timeout = duration_param("timeout", value)?,
            Param::ConnectTimeout => {
                self.connect_timeout = duration_param("connect_timeout", value)?
            }
            Param::TlsCaFile => self.tls_ca_file = Some(PathBuf::from(value)),
            Param::Prefix => self.prefix = value.to_owned(),
        }
        Ok(true)
    }

    /// Both timeouts lie from 1 ms to [`MAX_TIMEOUT`], or
    /// [`UrlError::BadDuration`] naming the first that does not
    /// (`timeout`, then `connect_timeout`).
    pub fn check_timeouts(&self) -> Result<(), UrlError> {
        for (name, timeout) in [
            ("timeout", self.request_timeout),
            ("connect_timeout", self.connect_timeout),
        ] {
            super::query::check_timeout(name, timeout, MAX_TIMEOUT)?;
        }
        Ok(())
    }

    /// The prefix is at most [`MAX_PREFIX_LEN`] bytes without control
    /// characters (it may be empty).
    pub fn prefix_is_valid(&self) -> bool {
        self.prefix.len() <= MAX_PREFIX_LEN && !self.prefix.chars().any(char::is_control)
    }
}

/// The public setters of a driver's builder for the [`ConnectOptions`] it
/// keeps in its field `options`, one per option named: `request_timeout`,
/// `connect_timeout`, `tls_ca_file`, `prefix`. Each returns the builder;
/// the builder's `build` validates.
///
/// ```
/// use ttl_storage::kit::options::ConnectOptions;
///
/// struct Builder {
///     options: ConnectOptions,
/// }
///
/// impl Builder {
///     ttl_storage::connect_setters!(request_timeout, prefix);
/// }
///
/// let builder = Builder { options: ConnectOptions::new("ttl:") }.prefix("leases:");
/// assert_eq!(builder.options.prefix, "leases:");
/// ```
#[macro_export]
macro_rules! connect_setters {
    ($($option:ident),* $(,)?) => {
        $($crate::connect_setters!(@ $option);)*
    };
    (@ request_timeout) => {
        /// Timeout of one request (default 5 s).
        pub fn request_timeout(mut self, timeout: ::std::time::Duration) -> Self {
            self.options.request_timeout = timeout;
            self
        }
    };
    (@ connect_timeout) => {
        /// Timeout for opening a connection (default 5 s).
        pub fn connect_timeout(mut self, timeout: ::std::time::Duration) -> Self {
            self.options.connect_timeout = timeout;
            self
        }
    };
    (@ tls_ca_file) => {
        /// Trusts the CA certificates in this PEM file instead of the
        /// system's trust store; needs TLS.
        pub fn tls_ca_file(mut self, path: impl Into<::std::path::PathBuf>) -> Self {
            self.options.tls_ca_file = Some(path.into());
            self
        }
    };
    (@ prefix) => {
        /// Prefix of every key (the driver's `DEFAULT_PREFIX` unless set);
        /// may be empty.
        pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
            self.options.prefix = prefix.into();
            self
        }
    };
}

/// The public getters of a driver's validated configuration for the
/// [`ConnectOptions`] it keeps in its field `options`, one per option
/// named: `request_timeout`, `connect_timeout`, `prefix`.
///
/// ```
/// use std::time::Duration;
/// use ttl_storage::kit::options::ConnectOptions;
///
/// struct Config {
///     options: ConnectOptions,
/// }
///
/// impl Config {
///     ttl_storage::connect_getters!(request_timeout, prefix);
/// }
///
/// let config = Config { options: ConnectOptions::new("ttl:") };
/// assert_eq!(config.prefix(), "ttl:");
/// assert_eq!(config.request_timeout(), Duration::from_secs(5));
/// ```
#[macro_export]
macro_rules! connect_getters {
    ($($option:ident),* $(,)?) => {
        $($crate::connect_getters!(@ $option);)*
    };
    (@ request_timeout) => {
        /// Timeout of one request.
        pub fn request_timeout(&self) -> ::std::time::Duration {
            self.options.request_timeout
        }
    };
    (@ connect_timeout) => {
        /// Timeout for opening a connection.
        pub fn connect_timeout(&self) -> ::std::time::Duration {
            self.options.connect_timeout
        }
    };
    (@ prefix) => {
        /// Prefix of every key written.
        pub fn prefix(&self) -> &str {
            &self.options.prefix
        }
    };
}

/// The public setters of a driver's builder for the one server it connects
/// to, kept in its fields `host: Option<String>` and `port: u16`: `host`
/// (required: `build` checks it is set) and `port` (its default, the
/// driver's constant named here).
///
/// ```
/// const DEFAULT_PORT: u16 = 7000;
///
/// struct Builder {
///     host: Option<String>,
///     port: u16,
/// }
///
/// impl Builder {
///     ttl_storage::server_setters!(DEFAULT_PORT);
/// }
///
/// let builder = Builder { host: None, port: DEFAULT_PORT }.host("db1").port(7001);
/// assert_eq!((builder.host.as_deref(), builder.port), (Some("db1"), 7001));
/// ```
#[macro_export]
macro_rules! server_setters {
    ($default_port:ident) => {
        /// The server's host name or IP address (required).
        pub fn host(mut self, host: impl Into<String>) -> Self {
            self.host = Some(host.into());
            self
        }

        #[doc = concat!("The server's port (default [`", stringify!($default_port), "`]).")]
        pub fn port(mut self, port: u16) -> Self {
            self.port = port;
            self
        }
    };
}

/// The public getters of a driver's validated configuration for the one
/// server it connects to, kept in its fields `host: String` and
/// `port: u16`.
///
/// ```
/// struct Config {
///     host: String,
///     port: u16,
/// }
///
/// impl Config {
///     ttl_storage::server_getters!();
/// }
///
/// let config = Config { host: "db1".into(), port: 7000 };
/// assert_eq!((config.host(), config.port()), ("db1", 7000));
/// ```
#[macro_export]
macro_rules! server_getters {
    () => {
        /// The server's host name or IP address.
        pub fn host(&self) -> &str {
            &self.host
        }

        /// The server's port.
        pub fn port(&self) -> u16 {
            self.port
        }
    };
}
