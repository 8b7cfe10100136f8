//! `guard console` in a real browser: Debian's headless Chromium, driven over WebDriver
//! (`guard_tests::browser`), against a real daemon holding real connects. An ask appears on the
//! page within a second of the held connect; "Once" lets the held connect go on; the `d` key
//! denies one and its connect fails; another user's session neither sees nor answers root's
//! ask; the page loads nothing from elsewhere; a screenshot is kept in the target folder.

use std::net::{Ipv4Addr, TcpListener};
use std::time::{Duration, Instant};

use fantoccini::Locator;
use guard_tests::browser::Browser;
use guard_tests::daemon::{DaemonSetup, TestDaemon, can_run, finish_held, text};
use guard_tests::kernel::http_server;
use serde_json::Value;

/// How long the page may take to show an ask the daemon holds.
const ASK_SHOWN_WITHIN: Duration = Duration::from_secs(1);
const ALICE: u32 = 64_351;

fn curl(port: u16) -> Vec<String> {
    ["curl", "-sS", "--max-time", "60"]
        .iter()
        .map(|s| s.to_string())
        .chain([format!("http://127.0.0.1:{port}/")])
        .collect()
}

fn held_curl(daemon: &TestDaemon, port: u16) -> std::process::Child {
    let args = curl(port);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    daemon.held_run(&args)
}

/// The link `guard console --json` gives `uid` (root: `None`).
fn login_link(daemon: &TestDaemon, uid: Option<u32>) -> String {
    let args = ["console", "--json"];
    let out = match uid {
        None => daemon.guard(&args),
        Some(uid) => daemon.guard_as(uid, &args),
    };
    assert!(out.status.success(), "guard console: {}", text(&out.stderr));
    let link: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    link["url"].as_str().expect("a url").to_string()
}

