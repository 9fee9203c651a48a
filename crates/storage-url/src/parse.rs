//! The one place that matches on storage URL schemes.

use crate::{Kind, UrlError, redact::redact, schemes};

/// The driver `raw` selects, after the driver has validated it.
pub(crate) fn kind(raw: &str) -> Result<Kind, UrlError> {
    if raw.is_empty() {
        return Err(UrlError::Empty);
    }
    let scheme = match raw.split_once("://") {
        Some((scheme, _)) => scheme,
        None if raw == "mem" => "mem",
        None => return Err(UrlError::Unknown { url: redact(raw) }),
    };
    let Some(driver) = schemes::driver(scheme) else {
        return Err(UrlError::Unknown { url: redact(raw) });
    };
    if let Some(feature) = driver.feature
        && !driver.built_in
    {
        return Err(UrlError::NotBuiltIn {
            scheme: scheme.to_owned(),
            feature,
        });
    }
    let invalid = |source: Box<dyn std::error::Error + Send + Sync>| UrlError::Invalid {
        scheme: scheme.to_owned(),
        url: redact(raw),
        source,
    };
    match scheme {
        "mem" => match storage_mem::MemConfig::from_url(raw) {
            Ok(config) => Ok(Kind::Mem(config)),
            Err(err) => Err(invalid(Box::new(err))),
        },
        #[cfg(feature = "redb")]
        "redb" => match storage_redb::RedbUrl::parse(raw) {
            Ok(url) => Ok(Kind::Redb {
                path: url.path().to_owned(),
                shared: url.mode() == storage_redb::RedbMode::Shared,
            }),
            Err(err) => Err(invalid(Box::new(err))),
        },
        #[cfg(feature = "scylla")]
        "scylla" | "cassandra" => match storage_scylla::ScyllaConfig::from_url(raw) {
            Ok(_) => Ok(Kind::Scylla),
            Err(err) => Err(invalid(Box::new(err))),
        },
        #[cfg(feature = "dynamodb")]
        "dynamodb" => match storage_dynamo::DynamoConfig::from_url(raw) {
            Ok(_) => Ok(Kind::Dynamo),
            Err(err) => Err(invalid(Box::new(err))),
        },
        #[cfg(feature = "valkey")]
        "redis" | "rediss" | "valkey" | "valkeys" | "redis-sentinel" | "rediss-sentinel"
        | "valkey-sentinel" | "valkeys-sentinel" => {
            match storage_valkey::ValkeyConfig::from_url(raw) {
                Ok(_) => Ok(Kind::Valkey),
                Err(err) => Err(invalid(Box::new(err))),
            }
        }
        #[cfg(feature = "postgres")]
        "postgres" | "postgresql" => match storage_postgres::PostgresConfig::from_url(raw) {
            Ok(_) => Ok(Kind::Postgres),
            Err(err) => Err(invalid(Box::new(err))),
        },
        #[cfg(feature = "etcd")]
        "etcd" | "etcds" => match storage_etcd::EtcdConfig::from_url(raw) {
            Ok(_) => Ok(Kind::Etcd),
            Err(err) => Err(invalid(Box::new(err))),
        },
        // Every other scheme was answered from the table above.
        _ => Err(UrlError::Unknown { url: redact(raw) }),
    }
}

/// The one network address of a URL, if it names exactly one.
pub(crate) fn endpoint(kind: &Kind, raw: &str) -> Option<String> {
    match kind {
        #[cfg(feature = "scylla")]
        Kind::Scylla => {
            let config = storage_scylla::ScyllaConfig::from_url(raw).ok()?;
            match config.contact_points() {
                [one] => Some(one.clone()),
                _ => None,
            }
        }
        #[cfg(feature = "dynamodb")]
        Kind::Dynamo => {
            let url = url::Url::parse(raw).ok()?;
            let endpoint = url
                .query_pairs()
                .find(|(name, _)| name == "endpoint")
                .map(|(_, value)| value.into_owned())?;
            let endpoint = url::Url::parse(&endpoint).ok()?;
            Some(format!(
                "{}:{}",
                endpoint.host_str()?,
                endpoint.port_or_known_default()?
            ))
        }
        // Sentinels name the primary: no one address to proxy.
        #[cfg(feature = "valkey")]
        Kind::Valkey if raw.contains("-sentinel") => None,
        #[cfg(feature = "valkey")]
        Kind::Valkey => host_and_port(raw),
        #[cfg(feature = "postgres")]
        Kind::Postgres => host_and_port(raw),
        // More endpoints in `endpoint=` parameters: not one address.
        #[cfg(feature = "etcd")]
        Kind::Etcd if raw.contains("endpoint=") => None,
        #[cfg(feature = "etcd")]
        Kind::Etcd => host_and_port(raw),
        _ => {
            let _ = raw;
            None
        }
    }
}

