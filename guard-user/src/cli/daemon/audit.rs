//! `guard audit`: the audit records you may read, from the daemon (which checks each record
//! against your authorization) or straight from log files (`--file`), filtered, as aligned
//! lines, JSON lines or RFC 5424 (printed, or sent to a syslog receiver with `--syslog`);
//! `--follow` keeps streaming new records live.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::SystemTime;

use anstream::eprintln;
use clap::{Args, ValueEnum};
use serde_json::Value;

use super::control::{SocketArgs, client_error};
use crate::audit::files::{Newest, log_files, read_records};
use crate::audit::filter::AuditFilter;
use crate::audit::record::AuditRecord;
use crate::audit::syslog::{Facility, SyslogSender, SyslogTarget, rfc5424};
use crate::cli::output::{decision_style, dim, usage_error};
use crate::daemon::client::Client;
use crate::daemon::wire::protocol::Request;
use crate::daemon::wire::responses::{AuditEvent, StreamLine};
use crate::policy::Decision;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AuditFormat {
    /// One aligned line per record (colour on a terminal).
    Text,
    /// The records as JSON lines, exactly as logged (schema version 1).
    Json,
    /// RFC 5424 syslog messages, one per line: PRI from the decision, MSGID the record type,
    /// `[guard@32473 ...]` structured data, the JSON record as the message.
    Rfc5424,
}

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  guard audit                                   # what the daemon has logged that you may read
  guard audit --follow --decision forbidden     # refusals, live
  guard audit --since 2h --exe /usr/bin/git --json
  guard audit --since 2026-12-01T09:00:00Z --pid 4242
  sudo guard audit --file /var/log/guard/audit.jsonl --type approval
  guard audit --follow --syslog tcp://logs.example.com:514   # forward to your pipeline

Through the daemon, each record is shown only if the authorization policy lets you read it
(built in: root and admin_group read everything, other users their own processes' and
requests' records). With --file the log is read directly (whoever may read the file).")]
pub struct AuditArgs {
    #[command(flatten)]
    socket: SocketArgs,
    /// After the records so far, stream new ones as the daemon makes them (Ctrl-C ends).
    #[arg(long, short = 'f')]
    follow: bool,
    /// Only records at or after T: an RFC 3339 time (2026-12-01T09:00:00Z) or an age (90s,
    /// 10m, 2h, 7d).
    #[arg(long, value_name = "T")]
    since: Option<String>,
    /// Only this decision: allow, prompt (or ask), forbidden (or deny).
    #[arg(long, value_name = "D")]
    decision: Option<String>,
    /// Only records about this process id.
    #[arg(long, value_name = "N")]
    pid: Option<u32>,
    /// Only records about this executable: a full path, or a file name (`git`).
    #[arg(long, value_name = "PATH")]
    exe: Option<String>,
    /// Only records of this type (decision, ask, ask_expired, approval, denial, amendment,
    /// reload, run, control_refused, control_allowed, loss, daemon_start, daemon_stop);
    /// repeat for several.
    #[arg(long = "type", value_name = "TYPE")]
    types: Vec<String>,
    /// Of the records so far, only the newest N.
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    /// The records as JSON lines (the same as --format json).
    #[arg(long)]
    json: bool,
    #[arg(long, value_enum, default_value_t = AuditFormat::Text)]
    format: AuditFormat,
    /// Read these log files (and their rotated predecessors, PATH.1 ...) instead of asking the
    /// daemon.
    #[arg(long = "file", value_name = "PATH", conflicts_with = "follow")]
    files: Vec<PathBuf>,
    /// Send the records as RFC 5424 to this receiver instead of printing them:
    /// udp://HOST:PORT, tcp://HOST:PORT (octet-counted frames) or unix:///dev/log.
    #[arg(long, value_name = "URL", value_parser = clap::value_parser!(SyslogTarget))]
    syslog: Option<SyslogTarget>,
    /// The syslog facility of --format rfc5424 and --syslog: authpriv, auth, daemon, user,
    /// local0 ... local7.
    #[arg(long, value_name = "NAME", default_value_t = Facility::Authpriv,
          value_parser = clap::value_parser!(Facility))]
    facility: Facility,
}

/// `--since`: an RFC 3339 time as given, or an age turned into one.
fn since_time(raw: &str) -> Result<String, String> {
    if humantime::parse_rfc3339_weak(raw).is_ok() {
        return Ok(raw.to_string());
    }
    let age = humantime::parse_duration(raw).map_err(|_| {
        format!(
            "--since {raw:?}: give an RFC 3339 time (2026-12-01T09:00:00Z) or an age (10m, 2h, 7d)"
        )
    })?;
    let at = SystemTime::now()
        .checked_sub(age)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    Ok(humantime::format_rfc3339_nanos(at).to_string())
}

