//! Each rule fails on a broken input, and the checkout keeps them all.

use std::collections::{BTreeMap, BTreeSet};

use super::{
    Package, check, crate_arrows, driver_lists, features_only_forward, file_lengths, network_suite,
    workspace_root,
};

fn package(name: &str, deps: &[&str]) -> Package {
    Package {
        name: name.into(),
        dir: std::path::PathBuf::from("/nonexistent").join(name),
        deps: deps.iter().map(|d| d.to_string()).collect(),
        features: BTreeMap::new(),
        default_features: BTreeSet::new(),
        dep_features: BTreeMap::new(),
    }
}

const MAP: &str = "## Code map\n\n| crate | holds | depends on |\n|---|---|---|\n\
| `a` | the base | nothing of ours |\n| `b` | above a | `a` |\n\n## Next\n";

#[test]
fn the_workspace_is_tidy() {
    let violations =
        check(&workspace_root()).unwrap_or_else(|err| panic!("tidy could not run: {err:#}"));
    assert!(violations.is_empty(), "tidy:\n{}", violations.join("\n"));
}

#[test]
fn an_arrow_the_map_does_not_list_is_refused() {
    assert!(crate_arrows(MAP, &[package("a", &[]), package("b", &["a"])]).is_empty());
    let upward = crate_arrows(MAP, &[package("a", &["b"]), package("b", &["a"])]);
    assert_eq!(upward.len(), 1, "{upward:?}");
    assert!(upward[0].contains("`a` depends on `b`"), "{upward:?}");
}

#[test]
fn an_arrow_the_map_lists_but_the_code_lacks_is_refused_and_every_crate_needs_a_row() {
    let stale = crate_arrows(MAP, &[package("a", &[]), package("b", &[])]);
    assert!(
        stale
            .iter()
            .any(|v| v.contains("the map says `b` depends on `a`")),
        "{stale:?}"
    );
    let unmapped = crate_arrows(
        MAP,
        &[package("a", &[]), package("b", &["a"]), package("c", &[])],
    );
    assert!(
        unmapped.iter().any(|v| v.contains("`c` has no row")),
        "{unmapped:?}"
    );
}

#[test]
fn a_file_over_the_limit_is_refused() {
    assert!(file_lengths(&[("ok.rs".into(), 600)]).is_empty());
    let long = file_lengths(&[("long.rs".into(), 601)]);
    assert!(
        long.len() == 1 && long[0].contains("long.rs has 601 lines"),
        "{long:?}"
    );
}

#[test]
fn a_crate_without_readme_or_header_is_refused() {
    let dir = tempfile::tempdir().unwrap_or_else(|err| panic!("tempdir: {err}"));
    let mut bare = package("bare", &[]);
    bare.dir = dir.path().to_path_buf();
    std::fs::create_dir_all(dir.path().join("src")).unwrap_or_else(|err| panic!("{err}"));
    std::fs::write(dir.path().join("src/lib.rs"), "pub fn f() {}\n")
        .unwrap_or_else(|err| panic!("{err}"));
    let violations = super::crate_docs(std::slice::from_ref(&bare));
    assert_eq!(violations.len(), 2, "{violations:?}");
    std::fs::write(dir.path().join("README.md"), "# bare\n").unwrap_or_else(|err| panic!("{err}"));
    std::fs::write(dir.path().join("src/lib.rs"), "//! Bare.\npub fn f() {}\n")
        .unwrap_or_else(|err| panic!("{err}"));
    assert!(super::crate_docs(&[bare]).is_empty());
}

fn registry_with(features: &[(&str, &str)]) -> Vec<Package> {
    let mut url = package("storage-url", &["storage-mem"]);
    for (feature, driver) in features {
        url.features
            .insert(feature.to_string(), vec![format!("dep:{driver}")]);
    }
    let mut host = package("vvm-host", &["storage-url"]);
    for (feature, _) in features {
        host.features
            .insert(feature.to_string(), vec![format!("storage-url/{feature}")]);
    }
    let mut packages = vec![package("storage-mem", &[]), url, host];
    packages.extend(features.iter().map(|(_, driver)| package(driver, &[])));
    packages
}

#[test]
fn a_driver_missing_from_any_list_is_refused() {
    let packages = registry_with(&[("kv", "storage-kv")]);
    let ci = "for feature in kv; do\n";
    assert!(driver_lists(&packages, ci, "storage_kv").is_empty());
    // not in .ci/run's loop
    let v = driver_lists(&packages, "for feature in other; do\n", "storage_kv");
    assert!(v.iter().any(|v| v.contains("loop of .ci/run")), "{v:?}");
    // no engine
    let v = driver_lists(&packages, ci, "");
    assert!(v.iter().any(|v| v.contains("no engine")), "{v:?}");
    // not forwarded by vvm-host
    let mut unforwarded = packages.clone();
    for p in &mut unforwarded {
        if p.name == "vvm-host" {
            p.features.clear();
        }
    }
    let v = driver_lists(&unforwarded, ci, "storage_kv");
    assert!(
        v.iter().any(|v| v.contains("vvm-host has no feature `kv`")),
        "{v:?}"
    );
    // not in storage-url at all
    let mut unlisted = packages;
    unlisted.push(package("storage-new", &[]));
    let v = driver_lists(&unlisted, ci, "storage_kv storage_new");
    assert!(
        v.iter()
            .any(|v| v.contains("`storage-new` is not in storage-url")),
        "{v:?}"
    );
}

#[test]
fn a_network_driver_without_the_network_cases_or_a_reason_is_refused() {
    assert!(network_suite("storage-x", "network_suite!(…);").is_empty());
    assert!(network_suite("storage-x", "// tidy: no network suite: it has no network").is_empty());
    assert_eq!(network_suite("storage-x", "testsuite!(…);").len(), 1);
    assert_eq!(
        network_suite("storage-x", "// tidy: no network suite:").len(),
        1
    );
}

#[test]
fn a_program_testing_a_driver_feature_is_refused() {
    assert!(features_only_forward("fn main() {}\n").is_empty());
    let v = features_only_forward("#[cfg(feature = \"valkey\")]\nfn f() {}\n");
    assert!(v.iter().any(|v| v.contains("only forward")), "{v:?}");
}
