//! `guard replay`: what a draft policy would change for the requests an audit log recorded
//! (the logic is `audit::replay`; this is the command line and how the report is shown).

use std::path::PathBuf;
use std::process::ExitCode;

use anstream::println;
use anstyle::Style;
use clap::{Args, ValueEnum};

use crate::audit::replay::{
    Class, Outcome, Recording, ReplayReport, ReplayedRequest, RequestKind, RuleChanges, replay,
};
use crate::cli::RulesArgs;
use crate::cli::output::{EXIT_POLICY_ERROR, decision_style, dim, error, print_json, usage_error};
use crate::policy::Decision;

const AFTER_HELP: &str = "Examples:
  guard replay --rules draft.rules /var/log/guard/audit.jsonl.1 /var/log/guard/audit.jsonl
  guard replay --rules ./rules --overlay managed.rules --exit-code audit.jsonl   # CI: 1 on a change
  guard replay --json --rules draft.rules audit.jsonl | jq '.newly_refused[].text'

Every recorded exec and connection is decided again by the draft the way the kernel decides it
(an exec by the executed file's name and its arguments, a destination by its address, port and
transport) and compared with what the recording says the process met:
  newly refused   it went through; the draft would ask (prompt) or refuse (forbidden)
  newly allowed   it was asked about or refused; the draft lets it through
  changed         prompt became forbidden, or forbidden became prompt
An audit-only match went through, so a draft that enforces it shows it as newly refused.

What it cannot see: only the requests the kernel recorded. With the default settings the kernel
records refusals, prompts and audit-only matches, not allowed requests, so \"newly refused\" can
only come from prompts and audit-only records unless the daemon also records allowed decisions.
Host names resolve to the addresses recorded with them, so a rule for a name the recording never
named matches nothing. An exec's first token is the file name of the path given to execve (the
kernel uses the executed file's own name, which differs when that path is a symlink).

Exit status: 0; with --exit-code, 1 when anything would change; 2 when an audit file cannot be
read or the policy does not load.";

#[derive(Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct ReplayArgs {
    /// The draft policy to try.
    #[command(flatten)]
    rules: RulesArgs,
    /// Print the report as one JSON object (every request, the unchanged ones too).
    #[arg(long)]
    json: bool,
    /// Also list this section; the changes are always listed.
    #[arg(long, value_enum, value_name = "SECTION")]
    show: Vec<ShowArg>,
    /// Exit 1 when the draft would change anything, else 0 (for CI).
    #[arg(long)]
    exit_code: bool,
    /// Audit log files (one JSON record a line), read in the order given.
    #[arg(value_name = "AUDIT_FILE", required = true)]
    files: Vec<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ShowArg {
    /// The requests the draft decides as they were decided.
    Unchanged,
}

/// The exit status `--exit-code` gives when something would change.
const EXIT_CHANGES: u8 = 1;

pub fn run(args: &ReplayArgs) -> ExitCode {
    let loaded = match args.rules.load() {
        Ok(loaded) => loaded,
        Err(code) => return code,
    };
    let recording = match Recording::read_files(&args.files) {
        Ok(recording) => recording,
        Err(err) => return usage_error(&err.to_string()),
    };
    let report = match replay(&loaded.policy, &recording) {
        Ok(report) => report,
        // The kernel could not hold this draft either; `guard run` would say the same.
        Err(err) => return error("policy", &format!("{err:#}"), EXIT_POLICY_ERROR),
    };
    if args.json {
        print_json(&serde_json::to_value(&report).expect("a report always serialises"));
    } else {
        let draft: Vec<String> = loaded.sources.iter().map(|s| s.display_name()).collect();
        explain(
            &report,
            &draft.join(", "),
            args.show.contains(&ShowArg::Unchanged),
        );
    }
    if args.exit_code && report.totals.changes() > 0 {
        ExitCode::from(EXIT_CHANGES)
    } else {
        ExitCode::SUCCESS
    }
}

