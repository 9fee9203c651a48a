//! One contender process: a [`vvm_orch::Vvm`] (cluster size 1, lease `d`)
//! whose service pipeline writes to the guarded resource every
//! [`WRITE_EVERY`] with the leadership's fencing token. The elections killer
//! is the production [`elections::ProcessKiller`] (wrapped to report its
//! deadlines). On a problem (a loss, or no leadership within `15 d`) the
//! process shuts the VVM down (services stop, then leadership is released)
//! and launches a new one. Every step is an `Event` (`crate::event::Event`)
//! line on stdout.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use elections::{ArmEvent, ArmReason, Killer, ProcessKiller};
use fence::AppendOutcome;
use storage_url::StorageUrl;
use tokio::{sync::Mutex, time::Instant};
use ttl_storage::{Key, TtlStorage};
use vvm_orch::{ServiceContext, Vvm, VvmConfig, service_fn};

use crate::{
    event::{Event, WriteOutcome, emit, now_ms},
    guarded::Guarded,
};

/// Time between two writes of a leader.
pub const WRITE_EVERY: Duration = Duration::from_millis(100);

/// What a contender needs to know.
#[derive(Debug, Clone)]
pub struct ContenderConfig {
    /// The store URL (`scylla://`, `dynamodb://`, `redis://`, `postgres://`
    /// or `etcd://`), usually through a fault proxy.
    pub url: String,
    /// The election key.
    pub key: String,
    /// The guarded resource's id.
    pub resource: String,
    /// Where the guarded resource lives when not at [`url`](Self::url):
    /// the engine's direct URL, so that cutting the contender's path to
    /// the store (its proxy) leaves its writes going through, as for a
    /// leader cut off from the lock store but not from the resource.
    pub resource_url: Option<String>,
    /// This contender's name (written as the leader value and the writer).
    pub name: String,
    /// The lease `d`.
    pub lease: Duration,
    /// A zombie: a contender that breaks the rules on purpose, to show what
    /// fencing protects against. Its killer never ends the process, and
    /// after a loss it keeps writing with its old token for another `2 d`
    /// before it releases. Every such write must be rejected once a newer
    /// token has reached the resource.
    pub zombie: bool,
    /// Negative control: the resource accepts any token (see
    /// [`Guarded::connect`]); a run with zombies must then fail.
    pub unfenced: bool,
}

/// The production killer, reporting every deadline change as an event; a
/// zombie's killer reports but never kills.
struct ReportingKiller {
    zombie: bool,
}

/// Converts a tokio instant to wall milliseconds.
fn wall_ms(at: Instant) -> u64 {
    let now = Instant::now();
    let wall = now_ms();
    if at >= now {
        wall.saturating_add(u64::try_from((at - now).as_millis()).unwrap_or(u64::MAX))
    } else {
        wall.saturating_sub(u64::try_from((now - at).as_millis()).unwrap_or(u64::MAX))
    }
}

impl Killer for ReportingKiller {
    fn kill(&self, key: &Key, deadline: Instant) {
        if self.zombie {
            tracing::warn!(%key, "zombie: ignoring the killer deadline");
            return;
        }
        emit(&Event::KillerFired);
        ProcessKiller.kill(key, deadline);
    }

    fn armed(&self, event: &ArmEvent) {
        emit(&Event::Armed {
            basis_ms: wall_ms(event.basis),
            deadline_ms: event.deadline.map(wall_ms),
            success: matches!(event.reason, ArmReason::Acquired | ArmReason::Renewed),
        });
    }
}

