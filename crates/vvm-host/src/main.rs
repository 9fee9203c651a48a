//! `vvm-host`: run a command only while this node leads, in the spirit of
//! `consul lock` / `etcdctl lock`, so a cron job or a daemon runs on exactly
//! one node of a cluster (or on `--cluster-size` nodes at most).
//!
//! ```text
//! vvm-host run [OPTIONS] NAME [--] COMMAND [ARGS...]
//! vvm-host status [OPTIONS] NAME
//! vvm-host handover [OPTIONS] NAME
//! vvm-host completions SHELL
//! ```
//!
//! One module per subcommand: [`run`], [`status`], [`handover`],
//! [`shell_docs`] (completions and man pages); [`cli`] holds the options.
//! `main` only dispatches, the internal entry points of the guard
//! ([`guard`]) first. The command runs under the guard, which kills it
//! whenever vvm-host ends, however it ends. See `--help` for the options
//! and exit statuses.

mod cli;
mod command;
mod containment;
mod default_storage;
mod error_text;
mod exit;
mod fault;
mod guard;
mod handover;
mod health;
mod job;
mod killer;
mod log;
mod observe;
mod observed_storage;
mod program;
mod run;
mod shell_docs;
mod signals;
mod status;
mod store;

use std::process::ExitCode;

use crate::cli::Command;

/// The soft `RLIMIT_NOFILE` vvm-host started with: `--metrics-listen`'s
/// server raises vvm-host's own, and the command gets this one back (many
/// programs still expect the usual 1024, e.g. for `select`).
pub(crate) static NOFILE_AT_START: std::sync::OnceLock<u64> = std::sync::OnceLock::new();

fn main() -> ExitCode {
    if let Ok((soft, _)) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
    {
        let _ = NOFILE_AT_START.set(soft);
    }
    let mut raw = std::env::args_os();
    match raw.nth(1) {
        Some(first) if first == guard::GUARD_ARG => return guard::main(raw.collect()),
        Some(first) if first == guard::exec::EXEC_ARG => return guard::exec::main(raw.collect()),
        Some(first) if first == guard::init::INIT_ARG => return guard::init::main(raw.collect()),
        Some(first) if first == shell_docs::MAN_ARG => {
            return shell_docs::man_main(&raw.collect::<Vec<_>>());
        }
        Some(first) if first == containment::pidns::PROBE_ARG => {
            return containment::pidns::probe_main();
        }
        _ => {}
    }
    match cli::parse().command {
        Command::Run(args) => run::main(*args),
        Command::Status(args) => status::main(&args),
        Command::Handover(args) => handover::main(&args),
        Command::Completions { shell } => {
            // Into a buffer: a closed stdout (`| head`) is not a panic.
            let script = shell_docs::completions(shell);
            match std::io::Write::write_all(&mut std::io::stdout(), &script) {
                Ok(()) => ExitCode::SUCCESS,
                Err(_) => ExitCode::from(exit::DEFAULT_ERROR),
            }
        }
    }
}
