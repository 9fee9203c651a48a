//! `cargo xtask tidy`: the invariants `docs/architecture.md` states, made
//! executable (in the manner of rust-analyzer's `xtask/src/tidy.rs`). Each
//! rule is a function from what it reads to the violations it finds, so the
//! tests below can show every rule failing on a broken input; the `#[test]`
//! `the_workspace_is_tidy` runs them all on this checkout, so `cargo test
//! --workspace` fails when the tree drifts.
//!
//! The rules:
//! - **crate arrows**: every dependency between workspace crates (normal and
//!   build) is an arrow the map's code-map table lists in its "depends on"
//!   column, and every listed arrow exists; every crate has a row;
//! - **file length**: no `.rs` file over [`MAX_LINES`] lines;
//! - **crate docs**: every crate has a `README.md` and a `//!` header at the
//!   top of its `lib.rs` (or `main.rs`);
//! - **driver lists**: every driver crate (`storage-*` but `storage-url`) is
//!   a feature of `storage-url` (or always built in), vvm-host forwards each
//!   of `storage-url`'s driver features under the same name, every driver
//!   crate has its line in `storage-url`'s `drivers!` list, `.ci/run`'s
//!   `for feature in …` loops name exactly those features, and an xtask
//!   engine names every network driver's crate;
//! - **network suite**: every network driver's tests run the shared network
//!   cases, or a `tidy: no network suite: <reason>` line says why not.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

use anyhow::Context;

/// The longest a source file may be.
pub(crate) const MAX_LINES: usize = 600;

/// Drivers that live in the process (no network cases apply).
const IN_PROCESS_DRIVERS: &[&str] = &["storage-mem", "storage-redb"];

/// A workspace crate, as `cargo metadata` describes it.
#[derive(Debug, Clone)]
pub(crate) struct Package {
    pub(crate) name: String,
    pub(crate) dir: PathBuf,
    /// Workspace crates it depends on (normal and build dependencies).
    pub(crate) deps: BTreeSet<String>,
    /// Its features and what each enables.
    pub(crate) features: BTreeMap<String, Vec<String>>,
    /// Its default features.
    pub(crate) default_features: BTreeSet<String>,
    /// Features it always enables on a workspace dependency (`dep = {
    /// features = [...] }`), by dependency.
    pub(crate) dep_features: BTreeMap<String, BTreeSet<String>>,
}

pub(crate) fn run() -> anyhow::Result<()> {
    let root = workspace_root();
    let violations = check(&root)?;
    for violation in &violations {
        eprintln!("tidy: {violation}");
    }
    anyhow::ensure!(
        violations.is_empty(),
        "{} tidy violation(s); see docs/architecture.md",
        violations.len()
    );
    println!("tidy: the tree keeps every rule");
    Ok(())
}

/// The workspace root (xtask's parent directory).
pub(crate) fn workspace_root() -> PathBuf {
    let manifest_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest_dir
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or(manifest_dir)
}

/// Every rule on the checkout at `root`.
pub(crate) fn check(root: &Path) -> anyhow::Result<Vec<String>> {
    let packages = load_packages(root)?;
    let map = read(&root.join("docs/architecture.md"))?;
    let ci = read(&root.join(".ci/run"))?;
    let engines = read_dir_text(&root.join("xtask/src/engines"))?;
    let mut violations = crate_arrows(&map, &packages);
    violations.extend(file_lengths(&source_files(root)?));
    violations.extend(crate_docs(&packages));
    violations.extend(driver_lists(&packages, &ci, &engines));
    let registry = read(&root.join("crates/storage-url/src/registry.rs"))?;
    violations.extend(registry_lines(&packages, &registry));
    if let Some(host) = packages.iter().find(|p| p.name == "vvm-host") {
        violations.extend(features_only_forward(&read_dir_text(
            &host.dir.join("src"),
        )?));
    }
    for package in drivers(&packages) {
        if IN_PROCESS_DRIVERS.contains(&package.name.as_str()) {
            continue;
        }
        let tests = read_dir_text(&package.dir.join("tests")).unwrap_or_default();
        violations.extend(network_suite(&package.name, &tests));
    }
    Ok(violations)
}

fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

/// The text of every `.rs` file under `dir`, concatenated.
fn read_dir_text(dir: &Path) -> anyhow::Result<String> {
    let mut text = String::new();
    for path in rust_files(dir)? {
        text.push_str(&read(&path)?);
        text.push('\n');
    }
    Ok(text)
}

fn rust_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
            Err(err) => return Err(err).with_context(|| format!("listing {}", dir.display())),
        };
        for entry in entries {
            let path = entry?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if path.is_dir() {
                if name != "target" && !name.starts_with('.') {
                    pending.push(path);
                }
            } else if name.ends_with(".rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    Ok(files)
}

/// `(path relative to root, line count)` of every `.rs` file of the
/// workspace's crates, examples and xtask.
fn source_files(root: &Path) -> anyhow::Result<Vec<(String, usize)>> {
    let mut files = Vec::new();
    for top in ["crates", "examples", "xtask"] {
        for path in rust_files(&root.join(top))? {
            let lines = read(&path)?.lines().count();
            let relative = path.strip_prefix(root).unwrap_or(&path);
            files.push((relative.display().to_string(), lines));
        }
    }
    Ok(files)
}

fn load_packages(root: &Path) -> anyhow::Result<Vec<Package>> {
    let output = crate::cargo::command()
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(root)
        .output()
        .context("running cargo metadata")?;
    anyhow::ensure!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    let raw = metadata["packages"]
        .as_array()
        .context("cargo metadata: no packages")?;
    let names: BTreeSet<String> = raw
        .iter()
        .filter_map(|p| p["name"].as_str().map(str::to_string))
        .collect();
    let mut packages = Vec::new();
    for p in raw {
        let name = p["name"].as_str().context("a package without a name")?;
        let manifest = Path::new(p["manifest_path"].as_str().context("no manifest path")?);
        let deps = p["dependencies"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|d| d["kind"].as_str() != Some("dev"))
            .filter_map(|d| d["name"].as_str())
            .filter(|d| names.contains(*d))
            .map(str::to_string)
            .collect();
        let mut dep_features = BTreeMap::new();
        for d in p["dependencies"].as_array().into_iter().flatten() {
            let (Some(dep), Some(enabled)) = (d["name"].as_str(), d["features"].as_array()) else {
                continue;
            };
            if names.contains(dep) && d["kind"].as_str() != Some("dev") {
                let enabled = enabled
                    .iter()
                    .filter_map(|f| f.as_str().map(str::to_string));
                dep_features
                    .entry(dep.to_string())
                    .or_insert_with(BTreeSet::new)
                    .extend(enabled);
            }
        }
        let mut features = BTreeMap::new();
        let mut default_features = BTreeSet::new();
        if let Some(map) = p["features"].as_object() {
            for (feature, enables) in map {
                let enables: Vec<String> = enables
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|e| e.as_str().map(str::to_string))
                    .collect();
                if feature == "default" {
                    default_features.extend(enables);
                } else {
                    features.insert(feature.clone(), enables);
                }
            }
        }
        packages.push(Package {
            name: name.to_string(),
            dir: manifest.parent().map(Path::to_path_buf).unwrap_or_default(),
            deps,
            features,
            default_features,
            dep_features,
        });
    }
    packages.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(packages)
}

