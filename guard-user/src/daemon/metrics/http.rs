//! The `/metrics` listener: just enough HTTP/1.x for a scraper. One request per connection
//! (`Connection: close`); a request head of at most [`MAX_HEAD`] bytes, read within
//! [`IO_TIMEOUT`]; `GET` (or `HEAD`) `/metrics` answers the exposition text, any other path 404,
//! any other method 405, a malformed or oversized head 400 or 431. At most [`MAX_CONNECTIONS`]
//! are served at once (the rest wait in the listen queue). Each reading comes from the daemon's
//! task through `readings`; this module never touches the daemon's state.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio::time::timeout;

use super::{MetricsSnapshot, exposition};

/// The longest request head read (request line and headers).
pub const MAX_HEAD: usize = 8 * 1024;
/// How long reading the request, getting a reading and writing the answer may each take.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 8;

/// A request for one reading; the daemon's task answers on the sender.
pub type ReadingRequest = oneshot::Sender<MetricsSnapshot>;

/// Serves `/metrics` on `listener` until the daemon stops (the task is dropped with it).
pub async fn serve(listener: TcpListener, readings: mpsc::Sender<ReadingRequest>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        match listener.accept().await {
            Ok((stream, _)) => {
                let readings = readings.clone();
                tokio::spawn(async move {
                    let _ = timeout(3 * IO_TIMEOUT, connection(stream, &readings)).await;
                    drop(permit);
                });
            }
            Err(err) => {
                tracing::warn!("accepting a metrics connection failed: {err}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// What a request head asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Route {
    /// `GET /metrics` (`head`: `HEAD /metrics`, no body).
    Metrics {
        head: bool,
    },
    NotFound,
    MethodNotAllowed,
    BadRequest,
}

/// Reads the request line of `head` (the bytes before the blank line).
pub fn route(head: &[u8]) -> Route {
    let Ok(text) = std::str::from_utf8(head) else {
        return Route::BadRequest;
    };
    let line = text.lines().next().unwrap_or("");
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Route::BadRequest;
    };
    if !version.starts_with("HTTP/1.") {
        return Route::BadRequest;
    }
    let head = match method {
        "GET" => false,
        "HEAD" => true,
        _ => return Route::MethodNotAllowed,
    };
    // A query string (`?name[]=...`) is ignored: every metric is always sent.
    match target.split('?').next() {
        Some("/metrics") => Route::Metrics { head },
        _ => Route::NotFound,
    }
}

/// The request head: bytes up to the blank line. `Err(status)`: answer that status and close.
async fn read_head(stream: &mut TcpStream) -> Result<Vec<u8>, u16> {
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            head.truncate(end);
            return Ok(head);
        }
        if head.len() > MAX_HEAD {
            return Err(431);
        }
        match timeout(IO_TIMEOUT, stream.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return Err(400),
            Ok(Ok(n)) => head.extend_from_slice(&chunk[..n]),
        }
    }
}

async fn connection(mut stream: TcpStream, readings: &mpsc::Sender<ReadingRequest>) {
    let (status, content_type, body, head_only) = match read_head(&mut stream).await {
        Err(status) => (status, "text/plain", reason(status).to_string(), false),
        Ok(head) => match route(&head) {
            Route::Metrics { head } => match reading(readings).await {
                Some(snapshot) => (
                    200,
                    exposition::CONTENT_TYPE,
                    exposition::encode(&snapshot),
                    head,
                ),
                None => (
                    503,
                    "text/plain",
                    "the daemon did not answer\n".into(),
                    head,
                ),
            },
            Route::NotFound => (
                404,
                "text/plain",
                "only /metrics is served here\n".into(),
                false,
            ),
            Route::MethodNotAllowed => (405, "text/plain", "use GET\n".into(), false),
            Route::BadRequest => (400, "text/plain", reason(400).to_string(), false),
        },
    };
    let mut response = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n",
        reason(status),
        body.len()
    );
    if status == 405 {
        response.push_str("Allow: GET, HEAD\r\n");
    }
    response.push_str("\r\n");
    if !head_only {
        response.push_str(&body);
    }
    let _ = timeout(IO_TIMEOUT, async {
        stream.write_all(response.as_bytes()).await?;
        stream.shutdown().await
    })
    .await;
    // What the client sent past the head is read and dropped (bounded) before the socket
    // closes: closing with unread bytes would reset the connection and lose the answer.
    let mut sink = [0u8; 4096];
    let mut drained = 0;
    while drained < 16 * MAX_HEAD {
        match timeout(Duration::from_millis(500), stream.read(&mut sink)).await {
            Ok(Ok(n)) if n > 0 => drained += n,
            _ => break,
        }
    }
}

