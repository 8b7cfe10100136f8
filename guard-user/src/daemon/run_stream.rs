//! What a `guard run` client is sent about its refusals: each blocked-request line, but not a
//! flood of the same one. A line repeated within a second is counted instead of sent; the count
//! goes out (`repeated`) before the next different line, once the second is over, or when the
//! client asks for a flush. A process refused a million times a second costs its terminal a
//! line a second, and the audit log still has every record.

use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedSender;

use super::wire::protocol::stream_line;
use super::wire::responses::{Blocked, RunEvent};
use crate::kernel::events::KernelEvent;

/// Repeats of one line within this window are counted, not sent.
const WINDOW: Duration = Duration::from_secs(1);

pub struct RunStream {
    out: UnboundedSender<String>,
    /// The last line sent (its [`repeat_key`]) and when.
    last: Option<(u64, Instant)>,
    repeats: u64,
}

/// What makes two events the same line: the request and the decision, not the process or the
/// time. A hash, so a flood of repeats costs no formatting.
pub fn repeat_key(event: &KernelEvent) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (
        event.rule,
        event.decision,
        event.audit_only,
        &event.exe,
        &event.argv,
        &event.destination,
    )
        .hash(&mut hasher);
    hasher.finish()
}

impl RunStream {
    pub fn new(out: UnboundedSender<String>) -> RunStream {
        RunStream {
            out,
            last: None,
            repeats: 0,
        }
    }

    pub fn is(&self, other: &UnboundedSender<String>) -> bool {
        self.out.same_channel(other)
    }

    /// Sends the event (made only when it is sent), or counts a repeat of the last one (same
    /// `key`) within the window.
    pub fn blocked(&mut self, key: u64, event: impl FnOnce() -> Blocked, now: Instant) {
        if let Some((last, at)) = &self.last
            && *last == key
            && now.duration_since(*at) < WINDOW
        {
            self.repeats += 1;
            return;
        }
        self.send_repeats();
        self.send(RunEvent::Blocked(Box::new(event())));
        self.last = Some((key, now));
    }

    /// A line about the run that is not a kernel refusal (a held call that failed), sent as
    /// it is; `on_stderr` says the program's stderr has it already, so the client need not
    /// print it again.
    pub fn message(&mut self, line: &str, on_stderr: bool) {
        self.send_repeats();
        self.send(RunEvent::Message {
            line: line.to_string(),
            on_stderr,
        });
        self.last = None;
    }

    /// Every event drained for a flush has been sent.
    pub fn flushed(&mut self) {
        self.send(RunEvent::Flushed);
    }

    /// The count of repeats not yet told, if the window is over (or `force`).
    pub fn settle(&mut self, now: Instant, force: bool) {
        let over = self
            .last
            .as_ref()
            .is_some_and(|(_, at)| now.duration_since(*at) >= WINDOW);
        if force || over {
            self.send_repeats();
            if over {
                self.last = None;
            }
        }
    }

    fn send_repeats(&mut self) {
        if self.repeats > 0 {
            self.send(RunEvent::Repeated {
                count: self.repeats,
            });
            self.repeats = 0;
        }
    }

    /// A closed client is no error: its scope goes on, and `end_run` drops this stream.
    fn send(&self, event: RunEvent) {
        let _ = self.out.send(stream_line(event));
    }
}

#[cfg(test)]
mod tests {
    use super::super::wire::responses::StreamLine;
    use super::*;
    use crate::asks::BlockedRequest;

    fn blocked(line: &str) -> Blocked {
        Blocked {
            line: line.into(),
            message: String::new(),
            ask: None,
            answers: None,
            held: false,
            expires_in: 0,
            request: BlockedRequest {
                host: String::new(),
                protocol: "exec".into(),
                port: None,
                reason: "denied".into(),
                decision: "deny".into(),
                source: "baseline_policy".into(),
                pid: 1,
                uid: 0,
                executable: "/bin/true".into(),
                argv: vec![],
                timestamp: String::new(),
                rule: None,
                justification: None,
            },
        }
    }

    fn sent(rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>) -> Vec<RunEvent> {
        std::iter::from_fn(|| rx.try_recv().ok())
            .map(|line| {
                let read: StreamLine<RunEvent> = serde_json::from_str(&line).unwrap();
                assert_eq!(read.v, 1, "{line}");
                read.event
            })
            .collect()
    }

    fn line_of(event: &RunEvent) -> &str {
        match event {
            RunEvent::Blocked(blocked) => &blocked.line,
            other => panic!("not a blocked event: {other:?}"),
        }
    }

    #[test]
    fn repeats_within_a_second_are_counted_and_told_before_the_next_line() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut stream = RunStream::new(tx);
        let t0 = Instant::now();
        for i in 0..5 {
            stream.blocked(1, || blocked("a"), t0 + Duration::from_millis(i));
        }
        stream.blocked(2, || blocked("b"), t0 + Duration::from_millis(10));
        stream.blocked(2, || blocked("b"), t0 + Duration::from_millis(1500));
        let events = sent(&mut rx);
        assert_eq!(events.len(), 4, "{events:?}");
        assert_eq!(line_of(&events[0]), "a");
        assert_eq!(events[1], RunEvent::Repeated { count: 4 });
        assert_eq!(line_of(&events[2]), "b");
        // After the window the same line is sent again.
        assert_eq!(line_of(&events[3]), "b");
        stream.blocked(2, || blocked("b"), t0 + Duration::from_millis(1600));
        stream.settle(t0 + Duration::from_millis(1700), true);
        assert_eq!(sent(&mut rx), [RunEvent::Repeated { count: 1 }]);
    }
}
