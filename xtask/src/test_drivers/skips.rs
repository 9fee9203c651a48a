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
    package: &'static str,
    test: &'static str,
    /// Test-name filter, as libtest's `--skip` takes it.
    filter: &'static str,
    /// Whether the engine (its name, the environment it gives the suites)
    /// cannot run them.
    cannot: fn(engine: &str, env: &[(String, String)]) -> bool,
    reason: &'static str,
}

const NOT_ON: &[NotOn] = &[
    NotOn {
        package: "storage-cassandra",
        test: "suite",
        filter: "renewal_applied_late_never_moves_the_expiry_earlier",
        cannot: |engine, _| engine == "cassandra-3",
        reason: "the case holds one request in a proxy in front of one node, and the driver \
                 routes to all three nodes (the `cassandra` engine runs it)",
    },
    NotOn {
        package: "storage-cassandra",
        test: "suite",
        filter: "lost_answer_of_a_write_is_outcome_unknown",
        cannot: |engine, _| engine == "cassandra-3",
        reason: "the case swallows answers in a proxy in front of one node, and the driver \
                 routes to all three nodes (the `cassandra` engine runs it)",
    },
    NotOn {
        package: "storage-cassandra",
        test: "suite",
        filter: "wrong_password_is_permanent",
        cannot: |_, env| !needs_a_password(env, "SCYLLA_URI"),
        reason: "the engine lets anyone connect (the `cassandra` engine requires a password \
                 and runs it)",
    },
    NotOn {
        package: "storage-etcd",
        test: "suite",
        filter: "wrong_password_is_permanent",
        cannot: |_, env| !env.iter().any(|(name, _)| name == "ETCD_AUTH_URL"),
        reason: "the engine has no member with authentication on (the `etcd` engine starts \
                 one and runs it)",
    },
];

/// Whether the URL in `var` carries a password (`scheme://user:password@…`).
fn needs_a_password(env: &[(String, String)], var: &str) -> bool {
    env.iter()
        .find(|(name, _)| name == var)
        .and_then(|(_, url)| url.split_once("://"))
        .and_then(|(_, rest)| rest.split(['/', '?']).next())
        .is_some_and(|authority| authority.contains('@'))
}

/// What to skip in `package`'s test `test` on `engine` (which gives the
/// suites `env`); an error under `CI=true` when a needed program is missing.
pub(super) fn for_suite(
    engine: &str,
    env: &[(String, String)],
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
        .filter(|n| n.package == package && n.test == test && (n.cannot)(engine, env))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_is_seen_in_the_authority_only() {
        let env = |url: &str| vec![("SCYLLA_URI".to_owned(), url.to_owned())];
        assert!(needs_a_password(
            &env("scylla://u:p@127.0.0.1:9042/ks?x=1"),
            "SCYLLA_URI"
        ));
        assert!(!needs_a_password(
            &env("scylla://127.0.0.1:9042/ks?tls_ca_file=/a@b"),
            "SCYLLA_URI"
        ));
        assert!(!needs_a_password(
            &env("scylla://127.0.0.1:9042/k@s"),
            "SCYLLA_URI"
        ));
        assert!(!needs_a_password(&[], "SCYLLA_URI"));
    }
}
