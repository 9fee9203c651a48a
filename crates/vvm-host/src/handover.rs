//! `vvm-host handover`: asks the node that holds a lock to hand it to a
//! waiting candidate, for a rolling deploy.
//!
//! ```text
//! vvm-host handover [--storage URL] [--to ADDRESS] [--index I] [--timeout 30s] NAME
//! ```
//!
//! The request goes through the store ([`vvm_orch::handover`]): the leader
//! sees it at once where the driver watches, within `min(d/4, 1 s)`
//! otherwise; it stops its command, reserves the lease for the candidate,
//! and answers. This program then waits until the successor leads.

use std::{
    process::ExitCode,
    time::{Duration, Instant},
};

use ttl_storage::DynTtlStorage;
use vvm_orch::handover::{self, Answer, Request, Requester};

use crate::store::{NoStore, StoreArgs, open_existing};

/// Exit status when the key has no leader.
const NO_LEADER: u8 = 3;
/// Exit status when the store does not exist (nothing was created).
const NO_STORE: u8 = 4;
/// Exit status when no candidate waits (or none with `--to`'s address).
const NO_CANDIDATE: u8 = 5;
/// Exit status when the successor did not lead within `--timeout`.
const TIMED_OUT: u8 = 6;
/// Exit status when another hand-over request is pending.
const BUSY: u8 = 7;

/// How often the request's answer and the successor are looked for.
const POLL: Duration = Duration::from_millis(20);

/// `vvm-host handover --help`'s closing text.
pub(crate) const AFTER_HELP: &str = "\
The leader stops its command (as on shutdown: SIGTERM, the grace period,
then SIGKILL), then reserves the lease for the candidate, which starts its
command with a larger fencing token; the old leader's vvm-host exits 0.
Candidates are the nodes waiting in `vvm-host run` for this NAME
(`vvm-host status NAME` lists them).

Exit status: 0 the successor leads; 3 the key has no leader; 4 the store
does not exist (nothing was created); 5 no candidate
waits (or none with --to's address): the leader keeps leading; 6 --timeout
passed (an unanswered request is withdrawn); 7 another hand-over request is
pending; 2 bad options; 125 the store cannot be read or written, or the
leader released the lock instead (its services did not stop in time, or the
candidate left).

Storage URLs: as for `vvm-host run` (see `vvm-host run --help`).";

/// `vvm-host handover`'s options.
#[derive(Debug, clap::Args)]
pub(crate) struct HandoverArgs {
    #[command(flatten)]
    store: StoreArgs,

    /// The candidate to hand over to: its address (`vvm-host run
    /// --address`, the host name by default). Default: the candidate that
    /// has waited longest.
    #[arg(long, value_name = "ADDRESS")]
    to: Option<String>,

    /// Which key of the --cluster-size keys NAME/1..=N to hand over.
    #[arg(long, default_value_t = 1, value_name = "I")]
    index: u32,

    /// Give up when the successor does not lead within this time.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    timeout: Duration,
}

/// Runs `vvm-host handover`.
pub(crate) fn main(args: &HandoverArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("vvm-host handover: cannot start the async runtime: {err}");
            return ExitCode::from(crate::exit::DEFAULT_ERROR);
        }
    };
    match runtime.block_on(run(args)) {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            eprintln!("vvm-host handover: {err:#}");
            if err.is::<NoStore>() {
                ExitCode::from(NO_STORE)
            } else {
                ExitCode::from(crate::exit::DEFAULT_ERROR)
            }
        }
    }
}

async fn run(args: &HandoverArgs) -> anyhow::Result<u8> {
    let config = args.store.config("handover".to_owned());
    config.validate()?;
    if args.index == 0 || args.index > config.cluster_size {
        eprintln!(
            "vvm-host handover: --index {} is not one of the keys 1..={} (--cluster-size)",
            args.index, config.cluster_size
        );
        return Ok(2);
    }
    let storage = open_existing(&args.store).await?;
    let key = config.key(args.index)?;
    let before = elections::inspect(&*storage, &key).await?;
    let Some(leader) = before.leader else {
        eprintln!("vvm-host handover: {key} has no leader");
        return Ok(NO_LEADER);
    };
    let leader = String::from_utf8_lossy(&leader).into_owned();
    // The same match as the leader's (`vvm_orch::handover::address_of`).
    let wanted = |value: &[u8]| {
        args.to
            .as_deref()
            .is_none_or(|to| value == to.as_bytes() || handover::address_of(value) == to.as_bytes())
    };
    if !before.candidates.iter().any(|c| wanted(&c.value)) {
        no_candidate(args, &leader);
        return Ok(NO_CANDIDATE);
    }
    let requester = Requester::new(storage.clone(), &config, args.index)?;
    let request = Request::new(args.to.as_deref());
    if !requester.post(&request).await? {
        eprintln!(
            "vvm-host handover: another hand-over request for {key} is pending; try again in a moment"
        );
        return Ok(BUSY);
    }
    let deadline = Instant::now() + args.timeout;
    let answer = loop {
        if let Some(answer) = requester.answer(&request).await? {
            break answer;
        }
        if Instant::now() >= deadline {
            let withdrawn = requester.withdraw(&request).await;
            eprintln!(
                "vvm-host handover: {leader} did not answer within {}{}",
                humantime::format_duration(args.timeout),
                if matches!(withdrawn, Ok(true)) {
                    " (request withdrawn)"
                } else {
                    ""
                }
            );
            return Ok(TIMED_OUT);
        }
        tokio::time::sleep(POLL).await;
    };
    let successor = match answer {
        Answer::HandedOver(successor) => successor,
        Answer::NoCandidate => {
            no_candidate(args, &leader);
            return Ok(NO_CANDIDATE);
        }
        Answer::Released(why) => {
            eprintln!("vvm-host handover: {leader} released the lock instead ({why})");
            return Ok(crate::exit::DEFAULT_ERROR);
        }
        other => {
            eprintln!("vvm-host handover: unexpected answer {other:?}");
            return Ok(crate::exit::DEFAULT_ERROR);
        }
    };
    wait_for(&storage, &key, &successor, deadline, args.timeout, &leader).await
}

fn no_candidate(args: &HandoverArgs, leader: &str) {
    match &args.to {
        Some(to) => eprintln!(
            "vvm-host handover: no candidate with address {to} waits; {leader} keeps leading"
        ),
        None => eprintln!("vvm-host handover: no candidate waits; {leader} keeps leading"),
    }
}

/// Waits until `successor` leads `key`; prints the change.
async fn wait_for(
    storage: &DynTtlStorage,
    key: &ttl_storage::Key,
    successor: &str,
    deadline: Instant,
    timeout: Duration,
    leader: &str,
) -> anyhow::Result<u8> {
    loop {
        let now = elections::inspect(&**storage, key).await?;
        if now.leader.as_deref() == Some(successor.as_bytes()) {
            let token = now
                .latest_fencing_token
                .map_or_else(|| "-".to_owned(), |t| t.to_string());
            println!("{key}: handed over from {leader} to {successor} (fencing token {token})");
            return Ok(0);
        }
        if Instant::now() >= deadline {
            eprintln!(
                "vvm-host handover: {leader} handed over to {successor}, which did not lead within {} (anyone may take the key once the reservation expires)",
                humantime::format_duration(timeout)
            );
            return Ok(TIMED_OUT);
        }
        tokio::time::sleep(POLL).await;
    }
}
