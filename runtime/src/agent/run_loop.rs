//! The agent's process: its loop (fetch, reconcile, wait for the interval, a webhook or a
//! stop signal), the in-process forwarder and the signal thread.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use miette::{IntoDiagnostic, Result, WrapErr};

use crate::metrics::{self, Health, Metrics};

use super::{exit_code, schedule, Agent, AgentConfig};

/// What wakes the loop early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// A webhook said something was pushed: fetch now.
    Push,
    /// SIGTERM / SIGINT.
    Stop,
}

/// Run the agent until SIGTERM / SIGINT (returns 0), or one iteration with `once` (returns
/// its [`exit_code`]).
pub fn run(cfg: AgentConfig) -> Result<u8> {
    let metrics = Arc::new(Metrics::for_host(&cfg.host));
    let health = Arc::new(Health::new((cfg.interval * 3).max(Duration::from_secs(60)) + cfg.fetch_timeout));
    let (tx, rx) = mpsc::channel::<Wake>();
    let _server = match cfg.metrics_addr {
        Some(addr) => {
            let push = tx.clone();
            let s = metrics::serve(
                addr,
                metrics::ServerState {
                    metrics: metrics.clone(),
                    health: health.clone(),
                    webhook: cfg.webhook.clone(),
                    deliveries: Some(Arc::new(crate::metrics::replay::DeliveryGuard::load(&cfg.state_dir))),
                    on_push: Arc::new(move || {
                        let _ = push.send(Wake::Push);
                    }),
                },
            )
            .into_diagnostic()
            .wrap_err_with(|| format!("cannot listen on {addr} (--metrics)"))?;
            tracing::info!("metrics on http://{}/metrics", s.addr);
            Some(s)
        }
        None => None,
    };
    let stop = Arc::new(AtomicBool::new(false));
    spawn_signal_thread(tx.clone(), stop.clone(), cfg.stop_grace);
    if cfg.forwarder {
        spawn_forwarder(&cfg.state_dir, cfg.netns.as_deref())?;
    }
    let mut agent = Agent::new(cfg.clone(), metrics, health.clone())?;
    agent.stop = stop.clone();
    // Recover an interrupted action before anything else.
    let mut force = {
        let _lock = agent.state.lock(true)?;
        agent.recover()?
    };
    tracing::info!(
        "watching {} branch {} for host {}, every {:?}, state in {}",
        cfg.repo_url,
        cfg.branch,
        cfg.host,
        cfg.interval,
        cfg.state_dir.display()
    );
    let mut next_fetch = Instant::now();
    let mut next_check = Instant::now();
    loop {
        health.tick();
        let now = Instant::now();
        let (mut fetch_failed, mut reconcile_failed) = (false, false);
        if now >= next_fetch {
            let (delay, changed) = agent.fetch();
            fetch_failed = agent.backoff.failures > 0;
            next_fetch = Instant::now() + delay;
            if changed {
                // A new tip is reconciled at once, not at the next drift-check tick.
                next_check = Instant::now();
            }
        }
        if Instant::now() >= next_check || force {
            if let Err(e) = agent.reconcile(force) {
                tracing::error!("reconcile failed: {e:?}");
                let c = agent.target.clone().unwrap_or_default();
                agent.set_degraded(Some((&c, "apply_failed")), format!("reconcile error: {e}"));
                reconcile_failed = true;
            }
            force = false;
            next_check = Instant::now() + cfg.interval;
        }
        if stop.load(Ordering::SeqCst) {
            tracing::info!("stopping");
            return Ok(exit_code::OK);
        }
        if cfg.once {
            return Ok(agent.once_code(fetch_failed, reconcile_failed));
        }
        // Schedules: wake when the applied artifacts stop being valid.
        // (Already past — the last reconcile could not apply — waits for the usual tick.)
        if let Some(d) = schedule::wait_until(agent.valid_until, agent.now()).filter(|d| !d.is_zero()) {
            next_check = next_check.min(Instant::now() + d);
        }
        let wait = next_fetch.min(next_check).saturating_duration_since(Instant::now());
        match rx.recv_timeout(wait) {
            Ok(Wake::Stop) | Err(RecvTimeoutError::Disconnected) => {
                tracing::info!("stopping");
                return Ok(exit_code::OK);
            }
            Ok(Wake::Push) => {
                // Coalesce a burst of webhooks into one fetch.
                while let Ok(w) = rx.try_recv() {
                    if w == Wake::Stop {
                        tracing::info!("stopping");
                        return Ok(exit_code::OK);
                    }
                }
                agent.backoff.reset();
                next_fetch = Instant::now();
                next_check = Instant::now();
            }
            Err(RecvTimeoutError::Timeout) => {}
        }
    }
}

