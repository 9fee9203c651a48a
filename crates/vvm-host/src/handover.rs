//! `vvm-host handover`: asks the node that holds a lock to hand it to a
//! waiting candidate, for a rolling deploy.
//!
//! ```text
//! vvm-host handover [--storage URL] [--to ADDRESS] [--index I] [--timeout 30s] NAME
//! ```
//!
//! The request goes through the store ([`vvm_orch::handover`]), addressed
//! to the leadership that holds the key now: the leader sees it at once
//! where the driver watches, within `min(d/4, 1 s)` otherwise; it accepts
//! it (from then on it cannot be withdrawn), stops its command, reserves
//! the lease for the candidate, and answers. This program then waits until
//! the successor leads. What it prints is what happened: from the answer,
//! or, when none comes, from the lease itself.

use std::{
    process::ExitCode,
    time::{Duration, Instant},
};

use ttl_storage::DynTtlStorage;
use vvm_orch::handover::{
    self, Addressed, Answer, Request, Requester, State, StoreOutcome, Withdrawal,
};

use crate::store::{NoStore, StoreArgs, open_existing};

/// Exit status when the key has no leader.
const NO_LEADER: u8 = 3;
/// Exit status when the store does not exist (nothing was created).
const NO_STORE: u8 = 4;
/// Exit status when no candidate waits (or none with `--to`'s address):
/// nothing was stopped.
const NO_CANDIDATE: u8 = 5;
/// Exit status when `--timeout` passed before the leader began: the
/// request was withdrawn, nothing was stopped.
const WITHDRAWN: u8 = 6;
/// Exit status when another hand-over request is pending.
const BUSY: u8 = 7;
/// Exit status when `--timeout` passed after the leader began the
/// hand-over: it goes on (or the successor had not led yet).
const UNDER_WAY: u8 = 8;

/// How often the request's state and the successor are looked for.
const POLL: Duration = Duration::from_millis(20);

/// How long a store that fails is retried before the outcome is reported
/// as unknown.
const STORE_PATIENCE: Duration = Duration::from_secs(10);

/// How long a requester that learned the outcome from the lease waits for
/// the leader's answer, to clear the record (the leader answers right after
/// the successor can take the lease).
const ANSWER_GRACE: Duration = Duration::from_secs(2);

/// `vvm-host handover --help`'s closing text.
pub(crate) const AFTER_HELP: &str = "\
The request names the leadership that holds NAME now; a later leader
ignores it. The leader first accepts it (from then on it cannot be
withdrawn), stops its command (as on shutdown: SIGTERM, the grace period,
then SIGKILL), then reserves the lease for the candidate, which starts its
command with a larger fencing token; the old leader's vvm-host exits 0.
Candidates are the nodes waiting in `vvm-host run` for this NAME
(`vvm-host status NAME` lists them); with --to, only that candidate: if it
has gone, the request is refused and nothing is stopped.

Exit status: 0 the successor leads; 3 the key has no leader; 4 the store
does not exist (nothing was created); 5 no candidate waits (or none with
--to's address): nothing was stopped, the leader keeps leading; 6 --timeout
passed before the leader began: the request was withdrawn, nothing was
stopped; 7 another hand-over request is pending; 8 --timeout passed after
the leader began the hand-over (it goes on; the successor had not led
yet); 2 bad options; 125 the store cannot be read or written, the leader
could not read the candidates (nothing was stopped), or it stopped its
command and released the lock instead of handing over (the candidate left,
the command did not stop within a lease).

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
    #[arg(long, default_value = "30s", value_parser = crate::cli::parse_positive)]
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
            eprintln!("vvm-host handover: {}", crate::error_text::chain(&err));
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
    let requester = Requester::new(storage.clone(), &config, args.index)?;
    let Some(leader) = requester.leader().await? else {
        eprintln!("vvm-host handover: {key} has no leader");
        return Ok(NO_LEADER);
    };
    // Refused here when nobody waits, without bothering the leader (it
    // checks again: a candidate may leave meanwhile).
    let status = elections::inspect(&*storage, &key).await?;
    let asking = Asking {
        args,
        storage: &storage,
        key: &key,
        requester: &requester,
        leader: String::from_utf8_lossy(&leader.value).into_owned(),
        token_before: status.latest_fencing_token,
    };
    if !status.candidates.iter().any(|c| {
        args.to
            .as_deref()
            .is_none_or(|to| handover::matches(&c.value, to))
    }) {
        asking.no_candidate();
        return Ok(NO_CANDIDATE);
    }
    asking.ask(&leader).await
}

