//! The cargo commands xtask runs: the cargo that runs xtask, without the
//! variables `cargo run` sets for xtask itself.
//!
//! `cargo xtask` is `cargo run -p xtask`, which gives xtask's process
//! `CARGO_PKG_NAME=xtask`, `CARGO_MANIFEST_DIR=…/xtask` and the like. A
//! cargo started with them sees build scripts that declared
//! `rerun-if-env-changed` on those names (ring's does, for every one it
//! reads) as changed, and rebuilds them and everything above them: in CI
//! each switch between a top-level `cargo test` and an xtask build cost
//! about two minutes of the same build again. Without them, both share one
//! build.

use std::process::Command;

/// `cargo` (the one running xtask when there is one) with the variables
/// `cargo run` set for xtask removed.
pub(crate) fn command() -> Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    for (key, _) in std::env::vars_os() {
        if key.to_str().is_some_and(set_by_cargo_run) {
            command.env_remove(key);
        }
    }
    command
}

/// Whether `cargo run` sets `key` for the program it runs (and a user
/// never does).
fn set_by_cargo_run(key: &str) -> bool {
    key.starts_with("CARGO_PKG_")
        || matches!(
            key,
            "CARGO_MANIFEST_DIR"
                | "CARGO_MANIFEST_PATH"
                | "CARGO_MANIFEST_LINKS"
                | "CARGO_CRATE_NAME"
                | "CARGO_BIN_NAME"
                | "CARGO_PRIMARY_PACKAGE"
                | "CARGO_RUSTC_CURRENT_DIR"
                | "OUT_DIR"
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_cargo_run_set_for_xtask_is_not_passed_on() {
        assert!(set_by_cargo_run("CARGO_PKG_NAME"));
        assert!(set_by_cargo_run("CARGO_MANIFEST_DIR"));
        assert!(!set_by_cargo_run("CARGO_TARGET_DIR"));
        assert!(!set_by_cargo_run("CARGO_HOME"));
        assert!(!set_by_cargo_run("RUSTFLAGS"));
        // cargo test sets CARGO_PKG_NAME for this test too
        if std::env::var_os("CARGO_PKG_NAME").is_some() {
            let removed = command()
                .get_envs()
                .any(|(k, v)| k == "CARGO_PKG_NAME" && v.is_none());
            assert!(removed);
        }
    }
}
