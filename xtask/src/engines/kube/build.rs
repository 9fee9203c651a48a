//! kube-apiserver built from source with Go, once per target directory.
//!
//! No image registry or release download is needed: the Go module proxy
//! (whatever `go env` names) serves `k8s.io/kubernetes` and its staging
//! modules. The module next to this file (`go.mod`, `go.sum`, `tools.go`)
//! requires `k8s.io/kubernetes` [`VERSION`] and restates, as `replace`
//! lines, each of that module's `k8s.io/<name> => ./staging/...`
//! replacements with the published `k8s.io/<name> v0.<minor>.<patch>` (a
//! dependency's own replace directives are ignored, so they must be
//! restated: 33 of them for v1.37.2).
//!
//! [`ensure_apiserver`] returns `<dir>/kube-apiserver-<VERSION>` (`dir` is
//! `<target>/engines/kube`), building it first if it is missing: the three
//! files are written to `<dir>/go/build`, and `go build -trimpath` runs
//! there with its module and build caches in `<dir>/go/{mod,cache}` (they
//! outlive the run, so a rebuild is warm); the binary is renamed into place
//! only once complete. An exclusive lock on `<dir>/build.lock` is held
//! while checking and building, so two xtasks (CI starts
//! `build-kube-apiserver` in the background, then `test-drivers` needs the
//! binary) never build twice: the second waits and finds it built.
//!
//! Measured on 2 cores: cold 3.5-7.5 min (peak 2.4 GB of memory, 3.4 GB of
//! caches, a 114 MiB binary), warm (caches kept, binary removed) seconds.

use std::{
    fs::{File, OpenOptions, TryLockError},
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use anyhow::{Context, Result, bail};

use crate::engines::LogTo;

/// The Kubernetes release built (the `require` of `go.mod`).
pub(crate) const VERSION: &str = "v1.37.2";

/// The build's Go module: the release and its staging modules pinned.
const GO_MOD: &str = include_str!("go.mod");
/// Its checksums, so the build downloads exactly what was reviewed.
const GO_SUM: &str = include_str!("go.sum");
/// Imports `k8s.io/kubernetes/cmd/kube-apiserver` so `go mod tidy` keeps
/// every module it needs.
const TOOLS_GO: &str = include_str!("tools.go");

/// The package built.
const PACKAGE: &str = "k8s.io/kubernetes/cmd/kube-apiserver";

/// The cached kube-apiserver under `dir`, built first if it is missing
/// (see the module docs); waits for another xtask building it.
pub(crate) fn ensure_apiserver(dir: &Path) -> Result<PathBuf> {
    let binary = dir.join(format!("kube-apiserver-{VERSION}"));
    // Renamed into place complete: if it is there, it is whole.
    if binary.is_file() {
        return Ok(binary);
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let lock_path = dir.join("build.lock");
    let lock = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(false)
        .open(&lock_path)
        .with_context(|| format!("cannot open {}", lock_path.display()))?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            println!(
                "kube-apiserver {VERSION}: another xtask is building it; waiting for {}",
                lock_path.display()
            );
            let waiting = Instant::now();
            lock.lock()
                .with_context(|| format!("cannot lock {}", lock_path.display()))?;
            println!(
                "kube-apiserver {VERSION}: waited {:.0}s for the other build",
                waiting.elapsed().as_secs_f64()
            );
        }
        Err(TryLockError::Error(err)) => {
            return Err(err).with_context(|| format!("cannot lock {}", lock_path.display()));
        }
    }
    if !binary.is_file() {
        build(dir, &binary)?;
    }
    // The lock is released when `lock` is dropped.
    drop(lock);
    Ok(binary)
}

