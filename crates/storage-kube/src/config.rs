//! [`KubeConfig`]: which API server, which namespace, which credentials;
//! parsed from a `kube://` URL.

use std::{path::PathBuf, time::Duration};

use ttl_storage::kit::{
    UrlError,
    options::{ConnectOptions, Param},
    url::{params, parse},
};

/// A configuration that cannot be used, found before connecting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// What every driver's URL can have wrong (syntax, scheme,
    /// percent-encoding, parameters unknown or given twice, values).
    #[error(transparent)]
    Url(#[from] UrlError),
    /// The namespace is missing or not a DNS-1123 label.
    #[error(
        "bad namespace {0:?}: expected kube://NAMESPACE, a name of at most 63 lowercase letters, digits and -"
    )]
    BadNamespace(String),
    /// `server` is not an `https://` URL (the driver never talks to an API
    /// server in plaintext).
    #[error("bad server {0:?}: expected https://host[:port]")]
    BadServer(String),
    /// Options that cannot go together (`server` with `kubeconfig`, a
    /// token file without `server`, ...).
    #[error("{0}")]
    Conflict(&'static str),
}

/// Where the credentials and the API server's address come from.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Source {
    /// kube's inference: the kubeconfig of `KUBECONFIG` or
    /// `~/.kube/config` if there is one, else the pod's service account
    /// (`KUBERNETES_SERVICE_HOST` and
    /// `/var/run/secrets/kubernetes.io/serviceaccount`). In a pod without a
    /// kubeconfig, that is the service account.
    Infer,
    /// The pod's service account only (`in_cluster=true`).
    InCluster,
    /// A kubeconfig file (`kubeconfig=PATH`; `KUBECONFIG` or
    /// `~/.kube/config` when only `context` is given) and its context.
    Kubeconfig {
        /// The file, `None` for the usual place.
        path: Option<PathBuf>,
        /// The context, `None` for the file's current context.
        context: Option<String>,
    },
    /// An API server given directly (`server=https://...`), with a CA file
    /// and a bearer token file (re-read as it rotates).
    Server {
        /// `https://host[:port]`.
        url: String,
        /// A PEM CA file to trust, `None` for the system's roots.
        ca_file: Option<PathBuf>,
        /// A file holding a bearer token.
        token_file: Option<PathBuf>,
    },
}

/// How to reach the Lease API of one namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeConfig {
    pub(crate) namespace: String,
    pub(crate) source: Source,
    pub(crate) options: ConnectOptions,
}

impl KubeConfig {
    /// Leases in `namespace`, credentials by [`Source::Infer`], the
    /// default timeouts (5 s per request and per connection).
    ///
    /// # Errors
    ///
    /// [`ConfigError::BadNamespace`].
    pub fn new(namespace: &str) -> Result<Self, ConfigError> {
        if !is_label(namespace) {
            return Err(ConfigError::BadNamespace(namespace.to_owned()));
        }
        Ok(KubeConfig {
            namespace: namespace.to_owned(),
            source: Source::Infer,
            options: ConnectOptions::new(""),
        })
    }