/// The userspace forwarder, hosted by the agent: a tokio runtime on its own thread (inside
/// `--netns` when given, so its sockets live there) serving the control socket in the state
/// dir, which the forward backend of every apply talks to. It starts with the applied
/// `forward.json`, so a restart adopts the listeners. Returns once it serves (or failed to).
fn spawn_forwarder(state_dir: &std::path::Path, netns: Option<&str>) -> Result<()> {
    use fwc_forwarder::control;
    let (ready_tx, ready_rx) = mpsc::channel::<std::result::Result<usize, String>>();
    let (dir, ns) = (state_dir.to_path_buf(), netns.map(str::to_string));
    std::thread::Builder::new()
        .name("fwc-forwarder".into())
        .spawn(move || {
            if let Some(ns) = &ns {
                if let Err(e) = crate::backend::netns::enter_netns(ns) {
                    let _ = ready_tx.send(Err(format!("{e}")));
                    return;
                }
            }
            let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = ready_tx.send(Err(format!("tokio runtime: {e}")));
                    return;
                }
            };
            rt.block_on(async move {
                let sock = control::socket_path(&dir);
                let listener = match control::bind(&sock) {
                    Ok(l) => l,
                    Err(e) => {
                        let _ = ready_tx.send(Err(format!("control socket {}: {e}", sock.display())));
                        return;
                    }
                };
                let fwd = fwc_forwarder::server::Forwarder::new(Default::default());
                let mut n = 0;
                if let Ok(Some(cfg)) = control::applied_config(&dir) {
                    n = cfg.listeners.len();
                    if let Err(e) = fwd.reload(cfg).await {
                        tracing::error!("forwarder could not restore the applied listeners: {e}");
                    }
                }
                let _ = ready_tx.send(Ok(n));
                control::serve(fwd, listener).await;
            });
        })
        .into_diagnostic()?;
    match ready_rx.recv() {
        Ok(Ok(n)) => {
            tracing::info!("forwarder running ({n} listener(s) restored)");
            Ok(())
        }
        Ok(Err(e)) => Err(miette::miette!(
            help = "if a `fwc forward --state-dir` already serves this state dir, run the agent with --no-forwarder",
            "cannot start the in-process forwarder: {e}"
        )),
        Err(_) => Err(miette::miette!("the forwarder thread ended before it started")),
    }
}

/// On SIGTERM / SIGINT: raise `stop`, wake the loop, and if the process still runs after
/// `grace`, exit (the journal's intent makes the next start redo what was cut).
fn spawn_signal_thread(tx: mpsc::Sender<Wake>, stop: Arc<AtomicBool>, grace: Duration) {
    std::thread::Builder::new()
        .name("fwc-signals".into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
            rt.block_on(async move {
                use tokio::signal::unix::{signal, SignalKind};
                let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
                    return;
                };
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
                stop.store(true, Ordering::SeqCst);
                let _ = tx.send(Wake::Stop);
            });
            std::thread::sleep(grace);
            tracing::warn!("still busy {grace:?} after the stop signal: exiting now; the next start redoes the interrupted action");
            std::process::exit(i32::from(exit_code::OK));
        })
        .expect("signal thread");
}
