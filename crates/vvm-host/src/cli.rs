//! Command-line options (each also read from an environment variable).

use std::{ffi::OsString, net::SocketAddr, time::Duration};

use clap::Parser;
use storage_url::StorageUrl;
use vvm_orch::{DEFAULT_KEY_PREFIX, MAX_CLUSTER_SIZE, VvmConfig};

use crate::exit::{self, ExitCodes};

/// Run a command only while this node leads: one of `--cluster-size` keys
/// in a shared storage is held for it, renewed, and released after the
/// command has stopped.
#[derive(Debug, Parser)]
#[command(
    after_help = after_help(),
    name = "vvm-host",
    version,
)]
pub(crate) struct Args {
    /// Where the leadership records live, and which keys.
    #[command(flatten)]
    pub(crate) store: StoreArgs,

    /// This node's address, written to the leadership record (default: the host name).
    #[arg(long, env = "VVM_HOST_ADDRESS")]
    pub(crate) address: Option<String>,

    /// Lease length (whole seconds): a crashed leader is replaced after at most this.
    #[arg(long, env = "VVM_HOST_LEADERSHIP_DURATION", default_value = "20s", value_parser = parse_duration)]
    pub(crate) leadership_duration: Duration,

    /// Give up (exit 124, see --exit-code-no-leadership) if no key could be
    /// acquired within this time. Default: wait as long as it takes, as a
    /// standby should.
    #[arg(long, env = "VVM_HOST_ACQUISITION_DURATION", default_value = "forever", value_parser = parse_acquisition)]
    pub(crate) acquisition_duration: Duration,

    /// Pause between two acquisition rounds.
    #[arg(long, env = "VVM_HOST_RETRY_PAUSE", default_value = "1s", value_parser = parse_duration)]
    pub(crate) retry_pause: Duration,

    /// Time the command gets between SIGTERM and SIGKILL.
    #[arg(long, env = "VVM_HOST_GRACE_PERIOD", default_value = "10s", value_parser = parse_duration)]
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

    /// Log filter (tracing-subscriber syntax), e.g. `info` or `vvm_orch=debug`.
    #[arg(long, env = "VVM_HOST_LOG", default_value = "info")]
    pub(crate) log: String,

    /// Exit status when leadership is lost (also after the killer ended the command).
    #[arg(long, env = "VVM_HOST_EXIT_CODE_LOST", default_value_t = exit::DEFAULT_LOST)]
    pub(crate) exit_code_lost: u8,

    /// Exit status when no leadership was acquired within --acquisition-duration.
    #[arg(long, env = "VVM_HOST_EXIT_CODE_NO_LEADERSHIP", default_value_t = exit::DEFAULT_NO_LEADERSHIP)]
    pub(crate) exit_code_no_leadership: u8,

    /// Exit status on errors of vvm-host itself (storage, runtime).
    #[arg(long, env = "VVM_HOST_EXIT_CODE_ERROR", default_value_t = exit::DEFAULT_ERROR)]
    pub(crate) exit_code_error: u8,

    /// The command to run while leading, after `--`.
    #[arg(last = true, value_name = "COMMAND")]
    pub(crate) command: Vec<OsString>,
}

/// The options `vvm-host` and `vvm-host status` share: the storage and the keys.
#[derive(Debug, clap::Args)]
pub(crate) struct StoreArgs {
    /// Storage URL (see "Storage URLs" below). Default: a redb file under
    /// $XDG_DATA_HOME/vvm-host/ (~/.local/share).
    #[arg(long, env = "VVM_HOST_STORAGE", value_name = "URL")]
    pub(crate) storage: Option<StorageUrl>,

    /// Number of nodes that may lead at once (keys 1..=N are tried in turn).
    #[arg(
        long,
        env = "VVM_HOST_CLUSTER_SIZE",
        default_value_t = 1,
        value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_CLUSTER_SIZE)),
    )]
    pub(crate) cluster_size: u32,

    /// Prefix of the leadership keys; use one per job sharing a storage.
    #[arg(long, env = "VVM_HOST_KEY_PREFIX", default_value = DEFAULT_KEY_PREFIX)]
    pub(crate) key_prefix: String,
}

impl StoreArgs {
    /// A configuration naming these keys (for `address`).
    pub(crate) fn config(&self, address: String) -> VvmConfig {
        let mut config = VvmConfig::new(address);
        config.cluster_size = self.cluster_size;
        config.key_prefix = self.key_prefix.clone();
        config
    }
}

/// The text after the options in `--help`.
fn after_help() -> String {
    format!(
        "\
Without COMMAND, a demo service logs the key it leads once a second.
`vvm-host status [--storage URL] [--json]` shows who leads (read only).

Storage URLs built into this vvm-host (others need a cargo feature):
{}

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
vvm-host itself, e.g. storage (--exit-code-error).",
        storage_url::schemes_help()
            .lines()
            .map(|line| format!("  {line}"))
            .collect::<Vec<_>>()
            .join("\n")
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
    pub(crate) fn vvm_config(&self) -> Result<VvmConfig, ArgsError> {
        let address = match &self.address {
            Some(address) => address.clone(),
            None => host_name()?,
        };
        let mut config = self.store.config(address);
        config.leadership_duration = self.leadership_duration;
        config.acquisition_duration = self.acquisition_duration;
        config.acquisition_retry_pause = self.retry_pause;
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

/// Parses a duration with `humantime` (`1500ms`, `20s`, `2m`, `1h 30m`),
/// or a bare number of seconds.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if let Ok(seconds) = text.parse::<u64>() {
        return Ok(Duration::from_secs(seconds));
    }
    humantime::parse_duration(text)
        .map_err(|err| format!("{text:?} is not a duration (examples: 500ms, 20s, 2m, 1h): {err}"))
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }

    #[test]
    fn metrics_listen_takes_ip_and_port_only() {
        let args = Args::parse_from(["vvm-host", "--metrics-listen", "127.0.0.1:0"]);
        assert_eq!(args.metrics_listen, Some("127.0.0.1:0".parse().unwrap()));
        assert_eq!(Args::parse_from(["vvm-host"]).metrics_listen, None);
        for bad in ["localhost:9187", "127.0.0.1", "9187", "1.2.3.4:99999", ""] {
            let err = Args::try_parse_from(["vvm-host", "--metrics-listen", bad]).unwrap_err();
            assert!(err.to_string().contains("IP:PORT"), "{bad}: {err}");
        }
    }

    #[test]
    fn options_make_a_validated_config() {
        let args = Args::parse_from([
            "vvm-host",
            "--address",
            "node-1",
            "--cluster-size",
            "3",
            "--leadership-duration",
            "4s",
            "--",
            "sleep",
            "10",
        ]);
        let config = args.vvm_config().unwrap();
        assert_eq!(config.cluster_size, 3);
        assert_eq!(config.leadership_duration, Duration::from_secs(4));
        // A standby waits as long as it takes unless told otherwise.
        assert_eq!(config.acquisition_duration, vvm_orch::ACQUIRE_FOREVER);
        assert_eq!(args.command, ["sleep", "10"]);

        let bad = Args::parse_from([
            "vvm-host",
            "--address",
            "n",
            "--leadership-duration",
            "1500ms",
        ]);
        assert!(matches!(bad.vvm_config(), Err(ArgsError::Config(_))));
        assert!(Args::try_parse_from(["vvm-host", "--cluster-size", "0"]).is_err());
        assert!(Args::try_parse_from(["vvm-host", "--storage", "nope://x"]).is_err());
    }
}
