//! The resolver on a thread of its own, for an owner of the maps that has no tokio runtime
//! (`guard run`, a [`crate::session::Session`]): its events are read with [`ResolverThread::
//! take_events`], and [`ResolverThread::wake_fd`] becomes readable when one is waiting, so the
//! owner can wait for kernel events and resolver events in one `poll`.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, RwLock};
use std::thread::JoinHandle;

use anyhow::{Context, Result, anyhow};
use tokio::sync::oneshot;

use super::refresher::Refresher;
use super::{EventSink, NamePolicy, Resolver, ResolverConfig, ResolverEvent};

pub struct ResolverThread {
    port: u16,
    refresher: Refresher,
    /// What the resolver decides names by; replaced when the owner's policy changes.
    names: Arc<RwLock<NamePolicy>>,
    events: std::sync::mpsc::Receiver<ResolverEvent>,
    wake: Arc<OwnedFd>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl ResolverThread {
    pub fn start(config: ResolverConfig, names: NamePolicy) -> Result<ResolverThread> {
        // SAFETY: eventfd returns a new descriptor or -1.
        let raw = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if raw < 0 {
            return Err(std::io::Error::last_os_error()).context("creating an eventfd");
        }
        // SAFETY: a descriptor just made and owned by nobody else.
        let wake = Arc::new(unsafe { OwnedFd::from_raw_fd(raw) });
        let (out_tx, out_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(u16, Refresher)>>();
        let thread_wake = wake.clone();
        let names = Arc::new(RwLock::new(names));
        let thread_names = names.clone();
        let thread = std::thread::Builder::new()
            .name("guard-resolver".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(err) => {
                        let _ =
                            ready_tx.send(Err(anyhow!("starting the resolver's runtime: {err}")));
                        return;
                    }
                };
                runtime.block_on(async move {
                    let sink = EventSink::Poll {
                        events: out_tx,
                        wake: thread_wake,
                    };
                    let resolver = match Resolver::start(config, thread_names, sink).await {
                        Ok(resolver) => resolver,
                        Err(err) => {
                            let _ = ready_tx.send(Err(err));
                            return;
                        }
                    };
                    let _ = ready_tx.send(Ok((resolver.port(), resolver.refresher())));
                    let _ = stop_rx.await;
                    drop(resolver);
                });
            })
            .context("starting the resolver thread")?;
        let (port, refresher) = ready_rx
            .recv()
            .map_err(|_| anyhow!("the resolver thread ended before it listened"))??;
        Ok(ResolverThread {
            port,
            refresher,
            names,
            events: out_rx,
            wake,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Where to send the names guard asks for again ([`Resolver::refresher`]).
    pub fn refresher(&self) -> Refresher {
        self.refresher.clone()
    }

    /// Decides the names of the next queries by `names` (a new policy's).
    pub fn set_names(&self, names: NamePolicy) {
        // A poisoned lock means the resolver's task panicked: it answers nothing any more.
        if let Ok(mut current) = self.names.write() {
            *current = names;
        }
    }

    /// Readable while events wait.
    pub fn wake_fd(&self) -> RawFd {
        self.wake.as_raw_fd()
    }

    /// Every event waiting (clears the wake descriptor first, so an event sent meanwhile
    /// makes it readable again).
    pub fn take_events(&self) -> Vec<ResolverEvent> {
        let mut count = 0u64;
        // SAFETY: an 8-byte read from a non-blocking eventfd.
        unsafe { libc::read(self.wake.as_raw_fd(), (&raw mut count).cast(), 8) };
        self.events.try_iter().collect()
    }
}

impl Drop for ResolverThread {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
