//! guard's own log: `tracing` events (the daemon's notes, reload refusals, what the kernel does not
//! hold), with the `log` records of aya and hickory bridged in, filtered by `GUARD_LOG` (an
//! env-filter, e.g. `guard=debug,aya=info`) or by the global `-v`/`-q`, on stderr. Under systemd
//! (`JOURNAL_STREAM` set) each line starts with its syslog priority (`<4>` for a warning), which
//! journald reads as the entry's level, and carries no time or colour of its own.
//!
//! What a command prints for people (a decision, a refusal, an answer) is its output, not this log.

use std::fmt;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The filter when `GUARD_LOG` is not set: guard's notes at info, the libraries' warnings.
fn default_filter(verbose: u8, quiet: u8) -> &'static str {
    match (verbose, quiet) {
        (_, q) if q >= 2 => "off",
        (_, 1) => "error",
        (0, _) => "guard=info,warn",
        (1, _) => "guard=debug,info",
        _ => "debug",
    }
}

/// Installs the subscriber once, for the whole process (a second call changes nothing).
pub fn init(verbose: u8, quiet: u8) {
    let filter = EnvFilter::try_from_env("GUARD_LOG")
        .unwrap_or_else(|_| EnvFilter::new(default_filter(verbose, quiet)));
    let journal = std::env::var_os("JOURNAL_STREAM").is_some();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if journal {
        builder.event_format(JournalFormat).try_init()
    } else {
        builder
            .with_ansi(
                anstream::AutoStream::choice(&std::io::stderr()) != anstream::ColorChoice::Never,
            )
            .with_target(false)
            .without_time()
            .try_init()
    };
}

/// `<PRIORITY>target: message key=value ...`, the sd-daemon convention journald understands.
struct JournalFormat;

impl<S, N> FormatEvent<S, N> for JournalFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let level = *event.metadata().level();
        write!(
            writer,
            "<{}>{}: ",
            priority(level),
            event.metadata().target()
        )?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// syslog priorities (sd-daemon(3)): err 3, warning 4, info 6, debug 7.
fn priority(level: Level) -> u8 {
    match level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        _ => 7,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiet_and_verbose_choose_the_default_filter() {
        assert_eq!(default_filter(0, 0), "guard=info,warn");
        assert_eq!(default_filter(1, 0), "guard=debug,info");
        assert_eq!(default_filter(2, 0), "debug");
        assert_eq!(default_filter(0, 1), "error");
        assert_eq!(default_filter(3, 2), "off");
        assert_eq!(priority(Level::WARN), 4);
    }
}