/// The code map's rows: crate name (the last path segment of the first
/// column) → the workspace crates its "depends on" column names.
fn map_rows(map: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut rows = BTreeMap::new();
    let Some(start) = map.find("## Code map") else {
        return rows;
    };
    for line in map[start..].lines().skip(1) {
        if line.starts_with("## ") {
            break;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // "| `name` | holds | depends on |" splits into 5 cells.
        if cells.len() < 5 || !cells[1].starts_with('`') {
            continue;
        }
        let name = backticked(cells[1]).into_iter().next().unwrap_or_default();
        let name = name.rsplit('/').next().unwrap_or(&name).to_string();
        let depends_on = cells[cells.len() - 2];
        rows.insert(name, backticked(depends_on).into_iter().collect());
    }
    rows
}

/// The `code spans` of a line.
fn backticked(text: &str) -> Vec<String> {
    text.split('`')
        .enumerate()
        .filter(|(i, _)| i % 2 == 1)
        .map(|(_, s)| s.to_string())
        .collect()
}

/// Rule: the crate arrows are the map's.
pub(crate) fn crate_arrows(map: &str, packages: &[Package]) -> Vec<String> {
    let rows = map_rows(map);
    let names: BTreeSet<&str> = packages.iter().map(|p| p.name.as_str()).collect();
    let mut violations = Vec::new();
    for package in packages {
        let Some(listed) = rows.get(&package.name) else {
            violations.push(format!(
                "crate arrows: `{}` has no row in docs/architecture.md's code map",
                package.name
            ));
            continue;
        };
        let listed: BTreeSet<&str> = listed
            .iter()
            .map(String::as_str)
            .filter(|n| names.contains(n))
            .collect();
        for dep in &package.deps {
            if !listed.contains(dep.as_str()) {
                violations.push(format!(
                    "crate arrows: `{}` depends on `{dep}`, an arrow the map does not list",
                    package.name
                ));
            }
        }
        for dep in listed {
            if !package.deps.contains(dep) {
                violations.push(format!(
                    "crate arrows: the map says `{}` depends on `{dep}`, and it does not",
                    package.name
                ));
            }
        }
    }
    for row in rows.keys() {
        if !names.contains(row.as_str()) {
            violations.push(format!(
                "crate arrows: the code map has a row for `{row}`, which is no workspace crate"
            ));
        }
    }
    violations
}

/// Rule: no source file over [`MAX_LINES`] lines.
pub(crate) fn file_lengths(files: &[(String, usize)]) -> Vec<String> {
    files
        .iter()
        .filter(|(_, lines)| *lines > MAX_LINES)
        .map(|(path, lines)| {
            format!(
                "file length: {path} has {lines} lines (at most {MAX_LINES}: split it by concept)"
            )
        })
        .collect()
}

/// Rule: a README and a `//!` header per crate.
pub(crate) fn crate_docs(packages: &[Package]) -> Vec<String> {
    let mut violations = Vec::new();
    for package in packages {
        if !package.dir.join("README.md").is_file() {
            violations.push(format!("crate docs: `{}` has no README.md", package.name));
        }
        let root_file = ["src/lib.rs", "src/main.rs"]
            .iter()
            .map(|f| package.dir.join(f))
            .find(|f| f.is_file());
        let header = root_file
            .and_then(|f| std::fs::read_to_string(f).ok())
            .is_some_and(|text| text.trim_start().starts_with("//!"));
        if !header {
            violations.push(format!(
                "crate docs: `{}`'s lib.rs/main.rs does not open with a `//!` header",
                package.name
            ));
        }
    }
    violations
}

/// The driver crates: `storage-*` but the registry itself.
fn drivers(packages: &[Package]) -> impl Iterator<Item = &Package> {
    packages
        .iter()
        .filter(|p| p.name.starts_with("storage-") && p.name != "storage-url")
}

/// `storage-url`'s feature that compiles `driver` in, or `None` when it
/// is a plain (always built) dependency.
fn driver_feature<'a>(url: &'a Package, driver: &str) -> Option<&'a str> {
    url.features.iter().find_map(|(feature, enables)| {
        enables
            .iter()
            .any(|e| e == &format!("dep:{driver}") || e == driver)
            .then_some(feature.as_str())
    })
}