impl AuditArgs {
    fn filter(&self) -> Result<AuditFilter, String> {
        let filter = AuditFilter {
            since: self.since.as_deref().map(since_time).transpose()?,
            decision: self.decision.clone(),
            pid: self.pid,
            exe: self.exe.clone(),
            types: self.types.clone(),
        };
        // Checked here too, so a mistake is reported before anything is read.
        filter.compile()?;
        Ok(filter)
    }

    fn format(&self) -> AuditFormat {
        if self.json {
            AuditFormat::Json
        } else {
            self.format
        }
    }
}

pub fn audit(args: &AuditArgs) -> ExitCode {
    let filter = match args.filter() {
        Ok(filter) => filter,
        Err(message) => return usage_error(&message),
    };
    let syslog = match &args.syslog {
        Some(target) => match SyslogSender::connect(target, args.facility) {
            Ok(sender) => Some(sender),
            Err(err) => {
                eprintln!("guard audit: {err:#}");
                return ExitCode::from(1);
            }
        },
        None => None,
    };
    let mut printer = Printer {
        format: args.format(),
        facility: args.facility,
        out: std::io::stdout().lock(),
        syslog,
    };
    let code = if args.files.is_empty() {
        from_daemon(args, filter, &mut printer)
    } else {
        from_files(args, &filter, &mut printer)
    };
    if let Some(sender) = &printer.syslog {
        eprintln!(
            "guard audit: sent {} record(s) to {}{}",
            sender.sent(),
            sender.target(),
            match sender.failed() {
                0 => String::new(),
                n => format!(", {n} failed"),
            }
        );
        if sender.failed() > 0 {
            return ExitCode::from(1);
        }
    }
    code
}

fn from_files(args: &AuditArgs, filter: &AuditFilter, printer: &mut Printer) -> ExitCode {
    let compiled = filter.compile().expect("checked in filter()");
    let mut files = Vec::new();
    for path in &args.files {
        if !path.exists() {
            eprintln!("guard audit: {}: no such file", path.display());
            return ExitCode::from(2);
        }
        files.extend(log_files(path));
    }
    let mut newest = args.limit.map(Newest::new);
    let read = read_records(&files, |record| {
        if compiled.matches(&record) {
            match &mut newest {
                Some(kept) => kept.push(record),
                None => return printer.print(&record),
            }
        }
        true
    });
    for record in newest.into_iter().flat_map(Newest::into_items) {
        if !printer.print(&record) {
            break;
        }
    }
    match read {
        Ok(stats) => {
            if stats.bad_lines > 0 {
                eprintln!(
                    "guard audit: skipped {} line(s) that are not records (a torn line after a crash, or not an audit log)",
                    stats.bad_lines
                );
            }
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("guard audit: {err}");
            ExitCode::from(2)
        }
    }
}

fn from_daemon(args: &AuditArgs, filter: AuditFilter, printer: &mut Printer) -> ExitCode {
    let mut client = match Client::connect(&args.socket.socket) {
        Ok(client) => client,
        Err(err) => return client_error(&err),
    };
    if let Err(err) = client.request(Request::Audit {
        filter,
        follow: args.follow,
        limit: args.limit,
    }) {
        return client_error(&err);
    }
    loop {
        let line = match client.next_line() {
            Ok(Some(line)) => line,
            Ok(None) => {
                if args.follow {
                    eprintln!("guard audit: the daemon closed the stream (it stopped?)");
                    return ExitCode::from(4);
                }
                return ExitCode::SUCCESS;
            }
            Err(err) => return client_error(&err),
        };
        // A line of a newer daemon this client does not know is skipped.
        let Ok(StreamLine { event, .. }) = serde_json::from_str::<StreamLine<AuditEvent>>(&line)
        else {
            continue;
        };
        match event {
            AuditEvent::Record { record } => {
                if !printer.print(&record) {
                    return ExitCode::SUCCESS;
                }
            }
            AuditEvent::HistoryEnd(end) => {
                // The daemon could not read (part of) its log: say so, whatever followed.
                if let Some(error) = &end.error {
                    eprintln!("guard audit: the daemon could not read its log: {error}");
                    if !args.follow {
                        return ExitCode::from(1);
                    }
                }
                if let Some(bad) = end.bad_lines.filter(|&n| n > 0) {
                    eprintln!(
                        "guard audit: {bad} line(s) of the log are not records (a torn line after a crash?)"
                    );
                }
                if !args.follow {
                    return ExitCode::SUCCESS;
                }
            }
            AuditEvent::Missed { records } => eprintln!(
                "guard audit: missed {records} record(s): this client read too slowly (they are in the log)"
            ),
        }
    }
}