/// A contender error (only setup can fail; the loop itself never ends).
#[derive(Debug, thiserror::Error)]
pub enum ContenderError {
    /// The election key is invalid.
    #[error(transparent)]
    Key(#[from] ttl_storage::ValidationError),
    /// The storage URL is invalid.
    #[error(transparent)]
    Url(#[from] storage_url::UrlError),
    /// The VVM configuration is invalid.
    #[error("bad VVM configuration: {0}")]
    Vvm(#[from] vvm_orch::ConfigError),
}

/// Runs the contender forever (the harness kills it).
///
/// # Errors
///
/// Only for an invalid key or URL; connection failures are retried.
pub async fn run(config: ContenderConfig) -> Result<(), ContenderError> {
    emit(&Event::Started {
        pid: std::process::id(),
        zombie: config.zombie,
    });
    let key = Key::new(config.key.clone())?;
    let retry = config.lease / 20;
    let url: StorageUrl = config.url.parse()?;
    let storage = loop {
        match url.open().await {
            Ok(storage) => break storage,
            Err(err) => {
                tracing::warn!(%err, "connecting the store failed; retrying");
                tokio::time::sleep(retry).await;
            }
        }
    };
    contend(storage, &key, &config).await
}

/// The VVM loop over `storage`: provide, launch, wait for a problem (a
/// loss, or no leadership within the acquisition duration), shut down
/// (services stop, then leadership is released), and again.
async fn contend(
    storage: impl TtlStorage + 'static,
    key: &Key,
    config: &ContenderConfig,
) -> Result<(), ContenderError> {
    let retry = config.lease / 20;
    let guarded = loop {
        let resource_url = config.resource_url.as_deref().unwrap_or(&config.url);
        match Guarded::connect(resource_url, &config.resource, !config.unfenced).await {
            Ok(guarded) => break guarded,
            Err(err) => {
                tracing::warn!(%err, "connecting the guarded resource failed; retrying");
                tokio::time::sleep(retry).await;
            }
        }
    };
    let guarded = Arc::new(Mutex::new(guarded));
    let killer: Arc<dyn Killer> = Arc::new(ReportingKiller {
        zombie: config.zombie,
    });
    let storage: Arc<dyn TtlStorage> = Arc::new(storage);
    let mut vvm_config = VvmConfig::new(config.name.clone());
    vvm_config.cluster_size = 1;
    vvm_config.key_prefix = format!("{key}/");
    vvm_config.leadership_duration = config.lease;
    vvm_config.acquisition_duration = config.lease * 15;
    vvm_config.acquisition_retry_pause = retry;
    loop {
        let led = Arc::new(AtomicBool::new(false));
        let pipeline = {
            let guarded = guarded.clone();
            let led = led.clone();
            let config = config.clone();
            service_fn(move |ctx: ServiceContext| {
                let guarded = guarded.clone();
                let led = led.clone();
                let config = config.clone();
                async move {
                    led.store(true, Ordering::SeqCst);
                    let mut guarded = guarded.lock().await;
                    guarded_writer(&ctx, &mut guarded, &config).await;
                    Ok::<_, std::convert::Infallible>(())
                }
            })
        };
        let vvm = Vvm::provide(vvm_config.clone(), storage.clone(), pipeline)?
            .with_killer(killer.clone());
        let (vvm, problem) = vvm.launch();
        problem.raised().await;
        if let Err(problem) = vvm.shutdown().await {
            tracing::info!(%problem, "VVM stopped");
        }
        if led.load(Ordering::SeqCst) {
            emit(&Event::Released);
        }
        tokio::time::sleep(retry).await;
    }
}

/// The service pipeline: writes to the guarded resource every
/// [`WRITE_EVERY`] with the leadership's fencing token until the VVM asks
/// it to stop (a zombie goes on for another `2 d`).
async fn guarded_writer(ctx: &ServiceContext, guarded: &mut Guarded, config: &ContenderConfig) {
    let token = ctx.fencing_token();
    emit(&Event::Acquired { token });
    let mut tick = tokio::time::interval(WRITE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut reported = false;
    let mut zombie_until = None;
    loop {
        if ctx.is_shutdown_requested() && !reported {
            reported = true;
            emit(&Event::Lost {
                reason: "the VVM asked its services to stop".into(),
            });
            if !config.zombie {
                break;
            }
            zombie_until = Some(Instant::now() + config.lease * 2);
        }
        if zombie_until.is_some_and(|until| Instant::now() >= until) {
            break;
        }
        tokio::select! {
            biased;
            _ = ctx.shutdown_requested(), if !reported => continue,
            _ = tick.tick() => {}
        }
        // The write is cancelled as soon as the VVM asks the service to
        // stop (a zombie lets it finish); if it was already sent, the
        // fencing token is what protects the resource.
        let start_ms = now_ms();
        let outcome = tokio::select! {
            biased;
            _ = ctx.shutdown_requested(), if !reported && !config.zombie => continue,
            verdict = tokio::time::timeout(config.lease, guarded.write(token, &config.name)) => match verdict {
                Ok(Ok(AppendOutcome::Appended { seq })) => WriteOutcome::Accepted { seq },
                Ok(Ok(AppendOutcome::Rejected { highest })) => WriteOutcome::Rejected { seen: highest },
                Ok(Err(err)) => {
                    tracing::warn!(%err, "guarded write failed");
                    WriteOutcome::Failed
                }
                Err(_) => {
                    tracing::warn!("guarded write timed out");
                    WriteOutcome::Failed
                }
            },
        };
        emit(&Event::Write {
            start_ms,
            token,
            outcome,
        });
    }
}