    /// Parses a URL:
    ///
    /// ```text
    /// kube://NAMESPACE[?param=value&...]
    /// ```
    ///
    /// | parameter | meaning | default |
    /// |---|---|---|
    /// | `kubeconfig` | a kubeconfig file | `KUBECONFIG`, `~/.kube/config`, then the pod's service account |
    /// | `context` | the kubeconfig's context | its current context |
    /// | `in_cluster` | `true`: the pod's service account only | `false` |
    /// | `server` | the API server, `https://host[:port]` (then no kubeconfig is read) | none |
    /// | `ca_file` (or `tls_ca_file`) | PEM CA file of `server` | the system's roots |
    /// | `token_file` | bearer token file for `server` (re-read as it rotates) | none |
    /// | `timeout` | timeout of one request | `5s` |
    /// | `connect_timeout` | timeout for opening a connection | `5s` |
    ///
    /// ```
    /// use storage_kube::KubeConfig;
    ///
    /// let config = KubeConfig::from_url(
    ///     "kube://leases?server=https://127.0.0.1:6443&ca_file=/ca.pem&token_file=/token&timeout=2s",
    /// )
    /// .unwrap();
    /// assert_eq!(config.namespace(), "leases");
    /// assert_eq!(config.endpoint().as_deref(), Some("127.0.0.1:6443"));
    /// assert!(KubeConfig::from_url("kube://default?server=http://127.0.0.1:8080").is_err());
    /// assert!(KubeConfig::from_url("kube://Default").is_err());
    /// ```
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming what is wrong.
    pub fn from_url(url: &str) -> Result<Self, ConfigError> {
        let parsed = parse(url)?;
        if parsed.scheme() != "kube" {
            return Err(UrlError::BadScheme {
                scheme: parsed.scheme().to_owned(),
                expected: "kube://",
            }
            .into());
        }
        if parsed.port().is_some() || !parsed.username().is_empty() || parsed.path() != "" {
            return Err(ConfigError::BadNamespace(
                url.split('?').next().unwrap_or(url).to_owned(),
            ));
        }
        let mut config = KubeConfig::new(parsed.host_str().unwrap_or(""))?;
        let (mut kubeconfig, mut context, mut in_cluster) = (None, None, false);
        let (mut server, mut token_file) = (None, None);
        for (name, value) in params(&parsed, &[])? {
            // `ca_file` is `tls_ca_file` by its Kubernetes name: one of them, once.
            let ca_file = name == "ca_file" || name == "tls_ca_file";
            if ca_file && config.options.tls_ca_file.is_some() {
                return Err(UrlError::DuplicateParameter(name).into());
            }
            let accepted = &[Param::Timeout, Param::ConnectTimeout, Param::TlsCaFile];
            if config.options.apply(accepted, &name, &value)? {
                continue;
            }
            match name.as_str() {
                "ca_file" => config.options.tls_ca_file = Some(PathBuf::from(value)),
                "kubeconfig" => kubeconfig = Some(PathBuf::from(value)),
                "context" => context = Some(value),
                "in_cluster" => {
                    in_cluster = ttl_storage::kit::query::bool_param("in_cluster", &value)?
                }
                "server" => server = Some(value),
                "token_file" => token_file = Some(PathBuf::from(value)),
                _ => return Err(UrlError::UnknownParameter(name).into()),
            }
        }
        config.options.check_timeouts()?;
        config.source = match (
            server,
            kubeconfig.is_some() || context.is_some(),
            in_cluster,
        ) {
            (Some(url), false, false) => {
                check_server(&url)?;
                Source::Server {
                    url,
                    ca_file: config.options.tls_ca_file.clone(),
                    token_file,
                }
            }
            (Some(_), _, _) => {
                return Err(ConfigError::Conflict(
                    "server cannot go with kubeconfig, context or in_cluster",
                ));
            }
            (None, has_kubeconfig, in_cluster) => {
                if token_file.is_some() || config.options.tls_ca_file.is_some() {
                    return Err(ConfigError::Conflict(
                        "ca_file and token_file go with server (a kubeconfig and the service account name their own)",
                    ));
                }
                match (has_kubeconfig, in_cluster) {
                    (true, true) => {
                        return Err(ConfigError::Conflict(
                            "in_cluster cannot go with kubeconfig or context",
                        ));
                    }
                    (true, false) => Source::Kubeconfig {
                        path: kubeconfig,
                        context,
                    },
                    (false, true) => Source::InCluster,
                    (false, false) => Source::Infer,
                }
            }
        };
        Ok(config)
    }

    /// The namespace of the Leases.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Where the credentials come from.
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// The timeout of one request.
    pub fn request_timeout(&self) -> Duration {
        self.options.request_timeout
    }

    /// The timeout for opening a connection.
    pub fn connect_timeout(&self) -> Duration {
        self.options.connect_timeout
    }

