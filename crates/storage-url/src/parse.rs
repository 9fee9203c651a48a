//! From text to a driver's parsed configuration, once.

use ttl_storage::{Driver, ParsedUrl};

use crate::{UrlError, redact::redact, registry};

/// The driver `raw` selects and its configuration, parsed and validated by
/// that driver. The one place a storage URL is parsed.
pub(crate) fn parse(raw: &str) -> Result<(&'static Driver, ParsedUrl), UrlError> {
    if raw.is_empty() {
        return Err(UrlError::Empty);
    }
    let scheme = match raw.split_once("://") {
        Some((scheme, _)) => scheme,
        None if raw == "mem" => "mem",
        None => return Err(UrlError::Unknown { url: redact(raw) }),
    };
    let Some(entry) = registry::entry(scheme) else {
        return Err(UrlError::Unknown { url: redact(raw) });
    };
    let Some(driver) = entry.built_in() else {
        return Err(UrlError::NotBuiltIn {
            scheme: scheme.to_owned(),
            feature: entry.feature().unwrap_or_default(),
        });
    };
    match (driver.parse)(raw) {
        Ok(parsed) => Ok((driver, parsed)),
        Err(source) => Err(UrlError::Invalid {
            scheme: scheme.to_owned(),
            url: redact(raw),
            source,
        }),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    };

    use ttl_storage::{
        BoxError, Driver, DriverConfig, DynTtlStorage, FenceConfig,
        fence::{DynFence, OpenOptions},
    };

    use crate::{StorageUrl, UrlError};

    /// The URL whose parses are counted (other tests parse other
    /// `counted://` URLs at the same time).
    const ONCE: &str = "counted://once:1";
    /// How often [`Counted::parse_url`] parsed [`ONCE`].
    static PARSES: AtomicUsize = AtomicUsize::new(0);
    /// The URL whose parses are counted on the way to a fence.
    const FENCE_ONCE: &str = "counted://fence:1";
    /// How often [`Counted::parse_url`] parsed [`FENCE_ONCE`].
    static FENCE_PARSES: AtomicUsize = AtomicUsize::new(0);

    /// The configuration of `counted://host:port` (a mem store).
    #[derive(Debug, Clone, PartialEq)]
    struct Counted(String);

    impl DriverConfig for Counted {
        fn parse_url(url: &str) -> Result<Self, BoxError> {
            if url == ONCE {
                PARSES.fetch_add(1, Ordering::SeqCst);
            }
            if url == FENCE_ONCE {
                FENCE_PARSES.fetch_add(1, Ordering::SeqCst);
            }
            let addr = url.strip_prefix("counted://").ok_or("not counted://")?;
            Ok(Counted(addr.to_owned()))
        }

        async fn open(self) -> Result<DynTtlStorage, BoxError> {
            Ok(Arc::new(storage_mem::MemStorage::new()) as DynTtlStorage)
        }

        async fn open_existing(self) -> Result<DynTtlStorage, BoxError> {
            self.open().await
        }

        fn single_endpoint(&self) -> Option<String> {
            Some(self.0.clone())
        }
    }

    impl FenceConfig for Counted {
        async fn open_fence(self, _options: OpenOptions) -> ttl_storage::Result<DynFence> {
            Ok(Arc::new(fence::MemFence::default()) as DynFence)
        }
    }

    /// A test driver in the registry (see `registry::DRIVERS`).
    pub(crate) const COUNTED: Driver =
        Driver::new::<Counted>("counted", &["counted"], "counted://host:port (tests)", None)
            .with_fence::<Counted>();

    #[tokio::test]
    async fn a_url_is_parsed_once_on_its_way_to_a_fence() {
        let url: StorageUrl = FENCE_ONCE.parse().unwrap();
        assert_eq!(FENCE_PARSES.load(Ordering::SeqCst), 1);
        let options = OpenOptions::new("fences", true);
        crate::open_fence(&url, &options).await.unwrap();
        crate::open_fence(&url.clone(), &options).await.unwrap();
        assert_eq!(FENCE_PARSES.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_url_is_parsed_once_on_its_way_to_connect() {
        let url: StorageUrl = ONCE.parse().unwrap();
        assert_eq!(PARSES.load(Ordering::SeqCst), 1);
        assert_eq!(url.endpoint().as_deref(), Some("once:1"));
        url.open().await.unwrap();
        url.clone().open().await.unwrap();
        assert_eq!(url.config::<Counted>(), Some(&Counted("once:1".to_owned())));
        assert_eq!(PARSES.load(Ordering::SeqCst), 1);
    }

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
        assert!(matches!(
            "redb://data/x.redb".parse::<StorageUrl>(),
            Err(UrlError::Invalid { .. })
        ));
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

    #[cfg(not(feature = "cassandra"))]
    #[test]
    fn drivers_not_built_in_say_which_feature() {
        let err = "scylla://10.0.0.1/ks".parse::<StorageUrl>().unwrap_err();
        assert!(err.to_string().contains("`cassandra`"), "{err}");
    }

    #[cfg(feature = "cassandra")]
    #[test]
    fn cassandra_urls() {
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
        assert_eq!(sentinel.driver().name, "valkey");
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
        assert_eq!(pg.driver().name, "postgres");
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
