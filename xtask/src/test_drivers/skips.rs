//! Tests a suite runs only when a program they drive is installed: the
//! pg-example's browser test needs `chromium`. Without it the tests are
//! left out (`--skip`) and reported as skipped, never as passed; under
//! `CI=true` a missing program is an error instead, since
//! `.ci/install-deps.sh` installs it.

use std::path::Path;
use std::process::Command;

/// A filter of tests that need `program`.
struct Needs {
    package: &'static str,
    test: &'static str,
    /// Test-name filter, as libtest's `--skip` takes it.
    filter: &'static str,
    program: &'static str,
    /// An environment variable that names the program instead.
    env: &'static str,
}

const NEEDS: &[Needs] = &[Needs {
    package: "pg-tenants",
    test: "e2e",
    filter: "browser::",
    program: "chromium",
    env: "CHROMIUM",
}];

/// What to leave out of one suite binary.
pub(super) struct Skip {
    /// Arguments for the test binary (`--skip <filter>`).
    pub(super) args: Vec<String>,
    /// Lines for the summary: what was skipped and why.
    pub(super) notes: Vec<String>,
    /// How many tests were left out.
    pub(super) count: u64,
}

fn installed(need: &Needs) -> bool {
    if std::env::var_os(need.env).is_some_and(|p| Path::new(&p).is_file()) {
        return true;
    }
    std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|dir| dir.join(need.program).is_file())
    })
}

/// Counts the tests of `binary` that `filter` selects (`--list`).
fn count(binary: &Path, filter: &str) -> u64 {
    Command::new(binary)
        .args(["--ignored", "--list", filter])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter(|l| l.ends_with(": test"))
                .count() as u64
        })
        .unwrap_or(0)
}

/// Tests an engine cannot run, with the reason the summary prints (the
/// engine named in the reason runs them).
struct NotOn {
    engine: &'static str,
    package: &'static str,
    test: &'static str,
    /// Test-name filter, as libtest's `--skip` takes it.
    filter: &'static str,
    reason: &'static str,
}

const NOT_ON: &[NotOn] = &[NotOn {
    engine: "cassandra-3",
    package: "storage-cassandra",
    test: "suite",
    filter: "renewal_applied_late_never_moves_the_expiry_earlier",
    reason: "the case holds one request in a proxy in front of one node, and the driver \
             routes to all three nodes (the `cassandra` engine runs it)",
}];

/// What to skip in `package`'s test `test` on `engine`; an error under
/// `CI=true` when a needed program is missing.
pub(super) fn for_suite(
    engine: &str,
    package: &str,
    test: &str,
    binary: &Path,
) -> anyhow::Result<Skip> {
    let mut skip = Skip {
        args: Vec::new(),
        notes: Vec::new(),
        count: 0,
    };
    for not in NOT_ON
        .iter()
        .filter(|n| n.engine == engine && n.package == package && n.test == test)
    {
        let n = count(binary, not.filter);
        skip.args
            .extend(["--skip".to_owned(), not.filter.to_owned()]);
        skip.count += n;
        skip.notes.push(format!(
            "{package}/{test}: {n} test(s) `{}` SKIPPED on {engine}: {}",
            not.filter, not.reason
        ));
    }
    for need in NEEDS
        .iter()
        .filter(|n| n.package == package && n.test == test)
    {
        if installed(need) {
            continue;
        }
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            anyhow::bail!(
                "`{}` is not installed (.ci/install-deps.sh installs it); its tests ({}) cannot be skipped in CI",
                need.program,
                need.filter
            );
        }
        let n = count(binary, need.filter);
        skip.args
            .extend(["--skip".to_owned(), need.filter.to_owned()]);
        skip.count += n;
        skip.notes.push(format!(
            "{package}/{test}: {n} test(s) `{}` SKIPPED: no `{}` on the PATH (or in {})",
            need.filter, need.program, need.env
        ));
    }
    Ok(skip)
}