fn explain(report: &ReplayReport, draft: &str, show_unchanged: bool) {
    println!("{}", summary(report, draft));
    if let Some(skipped) = skipped(report) {
        let dim = dim();
        println!("{dim}skipped:{dim:#} {skipped}");
    }
    let mut classes = vec![Class::NewlyRefused, Class::NewlyAllowed, Class::Changed];
    if show_unchanged {
        classes.push(Class::Unchanged);
    }
    let rows: Vec<(Class, Row)> = classes
        .iter()
        .flat_map(|&class| report.requests(class).iter().map(move |r| (class, row(r))))
        .collect();
    let widths = Widths::of(rows.iter().map(|(_, row)| row));
    let bold = Style::new().bold();
    for class in classes {
        let count = report.requests(class).len();
        if count == 0 {
            continue;
        }
        println!("\n{bold}{}{bold:#} ({count})", class.title());
        for (_, row) in rows.iter().filter(|(of, _)| *of == class) {
            println!("  {}", row.render(&widths));
        }
    }
    if report.totals.changes() == 0 {
        println!("\nNothing would change.");
    } else {
        explain_by_rule(report);
    }
    for note in notes(report) {
        let dim = dim();
        println!("{dim}note:{dim:#} {note}");
    }
}

/// `6 decision records (5 requests) against draft.rules: 2 newly refused, ...`.
fn summary(report: &ReplayReport, draft: &str) -> String {
    let totals = &report.totals;
    format!(
        "{} ({}) against {draft}: {} newly refused, {} newly allowed, {} changed, {} unchanged",
        plural(totals.read.decision_records, "decision record"),
        plural(totals.requests as u64, "request"),
        totals.newly_refused.requests,
        totals.newly_allowed.requests,
        totals.changed.requests,
        totals.unchanged.requests,
    )
}

/// What was read but not replayed: `1 line that is not a record, ...`.
fn skipped(report: &ReplayReport) -> Option<String> {
    let read = &report.totals.read;
    let mut parts = Vec::new();
    if read.skipped_lines > 0 {
        let verb = if read.skipped_lines == 1 { "is" } else { "are" };
        parts.push(format!(
            "{} that {verb} not a record",
            plural(read.skipped_lines, "line")
        ));
    }
    if read.unusable_decision_records > 0 {
        parts.push(format!(
            "{} that cannot be replayed",
            plural(read.unusable_decision_records, "decision record")
        ));
    }
    (!parts.is_empty()).then(|| parts.join(", "))
}

fn plural(count: u64, noun: &str) -> String {
    if count == 1 {
        format!("1 {noun}")
    } else {
        format!("{count} {noun}s")
    }
}

/// What a person should keep in mind about this report.
fn notes(report: &ReplayReport) -> Vec<&'static str> {
    let mut notes = Vec::new();
    if report.totals.read.decision_records > 0 && report.totals.read.allowed_records == 0 {
        notes.push(
            "the recording holds no allowed requests (the daemon records them only when set \
             to), so newly refused can only come from prompts and audit-only records.",
        );
    }
    if report.unmatched_defaults.audit_only {
        notes.push("the draft is in audit-only mode: it would enforce nothing.");
    }
    notes
}

/// Text as shown, and its width without the styling.
struct Cell {
    styled: String,
    width: usize,
}

impl Cell {
    fn plain(text: &str) -> Cell {
        Cell {
            styled: text.to_string(),
            width: text.chars().count(),
        }
    }

    fn styled(text: &str, style: Style) -> Cell {
        Cell {
            styled: format!("{style}{text}{style:#}"),
            width: text.chars().count(),
        }
    }

    fn then(mut self, next: Cell) -> Cell {
        self.styled.push_str(&next.styled);
        self.width += next.width;
        self
    }

    /// Padded with spaces to `width` columns.
    fn padded(&self, width: usize) -> String {
        format!(
            "{}{}",
            self.styled,
            " ".repeat(width.saturating_sub(self.width))
        )
    }
}

