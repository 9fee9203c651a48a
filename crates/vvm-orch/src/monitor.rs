//! The LeadershipMonitor: watches the leadership while the services run,
//! serves the hand-over requests addressed to it ([`crate::handover`]),
//! and hands over to a higher-priority candidate once it has stood for the
//! hold-down ([`elections::Preemption`]), by the same graceful path.

use std::{sync::Arc, time::Duration};

use elections::{Candidate, EndReason, HandOverError, Leadership, Preemption};

use crate::{
    LeaderInfo, VvmProblem, VvmStatus, cluster_size,
    handover::{self, Accept, Answer, Listener, Served},
    shutdown::Shared,
};

/// The LeadershipMonitor: waits for leadership loss, its own shutdown, or a
/// hand-over request.
pub(crate) async fn monitor(shared: Arc<Shared>, leadership: Leadership, info: LeaderInfo) {
    let listener = match Listener::new(
        shared.storage.clone(),
        &shared.config,
        leadership.key(),
        leadership.record_value(),
    ) {
        Ok(listener) => Some(listener),
        Err(err) => {
            tracing::warn!(error = %err, "no hand-over requests for this key");
            None
        }
    };
    let mut requests = Box::pin(next_request(listener.as_ref(), Duration::ZERO));
    let config = &shared.config;
    let mut preemption = Preemption::new(config.priority, config.hold_down(), config.tenure());
    // Nobody can outrank the highest priority: no listing needed.
    let mut scans = (config.priority < i32::MAX).then(|| {
        let mut scans =
            tokio::time::interval((config.leadership_duration / 4).max(Duration::from_millis(100)));
        scans.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        scans
    });
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
            served = &mut requests => {
                let Some(listener) = &listener else { continue };
                if serve(&shared, &leadership, &info, listener, served).await {
                    return;
                }
                // Not acted on: read again after a pause, not at once (a
                // request whose refusal could not be written is read again).
                requests = Box::pin(next_request(Some(listener), listener.poll()));
            }
            () = next_scan(scans.as_mut()) => {
                let due = match leadership.preemption_due(&mut preemption).await {
                    Ok(due) => due,
                    Err(err) => {
                        tracing::debug!(error = %err, "cannot list the candidates; hold-downs start again");
                        None
                    }
                };
                if let Some(candidate) = due {
                    preempt(&shared, &leadership, &info, listener.as_ref(), &candidate).await;
                    return;
                }
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

/// The next tick of the preemption scans, or never without them.
async fn next_scan(scans: Option<&mut tokio::time::Interval>) {
    match scans {
        Some(scans) => {
            scans.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// Hands over to `candidate`, a higher-priority candidate that has stood
/// for the hold-down: the services stop first, exactly as for a request.
async fn preempt(
    shared: &Shared,
    leadership: &Leadership,
    info: &LeaderInfo,
    listener: Option<&Listener>,
    candidate: &Candidate,
) {
    let to = String::from_utf8_lossy(&candidate.value).into_owned();
    tracing::info!(
        to,
        priority = candidate.priority,
        own = shared.config.priority,
        hold_down = ?shared.config.hold_down(),
        "a higher-priority candidate has stood for the hold-down: handing over"
    );
    let answer = act(shared, leadership, candidate, &to).await;
    if let Some(listener) = listener {
        listener.close().await;
    }
    ended(shared, leadership, info, &answer);
}

/// Reports the end of a leadership that handed over (or tried to).
fn ended(shared: &Shared, leadership: &Leadership, info: &LeaderInfo, answer: &Answer) {
    let reason = match answer {
        Answer::HandedOver(to) => {
            tracing::info!(to, "leadership handed over");
            EndReason::Superseded
        }
        other => {
            tracing::warn!(answer = ?other, "hand-over did not happen; the leadership ends");
            leadership.end_reason().unwrap_or(EndReason::Released)
        }
    };
    lost(shared, info.clone(), reason);
}

/// The next hand-over request after `pause`, or never without a listener.
async fn next_request(listener: Option<&Listener>, pause: Duration) -> Served {
    match listener {
        Some(listener) => {
            tokio::time::sleep(pause).await;
            listener.next().await
        }
        None => std::future::pending().await,
    }
}

/// Reports the end of the leadership: the services are told to stop now
/// rather than when the host reacts; the killer (armed by elections on a
/// loss) covers services that do not stop in time. A lost cluster-size
/// claim that another size now holds is reported as the mismatch it is.
fn lost(shared: &Shared, info: LeaderInfo, reason: EndReason) {
    shared.services_shut.cancel();
    shared
        .status
        .send_replace(VvmStatus::LeadershipLost(info.clone()));
    let problem = match &reason {
        EndReason::ClaimLost {
            found: Some(found), ..
        } => cluster_size::mismatch(&shared.config, found),
        _ => VvmProblem::LeadershipLost {
            key: info.key,
            reason,
        },
    };
    shared.problems.update(problem);
}

/// Serves one request addressed to this leadership: `false` when nothing
/// was stopped (refused, withdrawn, or to be read again; still leading),
/// `true` when the leadership ended (handed over, or released after a
/// failure), the services stopped and the problem reported.
async fn serve(
    shared: &Shared,
    leadership: &Leadership,
    info: &LeaderInfo,
    listener: &Listener,
    served: Served,
) -> bool {
    let (request, accepted_to) = match served {
        Served::Pending(request) => (request, None),
        Served::Accepted(request, to) => (request, Some(to)),
    };
    let current = match &accepted_to {
        Some(to) => request.accepted(to),
        None => request.as_bytes().to_vec(),
    };
    let candidates = match leadership.candidates().await {
        Ok(candidates) => candidates,
        Err(err) => {
            tracing::warn!(error = %err, "hand-over requested, but the candidates cannot be read; still leading");
            let answer = Answer::Failed(format!("cannot read the candidates: {err}"));
            listener.answer(&request, &current, &answer).await;
            return false;
        }
    };
    let chosen = match &accepted_to {
        // Accepted earlier: that candidate, or none.
        Some(to) => candidates.into_iter().find(|c| c.value == to.as_bytes()),
        None => candidates.into_iter().find(|c| {
            request
                .to()
                .is_none_or(|to| handover::matches(&c.value, to))
        }),
    };
    let Some(candidate) = chosen else {
        tracing::info!(
            to = request.to().unwrap_or("(any)"),
            "hand-over requested, but no such candidate waits; still leading"
        );
        listener
            .answer(&request, &current, &Answer::NoCandidate)
            .await;
        return false;
    };
    let to = String::from_utf8_lossy(&candidate.value).into_owned();
    if accepted_to.is_none() {
        // The commitment: from here the requester can no longer withdraw.
        match listener.accept(&request, &to).await {
            Accept::Accepted => {}
            Accept::Withdrawn => {
                tracing::info!("the hand-over request was withdrawn before it was accepted");
                return false;
            }
            Accept::Unknown => return false,
        }
    }
    let answer = act(shared, leadership, &candidate, &to).await;
    listener
        .answer(&request, &request.accepted(&to), &answer)
        .await;
    listener.close().await;
    ended(shared, leadership, info, &answer);
    true
}

/// Acts on an accepted request: stops the services, then hands over to
/// `candidate` (and to no one else). Whatever fails after the services
/// stopped ends the leadership by a release, so it never stays held idle.
async fn act(shared: &Shared, leadership: &Leadership, candidate: &Candidate, to: &str) -> Answer {
    tracing::info!(to, "hand-over requested: stopping the services");
    // Services first, as on shutdown: the lease moves only once nothing of
    // ours runs. Renewal (and the cluster-size claim with it) goes on
    // meanwhile; a stop slower than a lease is a problem like any other
    // (the host then shuts down, and the release follows the stop).
    shared.services_shut.cancel();
    shared.service_tasks.close();
    let stopped = tokio::time::timeout(
        shared.config.leadership_duration,
        shared.service_tasks.wait(),
    )
    .await;
    if stopped.is_err() {
        tracing::warn!("the services did not stop within a lease; not handing over");
        return Answer::Released(
            "the services did not stop within a lease; the lock is released once they stop".into(),
        );
    }
    let why = match leadership.hand_over(Some(candidate)).await {
        Ok(successor) => {
            return Answer::HandedOver(String::from_utf8_lossy(&successor.value).into_owned());
        }
        Err(HandOverError::NoSuchCandidate(_)) => {
            format!("candidate {to} left while the services stopped")
        }
        Err(HandOverError::Ended(reason)) => format!("the leadership ended first: {reason}"),
        Err(err) => err.to_string(),
    };
    // Nothing runs any more: give the lease back rather than hold it idle
    // (a no-op when the hand-over already ended it).
    if leadership.is_active() {
        leadership.clone().release().await;
    }
    Answer::Released(why)
}
