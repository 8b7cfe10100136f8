//! `/etc/hosts`: the system resolver answers its names without any DNS query, so guard's
//! resolver never sees them. Its entries are read when guard's resolver starts and kept as
//! answers for as long as the scope lives, so a rule (or pattern) for such a name holds, and a
//! connect to its address names it.

use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use super::answers::AnswerBook;

/// The system's hosts file.
pub const HOSTS_FILE: &str = "/etc/hosts";
/// How long a hosts-file entry is kept: the life of any scope.
pub const HOSTS_TTL: Duration = Duration::from_secs(365 * 24 * 3600);

/// `(name, address)` of every entry (`ADDRESS NAME [ALIAS...]`, `#` starts a comment); names in
/// lower case without a trailing dot. A file that cannot be read has no entries.
pub fn entries(path: &Path) -> Vec<(String, IpAddr)> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or_default();
        let mut fields = line.split_whitespace();
        let Some(Ok(address)) = fields.next().map(str::parse::<IpAddr>) else {
            continue;
        };
        for name in fields {
            out.push((name.trim_end_matches('.').to_ascii_lowercase(), address));
        }
    }
    out
}

/// Records every entry of `path` in `book`.
pub fn seed(book: &mut AnswerBook, path: &Path) {
    let now = Instant::now();
    for (name, address) in entries(path) {
        book.record(&name, &[address], HOSTS_TTL, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_an_address_and_its_names_and_comments_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hosts");
        std::fs::write(
            &path,
            "127.0.0.1 localhost\n# 10.0.0.1 commented.test\n::1 ip6-localhost ip6-loopback\n\
             10.1.2.3  Mirror.Internal.TEST.  mirror # the package mirror\nnot-an-address x\n",
        )
        .unwrap();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(
            entries(&path),
            vec![
                ("localhost".to_string(), ip("127.0.0.1")),
                ("ip6-localhost".to_string(), ip("::1")),
                ("ip6-loopback".to_string(), ip("::1")),
                ("mirror.internal.test".to_string(), ip("10.1.2.3")),
                ("mirror".to_string(), ip("10.1.2.3")),
            ]
        );
        let mut book = AnswerBook::new();
        seed(&mut book, &path);
        assert_eq!(
            book.names_for(ip("10.1.2.3"), 9),
            vec!["mirror", "mirror.internal.test"]
        );
        assert!(entries(&dir.path().join("absent")).is_empty());
    }
}
