//! The table of every driver the registry knows, compiled in or not: the
//! `--help` text ([`crate::schemes_help`]), the "unknown scheme" error and
//! the "not built in" error are all derived from it.

/// One driver of the registry.
#[derive(Debug)]
pub(crate) struct Driver {
    /// The URL schemes it answers.
    pub(crate) schemes: &'static [&'static str],
    /// The cargo feature that compiles it in; `None`: always there.
    pub(crate) feature: Option<&'static str>,
    /// Whether it is compiled into this build.
    pub(crate) built_in: bool,
    /// Its line of [`crate::schemes_help`].
    pub(crate) help: &'static str,
}

/// Every driver, in the order of the `--help` text.
pub(crate) const DRIVERS: &[Driver] = &[
    Driver {
        schemes: &["mem"],
        feature: None,
        built_in: true,
        help: "mem[://?max_records=N] (this process only)",
    },
    Driver {
        schemes: &["redb"],
        feature: Some("redb"),
        built_in: cfg!(feature = "redb"),
        help: "redb:///path/file.redb[?mode=exclusive] (an embedded file, shared by the processes of one host; exclusive: one process, faster)",
    },
    Driver {
        schemes: &["scylla", "cassandra"],
        feature: Some("scylla"),
        built_in: cfg!(feature = "scylla"),
        help: "scylla://[user:password@]host[:port][,host...]/keyspace[?options] (Cassandra, ScyllaDB; also cassandra://)",
    },
    Driver {
        schemes: &["dynamodb"],
        feature: Some("dynamodb"),
        built_in: cfg!(feature = "dynamodb"),
        help: "dynamodb://TABLE?region=R[&endpoint=URL] (DynamoDB)",
    },
    Driver {
        schemes: &[
            "redis",
            "rediss",
            "valkey",
            "valkeys",
            "redis-sentinel",
            "rediss-sentinel",
            "valkey-sentinel",
            "valkeys-sentinel",
        ],
        feature: Some("valkey"),
        built_in: cfg!(feature = "valkey"),
        help: "redis://[user:password@]host[:port][/db] (Valkey, Redis; rediss:// for TLS); redis-sentinel://host[:port][,host[:port]...]/service[/db] (the primary found through Sentinels); ?wait_replicas=N: a write counts once N replicas have it",
    },
    Driver {
        schemes: &["postgres", "postgresql"],
        feature: Some("postgres"),
        built_in: cfg!(feature = "postgres"),
        help: "postgres://user:password@host[:port][,host[:port]...]/database[?sslmode=require] (PostgreSQL; several hosts: the one that accepts writes)",
    },
    Driver {
        schemes: &["etcd", "etcds"],
        feature: Some("etcd"),
        built_in: cfg!(feature = "etcd"),
        help: "etcd://host[:port][?endpoint=host:port...] (etcd v3, every member in endpoint=; etcds:// for TLS)",
    },
];

/// The driver answering `scheme`, if any.
pub(crate) fn driver(scheme: &str) -> Option<&'static Driver> {
    DRIVERS.iter().find(|d| d.schemes.contains(&scheme))
}

/// `scheme` as a URL starts (`mem` stands alone).
fn shown(scheme: &str) -> String {
    if scheme == "mem" {
        scheme.to_owned()
    } else {
        format!("{scheme}://")
    }
}

/// Every known scheme, those compiled in first, then the others with the
/// cargo feature that adds them:
/// `built in: mem, redb://; not built in: scylla://, cassandra:// (feature
/// `scylla`), ...`.
pub(crate) fn known() -> String {
    let built_in: Vec<String> = DRIVERS
        .iter()
        .filter(|d| d.built_in)
        .flat_map(|d| d.schemes.iter().map(|s| shown(s)))
        .collect();
    let missing: Vec<String> = DRIVERS
        .iter()
        .filter(|d| !d.built_in)
        .map(|d| {
            let schemes: Vec<String> = d.schemes.iter().map(|s| shown(s)).collect();
            match d.feature {
                Some(feature) => format!("{} (feature `{feature}`)", schemes.join(", ")),
                None => schemes.join(", "),
            }
        })
        .collect();
    let mut text = format!("built in: {}", built_in.join(", "));
    if !missing.is_empty() {
        text.push_str("; not built in: ");
        text.push_str(&missing.join(", "));
    }
    text
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::{StorageUrl, UrlError};

    #[test]
    fn the_unknown_scheme_error_lists_every_scheme() {
        let err = "nope://x".parse::<StorageUrl>().unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, UrlError::Unknown { .. }), "{text}");
        for driver in DRIVERS {
            for scheme in driver.schemes {
                assert!(text.contains(&shown(scheme)), "{scheme} missing: {text}");
            }
            if !driver.built_in {
                let feature = driver.feature.unwrap();
                assert!(text.contains(&format!("`{feature}`")), "{text}");
            }
        }
        assert!(text.starts_with("unknown storage scheme in \"nope://x\"; built in: mem"));
    }

    #[test]
    fn every_scheme_of_the_table_is_dispatched() {
        // Compiled in: parsed by its driver (valid or not, never "unknown");
        // not compiled in: "enable the feature".
        for driver in DRIVERS {
            for scheme in driver.schemes {
                let url = format!("{scheme}://x");
                match (url.parse::<StorageUrl>(), driver.built_in) {
                    (Ok(_) | Err(UrlError::Invalid { .. }), true) => {}
                    (Err(UrlError::NotBuiltIn { feature, .. }), false) => {
                        assert_eq!(Some(feature), driver.feature);
                    }
                    (other, _) => panic!("{url}: {other:?}"),
                }
            }
        }
    }

    #[test]
    fn help_lists_the_compiled_in_drivers() {
        let help = crate::schemes_help();
        assert_eq!(
            help.lines().count(),
            DRIVERS.iter().filter(|d| d.built_in).count()
        );
        assert!(help.starts_with("mem"));
    }
}
