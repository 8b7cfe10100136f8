//! A [`MetricsSnapshot`] as OpenMetrics text (what Prometheus scrapes), written by the
//! `prometheus-client` crate's encoder. docs/daemon.md ("Metrics") lists every metric; a test
//! below checks that the kernel's counters all have one.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use super::MetricsSnapshot;
use super::tally::ASK_ENDINGS;
use crate::kernel::layers::LayerState;

/// The `Content-Type` of [`encode`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The kernel's decision counters (`guard status`'s `counters`) as `(counter, kind, action)`.
/// Where the kernel does not tell a prompt from a forbidden refusal the action is `refused`.
const KERNEL_DECISIONS: [(&str, &str, &str); 12] = [
    ("exec_allow", "exec", "allow"),
    ("exec_prompt", "exec", "prompt"),
    ("exec_forbidden", "exec", "forbidden"),
    ("net_allow", "net", "allow"),
    ("net_prompt", "net", "prompt"),
    ("net_forbidden", "net", "forbidden"),
    ("file_allow", "file", "allow"),
    ("file_refused", "file", "refused"),
    ("unix_allow", "unix", "allow"),
    ("unix_refused", "unix", "refused"),
    ("device_refused", "device", "refused"),
    ("socket_refused", "socket", "refused"),
];

/// The kernel's other counters, each a metric of its own: `(counter, metric, help)`. The
/// `*_failed_open` ones are `guard_failed_open_total{hook}` (from `failed_open`).
const KERNEL_OTHERS: [(&str, &str, &str); 10] = [
    (
        "audit_only",
        "guard_kernel_audit_only",
        "Decisions recorded but not enforced (audit-only mode), all scopes.",
    ),
    (
        "events_submitted",
        "guard_events_submitted",
        "Events the kernel programs put in the ring buffer.",
    ),
    (
        "events_lost",
        "guard_events_lost",
        "Events lost because the ring buffer was full (the decisions still held).",
    ),
    (
        "events_over_budget",
        "guard_events_over_budget",
        "Events a scope made past its share of the ring buffer in a second (lost; the decisions \
         still held).",
    ),
    (
        "argv_unreadable",
        "guard_argv_unreadable",
        "Execs whose argv could not be read (decided on what could be read, the safe side).",
    ),
    (
        "dns_redirected",
        "guard_dns_redirected",
        "DNS queries of the scopes sent to guard's resolver.",
    ),
    (
        "stand_in_unmapped",
        "guard_stand_in_unmapped",
        "Connects to a stand-in address refused because no approved address was known yet.",
    ),
    (
        "net_held",
        "guard_net_held",
        "Prompted connects and sends let through with their packets held until an answer.",
    ),
    (
        "net_held_dropped",
        "guard_net_held_dropped",
        "Packets of held sockets dropped on the way out (destination not yet approved).",
    ),
    (
        "net_hold_full",
        "guard_net_hold_full",
        "Prompted calls refused because the table of held sockets was full.",
    ),
];

/// The snapshot as OpenMetrics text, ending in `# EOF`.
pub fn encode(snapshot: &MetricsSnapshot) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Reading(snapshot.clone())));
    let mut text = String::new();
    // Writing to a String cannot fail, and every metric below is well-formed.
    let _ = prometheus_client::encoding::text::encode(&mut text, &registry);
    text
}

#[derive(Debug)]
struct Reading(MetricsSnapshot);

/// One metric family: its descriptor, then one sample per label set.
fn family<M: EncodeMetric>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    samples: &[(Vec<(&str, &str)>, M)],
) -> Result<(), std::fmt::Error> {
    let Some((_, first)) = samples.first() else {
        return Ok(());
    };
    let mut metric = encoder.encode_descriptor(name, help, None, first.metric_type())?;
    if let [(labels, value)] = samples
        && labels.is_empty()
    {
        return value.encode(metric);
    }
    for (labels, value) in samples {
        value.encode(metric.encode_family(labels)?)?;
    }
    Ok(())
}

fn counter(name: &str, help: &str, value: u64, e: &mut DescriptorEncoder) -> std::fmt::Result {
    family(e, name, help, &[(vec![], ConstCounter::new(value))])
}

fn gauge(name: &str, help: &str, value: i64, e: &mut DescriptorEncoder) -> std::fmt::Result {
    family(e, name, help, &[(vec![], ConstGauge::new(value))])
}

fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Collector for Reading {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = &self.0;
        let status = &s.status;
        let version = status.version.as_str();
        let backend = status.backend.as_str();
        e.encode_descriptor(
            "guard_build",
            "guard's version and the backend enforcing.",
            None,
            MetricType::Info,
        )?
        .encode_info(&[("version", version), ("backend", backend)])?;
        gauge(
            "guard_uptime_seconds",
            "Seconds since the daemon started.",
            signed(status.uptime_secs),
            &mut e,
        )?;
        gauge(
            "process_resident_memory_bytes",
            "The daemon's resident memory.",
            signed(s.rss_bytes.unwrap_or(0)),
            &mut e,
        )?;
        let mut scopes = vec![];
        for kind in ["host", "cgroup", "runs", "run"] {
            let n = status
                .scopes
                .iter()
                .filter(|c| c.kind.as_str() == kind)
                .count();
            scopes.push((vec![("kind", kind)], ConstGauge::new(signed(n as u64))));
        }
        family(&mut e, "guard_scopes", "Scopes in force, by kind.", &scopes)?;
        let rules: usize = status.rules.iter().map(|r| r.rules).sum();
        gauge(
            "guard_rules",
            "Rules in force.",
            signed(rules as u64),
            &mut e,
        )?;

        // The kernel's counters: every decision in every scope, allowed ones too.
        let kernel = |name: &str| status.counters.get(name).copied().unwrap_or(0);
        let decisions: Vec<_> = KERNEL_DECISIONS
            .iter()
            .map(|(c, kind, action)| {
                (
                    vec![("kind", *kind), ("action", *action)],
                    ConstCounter::new(kernel(c)),
                )
            })
            .collect();
        family(
            &mut e,
            "guard_kernel_decisions",
            "Decisions of the kernel programs in all scopes, by kind and action.",
            &decisions,
        )?;
        for (c, name, help) in KERNEL_OTHERS {
            counter(name, help, kernel(c), &mut e)?;
        }
        let failed: Vec<_> = status
            .failed_open
            .iter()
            .map(|(hook, n)| (vec![("hook", hook.as_str())], ConstCounter::new(*n)))
            .collect();
        family(
            &mut e,
            "guard_failed_open",
            "Decisions that failed open (kernel memory unreadable), by hook: each should stay 0.",
            &failed,
        )?;

        // The events the daemon read, by scope.
        let decisions: Vec<_> = s
            .tally
            .decisions
            .iter()
            .map(|((kind, action, scope), n)| {
                (
                    vec![("kind", *kind), ("action", *action), ("scope", *scope)],
                    ConstCounter::new(*n),
                )
            })
            .collect();
        family(
            &mut e,
            "guard_decisions",
            "Kernel events the daemon read (refusals, asks, audit-only matches; allowed calls \
             only with record_allowed), by kind, action and scope.",
            &decisions,
        )?;
        let refusals: Vec<_> = s
            .tally
            .refusals
            .iter()
            .map(|((kind, scope), n)| {
                (
                    vec![("kind", *kind), ("scope", *scope)],
                    ConstCounter::new(*n),
                )
            })
            .collect();
        family(
            &mut e,
            "guard_refusals",
            "Calls refused (prompt or forbidden, enforced), by kind and scope.",
            &refusals,
        )?;

        gauge(
            "guard_asks_pending",
            "Asks waiting for an answer.",
            signed(status.asks_pending as u64),
            &mut e,
        )?;
        counter(
            "guard_asks_raised",
            "Asks raised (repeats of a pending ask not counted).",
            s.tally.asks_raised,
            &mut e,
        )?;
        let answered: Vec<_> = ASK_ENDINGS
            .iter()
            .map(|how| {
                let n = s.tally.asks_answered.get(how).copied().unwrap_or(0);
                (vec![("answer", *how)], ConstCounter::new(n))
            })
            .collect();
        family(
            &mut e,
            "guard_asks_answered",
            "Asks ended, by answer (once, session, always, deny, deny_always, expired).",
            &answered,
        )?;
        counter(
            "guard_control_refused",
            "Control-socket requests the authorization policy refused.",
            s.tally.control_refused,
            &mut e,
        )?;
        let layers: Vec<_> = status
            .layers
            .iter()
            .map(|layer| {
                let up = i64::from(layer.state == LayerState::Up);
                (vec![("layer", layer.layer.as_str())], ConstGauge::new(up))
            })
            .collect();
        family(
            &mut e,
            "guard_layer_up",
            "1 when a layer of enforcement holds (exec, network, unix, devices, dns, hold, \
             files, audit, export), 0 when it is off, missing or degraded (guard status says \
             which and why).",
            &layers,
        )?;
        counter(
            "guard_links_repaired",
            "Pinned links of guard's found detached (or unpinned) and attached again.",
            s.tally.links_repaired,
            &mut e,
        )?;

        let audit = &status.audit;
        counter(
            "guard_audit_records_written",
            "Audit records written to the log.",
            audit.written,
            &mut e,
        )?;
        let mut lost = vec![
            (
                vec![("stage", "writer")],
                ConstCounter::new(audit.writer_lost),
            ),
            (
                vec![("stage", "follower")],
                ConstCounter::new(audit.follower_missed),
            ),
        ];
        if let Some(syslog) = &audit.syslog {
            lost.push((vec![("stage", "syslog")], ConstCounter::new(syslog.lost)));
        }
        if let Some(otlp) = &audit.otlp {
            lost.push((vec![("stage", "otlp")], ConstCounter::new(otlp.lost)));
            lost.push((
                vec![("stage", "otlp_failed")],
                ConstCounter::new(otlp.failed),
            ));
        }
        family(
            &mut e,
            "guard_audit_records_lost",
            "Audit records lost: the writer's queue was full, a `guard audit --follow` reader \
             fell behind (the records are in the log), the syslog or OTLP queue was full, or an OTLP \
             batch failed every attempt (`otlp_failed`).",
            &lost,
        )?;
        counter(
            "guard_audit_write_errors",
            "Failed writes of the audit log.",
            audit.write_errors,
            &mut e,
        )?;

        if let Some(resolver) = &s.resolver {
            let queries: Vec<_> = resolver
                .queries
                .iter()
                .map(|(outcome, n)| (vec![("outcome", outcome.as_str())], ConstCounter::new(*n)))
                .collect();
            family(
                &mut e,
                "guard_resolver_queries",
                "DNS queries guard's resolver took, by outcome (refused: a name the policy \
                 forbids, never sent on).",
                &queries,
            )?;
            e.encode_descriptor(
                "guard_resolver_query_duration_seconds",
                "Time from a query's arrival to its answer.",
                None,
                MetricType::Histogram,
            )?
            .encode_histogram::<NoLabelSet>(
                resolver.latency_sum_secs,
                resolver.latency_count,
                &resolver.latency_buckets,
                None,
            )?;
        }
        if let Some(refreshes) = &s.refreshes {
            let outcomes: Vec<_> = refreshes
                .by_outcome()
                .into_iter()
                .map(|(outcome, n)| (vec![("outcome", outcome)], ConstCounter::new(n)))
                .collect();
            family(
                &mut e,
                "guard_resolver_refreshes",
                "Names the scopes looked up that guard asked for again, by outcome (asked: \
                 questions sent; answered, gone: NXDOMAIN or NODATA, failed: no answer, \
                 given_up: failing past the hold, not_refreshed: past a bound).",
                &outcomes,
            )?;
        }

        if let Some(enabled) = s.bpf_stats_enabled {
            gauge(
                "guard_bpf_stats_enabled",
                "Whether the kernel keeps BPF run time (sysctl kernel.bpf_stats_enabled).",
                i64::from(enabled),
                &mut e,
            )?;
        }
        // Only while the kernel keeps them (or, the sysctl unreadable, once it has kept some):
        // otherwise they are frozen and would read as idle programs.
        let kept = s
            .bpf_stats_enabled
            .unwrap_or_else(|| s.programs.iter().any(|p| p.run_count > 0));
        if kept {
            let time: Vec<_> = s
                .programs
                .iter()
                .map(|p| {
                    (
                        vec![("program", p.name.as_str())],
                        ConstCounter::new(p.run_time.as_secs_f64()),
                    )
                })
                .collect();
            family(
                &mut e,
                "guard_bpf_program_run_time_seconds",
                "Time each BPF program ran, while kernel.bpf_stats_enabled is on.",
                &time,
            )?;
            let runs: Vec<_> = s
                .programs
                .iter()
                .map(|p| {
                    (
                        vec![("program", p.name.as_str())],
                        ConstCounter::new(p.run_count),
                    )
                })
                .collect();
            family(
                &mut e,
                "guard_bpf_program_runs",
                "Runs of each BPF program, while kernel.bpf_stats_enabled is on.",
                &runs,
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::daemon::metrics::tally::Tally;
    use crate::daemon::wire::responses::ScopeKind;
    use crate::daemon::wire::responses::{AuditStatus, ScopeStatus, StatusResponse};
    use crate::kernel::layers::{Layer, LayerStatus};
    use crate::kernel::loader::ProgramRunStats;
    use crate::resolve::stats::{Outcome, ResolverStats};
    use guard_common::maps::counter;

    pub(crate) fn snapshot() -> MetricsSnapshot {
        let counters = counter::NAMES
            .iter()
            .enumerate()
            .map(|(i, name)| (name.to_string(), 100 + i as u64))
            .collect();
        let mut tally = Tally::default();
        tally.decisions.insert(("exec", "forbidden", "run"), 3);
        tally.refusals.insert(("exec", "run"), 3);
        tally.asks_raised = 2;
        tally.ask_ended("once");
        let stats = ResolverStats::default();
        stats.answered(Outcome::Refused, std::time::Duration::from_micros(300));
        MetricsSnapshot {
            status: StatusResponse {
                version: "0.1.0".into(),
                pid: 1,
                backend: "cgroup".into(),
                uptime_secs: 42,
                audit_only: false,
                scopes: vec![ScopeStatus {
                    kind: ScopeKind::Runs,
                    cgroup: "/sys/fs/cgroup/guard-daemon".into(),
                    cgroup_id: 7,
                    streaming: false,
                    asks_pending: 0,
                    events_submitted: 0,
                    events_lost: 0,
                    overlay: Vec::new(),
                    names_answered: 0,
                }],
                rules: vec![],
                unresolved_hosts: vec![],
                addresses: vec![],
                resolver: None,
                asks_pending: 1,
                approvals: vec![],
                counters,
                events_lost: 107,
                failed_open: [("exec".to_string(), 0)].into_iter().collect(),
                audit: AuditStatus {
                    writer_lost: 5,
                    ..AuditStatus::default()
                },
                pinned: String::new(),
                last_reload_error: None,
                links_repaired: 0,
                last_link_repair: None,
                layers: vec![
                    LayerStatus::new(Layer::Exec, LayerState::Up, "the exec tracepoint"),
                    LayerStatus::new(Layer::Export, LayerState::Off, "no syslog"),
                ],
            },
            tally,
            resolver: Some(stats.snapshot()),
            refreshes: Some(crate::resolve::refresh::RefreshCounts {
                asked: 4,
                failed: 1,
                ..Default::default()
            }),
            bpf_stats_enabled: Some(true),
            programs: vec![ProgramRunStats {
                name: "exec_check".into(),
                run_time: std::time::Duration::from_millis(1500),
                run_count: 9,
            }],
            rss_bytes: Some(4096),
        }
    }

    #[test]
    fn the_text_has_each_family_its_samples_and_ends_in_eof() {
        let text = encode(&snapshot());
        for line in [
            "# TYPE guard_kernel_decisions counter",
            "guard_kernel_decisions_total{kind=\"exec\",action=\"forbidden\"} 102",
            "guard_kernel_decisions_total{kind=\"socket\",action=\"refused\"} 112",
            "guard_events_lost_total 107",
            "guard_decisions_total{kind=\"exec\",action=\"forbidden\",scope=\"run\"} 3",
            "guard_refusals_total{kind=\"exec\",scope=\"run\"} 3",
            "# TYPE guard_layer_up gauge",
            "guard_layer_up{layer=\"exec\"} 1",
            "guard_layer_up{layer=\"export\"} 0",
            "guard_asks_pending 1",
            "guard_asks_raised_total 2",
            "guard_asks_answered_total{answer=\"once\"} 1",
            "guard_asks_answered_total{answer=\"expired\"} 0",
            "guard_audit_records_lost_total{stage=\"writer\"} 5",
            "guard_resolver_queries_total{outcome=\"refused\"} 1",
            "guard_resolver_refreshes_total{outcome=\"asked\"} 4",
            "guard_resolver_refreshes_total{outcome=\"failed\"} 1",
            "guard_resolver_query_duration_seconds_bucket{le=\"0.0005\"} 1",
            "guard_resolver_query_duration_seconds_bucket{le=\"0.00025\"} 0",
            "guard_resolver_query_duration_seconds_count 1",
            "guard_bpf_program_run_time_seconds_total{program=\"exec_check\"} 1.5",
            "guard_bpf_program_runs_total{program=\"exec_check\"} 9",
            "guard_scopes{kind=\"runs\"} 1",
            "process_resident_memory_bytes 4096",
            "guard_build_info{version=\"0.1.0\",backend=\"cgroup\"} 1",
            "guard_failed_open_total{hook=\"exec\"} 0",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "no line {line:?} in:\n{text}"
            );
        }
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn every_kernel_counter_is_exported() {
        let text = encode(&snapshot());
        for (slot, name) in counter::NAMES.iter().enumerate() {
            let value = format!(" {}", 100 + slot);
            let exported = KERNEL_DECISIONS.iter().any(|(c, ..)| c == name)
                || KERNEL_OTHERS.iter().any(|(c, ..)| c == name)
                || name.ends_with("_failed_open");
            assert!(exported, "kernel counter {name} has no metric");
            if !name.ends_with("_failed_open") {
                assert!(
                    text.lines().any(|l| l.ends_with(&value)),
                    "{name}'s value is not in the text:\n{text}"
                );
            }
        }
    }

    #[test]
    fn program_times_are_left_out_while_the_kernel_does_not_keep_them() {
        let mut s = snapshot();
        s.bpf_stats_enabled = Some(false);
        let text = encode(&s);
        assert!(text.contains("guard_bpf_stats_enabled 0"), "{text}");
        assert!(!text.contains("guard_bpf_program_runs"), "{text}");
        s.bpf_stats_enabled = None;
        assert!(
            encode(&s).contains("guard_bpf_program_runs_total"),
            "counts seen: exported"
        );
    }
}
