//! The console's HTTP side: the page (one file, no script or style from anywhere else), its
//! JSON calls, and a server-sent event stream that pushes the asks as they change.
//!
//! Every call but `/login` needs the session cookie, and goes to the daemon's loop through
//! [`ControlPort`] as the session's person, with the pid and pidfd of the process holding the
//! browser's end of the connection (found by sock_diag once per connection): the loop's
//! authorization then sees that process's guard scope, so a guarded program that got hold of a
//! cookie still cannot answer its own asks (a process that cannot be named counts as
//! confined). The connection must come from the session's user or root. `Host` must name the
//! listening address (no DNS rebinding), and a change must carry `X-Guard-Console: 1` (which
//! a page of another origin cannot send without a preflight the console never allows).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::connect_info::Connected;
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::OnceCell;

use super::Logins;
use crate::asks::ApprovalMode;
use crate::audit::filter::AuditFilter;
use crate::daemon::control_port::ControlPort;
use crate::daemon::peer::{PeerCredentials, uid_of_pid};
use crate::daemon::wire::protocol::{ErrorCode, Request, ResponseLine};

/// The page.
const PAGE: &str = include_str!("page.html");
/// The session cookie's name.
const COOKIE: &str = "guard_console";
/// The header a change must carry.
const CHANGE_HEADER: &str = "x-guard-console";
/// How often the event stream looks at the asks when the daemon's watch stream has ended.
const ASKS_EVERY: Duration = Duration::from_millis(250);
/// How often it looks at the status.
const STATUS_EVERY: Duration = Duration::from_secs(1);
/// Records the decision list reads from the log, and shows.
const DECISIONS_READ: usize = 2_000;
const DECISIONS_SHOWN: usize = 200;

struct Console {
    logins: Arc<Logins>,
    port: ControlPort,
    listen: SocketAddr,
}

/// Serves the console on `listener` until the daemon stops (the task is dropped with it).
pub async fn serve(listener: TcpListener, logins: Arc<Logins>, port: ControlPort) {
    let Ok(listen) = listener.local_addr() else {
        return;
    };
    let console = Arc::new(Console {
        logins,
        port,
        listen,
    });
    let app = Router::new()
        .route("/", get(page))
        .route("/login", get(login))
        .route("/logout", post(logout))
        .route("/api/me", get(me))
        .route("/api/asks", get(asks))
        .route("/api/asks/{id}", post(answer))
        .route("/api/status", get(status))
        .route("/api/policy", get(policy))
        .route("/api/decisions", get(decisions))
        .route("/api/events", get(events))
        .with_state(console);
    let service = app.into_make_service_with_connect_info::<BrowserEnd>();
    if let Err(err) = axum::serve(listener, service).await {
        tracing::warn!("the console stopped serving: {err}");
    }
}

/// The two ends of a browser's connection, and who holds the browser's end (looked up once).
#[derive(Clone)]
struct BrowserEnd {
    remote: SocketAddr,
    local: Option<SocketAddr>,
    holder: Arc<OnceCell<Holder>>,
}

/// The process holding the browser's end: the socket's owner, and its pid and pidfd when
/// they could be found.
#[derive(Clone, Default)]
struct Holder {
    uid: Option<u32>,
    pid: Option<u32>,
    process: Option<Arc<crate::kernel::peer::PeerProcess>>,
}

impl Connected<axum::serve::IncomingStream<'_, TcpListener>> for BrowserEnd {
    fn connect_info(stream: axum::serve::IncomingStream<'_, TcpListener>) -> Self {
        BrowserEnd {
            remote: *stream.remote_addr(),
            local: stream.io().local_addr().ok(),
            holder: Arc::new(OnceCell::new()),
        }
    }
}

impl BrowserEnd {
    async fn holder(&self) -> Holder {
        let (remote, local) = (self.remote, self.local);
        self.holder
            .get_or_init(|| async move {
                let Some(local) = local else {
                    return Holder::default();
                };
                tokio::task::spawn_blocking(move || find_holder(remote, local))
                    .await
                    .unwrap_or_default()
            })
            .await
            .clone()
    }
}

/// sock_diag names the socket's owner and inode; `/proc` the process holding it. The pid is
/// opened as a pidfd and checked to be the owner's still, so a pid that was reused names no
/// one (the request then counts as from an unknown scope: confined).
fn find_holder(remote: SocketAddr, local: SocketAddr) -> Holder {
    let query = crate::resolve::peer::QuerySocket {
        program: remote,
        resolver: local,
        tcp: true,
    };
    let Some(found) = crate::resolve::peer::process_of(query) else {
        return Holder::default();
    };
    let mut holder = Holder {
        uid: Some(found.uid),
        ..Holder::default()
    };
    if let Some(pid) = found.pid
        && let Ok(process) = crate::kernel::peer::PeerProcess::open(pid as libc::pid_t)
        && uid_of_pid(pid) == Some(found.uid)
    {
        holder.pid = Some(pid);
        holder.process = Some(Arc::new(process));
    }
    holder
}

