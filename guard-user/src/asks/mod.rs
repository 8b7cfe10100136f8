//! Asks and their answers, shared by the daemon and a stand-alone `guard run`: a kernel
//! `prompt` becomes a message and an ask (`messages.rs`), pending asks are kept and expire
//! (`book.rs`), an approval `--once` / `--session` is held in the kernel maps (`approvals.rs`),
//! and an `--always` or a `deny --always` becomes the amendment line that covers exactly what
//! was asked (`lines.rs`). Who may answer, and where the line is written, is the caller's.

pub mod answer;
pub mod approvals;
pub mod book;
pub mod event;
pub mod messages;

use serde::{Deserialize, Serialize};

pub use approvals::{Answerer, Approval, ApprovalTarget, Approvals};
pub use book::{Ask, AskBook, AskState, AskTarget, BlockedRequest, Recorded, timestamp};
pub use messages::{Described, blocked_request, describe, protocol_for};

/// How an ask is approved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalMode {
    /// The same request succeeds when retried within `asks.once_secs`.
    Once,
    /// Until the daemon stops or the scope the ask came from ends.
    Session,
    /// The amendment line is appended to the amendments file.
    Always,
}

impl ApprovalMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalMode::Once => "once",
            ApprovalMode::Session => "session",
            ApprovalMode::Always => "always",
        }
    }
}
