//! Command-line options (each also read from an environment variable).

use std::{ffi::OsString, net::SocketAddr, time::Duration};

use clap::{CommandFactory, FromArgMatches, Parser};
use vvm_orch::VvmConfig;

use crate::exit::{self, ExitCodes};

/// Run a command only while this node holds a lock in a store you already
/// run (like `consul lock` and `etcdctl lock`): the command never outlives
/// the leadership.
#[derive(Debug, Parser)]
#[command(
    name = "vvm-host",
    version,
    subcommand_required = true,
    arg_required_else_help = true,
    after_help = "Examples:\n  vvm-host run nightly-report -- ./report.sh\n  vvm-host run --storage postgres://db/app billing ./billing-daemon --port 8080\n  vvm-host status nightly-report\n  vvm-host handover --to 10.0.0.8 nightly-report\n\nSee `vvm-host run --help` for the exit statuses."
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// What `vvm-host` is asked to do.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// Run COMMAND only while this node holds the lock NAME (one of
    /// --cluster-size keys NAME/1..=N), renewed, and released after the
    /// command has stopped.
    #[command(after_help = after_help())]
    Run(Box<Args>),
    /// Show who holds the lock NAME, and who waits (read only).
    #[command(after_help = crate::status::AFTER_HELP)]
    Status(crate::status::StatusArgs),
    /// Ask the node that holds the lock NAME to stop its command and hand
    /// the lock to a waiting candidate (--to ADDRESS, or the one that has
    /// waited longest); waits until the successor leads.
    #[command(after_help = crate::handover::AFTER_HELP)]
    Handover(crate::handover::HandoverArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell to complete for.
        shell: clap_complete::Shell,
    },
}

/// Parses the command line. An environment variable that is set but empty
/// counts as unset (as most programs read them: `VVM_HOST_STORAGE=` in a
/// unit file falls back to the default instead of failing).
pub(crate) fn parse() -> Cli {
    let matches = without_empty_env(Cli::command()).get_matches();
    match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(err) => err.exit(),
    }
}

/// `command` with the environment variable of every argument (in every
/// subcommand) that is set but empty dropped.
fn without_empty_env(command: clap::Command) -> clap::Command {
    let empty: Vec<clap::Id> = command
        .get_arguments()
        .filter(|a| {
            a.get_env()
                .and_then(std::env::var_os)
                .is_some_and(|v| v.is_empty())
        })
        .map(|a| a.get_id().clone())
        .collect();
    let command = empty.into_iter().fold(command, |c, id| {
        c.mut_arg(id, |a| a.env(clap::builder::Resettable::Reset))
    });
    let subs: Vec<String> = command
        .get_subcommands()
        .map(|s| s.get_name().to_owned())
        .collect();
    subs.into_iter()
        .fold(command, |c, name| c.mut_subcommand(name, without_empty_env))
}