    /// The API server's `host:port` when the URL names it (`server=`).
    pub fn endpoint(&self) -> Option<String> {
        let Source::Server { url, .. } = &self.source else {
            return None;
        };
        let parsed = url::Url::parse(url).ok()?;
        let host = parsed.host_str()?;
        Some(format!("{host}:{}", parsed.port_or_known_default()?))
    }

    /// The same configuration with `server`'s `host:port` replaced by
    /// `addr` (a proxy in front).
    pub(crate) fn with_server_addr(url: &str, addr: &str) -> Option<String> {
        let mut parsed = url::Url::parse(url).ok()?;
        let server = parsed
            .query_pairs()
            .find(|(name, _)| name == "server")?
            .1
            .into_owned();
        let replaced = ttl_storage::kit::url::replace_host_and_port(&server, addr)?;
        let pairs: Vec<(String, String)> = parsed
            .query_pairs()
            .map(|(n, v)| {
                let v = if n == "server" {
                    replaced.clone()
                } else {
                    v.into_owned()
                };
                (n.into_owned(), v)
            })
            .collect();
        parsed.query_pairs_mut().clear().extend_pairs(pairs);
        Some(parsed.to_string())
    }
}

impl std::str::FromStr for KubeConfig {
    type Err = ConfigError;

    fn from_str(url: &str) -> Result<Self, Self::Err> {
        KubeConfig::from_url(url)
    }
}

/// A DNS-1123 label (a namespace's name).
fn is_label(name: &str) -> bool {
    name.len() <= 63 && !name.contains('.') && crate::names::is_valid_name(name)
}

fn check_server(server: &str) -> Result<(), ConfigError> {
    match url::Url::parse(server) {
        Ok(url) if url.scheme() == "https" && url.host_str().is_some_and(|h| !h.is_empty()) => {
            Ok(())
        }
        _ => Err(ConfigError::BadServer(server.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources() {
        let infer = KubeConfig::from_url("kube://default").unwrap();
        assert_eq!(infer.source(), &Source::Infer);
        let pod = KubeConfig::from_url("kube://ns?in_cluster=true").unwrap();
        assert_eq!(pod.source(), &Source::InCluster);
        let file = KubeConfig::from_url("kube://ns?kubeconfig=/k&context=c").unwrap();
        assert_eq!(
            file.source(),
            &Source::Kubeconfig {
                path: Some("/k".into()),
                context: Some("c".into())
            }
        );
        assert_eq!(file.endpoint(), None);
        let server = KubeConfig::from_url("kube://ns?server=https://h&tls_ca_file=/c").unwrap();
        assert_eq!(server.endpoint().as_deref(), Some("h:443"));
    }

    #[test]
    fn refusals_say_why() {
        for (url, said) in [
            ("etcd://x", "scheme"),
            ("kube://", "namespace"),
            ("kube://a_b", "namespace"),
            ("kube://ns:80", "namespace"),
            ("kube://ns/x", "namespace"),
            ("kube://ns?server=http://h", "https"),
            ("kube://ns?server=https://h&kubeconfig=/k", "cannot go"),
            ("kube://ns?token_file=/t", "go with server"),
            ("kube://ns?in_cluster=true&context=c", "cannot go"),
            ("kube://ns?ca_file=/a&tls_ca_file=/b", "twice"),
            ("kube://ns?timeout=0s", "timeout"),
            ("kube://ns?table=t", "unknown"),
        ] {
            let err = KubeConfig::from_url(url).unwrap_err().to_string();
            assert!(err.contains(said), "{url}: {err}");
        }
    }

    #[test]
    fn the_server_can_be_replaced_by_a_proxy() {
        let url = "kube://ns?server=https://127.0.0.1:6443&ca_file=/ca.pem";
        let proxied = KubeConfig::with_server_addr(url, "127.0.0.1:9999").unwrap();
        let config = KubeConfig::from_url(&proxied).unwrap();
        assert_eq!(config.endpoint().as_deref(), Some("127.0.0.1:9999"));
        assert_eq!(config.options.tls_ca_file, Some("/ca.pem".into()));
    }
}
