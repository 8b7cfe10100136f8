//! Arbitrary bytes on the control socket, read as the daemon reads a connection
//! (`daemon::server::read_line`, then `parse_request` on each line): each line is a request or
//! an error response, never a panic; no line read is longer than `MAX_REQUEST_BYTES`; every
//! read takes bytes off the stream, so a connection's requests are bounded by its bytes; and a
//! request that parses writes back to a line that parses to the same request.
//!
//! Inputs are at most a few KiB (libFuzzer's `-max_len`), so the first byte can stretch the first
//! line past the limit (padded with spaces, which JSON allows): the over-long path runs too.
#![no_main]

use std::sync::OnceLock;

use guard::daemon::server::{parse_request, read_line};
use guard::daemon::wire::protocol::{MAX_REQUEST_BYTES, PROTOCOL_VERSION, RequestLine};
use libfuzzer_sys::fuzz_target;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a current-thread runtime")
    })
}

/// The stream the daemon reads: the input, or (first byte odd) its first line padded with
/// spaces to just past the limit by the first byte's value.
fn stream(data: &[u8]) -> Vec<u8> {
    let Some((&first, rest)) = data.split_first() else {
        return Vec::new();
    };
    if first % 2 == 0 {
        return rest.to_vec();
    }
    let end = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
    let mut stretched = rest[..end].to_vec();
    stretched.resize(MAX_REQUEST_BYTES + usize::from(first), b' ');
    stretched.extend_from_slice(&rest[end..]);
    stretched
}

fuzz_target!(|data: &[u8]| {
    let bytes = stream(data);
    runtime().block_on(async {
        let mut reader: &[u8] = &bytes;
        let mut lines = 0;
        while let Some(line) = read_line(&mut reader).await {
            lines += 1;
            assert!(lines <= bytes.len(), "a read that took no bytes");
            let Ok(line) = line else { continue };
            assert!(line.len() <= MAX_REQUEST_BYTES);
            let Ok(request) = parse_request(line.trim_end()) else {
                continue;
            };
            let written = serde_json::to_string(&RequestLine {
                v: PROTOCOL_VERSION,
                request: request.clone(),
            })
            .expect("a request serialises");
            assert_eq!(parse_request(&written).ok(), Some(request), "{written}");
        }
    });
});