/// Rule: a driver is in every list: `storage-url` (feature or always),
/// vvm-host's forwarded features, `.ci/run`'s loops, an xtask engine.
pub(crate) fn driver_lists(packages: &[Package], ci: &str, engines: &str) -> Vec<String> {
    let mut violations = Vec::new();
    let Some(url) = packages.iter().find(|p| p.name == "storage-url") else {
        return vec!["driver lists: there is no storage-url crate".into()];
    };
    let mut driver_features = BTreeSet::new();
    for driver in drivers(packages) {
        match driver_feature(url, &driver.name) {
            Some(feature) => {
                driver_features.insert(feature.to_string());
            }
            None if url.deps.contains(&driver.name) => {}
            None => violations.push(format!(
                "driver lists: `{}` is not in storage-url (no feature compiles it in)",
                driver.name
            )),
        }
        let crate_ident = driver.name.replace('-', "_");
        if !IN_PROCESS_DRIVERS.contains(&driver.name.as_str())
            && !engines.contains(&driver.name)
            && !engines.contains(&crate_ident)
        {
            violations.push(format!(
                "driver lists: no engine in xtask/src/engines/ names `{}`",
                driver.name
            ));
        }
    }
    if let Some(host) = packages.iter().find(|p| p.name == "vvm-host") {
        for feature in &driver_features {
            let forwards = host
                .features
                .get(feature)
                .is_some_and(|e| e.iter().any(|e| e == &format!("storage-url/{feature}")));
            let by_default = host.default_features.contains(feature)
                || host
                    .default_features
                    .contains(&format!("storage-url/{feature}"))
                || host
                    .dep_features
                    .get("storage-url")
                    .is_some_and(|always| always.contains(feature));
            if !forwards && !by_default {
                violations.push(format!(
                    "driver lists: vvm-host has no feature `{feature}` forwarding storage-url/{feature}"
                ));
            }
        }
    }
    let loops: Vec<BTreeSet<String>> = ci
        .lines()
        .filter_map(|l| l.trim().strip_prefix("for feature in "))
        .map(|rest| {
            rest.split(';')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .map(|f| f.trim_matches('"').to_string())
                .collect()
        })
        .collect();
    if loops.is_empty() {
        violations
            .push("driver lists: .ci/run has no `for feature in …` loop over the drivers".into());
    }
    for set in loops {
        if set != driver_features {
            violations.push(format!(
                "driver lists: a `for feature in` loop of .ci/run names {set:?}, storage-url's driver features are {driver_features:?}"
            ));
        }
    }
    violations
}

/// Rule: every driver crate has its line in storage-url's `drivers!`
/// list (`crates/storage-url/src/registry.rs`): `storage_x "feature"
/// [schemes],` or `storage_x always [schemes],`.
pub(crate) fn registry_lines(packages: &[Package], registry: &str) -> Vec<String> {
    drivers(packages)
        .filter(|driver| {
            let ident = driver.name.replace('-', "_");
            !registry.lines().any(|line| {
                line.trim_start()
                    .strip_prefix(&ident)
                    .is_some_and(|rest| rest.starts_with(" \"") || rest.starts_with(" always "))
            })
        })
        .map(|driver| {
            format!(
                "driver lists: `{}` has no line in storage-url's `drivers!` list (crates/storage-url/src/registry.rs)",
                driver.name
            )
        })
        .collect()
}

/// Rule: vvm-host's driver features only forward to storage-url (no
/// `cfg(feature = …)` in its sources), so `.ci/run` checks it once with
/// its default features rather than once per driver: the driver code it
/// can compile is storage-url's, whose subsets the loop checks.
pub(crate) fn features_only_forward(host_sources: &str) -> Vec<String> {
    match host_sources.contains("cfg(feature") {
        true => vec![
            "driver lists: vvm-host's sources test a cargo feature (`cfg(feature`): \
             its features must only forward to storage-url, or .ci/run must check \
             vvm-host once per driver"
                .into(),
        ],
        false => Vec::new(),
    }
}

/// Rule: a network driver runs the shared network cases, or says why not.
pub(crate) fn network_suite(driver: &str, tests: &str) -> Vec<String> {
    let runs = tests.contains("network_suite!") || tests.contains("elections_testsuite::network");
    let excused = tests.lines().any(|l| {
        l.contains("tidy: no network suite:")
            && l.split(':').nth(2).is_some_and(|r| !r.trim().is_empty())
    });
    if runs || excused {
        Vec::new()
    } else {
        vec![format!(
            "network suite: `{driver}`'s tests neither run the network cases nor say `tidy: no network suite: <reason>`"
        )]
    }
}

#[cfg(test)]
mod tests;