/// `vvm-host run`'s options.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The lock, and where it lives.
    #[command(flatten)]
    pub(crate) store: crate::store::StoreArgs,

    /// This node's address, written to the leadership record (default: the host name).
    #[arg(long, env = "VVM_HOST_ADDRESS")]
    pub(crate) address: Option<String>,

    /// Lease length, in whole seconds (e.g. 20s, 1m): a crashed leader is
    /// replaced after at most this.
    #[arg(long, env = "VVM_HOST_LEADERSHIP_DURATION", default_value = "20s", value_parser = parse_lease, allow_hyphen_values = true)]
    pub(crate) leadership_duration: Duration,

    /// Give up (exit 124, see --exit-code-no-leadership) if no key could be
    /// acquired within this time; `0s` tries once, as --no-wait. Default:
    /// wait as long as it takes, as a standby should.
    #[arg(long, env = "VVM_HOST_ACQUISITION_DURATION", default_value = "forever", value_parser = parse_acquisition, allow_hyphen_values = true)]
    pub(crate) acquisition_duration: Duration,

    /// Try once: if every key is held, exit at once with the no-leadership
    /// status (124), as `flock -n` does. The same as
    /// `--acquisition-duration 0s`.
    #[arg(long, conflicts_with = "acquisition_duration")]
    pub(crate) no_wait: bool,

    /// Give the command vvm-host's standard input (as `consul lock
    /// -pass-stdin` does). Off by default: the command's standard input is
    /// /dev/null, so a job never waits on a terminal or eats a pipe meant
    /// for something else. If the command runs again after a new
    /// acquisition, it reads on from where the last one stopped.
    #[arg(long)]
    pub(crate) pass_stdin: bool,

    /// Pause between two acquisition rounds (a standby is woken sooner when
    /// the store reports a release).
    #[arg(long, env = "VVM_HOST_RETRY_PAUSE", default_value = "1s", value_parser = parse_positive, allow_hyphen_values = true)]
    pub(crate) retry_pause: Duration,

    /// This node's priority as a candidate (any integer; default 0). A free
    /// lock goes to the highest priority waiting, and a leader hands over
    /// (its command stopped first) to a higher-priority candidate that has
    /// waited for --preempt-after; equal priorities never preempt.
    #[arg(
        long,
        env = "VVM_HOST_PRIORITY",
        default_value_t = 0,
        value_name = "N",
        allow_hyphen_values = true
    )]
    pub(crate) priority: i32,

    /// The hold-down: how long a higher-priority candidate must have waited,
    /// without a break, before this node, leading, hands over to it. A node
    /// that comes and goes starts again each time. Default: twice
    /// --leadership-duration.
    #[arg(long, env = "VVM_HOST_PREEMPT_AFTER", value_name = "DURATION", value_parser = parse_positive, allow_hyphen_values = true)]
    pub(crate) preempt_after: Option<Duration>,

    /// How long this node leads before any higher-priority candidate may
    /// take over. Default: the hold-down (--preempt-after).
    #[arg(long, env = "VVM_HOST_MIN_TENURE", value_name = "DURATION", value_parser = parse_duration, allow_hyphen_values = true)]
    pub(crate) min_tenure: Option<Duration>,

    /// Time the command gets between SIGTERM and SIGKILL. A second SIGINT or
    /// SIGTERM during it kills the command at once.
    #[arg(long, env = "VVM_HOST_GRACE_PERIOD", default_value = "10s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub(crate) grace_period: Duration,

    /// How the command's processes are kept within reach: `cgroup` (a cgroup
    /// v2 of the job's own, ended with cgroup.kill: nothing escapes), `pidns`
    /// (a PID namespace whose init takes every process with it), `subreaper`
    /// (a process-tree walk: a process whose parent is stuck can escape), or
    /// `auto`: the first of these that works here (the start log says which
    /// and why).
    #[arg(long, env = "VVM_HOST_CONTAINMENT", value_enum, default_value_t = crate::containment::Requested::Auto)]
    pub(crate) containment: crate::containment::Requested,

    /// Serve Prometheus metrics at http://ADDR/metrics and a health report
    /// at /healthz (200 while healthy as leader or standby, 503 otherwise).
    /// ADDR is IP:PORT, e.g. 127.0.0.1:9187; port 0 picks a free port (the
    /// log says which). Default: off.
    #[arg(long, env = "VVM_HOST_METRICS_LISTEN", value_name = "ADDR", value_parser = parse_listen)]
    pub(crate) metrics_listen: Option<SocketAddr>,

    /// Log filter (tracing-subscriber syntax), e.g. `info` or
    /// `vvm_orch=debug`. Default: $RUST_LOG, else `info`.
    #[arg(long, env = "VVM_HOST_LOG")]
    pub(crate) log: Option<String>,

    /// Log line format on standard error: `text`, or `json` (one JSON
    /// object per line with the span fields, for journald, Loki or
    /// Datadog). Colour only on a terminal, never with NO_COLOR set.
    #[arg(long, env = "VVM_HOST_LOG_FORMAT", value_enum, default_value_t = crate::log::Format::Text)]
    pub(crate) log_format: crate::log::Format,

    /// Exit status when leadership is lost (also after the killer ended the command).
    #[arg(long, env = "VVM_HOST_EXIT_CODE_LOST", default_value_t = exit::DEFAULT_LOST)]
    pub(crate) exit_code_lost: u8,

    /// Exit status when no leadership was acquired within --acquisition-duration.
    #[arg(long, env = "VVM_HOST_EXIT_CODE_NO_LEADERSHIP", default_value_t = exit::DEFAULT_NO_LEADERSHIP)]
    pub(crate) exit_code_no_leadership: u8,

    /// Exit status on errors of vvm-host itself (storage, runtime, guard).
    #[arg(long, env = "VVM_HOST_EXIT_CODE_ERROR", default_value_t = exit::DEFAULT_ERROR)]
    pub(crate) exit_code_error: u8,

    /// The command to run while leading, with its arguments (`--` before it
    /// is accepted, and needed only when it starts with `-`).
    #[arg(
        value_name = "COMMAND",
        required = true,
        num_args = 1..,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub(crate) command: Vec<OsString>,
}

impl Args {
    /// The log filter: `--log` / `VVM_HOST_LOG`, else `RUST_LOG`, else `info`.
    pub(crate) fn log_filter(&self) -> String {
        self.log
            .clone()
            .or_else(|| std::env::var("RUST_LOG").ok().filter(|v| !v.is_empty()))
            .unwrap_or_else(|| "info".to_owned())
    }
}