/// A refusal as the page shows it.
fn refusal(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({ "error": message.into() }))).into_response()
}

impl Console {
    /// The person behind a request, as the daemon's loop will see them; a refusal when the
    /// request has no session, names another host, or comes from another user.
    async fn person(
        &self,
        headers: &HeaderMap,
        end: &BrowserEnd,
    ) -> Result<PeerCredentials, Response> {
        self.check_host(headers)?;
        let user = session_id(headers)
            .and_then(|id| self.logins.session(&id))
            .ok_or_else(|| {
                refusal(
                    StatusCode::UNAUTHORIZED,
                    "no console session: run `guard console` and open the link it prints",
                )
            })?;
        let holder = end.holder().await;
        // A connection whose owner cannot be named is refused: it may be anyone's.
        if !holder.uid.is_some_and(|uid| uid == user.uid || uid == 0) {
            return Err(refusal(
                StatusCode::FORBIDDEN,
                "this connection is not from the session's user (or its owner cannot be \
                 named): run `guard console` as yourself",
            ));
        }
        Ok(PeerCredentials {
            uid: user.uid,
            gid: user.gid,
            pid: holder.pid,
            process: holder.process,
        })
    }

    fn check_host(&self, headers: &HeaderMap) -> Result<(), Response> {
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or_default();
        let port = self.listen.port();
        let allowed = [self.listen.to_string(), format!("localhost:{port}")];
        if allowed.iter().any(|a| a == host) {
            Ok(())
        } else {
            Err(refusal(
                StatusCode::MISDIRECTED_REQUEST,
                format!("open the console at http://{}/", self.listen),
            ))
        }
    }

    /// A change (an answer, signing out) must carry the console's header and, when the
    /// browser says where it comes from, this origin.
    fn check_change(&self, headers: &HeaderMap) -> Result<(), Response> {
        let marked = headers
            .get(CHANGE_HEADER)
            .is_some_and(|v| v.as_bytes() == b"1");
        let origin_ok = headers.get(header::ORIGIN).is_none_or(|origin| {
            let origin = origin.to_str().unwrap_or_default();
            origin == format!("http://{}", self.listen)
                || origin == format!("http://localhost:{}", self.listen.port())
        });
        if marked && origin_ok {
            Ok(())
        } else {
            Err(refusal(
                StatusCode::FORBIDDEN,
                "a change must come from the console's own page",
            ))
        }
    }

    /// One request through the loop, its answer as a response.
    async fn ask(&self, person: PeerCredentials, request: Request) -> Response {
        answered(self.port.request(person, request).await)
    }
}

fn answered(line: ResponseLine) -> Response {
    match (line.ok, line.result, line.error) {
        (true, result, _) => Json(result.unwrap_or(Value::Null)).into_response(),
        (false, _, Some(error)) => {
            let status = match error.code {
                ErrorCode::BadRequest => StatusCode::BAD_REQUEST,
                ErrorCode::Unauthorized => StatusCode::FORBIDDEN,
                ErrorCode::NotFound => StatusCode::NOT_FOUND,
                ErrorCode::Failed => StatusCode::CONFLICT,
            };
            refusal(status, error.message)
        }
        (false, _, None) => refusal(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the daemon gave no answer",
        ),
    }
}

fn session_id(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| {
            let (name, value) = pair.trim().split_once('=')?;
            (name == COOKIE).then(|| value.to_string())
        })
}

/// Every response: no caching, no framing by other pages, nothing loaded from elsewhere.
fn hardened(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CACHE_CONTROL, "no-store"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'unsafe-inline'; \
             connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'self'; \
             frame-ancestors 'none'",
        ),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

type Shared = State<Arc<Console>>;
type End = ConnectInfo<BrowserEnd>;

async fn page(State(console): Shared, ConnectInfo(end): End, headers: HeaderMap) -> Response {
    match console.person(&headers, &end).await {
        Ok(_) => hardened(Html(PAGE).into_response()),
        Err(refused) if refused.status() == StatusCode::UNAUTHORIZED => hardened(
            (
                StatusCode::UNAUTHORIZED,
                Html(
                    "<!doctype html><title>guard console</title><h1>Not signed in</h1>\
                     <p>Run <code>guard console</code> as yourself and open the link it prints \
                     (it works once, within two minutes).</p>",
                ),
            )
                .into_response(),
        ),
        Err(refused) => hardened(refused),
    }
}

#[derive(Deserialize)]
struct LoginQuery {
    token: String,
}