struct Printer {
    format: AuditFormat,
    facility: Facility,
    out: std::io::StdoutLock<'static>,
    /// Records go here instead of stdout.
    syslog: Option<SyslogSender>,
}

impl Printer {
    /// `false` once stdout is closed (e.g. piped into `head`).
    fn print(&mut self, record: &AuditRecord) -> bool {
        if let Some(sender) = &mut self.syslog {
            // A failed send is counted (and reported at the end); the next may get through.
            let _ = sender.send(record);
            return true;
        }
        let written = match self.format {
            AuditFormat::Rfc5424 => writeln!(self.out, "{}", rfc5424(record, self.facility)),
            AuditFormat::Json => serde_json::to_writer(&mut self.out, record)
                .map_err(std::io::Error::from)
                .and_then(|_| writeln!(self.out)),
            AuditFormat::Text => {
                let line = text_line(record);
                let mut styled = anstream::AutoStream::auto(&mut self.out);
                writeln!(styled, "{line}")
            }
        };
        written.is_ok() && self.out.flush().is_ok()
    }
}

fn decision_of(name: Option<&str>) -> Option<Decision> {
    match name? {
        "allow" => Some(Decision::Allow),
        "prompt" => Some(Decision::Prompt),
        "forbidden" => Some(Decision::Forbidden),
        _ => None,
    }
}

/// `TIME  TYPE  DECISION  OWNER  WHAT  RULE`, aligned.
pub fn text_line(record: &AuditRecord) -> String {
    // Milliseconds are enough to read; --json has the nanoseconds.
    let time = record
        .time
        .get(..23)
        .map_or(record.time.clone(), |t| format!("{t}Z"));
    let decision = decision_of(record.decision());
    let style = decision_style(decision);
    let decision = record.decision().unwrap_or("-");
    let rule = record
        .rule
        .as_ref()
        .map(|r| format!("  {}", r.location()))
        .unwrap_or_default();
    format!(
        "{dim}{time}{dim:#}  {:<15} {style}{decision:<9}{style:#} {:<10} {}{dim}{rule}{dim:#}",
        record.kind.as_str(),
        record.owner,
        what(record),
        dim = dim(),
    )
}

/// The record's subject in a few words.
fn what(record: &AuditRecord) -> String {
    let process = record.process.as_ref();
    let pid = process
        .map(|p| format!("pid {} ", p.pid))
        .unwrap_or_default();
    let target = if let Some(file) = &record.file {
        format!("{} {file}", record.event.as_deref().unwrap_or("write"))
    } else if let Some(d) = &record.destination {
        match &d.host {
            Some(host) => format!("{host} ({}):{}/{}", d.address, d.port, d.transport),
            None => format!("{}:{}/{}", d.address, d.port, d.transport),
        }
    } else if let Some(p) = process {
        let argv = if p.argv.is_empty() {
            p.exe.clone()
        } else {
            shlex::try_join(p.argv.iter().map(String::as_str)).unwrap_or_else(|_| p.argv.join(" "))
        };
        format!("{} {argv}", record.event.as_deref().unwrap_or("exec"))
    } else {
        String::new()
    };
    let mut out = format!("{pid}{target}");
    if let Some(ask) = record.ask {
        out.push_str(&format!("  ask {ask}"));
    }
    if let Some(a) = &record.approval {
        out.push_str(&format!("  {} by {}", a.mode, a.by));
    }
    if let Some(a) = &record.amendment {
        out.push_str(&format!("  {}:{}: {}", a.file, a.line, a.text));
    }
    if let Some(loss) = &record.loss {
        out.push_str(&format!(
            "lost {} (ring buffer full), {} (writer behind), {} (write errors)",
            loss.ring_buffer, loss.writer, loss.write_errors
        ));
    }
    if out.is_empty() {
        out = details(record);
    }
    out
}

/// A type's own fields, for records with no process (reload, run, control_*, daemon_*).
fn details(record: &AuditRecord) -> String {
    record
        .details
        .iter()
        .map(|(k, v)| match v {
            Value::String(s) => format!("{k}={s}"),
            other => format!("{k}={other}"),
        })
        .collect::<Vec<_>>()
        .join(" ")
}