/// The text after the options in `--help`.
fn after_help() -> String {
    let schemes = storage_url::schemes_help()
        .lines()
        .map(|line| format!("  {line}"))
        .collect::<Vec<_>>()
        .join("\n");
    after_help_with(&format!(
        "Storage URLs built into this vvm-host (others need a cargo feature):\n{schemes}"
    ))
}

/// The same text for the man page, which must not depend on the cargo
/// features of the build that renders it.
pub(crate) fn man_after_help() -> String {
    after_help_with(
        "Storage URLs: mem and redb:///path/file.redb always; with cargo features:\n  scylla:// cassandra:// (scylla), dynamodb:// (dynamodb),\n  redis:// rediss:// valkey:// valkeys:// (valkey), postgres:// (postgres),\n  etcd:// etcds:// (etcd). `vvm-host run --help` lists those of a build.",
    )
}

fn after_help_with(storage_urls: &str) -> String {
    format!(
        "\
`vvm-host status NAME` shows who holds the lock (read only).

{storage_urls}

The command starts once leadership is acquired, under a small guard process
(vvm-host-guard), contained (--containment), with VVM_HOST_KEY,
VVM_HOST_KEY_INDEX and VVM_HOST_FENCING_TOKEN set. SIGINT, SIGTERM, SIGHUP,
SIGQUIT or a leadership loss stop it: SIGTERM to every process of the job,
SIGKILL after the grace period; leadership is released only once the job is
empty (a process stuck in uninterruptible sleep keeps the lease, renewed,
until it is gone). If vvm-host dies in any other way (SIGKILL, the OOM
killer), the guard kills the whole job at once. If the lease may run out
first (the store hangs, or the command outlives its grace period after a
loss), the killer SIGKILLs the whole job at 0.8 x the leadership duration
after the last renewal, and vvm-host exits 123. A guard that does not answer
(stopped) by the end of the grace period: vvm-host ends the job itself and
exits 125.

Exit status: the command's own when it exits by itself (128+N if killed by
signal N, 126/127 if it could not be started); 0 after a clean shutdown by
signal; 2 on bad options; 123 leadership lost (--exit-code-lost); 124 no
leadership acquired in time (--exit-code-no-leadership); 125 error of
vvm-host itself, e.g. storage (--exit-code-error)."
    )
}

/// Why the options do not make a VVM configuration.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ArgsError {
    #[error("cannot determine the host name for --address: {0}")]
    HostName(String),
    #[error("invalid options: {0}")]
    Config(#[from] vvm_orch::ConfigError),
    #[error("invalid exit codes: {0}")]
    ExitCodes(String),
}

impl Args {
    /// vvm-host's own exit statuses, validated.
    pub(crate) fn exit_codes(&self) -> Result<ExitCodes, ArgsError> {
        ExitCodes {
            lost: self.exit_code_lost,
            no_leadership: self.exit_code_no_leadership,
            error: self.exit_code_error,
        }
        .validate()
        .map_err(ArgsError::ExitCodes)
    }

    /// The VVM configuration these options describe, validated.
    /// Whether one acquisition round is all (`--no-wait`,
    /// `--acquisition-duration 0s`).
    pub(crate) fn tries_once(&self) -> bool {
        self.no_wait || self.acquisition_duration.is_zero()
    }

    pub(crate) fn vvm_config(&self) -> Result<VvmConfig, ArgsError> {
        let address = match &self.address {
            Some(address) => address.clone(),
            None => host_name()?,
        };
        let mut config = self.store.config(address);
        config.leadership_duration = self.leadership_duration;
        config.acquisition_duration = self.acquisition_duration;
        config.acquisition_retry_pause = self.retry_pause;
        config.priority = self.priority;
        config.preempt_after = self.preempt_after;
        config.min_tenure = self.min_tenure;
        if self.tries_once() {
            // one round: the deadline has passed when it ends
            config.acquisition_duration = Duration::from_nanos(1);
            config.acquisition_retry_pause = Duration::from_nanos(1);
        }
        config.validate()?;
        Ok(config)
    }
}

fn host_name() -> Result<String, ArgsError> {
    let name = nix::unistd::gethostname().map_err(|e| ArgsError::HostName(e.to_string()))?;
    name.into_string()
        .map_err(|name| ArgsError::HostName(format!("not UTF-8: {name:?}")))
}

/// `forever` (never give up) or a duration.
fn parse_acquisition(text: &str) -> Result<Duration, String> {
    match text.trim() {
        "forever" | "infinite" => Ok(vvm_orch::ACQUIRE_FOREVER),
        other => parse_duration(other),
    }
}

/// An `IP:PORT` listen address (host names are refused: say which interface).
pub(crate) fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    text.trim().parse().map_err(|_| {
        format!("{text:?} is not an IP:PORT listen address (examples: 127.0.0.1:9187, [::1]:9187, 0.0.0.0:9187)")
    })
}