/// Runs `go build` into a temporary file and renames it to `binary`.
fn build(dir: &Path, binary: &Path) -> Result<()> {
    let go = find_go()?;
    let go_dir = dir.join("go");
    let module = go_dir.join("build");
    std::fs::create_dir_all(&module)
        .with_context(|| format!("cannot create {}", module.display()))?;
    // Written afresh each time: `-mod=mod` lets go rewrite them.
    for (name, text) in [
        ("go.mod", GO_MOD),
        ("go.sum", GO_SUM),
        ("tools.go", TOOLS_GO),
    ] {
        let path = module.join(name);
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    let tmp = dir.join(format!("kube-apiserver-{VERSION}.partial"));
    let log_path = go_dir.join("build.log");
    let log =
        File::create(&log_path).with_context(|| format!("cannot create {}", log_path.display()))?;
    println!(
        "kube-apiserver {VERSION}: building with {} (cold: 3.5-7.5 min on 2 cores; log: {})",
        go.display(),
        log_path.display()
    );
    let started = Instant::now();
    let status = Command::new(&go)
        .args(["build", "-trimpath", "-ldflags", &ldflags(), "-o"])
        .arg(&tmp)
        .arg(PACKAGE)
        .current_dir(&module)
        .env("GOMODCACHE", go_dir.join("mod"))
        .env("GOCACHE", go_dir.join("cache"))
        // `-modcacherw`: the module cache stays removable with the target
        // directory (`cargo clean`) without root.
        .env("GOFLAGS", "-mod=mod -modcacherw -buildvcs=false")
        .env("GOWORK", "off")
        // The installed Go, never a toolchain download.
        .env("GOTOOLCHAIN", "local")
        .log_to(log)?
        .status()
        .with_context(|| format!("cannot run {}", go.display()))?;
    if !status.success() {
        bail!(
            "go build of kube-apiserver {VERSION} failed ({status}) after {:.0}s; the end of {}:\n{}",
            started.elapsed().as_secs_f64(),
            log_path.display(),
            tail(&log_path, 30)
        );
    }
    std::fs::rename(&tmp, binary)
        .with_context(|| format!("cannot rename {} to {}", tmp.display(), binary.display()))?;
    println!(
        "kube-apiserver {VERSION}: built in {:.0}s: {}",
        started.elapsed().as_secs_f64(),
        binary.display()
    );
    Ok(())
}

/// The `-ldflags` that strip the binary and stamp its version (what
/// `kube-apiserver --version` and `/version` report).
fn ldflags() -> String {
    let minor = VERSION.split('.').nth(1).unwrap_or_default();
    format!(
        "-s -w -X k8s.io/component-base/version.gitVersion={VERSION} \
         -X k8s.io/component-base/version.gitMajor=1 \
         -X k8s.io/component-base/version.gitMinor={minor}"
    )
}

/// `go` on the `PATH`, or where the official tarball installs it.
fn find_go() -> Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let candidates = std::env::split_paths(&path)
        .map(|dir| dir.join("go"))
        .chain([PathBuf::from("/usr/local/go/bin/go")]);
    for candidate in candidates {
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    bail!(
        "Go is not installed (neither on PATH nor /usr/local/go/bin/go): the kube engine builds \
         kube-apiserver {VERSION} from source and needs Go 1.26 or later; or set KUBE_URL"
    )
}

/// The last `lines` lines of the file at `path`.
fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::{GO_MOD, VERSION, ldflags};

    #[test]
    fn the_module_requires_the_version_built() {
        assert!(
            GO_MOD
                .lines()
                .any(|l| l.trim() == format!("require k8s.io/kubernetes {VERSION}")),
            "go.mod does not require k8s.io/kubernetes {VERSION}"
        );
        // Every staging module pinned at the same release.
        let staging = format!("v0.{}", VERSION.trim_start_matches("v1."));
        let replaces: Vec<&str> = GO_MOD
            .lines()
            .filter(|l| l.starts_with("replace "))
            .collect();
        assert!(!replaces.is_empty());
        assert!(
            replaces.iter().all(|l| l.ends_with(&staging)),
            "{replaces:?}"
        );
        assert!(ldflags().contains(&format!("gitVersion={VERSION} ")));
    }
}