async fn login(
    State(console): Shared,
    headers: HeaderMap,
    Query(q): Query<LoginQuery>,
) -> Response {
    if let Err(refused) = console.check_host(&headers) {
        return hardened(refused);
    }
    let Some((session, _)) = console.logins.open(&q.token) else {
        return hardened(refusal(
            StatusCode::UNAUTHORIZED,
            "this link was opened already or is too old: run `guard console` again",
        ));
    };
    let cookie = format!("{COOKIE}={session}; Path=/; HttpOnly; SameSite=Strict");
    let mut response = Redirect::to("/").into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    hardened(response)
}

async fn logout(State(console): Shared, headers: HeaderMap) -> Response {
    if let Err(refused) = console.check_change(&headers) {
        return hardened(refused);
    }
    if let Some(id) = session_id(&headers) {
        console.logins.end(&id);
    }
    hardened(Json(json!({ "signed_out": true })).into_response())
}

async fn me(State(console): Shared, ConnectInfo(end): End, headers: HeaderMap) -> Response {
    match console.person(&headers, &end).await {
        Ok(person) => hardened(
            Json(json!({
                "user": crate::daemon::peer::user_name(person.uid),
                "uid": person.uid,
                "browser_pid": person.pid,
            }))
            .into_response(),
        ),
        Err(refused) => hardened(refused),
    }
}

async fn asks(State(console): Shared, ConnectInfo(end): End, headers: HeaderMap) -> Response {
    match console.person(&headers, &end).await {
        Ok(person) => hardened(console.ask(person, Request::Prompts).await),
        Err(refused) => hardened(refused),
    }
}

async fn status(State(console): Shared, ConnectInfo(end): End, headers: HeaderMap) -> Response {
    match console.person(&headers, &end).await {
        Ok(person) => hardened(console.ask(person, Request::Status).await),
        Err(refused) => hardened(refused),
    }
}

async fn policy(State(console): Shared, ConnectInfo(end): End, headers: HeaderMap) -> Response {
    match console.person(&headers, &end).await {
        Ok(person) => hardened(console.ask(person, Request::Policy).await),
        Err(refused) => hardened(refused),
    }
}

#[derive(Deserialize)]
struct AnswerBody {
    /// `once`, `session`, `always` or `deny`.
    answer: String,
}

async fn answer(
    State(console): Shared,
    ConnectInfo(end): End,
    headers: HeaderMap,
    Path(id): Path<u64>,
    Json(body): Json<AnswerBody>,
) -> Response {
    if let Err(refused) = console.check_change(&headers) {
        return hardened(refused);
    }
    let person = match console.person(&headers, &end).await {
        Ok(person) => person,
        Err(refused) => return hardened(refused),
    };
    let request = match body.answer.as_str() {
        "once" => approve(id, ApprovalMode::Once),
        "session" => approve(id, ApprovalMode::Session),
        "always" => approve(id, ApprovalMode::Always),
        "deny" => Request::Deny { id, always: false },
        other => {
            return hardened(refusal(
                StatusCode::BAD_REQUEST,
                format!("answer {other:?}: use once, session, always or deny"),
            ));
        }
    };
    hardened(console.ask(person, request).await)
}

fn approve(id: u64, mode: ApprovalMode) -> Request {
    Request::Approve {
        id,
        mode,
        prefix: None,
    }
}

/// The decision list's filters: each empty one lets everything through.
#[derive(Default, Deserialize)]
#[serde(default)]
struct DecisionQuery {
    /// A part of the scope's cgroup path.
    scope: String,
    /// The record type (`decision`, `ask`, ...) or the event (`exec`, `connect`, `dns`, ...).
    kind: String,
    /// `allow`, `prompt` or `forbidden`.
    decision: String,
    /// Text anywhere in the record.
    text: String,
}

async fn decisions(
    State(console): Shared,
    ConnectInfo(end): End,
    headers: HeaderMap,
    Query(q): Query<DecisionQuery>,
) -> Response {
    let person = match console.person(&headers, &end).await {
        Ok(person) => person,
        Err(refused) => return hardened(refused),
    };
    let filter = AuditFilter {
        decision: (!q.decision.is_empty()).then(|| q.decision.clone()),
        ..AuditFilter::default()
    };
    let lines = match console.port.audit(person, filter, DECISIONS_READ).await {
        Ok(lines) => lines,
        Err(line) => return hardened(answered(line)),
    };
    let text = q.text.to_lowercase();
    let mut shown: Vec<Value> = lines
        .iter()
        .rev()
        .filter(|line| text.is_empty() || line.to_lowercase().contains(&text))
        // Each line is a stream event (`{"event": "record", "record": {...}}`).
        .filter_map(|line| {
            let mut event = serde_json::from_str::<Value>(line).ok()?;
            Some(event.get_mut("record")?.take())
        })
        .filter(|record| {
            let field = |key: &str| record[key].as_str().unwrap_or_default().to_string();
            let cgroup = record["process"]["cgroup"]
                .as_str()
                .or_else(|| record["cgroup"].as_str())
                .unwrap_or_default();
            (q.kind.is_empty() || field("type") == q.kind || field("event") == q.kind)
                && (q.scope.is_empty() || cgroup.contains(&q.scope))
        })
        .take(DECISIONS_SHOWN)
        .collect();
    shown.shrink_to_fit();
    hardened(Json(shown).into_response())
}

