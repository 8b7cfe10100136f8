//! What a `guard run` client is sent about its refusals: each blocked-request line, but not a
//! flood of the same one. A line repeated within a second is counted instead of sent; the count
//! goes out (`repeated`) before the next different line, once the second is over, or when the
//! client asks for a flush. A process refused a million times a second costs its terminal a
//! line a second, and the audit log still has every record.

use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedSender;

use super::protocol::event_line;
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

    /// Sends the line (made, with `body`, only when it is sent), or counts a repeat of the
    /// last one (same `key`) within the window.
    pub fn blocked(
        &mut self,
        key: u64,
        line: impl FnOnce() -> String,
        body: impl FnOnce() -> Value,
        now: Instant,
    ) {
        if let Some((last, at)) = &self.last
            && *last == key
            && now.duration_since(*at) < WINDOW
        {
            self.repeats += 1;
            return;
        }
        self.send_repeats();
        let mut event = body();
        event["line"] = Value::String(line());
        let _ = self.out.send(event_line("blocked", event));
        self.last = Some((key, now));
    }

    /// A line about the run that is not a kernel refusal (a held call that failed), sent as
    /// it is; `on_stderr` says the program's stderr has it already, so the client need not
    /// print it again.
    pub fn message(&mut self, line: &str, on_stderr: bool) {
        self.send_repeats();
        let _ = self.out.send(event_line(
            "message",
            json!({"line": line, "on_stderr": on_stderr}),
        ));
        self.last = None;
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
            let _ = self
                .out
                .send(event_line("repeated", json!({"count": self.repeats})));
            self.repeats = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_within_a_second_are_counted_and_told_before_the_next_line() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut stream = RunStream::new(tx);
        let t0 = Instant::now();
        for i in 0..5 {
            stream.blocked(
                1,
                || "a".into(),
                || json!({}),
                t0 + Duration::from_millis(i),
            );
        }
        stream.blocked(
            2,
            || "b".into(),
            || json!({}),
            t0 + Duration::from_millis(10),
        );
        stream.blocked(
            2,
            || "b".into(),
            || json!({}),
            t0 + Duration::from_millis(1500),
        );
        let lines: Vec<String> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
        let events: Vec<(String, Value)> = lines
            .iter()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                (v["event"].as_str().unwrap().to_string(), v)
            })
            .collect();
        assert_eq!(events.len(), 4, "{lines:?}");
        assert_eq!(events[0].1["line"], "a");
        assert_eq!(
            (events[1].0.as_str(), &events[1].1["count"]),
            ("repeated", &json!(4))
        );
        assert_eq!(events[2].1["line"], "b");
        // After the window the same line is sent again.
        assert_eq!(events[3].1["line"], "b");
        stream.blocked(
            2,
            || "b".into(),
            || json!({}),
            t0 + Duration::from_millis(1600),
        );
        stream.settle(t0 + Duration::from_millis(1700), true);
        let told: Value = serde_json::from_str(&rx.try_recv().unwrap()).unwrap();
        assert_eq!(
            (told["event"].as_str(), &told["count"]),
            (Some("repeated"), &json!(1))
        );
    }
}