/// One reading from the daemon's task, or `None` when it does not answer in time.
async fn reading(readings: &mpsc::Sender<ReadingRequest>) -> Option<MetricsSnapshot> {
    let (tx, rx) = oneshot::channel();
    timeout(IO_TIMEOUT, async {
        readings.send(tx).await.ok()?;
        rx.await.ok()
    })
    .await
    .ok()
    .flatten()
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        _ => "Service Unavailable",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_get_or_head_of_metrics_is_served() {
        let r = |head: &str| route(head.as_bytes());
        assert_eq!(
            r("GET /metrics HTTP/1.1\r\nHost: x"),
            Route::Metrics { head: false }
        );
        assert_eq!(
            r("GET /metrics?name[]=up HTTP/1.0"),
            Route::Metrics { head: false }
        );
        assert_eq!(r("HEAD /metrics HTTP/1.1"), Route::Metrics { head: true });
        assert_eq!(r("GET / HTTP/1.1"), Route::NotFound);
        assert_eq!(r("GET /metrics/x HTTP/1.1"), Route::NotFound);
        assert_eq!(r("POST /metrics HTTP/1.1"), Route::MethodNotAllowed);
        assert_eq!(r("GET /metrics"), Route::BadRequest);
        assert_eq!(r("GET /metrics SPDY/3"), Route::BadRequest);
        assert_eq!(route(b"GET /\xff HTTP/1.1"), Route::BadRequest);
    }

    #[tokio::test]
    async fn a_scrape_gets_the_text_and_other_requests_their_status() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, mut rx) = mpsc::channel::<ReadingRequest>(4);
        tokio::spawn(serve(listener, tx));
        // The daemon's side: a reading with one known value.
        tokio::spawn(async move {
            while let Some(reply) = rx.recv().await {
                let mut snapshot = crate::daemon::metrics::exposition::tests::snapshot();
                snapshot.tally.asks_raised = 77;
                let _ = reply.send(snapshot);
            }
        });
        let ask = |request: Vec<u8>| async move {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            stream.write_all(&request).await.unwrap();
            let mut answer = String::new();
            timeout(IO_TIMEOUT * 2, stream.read_to_string(&mut answer))
                .await
                .expect("answered in time")
                .unwrap();
            answer
        };
        let ok = ask(b"GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n".to_vec()).await;
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(
            ok.contains("Content-Type: application/openmetrics-text"),
            "{ok}"
        );
        assert!(ok.contains("\nguard_asks_raised_total 77\n"), "{ok}");
        let missing = ask(b"GET /other HTTP/1.1\r\n\r\n".to_vec()).await;
        assert!(missing.starts_with("HTTP/1.1 404 "), "{missing}");
        let post = ask(b"POST /metrics HTTP/1.1\r\n\r\n".to_vec()).await;
        assert!(post.starts_with("HTTP/1.1 405 "), "{post}");
        let mut huge = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
        huge.extend(std::iter::repeat_n(b'a', MAX_HEAD + 10));
        let huge = ask(huge).await;
        assert!(huge.starts_with("HTTP/1.1 431 "), "{huge}");
    }
}
