//! `guard daemon`'s Prometheus metrics, scraped by a real Prometheus server: the daemon serves
//! `/metrics` on `[metrics] listen`, a command in a run scope is refused, and Prometheus (Debian's
//! binary, run privately: `guard_tests::prometheus`) answers a query over its HTTP API with the
//! refusal counted. Traffic goes to loopback addresses only.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use crate::common::net_probe;
use guard_tests::daemon::{DaemonSetup, TestDaemon, can_run};
use guard_tests::prometheus::{Prometheus, free_tcp_port, http_get};

/// How long Prometheus may take to scrape and answer with the refusal counted (it scrapes every
/// second).
const SCRAPED_WITHIN: Duration = Duration::from_secs(30);

#[test]
fn prometheus_scrapes_the_daemon_and_answers_with_a_refusal_counted() {
    if !can_run() {
        return;
    }
    let port = free_tcp_port().expect("a free port for the metrics");
    let metrics = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let Some(prometheus) = Prometheus::start_or_skip(metrics) else {
        return;
    };
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: "address_rule(addresses=[\"127.77.9.1\"], decision=\"forbidden\")\n".to_string(),
        extra_config: format!("[metrics]\nlisten = \"{metrics}\"\n"),
        ..Default::default()
    });

    let (code, stdout, stderr) =
        daemon.run_in_scope(&net_probe(), &["udp-connect", "127.77.9.1", "9"]);
    assert_eq!(
        (code, stdout.trim()),
        (1, "errno 1"),
        "the connect is refused: {stderr}"
    );

    // The daemon's own text first: the refusal, counted by kind and scope.
    let (status, text) = http_get(port, "/metrics").expect("GET /metrics");
    assert_eq!(status, 200, "{text}");
    assert!(
        text.lines()
            .any(|l| l == "guard_refusals_total{kind=\"connect\",scope=\"run\"} 1"),
        "the refusal is in /metrics:\n{text}"
    );
    let (status, _) = http_get(port, "/").expect("GET /");
    assert_eq!(status, 404, "only /metrics is served");

    // Then Prometheus, scraping every second, answers a query with it.
    let query = "guard_refusals_total{job=\"guard\",kind=\"connect\",scope=\"run\"}";
    let deadline = Instant::now() + SCRAPED_WITHIN;
    let mut last = None;
    while Instant::now() < deadline {
        last = Some(prometheus.value(query));
        if let Some(Ok(Some(value))) = &last
            && value == "1"
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(
        matches!(&last, Some(Ok(Some(v))) if v == "1"),
        "Prometheus did not answer {query} with 1 within {SCRAPED_WITHIN:?}: {last:?}\n\
         prometheus log:\n{}",
        prometheus.log()
    );
    // The kernel's own count of the same decision, and the target's health, from the same
    // scrapes.
    let up = prometheus.value("up{job=\"guard\"}").expect("querying up");
    assert_eq!(up.as_deref(), Some("1"), "the scrape is healthy");
    let kernel = prometheus
        .value("guard_kernel_decisions_total{kind=\"net\",action=\"forbidden\"}")
        .expect("querying the kernel's counter");
    let kernel: f64 = kernel
        .expect("the kernel's counter is scraped")
        .parse()
        .unwrap();
    assert!(kernel >= 1.0, "the kernel counted the refusal: {kernel}");
}