/// The event stream: `asks` with the pending asks the person may see, at the start and
/// whenever the daemon says one came, repeated or was answered (its `watch` stream, so nothing
/// polls the loop for them); `status` with the counters, scopes and layers each second when
/// they changed (or once, an `error`, when the person may not read the status: it is not
/// asked again, so a page left open makes no refusal record a second); a comment every 15 s
/// so proxies keep it open.
async fn events(State(console): Shared, ConnectInfo(end): End, headers: HeaderMap) -> Response {
    let person = match console.person(&headers, &end).await {
        Ok(person) => person,
        Err(refused) => return hardened(refused),
    };
    let (_, watch) = console.port.watch(person.clone()).await;
    let feed = Feed {
        console,
        person,
        watch: Some(watch),
        asks_changed: true,
        last_asks: None,
        last_status: None,
        next_status: tokio::time::Instant::now(),
        status_refused: false,
    };
    let stream = futures_util::stream::unfold(feed, |mut feed| async move {
        let event = feed.next_event().await;
        Some((Ok::<_, std::convert::Infallible>(event), feed))
    });
    hardened(
        Sse::new(stream)
            .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
            .into_response(),
    )
}

/// One page's event stream: what it was sent last.
struct Feed {
    console: Arc<Console>,
    person: PeerCredentials,
    /// The daemon's ask events for this person; `None` once it ended (the asks are then
    /// looked at every [`ASKS_EVERY`]).
    watch: Option<tokio::sync::mpsc::UnboundedReceiver<String>>,
    asks_changed: bool,
    last_asks: Option<String>,
    last_status: Option<String>,
    next_status: tokio::time::Instant,
    /// The person may not read the status: it was said once and is not asked again.
    status_refused: bool,
}

impl Feed {
    /// The next event: the asks when they changed, else the status when it is due and
    /// changed, else a wait for either.
    async fn next_event(&mut self) -> Event {
        loop {
            if std::mem::take(&mut self.asks_changed) {
                let asks = self.ask(Request::Prompts).await;
                let asks =
                    serde_json::to_string(&asks.result.unwrap_or(Value::Null)).unwrap_or_default();
                if self.last_asks.as_deref() != Some(asks.as_str()) {
                    self.last_asks = Some(asks.clone());
                    return Event::default().event("asks").data(asks);
                }
            }
            if !self.status_refused && tokio::time::Instant::now() >= self.next_status {
                self.next_status = tokio::time::Instant::now() + STATUS_EVERY;
                if let Some(event) = self.status_event().await {
                    return event;
                }
            }
            let wake = if self.status_refused {
                tokio::time::Instant::now() + Duration::from_secs(3600)
            } else {
                self.next_status
            };
            match &mut self.watch {
                Some(watch) => tokio::select! {
                    line = watch.recv() => {
                        if line.is_none() {
                            self.watch = None;
                        }
                        self.asks_changed = true;
                    }
                    () = tokio::time::sleep_until(wake) => {}
                },
                None => {
                    tokio::time::sleep(ASKS_EVERY).await;
                    self.asks_changed = true;
                }
            }
        }
    }

    /// The status as the page shows it, when it changed since the last one sent.
    async fn status_event(&mut self) -> Option<Event> {
        let status = self.ask(Request::Status).await;
        let shown = match (&status.result, &status.error) {
            (Some(s), _) => json!({ "counters": s["counters"], "scopes": s["scopes"],
                                    "layers": s["layers"], "asks_pending": s["asks_pending"] }),
            (None, error) => {
                self.status_refused = true;
                json!({ "error": error.as_ref().map(|e| e.message.clone()) })
            }
        }
        .to_string();
        if self.last_status.as_deref() == Some(shown.as_str()) {
            return None;
        }
        self.last_status = Some(shown.clone());
        Some(Event::default().event("status").data(shown))
    }

    async fn ask(&self, request: Request) -> ResponseLine {
        self.console
            .port
            .request(self.person.clone(), request)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; guard_console=abc; b=2"),
        );
        assert_eq!(session_id(&headers).as_deref(), Some("abc"));
        assert_eq!(session_id(&HeaderMap::new()), None);
    }

    #[test]
    fn the_page_loads_nothing_from_elsewhere() {
        for outside in ["http://", "https://", "//cdn", "@import"] {
            assert!(!PAGE.contains(outside), "the page names {outside}");
        }
    }
}