/// Opens the link in `browser` and waits until the page says who is signed in.
fn sign_in(browser: &Browser, link: &str, user: &str) {
    browser.run(async {
        browser.client.goto(link).await.expect("opening the link");
        let who = browser
            .client
            .wait()
            .at_most(Duration::from_secs(10))
            .for_element(Locator::Css("#who"))
            .await
            .expect("the page");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let said = who.text().await.unwrap_or_default();
            if said.contains(&format!("signed in as {user}")) {
                break;
            }
            assert!(Instant::now() < deadline, "the page says {said:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
}

/// A way to run curl with arguments: its exit code, stdout and stderr.
type Curl<'a> = dyn Fn(&[&str]) -> (i32, String, String) + 'a;

/// The text of each element `css` finds on the page.
fn rows(browser: &Browser, css: &str) -> Vec<String> {
    let found = browser.run(async {
        browser
            .client
            .execute(
                &format!("return [...document.querySelectorAll('{css}')].map(r => r.textContent)"),
                vec![],
            )
            .await
            .unwrap()
    });
    serde_json::from_value(found).unwrap()
}

/// Whether the page shows ask `id` now.
fn shows_ask(browser: &Browser, id: u64) -> bool {
    browser.run(async {
        browser
            .client
            .find_all(Locator::Css(&format!(".ask[data-id=\"{id}\"]")))
            .await
            .is_ok_and(|found| !found.is_empty())
    })
}

/// Waits (at most 10 s) for ask `id` on the page; how long it took.
fn wait_for_ask(browser: &Browser, id: u64) -> Duration {
    let start = Instant::now();
    while !shows_ask(browser, id) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "ask {id} never shown"
        );
        std::thread::sleep(Duration::from_millis(25));
    }
    start.elapsed()
}

#[test]
fn the_console_shows_asks_as_they_arrive_and_answers_them_for_its_person_only() {
    if !can_run() {
        return;
    }
    let Some(browser) = Browser::start_or_skip() else {
        return;
    };
    let (once_port, deny_port, roots_port) = (http_server(1), http_server(0), http_server(0));
    let console_port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let daemon = TestDaemon::start(&DaemonSetup {
        rules: format!(
            "address_rule(addresses=[\"127.0.0.1\"], ports=[{once_port}, {deny_port}, \
             {roots_port}], decision=\"prompt\", justification=\"ask before the test server\")\n"
        ),
        extra_config: format!("[console]\nlisten = \"127.0.0.1:{console_port}\"\n"),
        ..Default::default()
    });

    // Without a session the page says how to get one; a link opens once.
    let link = login_link(&daemon, None);
    sign_in(&browser, &link, "root");
    let second_use = browser.run(async {
        browser.client.goto(&link).await.unwrap();
        browser.client.source().await.unwrap()
    });
    assert!(second_use.contains("opened already"), "{second_use}");
    browser.run(async {
        browser
            .client
            .goto(&format!("http://127.0.0.1:{console_port}/"))
            .await
            .unwrap()
    });

    // A held connect: its ask is on the page within a second, with its rule.
    let mut run = held_curl(&daemon, once_port);
    let ask = daemon.pending_ask(&mut run);
    let id = ask["id"].as_u64().unwrap();
    let took = wait_for_ask(&browser, id);
    assert!(took < ASK_SHOWN_WITHIN, "the ask took {took:?} to show");
    let card = browser.run(async {
        browser
            .client
            .find(Locator::Css(&format!(".ask[data-id=\"{id}\"]")))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    });
    assert!(
        card.contains(&format!(":{once_port}")) && card.contains("ask before the test server"),
        "{card}"
    );
    let artefact = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("console.png");
    browser.screenshot(&artefact);
    let png = std::fs::read(&artefact).unwrap();
    assert!(
        png.starts_with(b"\x89PNG"),
        "a PNG at {}",
        artefact.display()
    );
    println!("console screenshot: {}", artefact.display());

    // Nothing the page loaded came from elsewhere.
    let resources = browser.run(async {
        browser
            .client
            .execute(
                "return performance.getEntriesByType('resource').map(e => e.name)",
                vec![],
            )
            .await
            .unwrap()
    });
    let origin = format!("http://127.0.0.1:{console_port}/");
    for resource in resources.as_array().unwrap() {
        assert!(
            resource.as_str().unwrap().starts_with(&origin),
            "{resources}"
        );
    }

    // "Once": the held connect goes on.
    browser.run(async {
        browser
            .client
            .find(Locator::Css(&format!(".ask[data-id=\"{id}\"] button.once")))
            .await
            .unwrap()
            .click()
            .await
            .unwrap()
    });
    let (code, stdout, stderr) = finish_held(run);
    assert_eq!((code, stdout.as_str()), (0, "held-ok"), "{stderr}");

    // The policy with each rule's place, the layers, and the decisions filtered by kind.
    let policy = rows(&browser, "#policy tr");
    assert!(
        policy
            .iter()
            .any(|row| row.contains("team.rules:1") && row.contains("address_rule")),
        "{policy:?}"
    );
    let layers = rows(&browser, "#layers tr");
    assert!(
        layers.iter().any(|row| row.starts_with("execup")),
        "{layers:?}"
    );
    browser.run(async {
        browser
            .client
            .execute(
                "document.querySelector('select[name=kind]').value = 'approval'; \
                 document.getElementById('filters').requestSubmit();",
                vec![],
            )
            .await
            .unwrap()
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    let decisions = loop {
        let found = rows(&browser, "#decisions tr");
        if !found.is_empty() && found.iter().all(|row| row.contains("approval")) {
            break found;
        }
        assert!(Instant::now() < deadline, "no approval row: {found:?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        decisions.iter().any(|row| row.contains("team.rules:1")),
        "{decisions:?}"
    );

    // The keyboard: `d` on a focused ask denies it, and its connect fails.
    let mut run = held_curl(&daemon, deny_port);
    let ask = daemon.pending_ask(&mut run);
    let id = ask["id"].as_u64().unwrap();
    wait_for_ask(&browser, id);
    browser.run(async {
        browser
            .client
            .find(Locator::Css(&format!(".ask[data-id=\"{id}\"]")))
            .await
            .unwrap()
            .send_keys("d")
            .await
            .unwrap()
    });
    let (code, _, stderr) = finish_held(run);
    assert_ne!(code, 0, "denied: {stderr}");
    assert!(
        stderr.contains("guard:"),
        "the blocked-request message: {stderr}"
    );

    // Another user's session: root's ask is neither shown nor answerable there.
    let Some(alices) = Browser::start_or_skip() else {
        return;
    };
    let link = login_link(&daemon, Some(ALICE));
    sign_in(&alices, &link, &ALICE.to_string());
    let mut run = held_curl(&daemon, roots_port);
    let ask = daemon.pending_ask(&mut run);
    let id = ask["id"].as_u64().unwrap();
    wait_for_ask(&browser, id);
    std::thread::sleep(ASK_SHOWN_WITHIN);
    assert!(!shows_ask(&alices, id), "Alice's page shows root's ask");
    let status = alices.run(async {
        alices
            .client
            .execute(
                &format!(
                    "return fetch('/api/asks/{id}', {{method: 'POST', headers: {{'Content-Type': \
                     'application/json', 'X-Guard-Console': '1'}}, body: JSON.stringify({{answer: \
                     'once'}})}}).then(r => r.status)"
                ),
                vec![],
            )
            .await
            .unwrap()
    });
    assert_eq!(status, 403, "Alice may not answer root's ask");
    // Her page, open for seconds, asked for the status she may not read once, not every second.
    std::thread::sleep(Duration::from_secs(2));
    let refused_status = std::fs::read_to_string(&daemon.audit_log)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|r| r["type"] == "control_refused" && r["uid"] == ALICE && r["entity"] == "status")
        .count();
    assert_eq!(
        refused_status, 1,
        "one refusal for the page's status, not one a second"
    );
    assert!(
        daemon.prompts().iter().any(|a| a["id"] == id),
        "the ask is still pending"
    );
    // A change without the console's header is refused whoever sends it.
    let status = browser.run(async {
        browser
            .client
            .execute(
                &format!(
                    "return fetch('/api/asks/{id}', {{method: 'POST', headers: {{'Content-Type': \
                     'application/json'}}, body: JSON.stringify({{answer: 'once'}})}}).then(r => r.status)"
                ),
                vec![],
            )
            .await
            .unwrap()
    });
    assert_eq!(status, 403, "no X-Guard-Console header");
    let out = daemon.guard(&["deny", &id.to_string()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (code, _, _) = finish_held(run);
    assert_ne!(code, 0);
}

#[test]
fn a_login_link_is_refused_from_inside_a_guard_scope_and_without_a_console() {
    if !can_run() {
        return;
    }
    let daemon = TestDaemon::start(&DaemonSetup::default());
    let out = daemon.guard(&["console", "--print"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("[console] listen"),
        "says how to turn it on: {}",
        text(&out.stderr)
    );
    let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    drop(daemon);
    let daemon = TestDaemon::start(&DaemonSetup {
        extra_config: format!("[console]\nlisten = \"127.0.0.1:{port}\"\n"),
        ..Default::default()
    });
    let guard = guard_tests::daemon::guard_bin();
    let (code, _, stderr) = daemon.run_in_scope(&guard, &["console", "--print"]);
    assert_ne!(code, 0, "refused inside a scope");
    assert!(stderr.contains("inside a guard scope"), "{stderr}");

    // A guarded program that got hold of a session cookie still cannot answer: the page's
    // requests are authorized with the scope of the process that sends them.
    let cookies = daemon.dir.path().join("cookies.txt");
    let cookies = cookies.to_str().unwrap();
    let link = login_link(&daemon, None);
    let out = std::process::Command::new("curl")
        .args(["-sS", "-o", "/dev/null", "-c", cookies, &link])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let url = format!("http://127.0.0.1:{port}/api/asks/1");
    let answer = |curl: &Curl| {
        curl(&[
            "-sS",
            "-b",
            cookies,
            "-H",
            "Content-Type: application/json",
            "-H",
            "X-Guard-Console: 1",
            "-d",
            "{\"answer\": \"once\"}",
            "-w",
            "%{http_code}",
            &url,
        ])
    };
    let outside = |args: &[&str]| {
        let out = std::process::Command::new("curl")
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            text(&out.stdout),
            text(&out.stderr),
        )
    };
    let (_, said, _) = answer(&outside);
    assert!(
        said.ends_with("404"),
        "outside, root's session reaches the ask book: {said}"
    );
    let curl = std::path::Path::new("/usr/bin/curl");
    let inside = |args: &[&str]| daemon.run_in_scope(curl, args);
    let (_, said, stderr) = answer(&inside);
    assert!(
        said.ends_with("403") && said.contains("inside a guard scope"),
        "inside a scope the same cookie answers nothing: {said} {stderr}"
    );
}
