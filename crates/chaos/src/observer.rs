//! An observer of the contested key beside the contenders, connected to
//! the store directly (never through a contender's fault proxy). On a
//! store that reports its writes (`TtlStorage::changes`: etcd, Valkey,
//! PostgreSQL) `elections::observe` must report every leadership, so every
//! token a contender acquired must be among its reports, whatever the
//! contenders' faults; elsewhere it is not run.

use std::{
    collections::HashSet,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use elections::Observation;
use ttl_storage::{Key, TtlStorage};

use crate::{
    check::Report,
    event::{Event, Record},
};

/// The running observer and the tokens it reported.
pub(crate) struct Observer {
    task: tokio::task::JoinHandle<()>,
    tokens: Arc<Mutex<Vec<u64>>>,
}

/// The observer of the first key of the contenders' lock `lock` on `url`,
/// or `None` when the store does not report its writes (polling may miss a
/// short leadership: nothing to hold it to).
pub(crate) async fn start(url: &str, lock: &str) -> anyhow::Result<Option<Observer>> {
    let storage = storage_url::open(url).await?;
    // vvm-orch's keys are `<prefix><index>`; the contenders' prefix is
    // `<lock>/` with one key.
    let key = Key::new(format!("{lock}/1"))?;
    let counter = elections::fencing::counter_key(&key)?;
    if storage.changes(&key, Some(&counter)).is_err() {
        return Ok(None);
    }
    let tokens: Arc<Mutex<Vec<u64>>> = Arc::default();
    let reported = tokens.clone();
    let (first_tx, first) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let mut leaders = elections::observe(storage, &key, Duration::from_secs(1));
        let mut first_tx = Some(first_tx);
        while let Some(observation) = leaders.next().await {
            if let Some(tx) = first_tx.take() {
                let _ = tx.send(());
            }
            if let Observation::Leader {
                fencing_token: Some(token),
                ..
            } = observation
            {
                reported
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(token);
            }
        }
    });
    // Its first report comes once its feed is armed and the key read:
    // from then on it follows every write the contenders make.
    tokio::time::timeout(Duration::from_secs(30), first)
        .await
        .map_err(|_| anyhow::anyhow!("the observer made no first report within 30 s"))?
        .map_err(|_| anyhow::anyhow!("the observer ended before its first report"))?;
    Ok(Some(Observer { task, tokens }))
}

impl Observer {
    /// Stops it and holds it to the history: each acquisition up to
    /// `until_ms` must have been reported with its token.
    pub(crate) fn check(self, history: &[Record], until_ms: u64, report: &mut Report) {
        self.task.abort();
        let tokens =
            std::mem::take(&mut *self.tokens.lock().unwrap_or_else(PoisonError::into_inner));
        let seen: HashSet<u64> = tokens.iter().copied().collect();
        let mut missed = 0;
        for record in history {
            if let Event::Acquired { token } = record.event
                && record.t_ms <= until_ms
                && !seen.contains(&token)
            {
                missed += 1;
                report.violations.push(format!(
                    "the observer never reported {}'s leadership with token {token}",
                    record.proc
                ));
            }
        }
        report.observer = Some((tokens.len() as u64, missed));
    }
}

/// How long before the end an acquisition need not have been reported yet.
pub(crate) const SETTLE_MS: u64 = 2_000;
