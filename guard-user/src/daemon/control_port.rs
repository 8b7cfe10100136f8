//! The daemon's loop as its front doors reach it: the control socket's connections
//! (`server.rs`) and the console's page (`console/`) send it [`Command`]s and wait for the
//! answers; [`ControlPort`] is that for a caller inside the daemon that is not a socket
//! client, so a request from the page is authorized and carried out exactly as one from the
//! socket.

use tokio::sync::{mpsc, oneshot};

use super::audit::HistoryRead;
use super::peer::PeerCredentials;
use super::wire::protocol::{ErrorCode, Request, ResponseLine};
use crate::audit::filter::AuditFilter;

/// What a connection task asks of the daemon task.
pub enum Command {
    Request {
        peer: PeerCredentials,
        request: Request,
        stream: Option<mpsc::UnboundedSender<String>>,
        reply: oneshot::Sender<ResponseLine>,
    },
    /// A run's client asks for every event so far to be delivered (then `flushed`).
    Flush(mpsc::UnboundedSender<String>),
    /// A streaming client went away.
    Detach(mpsc::UnboundedSender<String>),
    /// `guard audit`: the history to read, and with `live` the records from now on.
    Audit {
        peer: PeerCredentials,
        filter: AuditFilter,
        live: Option<mpsc::Sender<String>>,
        limit: Option<usize>,
        reply: oneshot::Sender<Result<HistoryRead, ResponseLine>>,
    },
    /// `guard node`: the cluster's latest picture of the node's pods, to put in force.
    Node(super::pods::Desired),
}

/// A handle on the daemon's loop for requests made inside the daemon.
#[derive(Clone)]
pub struct ControlPort {
    tx: mpsc::Sender<Command>,
}

impl ControlPort {
    pub fn new(tx: mpsc::Sender<Command>) -> ControlPort {
        ControlPort { tx }
    }

    /// Hands `guard node`'s latest picture of the pods to the loop; false when it stopped.
    pub async fn node_desired(&self, desired: super::pods::Desired) -> bool {
        self.tx.send(Command::Node(desired)).await.is_ok()
    }

    /// One request as `peer`, answered as the socket would answer it (never streamed).
    pub async fn request(&self, peer: PeerCredentials, request: Request) -> ResponseLine {
        let (reply, answer) = oneshot::channel();
        let command = Command::Request {
            peer,
            request,
            stream: None,
            reply,
        };
        if self.tx.send(command).await.is_err() {
            return stopping();
        }
        answer.await.unwrap_or_else(|_| stopping())
    }

    /// `watch` as `peer`: the answer (the asks now), and the stream of `ask` / `resolved`
    /// lines for the asks `peer` may see, which ends when the receiver is dropped.
    pub async fn watch(
        &self,
        peer: PeerCredentials,
    ) -> (ResponseLine, mpsc::UnboundedReceiver<String>) {
        let (lines, watched) = mpsc::unbounded_channel();
        let (reply, answer) = oneshot::channel();
        let command = Command::Request {
            peer,
            request: Request::Watch,
            stream: Some(lines),
            reply,
        };
        if self.tx.send(command).await.is_err() {
            return (stopping(), watched);
        }
        (answer.await.unwrap_or_else(|_| stopping()), watched)
    }

    /// The audit records `peer` may read that match `filter`, as JSON lines, from now on
    /// (none of the history); `None` when the loop refused or stopped.
    pub async fn follow_audit(
        &self,
        peer: PeerCredentials,
        filter: AuditFilter,
    ) -> Option<mpsc::Receiver<String>> {
        let (live, lines) = mpsc::channel(4096);
        let (reply, history) = oneshot::channel();
        let command = Command::Audit {
            peer,
            filter,
            live: Some(live),
            limit: Some(0),
            reply,
        };
        self.tx.send(command).await.ok()?;
        history.await.ok()?.ok()?;
        Some(lines)
    }

    /// The newest `limit` audit records `peer` may read that match `filter`, as JSON lines,
    /// read off the loop.
    pub async fn audit(
        &self,
        peer: PeerCredentials,
        filter: AuditFilter,
        limit: usize,
    ) -> Result<Vec<String>, ResponseLine> {
        let (reply, history) = oneshot::channel();
        let command = Command::Audit {
            peer,
            filter,
            live: None,
            limit: Some(limit),
            reply,
        };
        if self.tx.send(command).await.is_err() {
            return Err(stopping());
        }
        let history = history.await.map_err(|_| stopping())??;
        tokio::task::spawn_blocking(move || {
            let mut lines = Vec::new();
            history
                .run(|line| {
                    lines.push(line);
                    true
                })
                .map(|_| lines)
        })
        .await
        .map_err(|_| stopping())?
        .map_err(|err| {
            ResponseLine::error(ErrorCode::Failed, format!("reading the audit log: {err}"))
        })
    }
}

fn stopping() -> ResponseLine {
    ResponseLine::error(ErrorCode::Failed, "the daemon is stopping")
}
