//! The registry: every driver, declared once in [`drivers!`] below (its
//! crate, the cargo feature that compiles it in, and the URL schemes it
//! answers). From that one list come the drivers compiled into this build
//! (each crate's `DRIVER` descriptor, its fence included), the ones left
//! out with the feature that adds them, the `--help` text
//! ([`crate::schemes_help`]), the "unknown scheme" error and the "not built
//! in" error.
//!
//! A left-out driver's schemes cannot be read from its crate (it is not
//! compiled), so its line copies them; wherever the driver is compiled in,
//! a compile-time assertion proves the copy equals the crate's
//! `DRIVER.schemes` (`.ci/run` compiles storage-url once per driver
//! feature, so every line's assertion runs there; `cargo xtask tidy`
//! checks that every driver crate has a line).

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
    #[allow(dead_code)] // never built when every feature is on
    Missing {
        /// The URL schemes it answers (its `DRIVER.schemes`).
        schemes: &'static [&'static str],
        /// The cargo feature that adds it.
        feature: &'static str,
    },
}

/// Declares the list [`DRIVERS`], one line per driver:
/// `crate_name "feature" [schemes],` (or `crate_name always [schemes],`
/// for a driver that is always compiled in).
macro_rules! drivers {
    ($($krate:ident $feature:tt [$($scheme:literal),+ $(,)?],)+) => {
        /// Every driver, in the order of the `--help` text.
        pub(crate) const DRIVERS: &[Entry] = &[
            $(drivers!(@entry $krate $feature [$($scheme),+]),)+
            // A driver that counts how often it parses (`crate::parse`'s tests).
            #[cfg(test)]
            Entry::BuiltIn {
                driver: &crate::parse::tests::COUNTED,
                feature: None,
            },
        ];
        $(drivers!(@same $krate $feature [$($scheme),+]);)+
    };
    (@entry $krate:ident always [$($scheme:literal),+]) => {
        Entry::BuiltIn { driver: &$krate::DRIVER, feature: None }
    };
    (@entry $krate:ident $feature:literal [$($scheme:literal),+]) => {{
        #[cfg(feature = $feature)]
        let entry = Entry::BuiltIn { driver: &$krate::DRIVER, feature: Some($feature) };
        #[cfg(not(feature = $feature))]
        let entry = Entry::Missing { schemes: &[$($scheme),+], feature: $feature };
        entry
    }};
    (@same $krate:ident always [$($scheme:literal),+]) => {
        const _: () = assert!(
            same_schemes($krate::DRIVER.schemes, &[$($scheme),+]),
            concat!("storage-url's schemes of ", stringify!($krate), " differ from its DRIVER.schemes"),
        );
    };
    (@same $krate:ident $feature:literal [$($scheme:literal),+]) => {
        #[cfg(feature = $feature)]
        const _: () = assert!(
            same_schemes($krate::DRIVER.schemes, &[$($scheme),+]),
            concat!("storage-url's schemes of ", stringify!($krate), " differ from its DRIVER.schemes"),
        );
    };
}

// Adding a driver: one line here (and its cargo feature in Cargo.toml,
// one engine in xtask: `cargo xtask tidy` checks both).
drivers! {
    storage_mem always ["mem"],
    storage_redb "redb" ["redb"],
    storage_cassandra "cassandra" ["scylla", "cassandra"],
    storage_dynamodb "dynamodb" ["dynamodb"],
    storage_valkey "valkey" [
        "redis", "rediss", "valkey", "valkeys",
        "redis-sentinel", "rediss-sentinel", "valkey-sentinel", "valkeys-sentinel",
    ],
    storage_postgres "postgres" ["postgres", "postgresql"],
    storage_etcd "etcd" ["etcd", "etcds"],
    storage_kube "kube" ["kube"],
}

/// Whether two scheme lists are equal (in a `const` context).
const fn same_schemes(a: &[&str], b: &[&str]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        let (x, y) = (a[i].as_bytes(), b[i].as_bytes());
        if x.len() != y.len() {
            return false;
        }
        let mut j = 0;
        while j < x.len() {
            if x[j] != y[j] {
                return false;
            }
            j += 1;
        }
        i += 1;
    }
    true
}

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
    fn a_scheme_list_that_differs_is_caught() {
        assert!(same_schemes(&["etcd", "etcds"], &["etcd", "etcds"]));
        assert!(!same_schemes(&["etcd", "etcds"], &["etcd"]));
        assert!(!same_schemes(&["etcd", "etcds"], &["etcd", "etcdz"]));
        assert!(!same_schemes(&["etcd", "etcds"], &["etcds", "etcd"]));
    }

    #[test]
    fn every_driver_has_one_entry_and_unique_schemes() {
        let mut seen = std::collections::HashSet::new();
        for driver in DRIVERS {
            for scheme in driver.schemes() {
                assert!(seen.insert(*scheme), "{scheme} answered twice");
            }
        }
        let names: Vec<&str> = built_in().map(|d| d.name).collect();
        let unique: std::collections::HashSet<&str> = names.iter().copied().collect();
        assert_eq!(names.len(), unique.len(), "{names:?}");
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
