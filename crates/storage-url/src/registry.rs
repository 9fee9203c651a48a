//! The registry: every driver compiled into this build (each crate's
//! `DRIVER` descriptor, one line per driver) and the ones known but left
//! out, with the cargo feature that adds them. The `--help` text
//! ([`crate::schemes_help`]), the "unknown scheme" error and the "not built
//! in" error are all derived from it.

use ttl_storage::Driver;

/// One driver of the registry.
#[derive(Debug)]
pub(crate) enum Entry {
    /// Compiled in.
    BuiltIn {
        /// Its descriptor.
        driver: &'static Driver,
        /// The cargo feature that compiles it in; `None`: always there.
        feature: Option<&'static str>,
    },
    /// Known, but its cargo feature is off in this build.
    #[cfg_attr(
        all(
            feature = "redb",
            feature = "scylla",
            feature = "dynamodb",
            feature = "valkey",
            feature = "postgres",
            feature = "etcd"
        ),
        allow(dead_code)
    )]
    Missing {
        /// The URL schemes it answers.
        schemes: &'static [&'static str],
        /// The cargo feature that adds it.
        feature: &'static str,
    },
}

/// Every driver, in the order of the `--help` text. Adding a driver: one
/// line here (and one `Missing` line for builds without it).
pub(crate) const DRIVERS: &[Entry] = &[
    Entry::BuiltIn {
        driver: &storage_mem::DRIVER,
        feature: None,
    },
    #[cfg(feature = "redb")]
    Entry::BuiltIn {
        driver: &storage_redb::DRIVER,
        feature: Some("redb"),
    },
    #[cfg(not(feature = "redb"))]
    Entry::Missing {
        schemes: &["redb"],
        feature: "redb",
    },
    #[cfg(feature = "scylla")]
    Entry::BuiltIn {
        driver: &storage_scylla::DRIVER,
        feature: Some("scylla"),
    },
    #[cfg(not(feature = "scylla"))]
    Entry::Missing {
        schemes: &["scylla", "cassandra"],
        feature: "scylla",
    },
    #[cfg(feature = "dynamodb")]
    Entry::BuiltIn {
        driver: &storage_dynamo::DRIVER,
        feature: Some("dynamodb"),
    },
    #[cfg(not(feature = "dynamodb"))]
    Entry::Missing {
        schemes: &["dynamodb"],
        feature: "dynamodb",
    },
    #[cfg(feature = "valkey")]
    Entry::BuiltIn {
        driver: &storage_valkey::DRIVER,
        feature: Some("valkey"),
    },
    #[cfg(not(feature = "valkey"))]
    Entry::Missing {
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
        feature: "valkey",
    },
    #[cfg(feature = "postgres")]
    Entry::BuiltIn {
        driver: &storage_postgres::DRIVER,
        feature: Some("postgres"),
    },
    #[cfg(not(feature = "postgres"))]
    Entry::Missing {
        schemes: &["postgres", "postgresql"],
        feature: "postgres",
    },
    #[cfg(feature = "etcd")]
    Entry::BuiltIn {
        driver: &storage_etcd::DRIVER,
        feature: Some("etcd"),
    },
    #[cfg(not(feature = "etcd"))]
    Entry::Missing {
        schemes: &["etcd", "etcds"],
        feature: "etcd",
    },
    // A driver that counts how often it parses (`crate::parse`'s tests).
    #[cfg(test)]
    Entry::BuiltIn {
        driver: &crate::parse::tests::COUNTED,
        feature: None,
    },
];

impl Entry {
    /// The URL schemes it answers.
    pub(crate) fn schemes(&self) -> &'static [&'static str] {
        match self {
            Entry::BuiltIn { driver, .. } => driver.schemes,
            Entry::Missing { schemes, .. } => schemes,
        }
    }

    /// The cargo feature that compiles it in; `None`: always there.
    pub(crate) fn feature(&self) -> Option<&'static str> {
        match self {
            Entry::BuiltIn { feature, .. } => *feature,
            Entry::Missing { feature, .. } => Some(feature),
        }
    }

    /// Its descriptor, if compiled in.
    pub(crate) fn built_in(&self) -> Option<&'static Driver> {
        match self {
            Entry::BuiltIn { driver, .. } => Some(driver),
            Entry::Missing { .. } => None,
        }
    }
}

/// The entry answering `scheme`, if any.
pub(crate) fn entry(scheme: &str) -> Option<&'static Entry> {
    DRIVERS.iter().find(|d| d.schemes().contains(&scheme))
}

/// The drivers compiled in.
pub(crate) fn built_in() -> impl Iterator<Item = &'static Driver> {
    DRIVERS.iter().filter_map(Entry::built_in)
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
    let built_in: Vec<String> = built_in()
        .flat_map(|d| d.schemes.iter().map(|s| shown(s)))
        .collect();
    let missing: Vec<String> = DRIVERS
        .iter()
        .filter_map(|d| match d {
            Entry::Missing { schemes, feature } => {
                let schemes: Vec<String> = schemes.iter().map(|s| shown(s)).collect();
                Some(format!("{} (feature `{feature}`)", schemes.join(", ")))
            }
            Entry::BuiltIn { .. } => None,
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
            for scheme in driver.schemes() {
                assert!(text.contains(&shown(scheme)), "{scheme} missing: {text}");
            }
            if driver.built_in().is_none() {
                let feature = driver.feature().unwrap();
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
            for scheme in driver.schemes() {
                let url = format!("{scheme}://x");
                match (url.parse::<StorageUrl>(), driver.built_in().is_some()) {
                    (Ok(_) | Err(UrlError::Invalid { .. }), true) => {}
                    (Err(UrlError::NotBuiltIn { feature, .. }), false) => {
                        assert_eq!(Some(feature), driver.feature());
                    }
                    (other, _) => panic!("{url}: {other:?}"),
                }
            }
        }
    }

    #[test]
    fn every_built_in_driver_names_an_engine() {
        for driver in built_in() {
            assert!(
                crate::Engine::from_label(driver.name).is_some(),
                "{}",
                driver.name
            );
        }
    }

    #[test]
    fn help_lists_the_compiled_in_drivers() {
        let help = crate::schemes_help();
        assert_eq!(
            help.lines().count(),
            DRIVERS.iter().filter(|d| d.built_in().is_some()).count()
        );
        assert!(help.starts_with("mem"));
    }
}
