//! The one workspace build every chore reuses: `cargo test --workspace
//! --no-run`, with the feature unification of `cargo test --workspace`.
//!
//! A `cargo build -p chaos` (or `run -p`, or `test -p`) resolves features
//! for that package alone and recompiles every dependency whose features
//! differ (about a hundred crates); taking the executables from the
//! workspace's own test build costs a freshness check instead. Binaries are
//! built by that command for every package with integration tests (cargo
//! builds them for `CARGO_BIN_EXE_*`), so a package whose programs a chore
//! runs keeps at least one integration test that spawns them.

use std::{
    collections::HashMap,
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::Stdio,
};

use anyhow::Context;

/// A test executable built by `cargo test --workspace --no-run`.
pub(crate) struct TestBinary {
    pub(crate) executable: PathBuf,
    pub(crate) package_dir: PathBuf,
}

/// What the workspace build produced.
pub(crate) struct Artifacts {
    /// Test executables by `(package, test target)`.
    pub(crate) tests: HashMap<(String, String), TestBinary>,
    /// Program executables by binary name.
    pub(crate) bins: HashMap<String, PathBuf>,
}

impl Artifacts {
    /// The executable of the workspace program `name`.
    pub(crate) fn bin(&self, name: &str) -> anyhow::Result<PathBuf> {
        self.bins.get(name).cloned().with_context(|| {
            format!(
                "`cargo test --workspace --no-run` built no program {name:?} \
                 (its package needs an integration test that spawns it)"
            )
        })
    }
}

/// Builds every test binary and program of the workspace once and indexes
/// them.
pub(crate) fn build() -> anyhow::Result<Artifacts> {
    println!("== building test binaries (cargo test --workspace --no-run) ==");
    let mut child = crate::cargo::command()
        .args(["test", "--workspace", "--no-run"])
        .args(["--message-format", "json-render-diagnostics"])
        .stdout(Stdio::piped())
        .spawn()
        .context("running cargo test --no-run")?;
    let stdout = child.stdout.take().context("no stdout")?;
    let mut artifacts = Artifacts {
        tests: HashMap::new(),
        bins: HashMap::new(),
    };
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        let Ok(message) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        if message["reason"] != "compiler-artifact" {
            continue;
        }
        if let Some((key, binary)) = test_artifact(&message) {
            artifacts.tests.insert(key, binary);
        } else if let Some((name, executable)) = bin_artifact(&message) {
            artifacts.bins.insert(name, executable);
        }
    }
    let status = child.wait()?;
    anyhow::ensure!(
        status.success(),
        "building the test binaries failed ({status})"
    );
    Ok(artifacts)
}

/// `(package, target)` and the executable of a `compiler-artifact` message
/// for a test target.
fn test_artifact(message: &serde_json::Value) -> Option<((String, String), TestBinary)> {
    let target = &message["target"];
    let is_test = target["kind"].as_array()?.iter().any(|k| k == "test");
    if !is_test {
        return None;
    }
    let executable = PathBuf::from(message["executable"].as_str()?);
    let manifest = Path::new(message["manifest_path"].as_str()?);
    let package_dir = manifest.parent()?.to_path_buf();
    let package = package_name(message["package_id"].as_str()?)?;
    let name = target["name"].as_str()?.to_string();
    Some((
        (package, name),
        TestBinary {
            executable,
            package_dir,
        },
    ))
}

/// The name and executable of a program (a `bin` target built as itself,
/// not as its unit-test harness).
fn bin_artifact(message: &serde_json::Value) -> Option<(String, PathBuf)> {
    let target = &message["target"];
    let is_bin = target["kind"].as_array()?.iter().any(|k| k == "bin");
    if !is_bin || message["profile"]["test"].as_bool() != Some(false) {
        return None;
    }
    let executable = PathBuf::from(message["executable"].as_str()?);
    Some((target["name"].as_str()?.to_string(), executable))
}

/// The package name in a package id: `path+file:///dir/name#0.1.0` or
/// `path+file:///dir/other#name@0.1.0`.
fn package_name(id: &str) -> Option<String> {
    let (path, fragment) = id.rsplit_once('#')?;
    match fragment.split_once('@') {
        Some((name, _version)) => Some(name.to_string()),
        None => path.rsplit('/').next().map(str::to_string),
    }
}

#[cfg(test)]
mod tests {
    use super::package_name;

    #[test]
    fn package_names_from_ids() {
        assert_eq!(
            package_name("path+file:///work/main/crates/storage-mem#0.1.0").as_deref(),
            Some("storage-mem")
        );
        assert_eq!(
            package_name("path+file:///work/main/examples/pg#pg-tenants@0.1.0").as_deref(),
            Some("pg-tenants")
        );
    }
}
