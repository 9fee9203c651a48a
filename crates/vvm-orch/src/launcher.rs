//! The Launcher, the LeadershipMonitor and the task that runs the
//! ServicePipeline.

use std::{any::Any, panic::AssertUnwindSafe, sync::Arc, time::Duration};

use elections::{ElectionsError, EndReason, Leadership, Standby};
use futures::FutureExt;
use tokio::time::Instant;
use tracing::Instrument;
use ttl_storage::{ErrorKind, Key};

use crate::{
    LeaderInfo, ServiceContext, ServicePipeline, VvmProblem, VvmStatus,
    cluster_size::{self, Claim},
    handover,
    shutdown::Shared,
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
    let mut standbys = Vec::new();
    for index in 1..=config.cluster_size {
        let standby = config
            .key(index)
            .map_err(ElectionsError::Invalid)
            .and_then(|key| {
                shared
                    .elections
                    .stand_by(&key, shared.value.as_bytes(), config.leadership_duration)
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
                Ok(Some(leadership)) => match agree_on_size(&shared).await {
                    Ok(()) => {
                        start(&shared, pipeline, index, leadership);
                        return;
                    }
                    Err(Some(problem)) => {
                        // Nothing ran under this leadership: give it back.
                        leadership.release().await;
                        shared.fail(problem);
                        return;
                    }
                    Err(None) => {
                        leadership.release().await;
                        last_error =
                            Some("the cluster-size record could not be claimed".to_owned());
                        round_failed = true;
                    }
                },
                Ok(None) => tracing::debug!(%key, round, "key held by another VVM"),
                // cleanup() ran: shutdown is under way.
                Err(ElectionsError::Finalized) => return,
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

/// Claims the cluster size beside the lease (see [`cluster_size`]).
/// `Err(Some(problem))`: leaders of another size run; `Err(None)`: the
/// store failed (retry later).
async fn agree_on_size(shared: &Shared) -> Result<(), Option<VvmProblem>> {
    let config = &shared.config;
    let key = cluster_size::key(config)
        .map_err(|err| Some(VvmProblem::Elections(ElectionsError::Invalid(err))))?;
    let claim = tokio::time::timeout(
        config.leadership_duration / 4,
        cluster_size::claim(
            &shared.storage,
            &key,
            config.cluster_size,
            config.leadership_duration,
        ),
    )
    .await;
    match claim {
        Ok(Ok(Claim::Agreed)) => Ok(()),
        Ok(Ok(Claim::Mismatch(theirs))) => Err(Some(VvmProblem::ClusterSizeMismatch {
            ours: config.cluster_size,
            theirs: Some(theirs),
        })),
        Ok(Ok(Claim::Garbled)) => Err(Some(VvmProblem::ClusterSizeMismatch {
            ours: config.cluster_size,
            theirs: None,
        })),
        Ok(Err(err)) => {
            tracing::warn!(error = %err, "cannot claim the cluster size; giving the key back");
            Err(None)
        }
        Err(_) => {
            tracing::warn!("claiming the cluster size timed out; giving the key back");
            Err(None)
        }
    }
}

/// Refreshes the cluster-size record every quarter of the leadership
/// duration while leading; returns the problem if another size took it.
async fn keep_size(shared: &Shared) -> VvmProblem {
    let period = shared.config.leadership_duration / 4;
    loop {
        tokio::time::sleep(period).await;
        match agree_on_size(shared).await {
            Ok(()) | Err(None) => {}
            Err(Some(problem)) => return problem,
        }
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
    tracing::info!(key = %info.key, fencing_token = info.fencing_token, "leading; starting the monitor and the services");
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

/// The LeadershipMonitor: waits for leadership loss, its own shutdown, or a
/// hand-over request ([`crate::handover`]).
async fn monitor(shared: Arc<Shared>, leadership: Leadership, info: LeaderInfo) {
    let listener = match handover::Listener::new(
        shared.storage.clone(),
        &shared.config,
        info.key_index,
        &shared.value,
    ) {
        Ok(listener) => Some(listener),
        Err(err) => {
            tracing::warn!(error = %err, "no hand-over requests for this key");
            None
        }
    };
    let mut requests = Box::pin(next_request(listener.as_ref()));
    let keep = keep_size(&shared);
    tokio::pin!(keep);
    loop {
        tokio::select! {
            biased;
            // Biased: a loss that happened just before the monitor was stopped
            // is still reported.
            _ = leadership.ended() => break,
            () = shared.monitor_shut.cancelled() => {
                if let Some(listener) = &listener {
                    listener.close().await;
                }
                return;
            }
            problem = &mut keep => {
                // Another size took the record (it expired during store
                // trouble): stop the services, as on a loss.
                shared.services_shut.cancel();
                shared.problems.update(problem);
                return;
            }
            request = &mut requests => {
                if let Some(listener) = &listener
                    && hand_over(&shared, &leadership, &info, listener, &request).await
                {
                    return;
                }
                requests = Box::pin(next_request(listener.as_ref()));
            }
        }
    }
    // Only loss ends a leadership while the monitor runs: release happens
    // in elections cleanup, after the monitor has stopped.
    let reason = leadership
        .end_reason()
        .unwrap_or(EndReason::Stolen { by: None });
    lost(&shared, info, reason);
}

/// The next hand-over request, or never without a listener.
async fn next_request(listener: Option<&handover::Listener>) -> handover::Request {
    match listener {
        Some(listener) => listener.next().await,
        None => std::future::pending().await,
    }
}

/// Reports the end of the leadership: the services are told to stop now
/// rather than when the host reacts; the killer (armed by elections on a
/// loss) covers services that do not stop in time.
fn lost(shared: &Shared, info: LeaderInfo, reason: EndReason) {
    shared.services_shut.cancel();
    shared
        .status
        .send_replace(VvmStatus::LeadershipLost(info.clone()));
    shared.problems.update(VvmProblem::LeadershipLost {
        key: info.key,
        reason,
    });
}

/// Serves a hand-over request: `false` when refused (no candidate; still
/// leading), `true` when the leadership ended (handed over, or released
/// after a failure), the services stopped and the problem reported.
async fn hand_over(
    shared: &Shared,
    leadership: &Leadership,
    info: &LeaderInfo,
    listener: &handover::Listener,
    request: &handover::Request,
) -> bool {
    let candidates = match leadership.candidates().await {
        Ok(candidates) => candidates,
        Err(err) => {
            tracing::warn!(error = %err, "hand-over requested, but the candidates cannot be read; still leading");
            listener
                .reply(request, &handover::Answer::NoCandidate)
                .await;
            return false;
        }
    };
    let wanted = request.to.as_deref().map(str::as_bytes);
    let Some(candidate) = candidates
        .into_iter()
        .find(|c| wanted.is_none_or(|to| handover::address_of(&c.value) == to || c.value == to))
    else {
        tracing::info!(
            to = request.to.as_deref().unwrap_or("(any)"),
            "hand-over requested, but no such candidate waits; still leading"
        );
        listener
            .reply(request, &handover::Answer::NoCandidate)
            .await;
        return false;
    };
    let to = String::from_utf8_lossy(&candidate.value).into_owned();
    tracing::info!(to, "hand-over requested: stopping the services");
    // Services first, as on shutdown: the lease moves only once nothing of
    // ours runs. Renewal goes on meanwhile; a stop slower than a lease is
    // a problem like any other (the host then shuts down, and the release
    // follows the stop).
    shared.services_shut.cancel();
    shared.service_tasks.close();
    let stopped = tokio::time::timeout(
        shared.config.leadership_duration,
        shared.service_tasks.wait(),
    )
    .await;
    if stopped.is_err() {
        tracing::warn!("the services did not stop within a lease; not handing over");
        listener
            .reply(
                request,
                &handover::Answer::Released("the services did not stop".into()),
            )
            .await;
        lost(shared, info.clone(), EndReason::Released);
        return true;
    }
    let answer = match leadership.hand_over_or_release(Some(&candidate)).await {
        Ok(Some(to)) => {
            handover::Answer::HandedOver(String::from_utf8_lossy(&to.value).into_owned())
        }
        Ok(None) => handover::Answer::Released("no candidate left".into()),
        Err(elections::HandOverError::NoSuchCandidate(_)) => {
            match leadership.hand_over_or_release(None).await {
                Ok(Some(to)) => {
                    handover::Answer::HandedOver(String::from_utf8_lossy(&to.value).into_owned())
                }
                Ok(None) => handover::Answer::Released("the candidate left".into()),
                Err(err) => handover::Answer::Released(err.to_string()),
            }
        }
        Err(err) => handover::Answer::Released(err.to_string()),
    };
    listener.reply(request, &answer).await;
    listener.close().await;
    match &answer {
        handover::Answer::HandedOver(to) => tracing::info!(to, "leadership handed over"),
        other => tracing::warn!(answer = ?other, "hand-over did not happen; the leadership ended"),
    }
    let reason = leadership.end_reason().unwrap_or(EndReason::Superseded);
    lost(shared, info.clone(), reason);
    true
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