/// One request's line: count, old → new, the request, the draft rule that decides.
struct Row {
    count: String,
    change: Cell,
    request: Cell,
    rule: Cell,
}

/// Column widths over every row shown, so the sections line up with each other.
struct Widths {
    count: usize,
    change: usize,
    request: usize,
}

/// A longer request does not push every other line's rule column out with it.
const MAX_REQUEST_COLUMN: usize = 60;

impl Widths {
    fn of<'a>(rows: impl Iterator<Item = &'a Row>) -> Widths {
        let mut widths = Widths {
            count: 0,
            change: 0,
            request: 0,
        };
        for row in rows {
            widths.count = widths.count.max(row.count.len());
            widths.change = widths.change.max(row.change.width);
            widths.request = widths
                .request
                .max(row.request.width.min(MAX_REQUEST_COLUMN));
        }
        widths
    }
}

impl Row {
    fn render(&self, widths: &Widths) -> String {
        format!(
            "{:>count$}  {}  {}  {}",
            self.count,
            self.change.padded(widths.change),
            self.request.padded(widths.request),
            self.rule.styled,
            count = widths.count,
        )
    }
}

fn row(request: &ReplayedRequest) -> Row {
    let rule = match &request.draft.rule {
        Some(rule) => Cell::plain(&rule.location()),
        None => Cell::styled("unmatched default", dim()),
    };
    Row {
        count: request.count.to_string(),
        change: outcome_cell(request.recorded.outcome)
            .then(Cell::plain(" → "))
            .then(outcome_cell(request.draft.outcome)),
        request: Cell::plain(&request.text),
        rule,
    }
}

/// `forbidden`, or `forbidden (audit only)` when it was (or would be) recorded only.
fn outcome_cell(outcome: Outcome) -> Cell {
    let decision = Cell::styled(
        outcome.decision.as_str(),
        decision_style(Some(outcome.decision)),
    );
    if outcome.enforced || outcome.decision == Decision::Allow {
        decision
    } else {
        decision.then(Cell::styled(" (audit only)", dim()))
    }
}

fn explain_by_rule(report: &ReplayReport) {
    let bold = Style::new().bold();
    println!("\n{bold}by draft rule{bold:#}");
    let locations: Vec<String> = report.by_rule.iter().map(RuleChanges::location).collect();
    let counts: Vec<String> = report.by_rule.iter().map(class_counts).collect();
    let location_width = locations
        .iter()
        .map(|l| l.chars().count())
        .max()
        .unwrap_or(0);
    let counts_width = counts.iter().map(String::len).max().unwrap_or(0);
    for ((changes, location), counts) in report.by_rule.iter().zip(&locations).zip(&counts) {
        let dim = dim();
        println!(
            "  {location:<location_width$}  {counts:<counts_width$}  {dim}{}{dim:#}",
            rule_text(report, changes)
        );
    }
}

/// `2 newly refused, 1 changed`: the requests of one rule, per class.
fn class_counts(changes: &RuleChanges) -> String {
    [Class::NewlyRefused, Class::NewlyAllowed, Class::Changed]
        .into_iter()
        .filter_map(|class| {
            let count = changes.requests.iter().filter(|r| r.class == class).count();
            (count > 0).then(|| format!("{count} {}", class.title()))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The rule as written, or the unmatched setting that decides.
fn rule_text(report: &ReplayReport, changes: &RuleChanges) -> String {
    match (&changes.rule, changes.kind) {
        (Some(rule), _) => rule.text.clone(),
        (None, RequestKind::Exec) => format!(
            "enforcement(unmatched_exec=\"{}\")",
            report.unmatched_defaults.exec.as_str()
        ),
        (None, RequestKind::Destination) => format!(
            "enforcement(unmatched_network=\"{}\")",
            report.unmatched_defaults.network.as_str()
        ),
    }
}