/// A lease length: positive, in whole seconds (every store keeps TTLs in
/// seconds: the storage contract, `ttl_storage::Ttl`).
fn parse_lease(text: &str) -> Result<Duration, String> {
    let duration = parse_positive(text)?;
    if duration.subsec_nanos() != 0 {
        let up = Duration::from_secs(duration.as_secs() + 1);
        return Err(format!(
            "{text:?}: leases are kept in whole seconds by every store (the storage contract); use e.g. {}",
            humantime::format_duration(up)
        ));
    }
    Ok(duration)
}

/// A positive duration.
pub(crate) fn parse_positive(text: &str) -> Result<Duration, String> {
    let duration = parse_duration(text)?;
    if duration.is_zero() {
        return Err(format!("{text:?}: must be positive"));
    }
    Ok(duration)
}

/// Parses a duration with `humantime` (`1500ms`, `20s`, `2m`, `1h 30m`),
/// or a bare number of seconds.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if let Ok(seconds) = text.parse::<u64>() {
        return Ok(Duration::from_secs(seconds));
    }
    if text.starts_with('-') {
        return Err(format!("{text:?}: must be positive"));
    }
    humantime::parse_duration(text)
        .map_err(|err| format!("{text:?} is not a duration (examples: 500ms, 20s, 2m, 1h): {err}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_args(args: &[&str]) -> Result<Args, clap::Error> {
        let all = ["vvm-host", "run"].iter().chain(args);
        match Cli::try_parse_from(all)?.command {
            Command::Run(args) => Ok(*args),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("20s"), Ok(Duration::from_secs(20)));
        assert_eq!(parse_duration("20"), Ok(Duration::from_secs(20)));
        assert_eq!(parse_duration("1500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1m 30s"), Ok(Duration::from_secs(90)));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_lease("0s").unwrap_err().contains("must be positive"));
        assert!(parse_lease("-1s").unwrap_err().contains("must be positive"));
        let fractional = parse_lease("1500ms").unwrap_err();
        assert!(
            fractional.contains("whole seconds") && fractional.contains("2s"),
            "{fractional}"
        );
    }

    #[test]
    fn metrics_listen_takes_ip_and_port_only() {
        let args = run_args(&["--metrics-listen", "127.0.0.1:0", "job", "true"]).unwrap();
        assert_eq!(args.metrics_listen, Some("127.0.0.1:0".parse().unwrap()));
        assert_eq!(run_args(&["job", "true"]).unwrap().metrics_listen, None);
        for bad in ["localhost:9187", "127.0.0.1", "9187", "1.2.3.4:99999", ""] {
            let err = run_args(&["--metrics-listen", bad, "job", "true"]).unwrap_err();
            assert!(err.to_string().contains("IP:PORT"), "{bad}: {err}");
        }
    }

    #[test]
    fn a_name_and_a_command_with_or_without_the_double_dash() {
        let plain = run_args(&["job", "sleep", "10"]).unwrap();
        assert_eq!(plain.store.name, "job");
        assert_eq!(plain.command, ["sleep", "10"]);
        assert_eq!(plain.store.key_prefix(), "job/");
        let dashed = run_args(&["job", "--", "sleep", "-x"]).unwrap();
        assert_eq!(dashed.command, ["sleep", "-x"]);
        // Options after the command belong to the command.
        let late = run_args(&["job", "cmd", "--grace-period", "1s"]).unwrap();
        assert_eq!(late.command, ["cmd", "--grace-period", "1s"]);
        assert!(run_args(&["job"]).is_err(), "no command");
        assert!(run_args(&[]).is_err(), "no name");
        assert!(run_args(&["__fencing__", "true"]).is_err());
        let prefixed = run_args(&["--key-prefix", "vvm/leader/", "job", "true"]).unwrap();
        assert_eq!(prefixed.store.key_prefix(), "vvm/leader/");
    }

    #[test]
    fn options_make_a_validated_config() {
        let args = run_args(&[
            "--address",
            "node-1",
            "--cluster-size",
            "3",
            "--leadership-duration",
            "4s",
            "job",
            "--",
            "sleep",
            "10",
        ])
        .unwrap();
        let config = args.vvm_config().unwrap();
        assert_eq!(config.cluster_size, 3);
        assert_eq!(config.leadership_duration, Duration::from_secs(4));
        assert_eq!(config.key(2).unwrap().as_str(), "job/2");
        // A standby waits as long as it takes unless told otherwise.
        assert_eq!(config.acquisition_duration, vvm_orch::ACQUIRE_FOREVER);
        assert!(run_args(&["--leadership-duration", "1500ms", "job", "true"]).is_err());
        assert!(run_args(&["--cluster-size", "0", "job", "true"]).is_err());
        assert!(run_args(&["--storage", "nope://x", "job", "true"]).is_err());
    }
}