/// One hand-over request, from posting it to its outcome.
struct Asking<'a> {
    args: &'a HandoverArgs,
    storage: &'a DynTtlStorage,
    key: &'a ttl_storage::Key,
    requester: &'a Requester,
    /// The leader addressed (its value).
    leader: String,
    /// The latest fencing token before the request: the successor leads
    /// once the record names it *and* it took a larger token (between its
    /// write and its token the record already names it).
    token_before: Option<u64>,
}

impl Asking<'_> {
    async fn ask(&self, leader: &Addressed) -> anyhow::Result<u8> {
        let request = Request::new(leader, self.args.to.as_deref());
        if !self.requester.post(&request, self.args.timeout).await? {
            eprintln!(
                "vvm-host handover: another hand-over request for {} is pending; try again in a moment",
                self.key
            );
            return Ok(BUSY);
        }
        let deadline = Instant::now() + self.args.timeout;
        let mut accepted: Option<String> = None;
        let mut failing_since: Option<Instant> = None;
        loop {
            let state = match self.requester.state(&request).await {
                Ok(state) => {
                    failing_since = None;
                    state
                }
                Err(err) => {
                    let since = *failing_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= STORE_PATIENCE {
                        return Err(anyhow::Error::new(err).context(
                            "the request's state cannot be read; it may still be served",
                        ));
                    }
                    tokio::time::sleep(POLL).await;
                    continue;
                }
            };
            let timed_out = Instant::now() >= deadline;
            match state {
                State::Answered(answer) => {
                    self.requester.done(&request).await;
                    return self.answered(answer, deadline).await;
                }
                State::Pending if timed_out => return self.give_up(&request, deadline).await,
                State::Pending => {}
                State::Accepted { to } => {
                    if accepted.is_none() {
                        eprintln!(
                            "vvm-host handover: {} accepted the request: stopping its command, then handing over to {to}",
                            self.leader
                        );
                    }
                    if let Some(code) = self.store_says(&request, &to, timed_out).await? {
                        // clears the record so the next request is not
                        // refused as pending until it expires
                        let _ = self.await_answer(&request).await;
                        return Ok(code);
                    }
                    accepted = Some(to);
                }
                State::Gone => {
                    return Ok(match &accepted {
                        Some(to) => self
                            .store_says(&request, to, true)
                            .await?
                            .unwrap_or(UNDER_WAY),
                        None => {
                            eprintln!(
                                "vvm-host handover: the request is gone before {} served it (the lock changed hands meanwhile); nothing was done by it",
                                self.leader
                            );
                            crate::exit::DEFAULT_ERROR
                        }
                    });
                }
                _ => {}
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// `--timeout` passed with the request pending: withdraw it. Either the
    /// withdrawal wins (nothing happens) or the leader had begun, and what
    /// it began is reported.
    async fn give_up(&self, request: &Request, deadline: Instant) -> anyhow::Result<u8> {
        let timeout = humantime::format_duration(self.args.timeout);
        let started = Instant::now();
        let withdrawal = loop {
            match self.requester.withdraw(request).await {
                Ok(withdrawal) => break withdrawal,
                Err(err) if started.elapsed() < STORE_PATIENCE => {
                    tracing::debug!(error = %err, "withdrawing the request failed; retrying");
                    tokio::time::sleep(POLL).await;
                }
                Err(err) => {
                    return Err(anyhow::Error::new(err).context(format!(
                        "{} did not answer within {timeout}, and the request could not be withdrawn: it may still be served",
                        self.leader
                    )));
                }
            }
        };
        match withdrawal {
            Withdrawal::Withdrawn => {
                eprintln!(
                    "vvm-host handover: {} did not answer within {timeout}; the request was withdrawn and nothing was stopped",
                    self.leader
                );
                Ok(WITHDRAWN)
            }
            Withdrawal::TooLate(State::Answered(answer)) => {
                self.requester.done(request).await;
                self.answered(answer, deadline).await
            }
            Withdrawal::TooLate(State::Accepted { to }) => {
                eprintln!(
                    "vvm-host handover: too late to withdraw: {} had accepted the request and is handing over to {to}",
                    self.leader
                );
                Ok(self
                    .store_says(request, &to, true)
                    .await?
                    .unwrap_or(UNDER_WAY))
            }
            Withdrawal::TooLate(other) => {
                eprintln!("vvm-host handover: unexpected request state {other:?}");
                Ok(crate::exit::DEFAULT_ERROR)
            }
            other => {
                eprintln!("vvm-host handover: unexpected withdrawal {other:?}");
                Ok(crate::exit::DEFAULT_ERROR)
            }
        }
    }

    /// The outcome of the request accepted for `to`, as the lease says:
    /// `Some(status)` when it is decided, or when `last` (the time is up);
    /// `None` while it is under way.
    async fn store_says(
        &self,
        request: &Request,
        to: &str,
        last: bool,
    ) -> anyhow::Result<Option<u8>> {
        match self.requester.outcome_from_store(request, to).await? {
            StoreOutcome::HandedOver => {
                self.led(to).await?;
                Ok(Some(0))
            }
            StoreOutcome::Ended { leader } => {
                // the leader's own answer says why (the candidate left, …):
                // said instead of the store's view when it comes in time
                if let Some(answer) = self.await_answer(request).await {
                    return self.answered(answer, Instant::now()).await.map(Some);
                }
                let now = leader.map_or_else(
                    || "nobody leads now".to_owned(),
                    |l| format!("{} leads now", String::from_utf8_lossy(&l)),
                );
                eprintln!(
                    "vvm-host handover: {} stepped down without handing over to {to} ({now})",
                    self.leader
                );
                Ok(Some(crate::exit::DEFAULT_ERROR))
            }
            StoreOutcome::InProgress if last => {
                eprintln!(
                    "vvm-host handover: {} began the hand-over to {to}; it had not finished within {}",
                    self.leader,
                    humantime::format_duration(self.args.timeout)
                );
                Ok(Some(UNDER_WAY))
            }
            _ => Ok(None),
        }
    }

    /// The leader's answer to `request`, waited for up to [`ANSWER_GRACE`]
    /// while the request is accepted; the record is cleared once read.
    /// `None` when no answer came in time (a leader that died before
    /// answering leaves the record to expire) or the record is gone.
    async fn await_answer(&self, request: &Request) -> Option<Answer> {
        let started = Instant::now();
        while started.elapsed() < ANSWER_GRACE {
            match self.requester.state(request).await {
                Ok(State::Answered(answer)) => {
                    self.requester.done(request).await;
                    return Some(answer);
                }
                Ok(State::Accepted { .. }) | Err(_) => tokio::time::sleep(POLL).await,
                Ok(_) => return None,
            }
        }
        tracing::debug!("no answer within {ANSWER_GRACE:?}; the request record expires by itself");
        None
    }

    /// Reports the leader's answer.
    async fn answered(&self, answer: Answer, deadline: Instant) -> anyhow::Result<u8> {
        match answer {
            Answer::HandedOver(successor) => self.wait_for(&successor, deadline).await,
            Answer::NoCandidate => {
                self.no_candidate();
                Ok(NO_CANDIDATE)
            }
            Answer::Failed(why) => {
                eprintln!(
                    "vvm-host handover: {} could not serve the request ({why}); nothing was stopped, it keeps leading",
                    self.leader
                );
                Ok(crate::exit::DEFAULT_ERROR)
            }
            Answer::Released(why) => {
                eprintln!(
                    "vvm-host handover: {} stopped its command and released the lock instead of handing over ({why})",
                    self.leader
                );
                Ok(crate::exit::DEFAULT_ERROR)
            }
            other => {
                eprintln!("vvm-host handover: unexpected answer {other:?}");
                Ok(crate::exit::DEFAULT_ERROR)
            }
        }
    }

    fn no_candidate(&self) {
        match &self.args.to {
            Some(to) => eprintln!(
                "vvm-host handover: no candidate with address {to} waits; {} keeps leading",
                self.leader
            ),
            None => eprintln!(
                "vvm-host handover: no candidate waits; {} keeps leading",
                self.leader
            ),
        }
    }

    /// Waits until `successor` leads (at most until `deadline`).
    async fn wait_for(&self, successor: &str, deadline: Instant) -> anyhow::Result<u8> {
        loop {
            if self.led(successor).await? {
                return Ok(0);
            }
            if Instant::now() >= deadline {
                eprintln!(
                    "vvm-host handover: {} handed over to {successor}, which did not lead within {} (anyone may take the key once the reservation expires)",
                    self.leader,
                    humantime::format_duration(self.args.timeout)
                );
                return Ok(UNDER_WAY);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Prints the change and returns true when `successor` leads.
    async fn led(&self, successor: &str) -> anyhow::Result<bool> {
        let now = elections::inspect(&**self.storage, self.key).await?;
        if now.leader.as_deref() != Some(successor.as_bytes()) {
            return Ok(false);
        }
        let Some(token) = now
            .latest_fencing_token
            .filter(|t| Some(*t) > self.token_before)
        else {
            return Ok(false);
        };
        println!(
            "{}: handed over from {} to {successor} (fencing token {token})",
            self.key, self.leader
        );
        Ok(true)
    }
}
