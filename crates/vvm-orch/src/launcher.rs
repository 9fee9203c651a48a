//! The Launcher and the task that runs the ServicePipeline (the
//! LeadershipMonitor is in [`crate::monitor`]).

use std::{any::Any, panic::AssertUnwindSafe, sync::Arc, time::Duration};

use elections::{ElectionsError, Leadership, Standby};
use futures::FutureExt;
use tokio::time::Instant;
use tracing::Instrument;
use ttl_storage::{ErrorKind, Key};

use crate::{
    LeaderInfo, ServiceContext, ServicePipeline, VvmProblem, VvmStatus, cluster_size,
    monitor::monitor, shutdown::Shared,
};

/// Longest time an interrupted acquisition spends withdrawing its record.
const WITHDRAW_LIMIT: Duration = Duration::from_secs(1);

/// Tries keys `1..=cluster_size` in rounds until one is acquired, the
/// acquisition duration runs out, or shutdown begins.
///
/// Between rounds it pauses for `acquisition_retry_pause`, but wakes at once
/// when the storage reports that one of the keys may have been released
/// (deleted or expired, [`ttl_storage::TtlStorage::watch`]); storages
/// without that capability are polled.
pub(crate) async fn run<P: ServicePipeline>(shared: Arc<Shared>, pipeline: P) {
    let config = &shared.config;
    // `None`: keep trying until shutdown (`ACQUIRE_FOREVER`, or any duration
    // too long to add to the clock).
    let deadline = Instant::now().checked_add(config.acquisition_duration);
    let mut last_error: Option<String> = None;
    let mut round: u64 = 0;
    // One standing candidacy per key: listed by `vvm-host status`, and the
    // one a leader's hand-over names and this launcher then takes.
    // Every leadership holds the cluster-size claim, renewed with the lease.
    let mut standbys = Vec::new();
    for index in 1..=config.cluster_size {
        let standby = config
            .key(index)
            .and_then(|key| Ok((key, cluster_size::claim(config)?)))
            .map_err(ElectionsError::Invalid)
            .and_then(|(key, claim)| {
                shared
                    .elections
                    .stand_by(&key, shared.value.as_bytes(), config.leadership_duration)
                    .map(|standby| standby.with_claim(claim).with_priority(config.priority))
            });
        match standby {
            Ok(standby) => standbys.push((index, standby)),
            Err(err) => {
                // Unreachable after validation; reported rather than panicking.
                shared.fail(VvmProblem::Elections(err));
                return;
            }
        }
    }
    loop {
        round += 1;
        let mut round_failed = false;
        for (index, standby) in &mut standbys {
            let index = *index;
            let key = standby.key().clone();
            let attempt = standby.try_acquire();
            let result = tokio::select! {
                biased;
                () = shared.vvm_shut.cancelled() => {
                    withdraw(&shared, &key).await;
                    tracing::info!("shutdown during acquisition; launcher stops");
                    return;
                }
                result = attempt => result,
            };
            match result {
                Ok(Some(leadership)) => {
                    start(&shared, pipeline, index, leadership);
                    return;
                }
                Ok(None) => tracing::debug!(%key, round, "key held by another VVM"),
                // cleanup() ran: shutdown is under way.
                Err(ElectionsError::Finalized) => return,
                // Leaders of another cluster size hold the size claim; the
                // lease was given back before anything ran.
                Err(err @ ElectionsError::ClaimConflict { .. }) => {
                    if let Some(problem) = cluster_size::conflict(config, &err) {
                        shared.fail(problem);
                    }
                    return;
                }
                Err(ElectionsError::Storage(err)) if err.kind() == ErrorKind::Permanent => {
                    // Retrying will not help until someone fixes the storage.
                    shared.fail(VvmProblem::Elections(ElectionsError::Storage(err)));
                    return;
                }
                Err(ElectionsError::Storage(err)) => {
                    tracing::warn!(%key, round, error = %err, "acquisition attempt failed");
                    last_error = Some(err.to_string());
                    round_failed = true;
                }
                // Renewals of what this process holds are behind: try again
                // in a later round, as after a store error.
                Err(err @ ElectionsError::Overloaded { .. }) => {
                    tracing::debug!(%key, round, error = %err, "acquisition shed");
                    last_error = Some(err.to_string());
                    round_failed = true;
                }
                Err(err) => {
                    shared.fail(VvmProblem::Elections(err));
                    return;
                }
            }
        }
        let now = Instant::now();
        if let Some(deadline) = deadline
            && now >= deadline
        {
            shared.status.send_replace(VvmStatus::AcquisitionFailed);
            shared.problems.update(VvmProblem::LeadershipAcquisition {
                cluster_size: config.cluster_size,
                duration: config.acquisition_duration,
                last_error,
            });
            return;
        }
        if round == 1 {
            describe_holders(&shared, deadline.is_none()).await;
        }
        let pause_end = now + config.acquisition_retry_pause;
        let pause_end = deadline.map_or(pause_end, |deadline| pause_end.min(deadline));
        // After a failed attempt the storage may be unwell: a watch could
        // complete at once every time, so pause the whole time.
        let released = if round_failed {
            None
        } else {
            watch_keys(&standbys)
        };
        let released = async {
            match released {
                Some(watch) => watch.await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            () = shared.vvm_shut.cancelled() => return,
            () = released => tracing::debug!(round, "a key may have been released; retrying now"),
            () = tokio::time::sleep_until(pause_end) => {}
        }
    }
}

/// The standby's first word: who holds each key (value, fencing token, time
/// left, read with [`elections::inspect`]), and how long it will wait.
async fn describe_holders(shared: &Shared, forever: bool) {
    let config = &shared.config;
    let waiting = if forever {
        "waiting indefinitely".to_owned()
    } else {
        format!(
            "waiting up to {}",
            humantime::format_duration(config.acquisition_duration)
        )
    };
    for index in 1..=config.cluster_size {
        let Ok(key) = config.key(index) else { continue };
        let look = tokio::time::timeout(
            config.leadership_duration / 4,
            elections::inspect(&*shared.storage, &key),
        )
        .await;
        match look {
            Ok(Ok(status)) => {
                let holder = status.leader.as_deref().map_or_else(
                    || "(none)".to_owned(),
                    |v| String::from_utf8_lossy(v).into_owned(),
                );
                let time_left = match status.time_left {
                    Some(ttl_storage::TimeLeft::About(left)) => {
                        humantime::format_duration(Duration::from_secs(left.as_secs())).to_string()
                    }
                    Some(ttl_storage::TimeLeft::Never) => "never expires".to_owned(),
                    _ => "unknown".to_owned(),
                };
                tracing::info!(
                    %key,
                    holder,
                    fencing_token = ?status.latest_fencing_token,
                    time_left,
                    "key held by another node; {waiting}"
                );
            }
            _ => tracing::info!(%key, "key held by another node (holder unreadable); {waiting}"),
        }
    }
}

/// A future that completes when any of the keys may have been released (or
/// handed over to us), or `None` when the storage cannot tell (it is then
/// polled).
fn watch_keys(standbys: &[(u32, Standby)]) -> Option<impl Future<Output = ()> + use<>> {
    let watches: Vec<_> = standbys
        .iter()
        .filter_map(|(_, standby)| standby.watch())
        .map(Box::pin)
        .collect();
    if watches.is_empty() {
        return None;
    }
    Some(futures::future::select_all(watches).map(|_| ()))
}

/// An acquisition interrupted by shutdown may have written our record
/// without anyone renewing it. Our value is unique to this VVM, so deleting
/// a record that holds it cannot hurt anyone else; bounded, best effort (the
/// record expires by itself anyway).
async fn withdraw(shared: &Shared, key: &Key) {
    if shared.elections.held_keys().contains(key) {
        // The attempt completed: elections cleanup releases it.
        return;
    }
    let attempt = async {
        let Some(record) = shared.storage.get(key).await? else {
            return Ok(false);
        };
        if elections::record::leader_value(&record) != shared.value.as_bytes() {
            return Ok(false);
        }
        shared.storage.compare_and_delete(key, &record).await
    };
    match tokio::time::timeout(WITHDRAW_LIMIT, attempt).await {
        Ok(Ok(true)) => {
            tracing::info!(%key, "withdrew a record left by the interrupted acquisition");
        }
        Ok(Ok(false)) => {}
        Ok(Err(err)) => {
            tracing::warn!(%key, error = %err, "could not withdraw; the record will expire");
        }
        Err(_) => tracing::warn!(%key, "withdrawal timed out; the record will expire"),
    }
}

/// Starts the monitor and the services, unless shutdown has begun.
fn start<P: ServicePipeline>(
    shared: &Arc<Shared>,
    pipeline: P,
    index: u32,
    leadership: Leadership,
) {
    let info = LeaderInfo {
        key: leadership.key().clone(),
        key_index: index,
        fencing_token: leadership.fencing_token(),
    };
    // Under the gate, shutdown either has not begun (and will wait for the
    // tasks spawned here) or has (and nothing is spawned; elections cleanup
    // releases the leadership).
    let _gate = shared.lock_gate();
    if shared.vvm_shut.is_cancelled() {
        tracing::info!(key = %info.key, "leadership acquired as shutdown began; not starting services");
        return;
    }
    tracing::debug!(key = %info.key, fencing_token = info.fencing_token, "leading; starting the monitor and the services");
    let span = tracing::info_span!("leader", key = %info.key, fencing_token = info.fencing_token);
    let ctx = ServiceContext {
        shutdown: shared.services_shut.clone(),
        key: info.key.clone(),
        key_index: index,
        fencing_token: info.fencing_token,
        value: shared.value.as_str().into(),
        record: leadership.record_value().into(),
        tasks: shared.service_tasks.clone(),
    };
    shared
        .monitor_tasks
        .spawn(monitor(shared.clone(), leadership, info.clone()).instrument(span.clone()));
    shared
        .service_tasks
        .spawn(services(shared.clone(), pipeline, ctx).instrument(span));
    shared.status.send_replace(VvmStatus::Leading(info));
}

/// Runs the pipeline once; its outcome becomes a problem unless it stopped
/// because it was asked to.
async fn services<P: ServicePipeline>(shared: Arc<Shared>, pipeline: P, ctx: ServiceContext) {
    let token = ctx.shutdown.clone();
    let outcome = AssertUnwindSafe(pipeline.run(ctx)).catch_unwind().await;
    match outcome {
        Ok(Ok(())) if token.is_cancelled() => tracing::info!("services stopped"),
        Ok(Ok(())) => shared.problems.update(VvmProblem::ServicesFinished),
        Ok(Err(err)) => shared.problems.update(VvmProblem::Service(err.into())),
        Err(panic) => shared
            .problems
            .update(VvmProblem::ServicePanicked(panic_message(&*panic))),
    }
}

fn panic_message(panic: &(dyn Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}