/// `raw` with its one network address replaced by `addr`.
pub(crate) fn with_endpoint(kind: &Kind, raw: &str, addr: &str) -> Result<String, UrlError> {
    let no_endpoint = || UrlError::NoEndpoint { url: redact(raw) };
    if endpoint(kind, raw).is_none() {
        return Err(no_endpoint());
    }
    match kind {
        #[cfg(feature = "scylla")]
        Kind::Scylla => {
            // scheme://[userinfo@]host[:port]/keyspace?...: replace the host.
            let (scheme, rest) = raw.split_once("://").ok_or_else(no_endpoint)?;
            let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
            let (authority, tail) = rest.split_at(authority_end);
            let userinfo = authority
                .rsplit_once('@')
                .map(|(userinfo, _)| format!("{userinfo}@"))
                .unwrap_or_default();
            Ok(format!("{scheme}://{userinfo}{addr}{tail}"))
        }
        #[cfg(feature = "dynamodb")]
        Kind::Dynamo => {
            let mut url = url::Url::parse(raw).map_err(|_| no_endpoint())?;
            let pairs: Vec<(String, String)> = url
                .query_pairs()
                .map(|(name, value)| {
                    if name == "endpoint" {
                        let scheme = value.split_once("://").map_or("http", |(s, _)| s);
                        (name.into_owned(), format!("{scheme}://{addr}"))
                    } else {
                        (name.into_owned(), value.into_owned())
                    }
                })
                .collect();
            url.query_pairs_mut().clear().extend_pairs(pairs);
            Ok(url.to_string())
        }
        #[cfg(feature = "valkey")]
        Kind::Valkey => replace_host_and_port(raw, addr).ok_or_else(no_endpoint),
        #[cfg(feature = "postgres")]
        Kind::Postgres => replace_host_and_port(raw, addr).ok_or_else(no_endpoint),
        #[cfg(feature = "etcd")]
        Kind::Etcd => replace_host_and_port(raw, addr).ok_or_else(no_endpoint),
        _ => {
            let _ = addr;
            Err(no_endpoint())
        }
    }
}

/// `host:port` of a URL of the plain `scheme://[userinfo@]host[:port]/...`
/// form (Valkey, PostgreSQL, etcd), with the scheme's default port.
#[cfg(any(feature = "valkey", feature = "postgres", feature = "etcd"))]
fn host_and_port(raw: &str) -> Option<String> {
    let url = url::Url::parse(raw).ok()?;
    let port = url.port().or(match url.scheme() {
        "redis" | "rediss" | "valkey" | "valkeys" => Some(6379),
        "postgres" | "postgresql" => Some(5432),
        "etcd" | "etcds" => Some(2379),
        _ => None,
    })?;
    Some(format!("{}:{port}", url.host_str()?))
}

/// `raw` (of the form [`host_and_port`] reads) with `host:port` replaced by
/// `addr`.
#[cfg(any(feature = "valkey", feature = "postgres", feature = "etcd"))]
fn replace_host_and_port(raw: &str, addr: &str) -> Option<String> {
    let (host, port) = addr.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    let mut url = url::Url::parse(raw).ok()?;
    url.set_host(Some(host)).ok()?;
    url.set_port(Some(port)).ok()?;
    Some(url.to_string())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use crate::{StorageUrl, UrlError};

    #[test]
    fn embedded_urls() {
        assert_eq!("mem".parse::<StorageUrl>().unwrap(), StorageUrl::mem());
        assert!(matches!("".parse::<StorageUrl>(), Err(UrlError::Empty)));
        assert!(matches!(
            "mysql://x/y".parse::<StorageUrl>(),
            Err(UrlError::Unknown { .. })
        ));
        assert!(matches!(
            "just-words".parse::<StorageUrl>(),
            Err(UrlError::Unknown { .. })
        ));
        assert_eq!("mem".parse::<StorageUrl>().unwrap().endpoint(), None);
    }

    #[cfg(feature = "redb")]
    #[test]
    fn redb_urls() {
        let url: StorageUrl = "redb:///var/lib/x%20y.redb".parse().unwrap();
        assert_eq!(url, StorageUrl::redb("/var/lib/x y.redb"));
        let exclusive: StorageUrl = "redb:///var/lib/x.redb?mode=exclusive".parse().unwrap();
        assert_ne!(exclusive, StorageUrl::redb("/var/lib/x.redb"));
        assert_eq!(
            "redb:///var/lib/x.redb?mode=shared"
                .parse::<StorageUrl>()
                .unwrap(),
            StorageUrl::redb("/var/lib/x.redb")
        );
        assert!(matches!(
            "redb:///x.redb?mode=fast".parse::<StorageUrl>(),
            Err(UrlError::Invalid { .. })
        ));
        assert_eq!(url.scheme(), "redb");
        let relative: StorageUrl = "redb://data/x.redb".parse().unwrap();
        assert_eq!(relative, StorageUrl::redb("data/x.redb"));
        assert!(matches!(
            "redb://".parse::<StorageUrl>(),
            Err(UrlError::Invalid { .. })
        ));
        assert!(matches!(
            url.with_endpoint("127.0.0.1:1"),
            Err(UrlError::NoEndpoint { .. })
        ));
        let shown = StorageUrl::redb("/a/b.redb");
        assert_eq!(shown.to_string().parse::<StorageUrl>().unwrap(), shown);
    }

    #[cfg(not(feature = "scylla"))]
    #[test]
    fn drivers_not_built_in_say_which_feature() {
        let err = "scylla://10.0.0.1/ks".parse::<StorageUrl>().unwrap_err();
        assert!(err.to_string().contains("`scylla`"), "{err}");
    }

    #[cfg(feature = "scylla")]
    #[test]
    fn scylla_urls() {
        let url: StorageUrl = "scylla://app:pw@10.0.0.1:9042/leases".parse().unwrap();
        assert_eq!(url.to_string(), "scylla://app:***@10.0.0.1:9042/leases");
        assert_eq!(url.endpoint().as_deref(), Some("10.0.0.1:9042"));
        let proxied = url.with_endpoint("127.0.0.1:7000").unwrap();
        assert_eq!(proxied.endpoint().as_deref(), Some("127.0.0.1:7000"));
        assert_eq!(
            proxied.to_string(),
            "scylla://app:***@127.0.0.1:7000/leases"
        );
        let two: StorageUrl = "cassandra://a:9042,b:9042/k".parse().unwrap();
        assert_eq!(two.endpoint(), None);
        let err = "scylla://10.0.0.1/k?bogus=1"
            .parse::<StorageUrl>()
            .unwrap_err();
        assert!(matches!(err, UrlError::Invalid { .. }), "{err}");
    }

    #[cfg(all(feature = "valkey", feature = "postgres"))]
    #[test]
    fn host_port_urls() {
        let url: StorageUrl = "rediss://app:pw@cache.internal/2".parse().unwrap();
        assert_eq!(url.to_string(), "rediss://app:***@cache.internal/2");
        assert_eq!(url.endpoint().as_deref(), Some("cache.internal:6379"));
        let proxied = url.with_endpoint("127.0.0.1:7001").unwrap();
        assert_eq!(proxied.endpoint().as_deref(), Some("127.0.0.1:7001"));
        assert!(
            proxied
                .as_str()
                .starts_with("rediss://app:pw@127.0.0.1:7001")
        );
        let pg: StorageUrl = "postgres://u:p@db/leases".parse().unwrap();
        assert_eq!(pg.endpoint().as_deref(), Some("db:5432"));
        assert!(matches!(
            "postgres://u:p@db/leases?sslmode=prefer".parse::<StorageUrl>(),
            Err(UrlError::Invalid { .. })
        ));
    }

    #[cfg(all(feature = "valkey", feature = "postgres", feature = "etcd"))]
    #[test]
    fn replicated_engine_urls() {
        let sentinel: StorageUrl =
            "redis-sentinel://:pw@127.0.0.1:26379,127.0.0.1:26380/mymaster?wait_replicas=1"
                .parse()
                .unwrap();
        assert_eq!(sentinel.engine(), crate::Engine::Valkey);
        assert_eq!(
            sentinel.to_string(),
            "redis-sentinel://:***@127.0.0.1:26379,127.0.0.1:26380/mymaster?wait_replicas=1"
        );
        assert_eq!(sentinel.endpoint(), None);
        assert!(matches!(
            "redis-sentinel://h1/".parse::<StorageUrl>(),
            Err(UrlError::Invalid { .. })
        ));
        let pg: StorageUrl =
            "postgres://u:p@pg-a:5432,pg-b:5433/db?target_session_attrs=read-write"
                .parse()
                .unwrap();
        assert_eq!(pg.engine(), crate::Engine::Postgres);
        assert_eq!(pg.endpoint(), None);
        let etcd: StorageUrl = "etcd://m1:2379?endpoint=m2:2379&endpoint=m3:2379"
            .parse()
            .unwrap();
        assert_eq!(etcd.endpoint(), None);
        let single: StorageUrl = "etcd://m1:2379".parse().unwrap();
        assert_eq!(single.endpoint().as_deref(), Some("m1:2379"));
    }

    #[cfg(feature = "dynamodb")]
    #[test]
    fn dynamodb_urls() {
        let url: StorageUrl = "dynamodb://leases?region=eu-west-1&endpoint=http://127.0.0.1:8000"
            .parse()
            .unwrap();
        assert_eq!(url.endpoint().as_deref(), Some("127.0.0.1:8000"));
        let proxied = url.with_endpoint("127.0.0.1:9").unwrap();
        assert_eq!(proxied.endpoint().as_deref(), Some("127.0.0.1:9"));
        let no_endpoint: StorageUrl = "dynamodb://leases?region=eu-west-1".parse().unwrap();
        assert!(no_endpoint.with_endpoint("127.0.0.1:9").is_err());
    }
}
