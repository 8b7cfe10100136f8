//! The same program by another route gets the same decision, in the real kernel: through the
//! dynamic loader, from a file no path names (a memfd, a deleted file), under another
//! `argv[0]` or another name of the same file (multi-call dispatch, hard links, `NAME-SUB`).
//!
//! The programs are copies of `touch` in each test's temporary folder, so what must not happen
//! is a file that appears. Needs root; without it, or where the kernel cannot run guard's
//! programs, each test prints `skipped: ...` (and fails when CI=true).

use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use crate::common::{
    assert_absent, assert_exists, assert_ran, exec_anon, fresh_dir, scope_escape, stderr,
};
use guard::compile::loader::LOADER_RULE_ORIGIN;
use guard::kernel::events::EventKind;
use guard::policy::Decision;
use guard::session::SessionOptions;
use guard_tests::kernel::{
    TestSession, copy_program, exec_refused, killed, session_in_or_skip, shell_program, skip,
    system_program, touch_program,
};

const RUN_TIMEOUT: Duration = Duration::from_secs(20);
const EVENT_TIMEOUT: Duration = Duration::from_secs(5);

fn options_for(dir: &Path) -> SessionOptions {
    SessionOptions {
        extra_path_dirs: vec![dir.to_path_buf()],
        ..SessionOptions::default()
    }
}

/// Refused by either backend: SIGKILL (`cgroup`, or argv on `lsm`), or EPERM from the exec
/// (`lsm`: the spawn fails, or `exec-anon`'s own execv fails and it exits 126).
fn assert_refused(what: &str, result: io::Result<Output>) {
    if exec_refused(&result) {
        return;
    }
    match result {
        Ok(output)
            if output.status.code() == Some(126)
                && stderr(&output).contains("Operation not permitted") => {}
        Ok(output) => panic!(
            "{what}: expected a refusal, got {} (stderr: {})",
            output.status,
            stderr(&output)
        ),
        Err(err) => panic!("{what}: expected a refusal, got the error {err}"),
    }
}

fn run(session: &TestSession, command: &mut Command) -> io::Result<Output> {
    session.run(command, RUN_TIMEOUT)
}

// --- files no path names ---------------------------------------------------------------------

#[test]
fn an_exec_of_a_memfd_or_a_deleted_file_is_refused_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let touch = copy_program(&touch_program(), dir.path(), "gt-payload");
    // No rule names the payload, and the default for unmatched execs is allow: only the
    // default for files without a path refuses it.
    let rules = "prefix_rule(pattern=[\"gt-unrelated\"], decision=\"forbidden\")\n";
    let Some(mut session) = session_in_or_skip(dir, rules, SessionOptions::default()) else {
        return;
    };
    let work = fresh_dir(session.path(), "work");

    assert_ran(
        "the payload by its path",
        run(
            &session,
            Command::new(&touch).arg("by-path").current_dir(&work),
        ),
    );
    assert_exists(&work.join("by-path"), "a file with a path runs");

    for mode in ["memfd", "deleted"] {
        let marker = format!("from-{mode}");
        assert_refused(
            mode,
            run(
                &session,
                Command::new(exec_anon())
                    .args([mode, touch.to_str().unwrap(), &marker])
                    .current_dir(&work),
            ),
        );
        assert_absent(
            &work.join(&marker),
            "a program from a file no path names must not run",
        );
    }
    let event = session.expect_event("the memfd exec", EVENT_TIMEOUT, |e| {
        e.kind == EventKind::Exec && e.anonymous
    });
    assert_eq!(event.decision, Decision::Forbidden);
    assert_eq!(event.rule, None, "no rule decided: {event:#?}");
    let message = session.describe(&event);
    assert!(
        message.contains("no path") && message.contains("anonymous_exec"),
        "{message}"
    );
}

#[test]
fn anonymous_exec_allow_lets_a_memfd_run() {
    let dir = tempfile::tempdir().unwrap();
    let touch = copy_program(&touch_program(), dir.path(), "gt-payload");
    let rules = "enforcement(anonymous_exec=\"allow\")\n";
    let Some(session) = session_in_or_skip(dir, rules, SessionOptions::default()) else {
        return;
    };
    let work = fresh_dir(session.path(), "work");
    assert_ran(
        "memfd under anonymous_exec=allow",
        run(
            &session,
            Command::new(exec_anon())
                .args(["memfd", touch.to_str().unwrap(), "from-memfd"])
                .current_dir(&work),
        ),
    );
    assert_exists(&work.join("from-memfd"), "the policy allows it");
}

// --- the dynamic loader ----------------------------------------------------------------------

/// The loader this machine's programs name (their ELF interpreter).
fn system_loader() -> Option<PathBuf> {
    [
        "/lib64/ld-linux-x86-64.so.2",
        "/lib/ld-linux-aarch64.so.1",
        "/lib/ld-linux-armhf.so.3",
        "/lib/ld-musl-x86_64.so.1",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.is_file())
}

#[test]
fn a_program_run_through_the_dynamic_loader_is_refused_unless_a_rule_allows_the_loader() {
    let Some(loader) = system_loader() else {
        skip("no dynamic loader at a known path on this machine");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let touch = copy_program(&touch_program(), dir.path(), "gt-touch");
    let options = options_for(dir.path());
    let rules = "prefix_rule(pattern=[\"gt-touch\"], decision=\"forbidden\")\n";
    let Some(mut session) = session_in_or_skip(dir, rules, options) else {
        return;
    };
    assert!(
        session.image().rules.iter().any(|r| r
            .origin
            .as_ref()
            .is_some_and(|o| &*o.file == LOADER_RULE_ORIGIN)),
        "the image holds the built-in loader rule; warnings: {:?}",
        session.image().warnings
    );
    let work = fresh_dir(session.path(), "work");
    assert_refused(
        "gt-touch itself",
        run(
            &session,
            Command::new(&touch).arg("direct").current_dir(&work),
        ),
    );
    assert_refused(
        "gt-touch through the loader",
        run(
            &session,
            Command::new(&loader)
                .args([touch.to_str().unwrap(), "through-loader"])
                .current_dir(&work),
        ),
    );
    assert_absent(
        &work.join("through-loader"),
        "a forbidden program must not run through the loader",
    );
    let event = session.expect_event("the loader exec", EVENT_TIMEOUT, |e| {
        e.kind == EventKind::Exec && e.exe.contains("ld-")
    });
    let message = session.describe(&event);
    assert!(message.contains("dynamic loader"), "{message}");

    // Ordinary dynamically linked programs are not execs of the loader.
    let other = copy_program(&touch_program(), session.path(), "gt-other");
    assert_ran(
        "a dynamically linked program",
        run(
            &session,
            Command::new(&other).arg("plain").current_dir(&work),
        ),
    );
    assert_exists(
        &work.join("plain"),
        "the loader rule costs ordinary programs nothing",
    );
}

#[test]
fn a_rule_that_allows_the_loader_lets_it_run() {
    let Some(loader) = system_loader() else {
        skip("no dynamic loader at a known path on this machine");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let touch = copy_program(&touch_program(), dir.path(), "gt-touch");
    let rules = format!(
        "prefix_rule(pattern=[\"{}\"], decision=\"allow\")\n",
        loader.display()
    );
    let Some(session) = session_in_or_skip(dir, &rules, SessionOptions::default()) else {
        return;
    };
    let work = fresh_dir(session.path(), "work");
    assert_ran(
        "the loader, allowed by a rule",
        run(
            &session,
            Command::new(&loader)
                .args([touch.to_str().unwrap(), "through-loader"])
                .current_dir(&work),
        ),
    );
    assert_exists(&work.join("through-loader"), "the rule allows the loader");
}

// --- argv[0] dispatch and other names of the same file ---------------------------------------

/// A folder with a fake `git` (a copy of `touch`: `git push origin` makes `push` and `origin`)
/// and hard links of it under other names.
fn fake_git_with_links() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("making a temporary folder");
    let git = copy_program(&touch_program(), dir.path(), "git");
    for name in ["git-push", "git-status", "gt-other-name"] {
        std::fs::hard_link(&git, dir.path().join(name)).unwrap();
    }
    (dir, git)
}

#[test]
fn argv_rules_hold_under_every_name_and_argv0_a_dispatcher_acts_on() {
    let (dir, git) = fake_git_with_links();
    let links = dir.path().to_path_buf();
    let options = options_for(dir.path());
    let rules = "prefix_rule(pattern=[\"git\", \"push\"], decision=\"forbidden\")\n";
    let Some(session) = session_in_or_skip(dir, rules, options) else {
        return;
    };
    let work = fresh_dir(session.path(), "work");
    let refused = |what: &str, command: &mut Command, files: &[&str]| {
        let result = run(&session, command.current_dir(&work));
        match &result {
            Ok(output) if killed(&output.status) => {}
            _ => panic!("{what}: expected SIGKILL, got {result:?}"),
        }
        for file in files {
            assert_absent(&work.join(file), what);
        }
    };

    // `exec -a git-push git origin main`: git dispatches on argv[0].
    refused(
        "git with argv[0] = git-push",
        Command::new(&git).arg0("git-push").args(["origin", "main"]),
        &["origin", "main"],
    );
    // git's own hard link `git-push`: read as `git push`.
    refused(
        "the hard link git-push",
        Command::new(links.join("git-push")).arg("origin"),
        &["origin"],
    );
    // Any other name of the same file: its argv rules hold by identity.
    refused(
        "a hard link of git under another name",
        Command::new(links.join("gt-other-name")).arg("push"),
        &["push"],
    );
    // An argv[0] path whose last component dispatches.
    refused(
        "argv[0] = /usr/lib/git-core/git-push",
        Command::new(&git)
            .arg0("/usr/lib/git-core/git-push")
            .arg("upstream"),
        &["upstream"],
    );

    // No collateral: other subcommands under the same names still run.
    assert_ran(
        "the hard link git-status",
        run(
            &session,
            Command::new(links.join("git-status"))
                .arg("st1")
                .current_dir(&work),
        ),
    );
    assert_exists(
        &work.join("st1"),
        "git-status is `git status`, not forbidden",
    );
    assert_ran(
        "git with argv[0] = git-status",
        run(
            &session,
            Command::new(&git)
                .arg0("git-status")
                .arg("st2")
                .current_dir(&work),
        ),
    );
    assert_exists(&work.join("st2"), "argv[0] git-status is not forbidden");
    assert_ran(
        "another name, another subcommand",
        run(
            &session,
            Command::new(links.join("gt-other-name"))
                .arg("st3")
                .current_dir(&work),
        ),
    );
    assert_exists(&work.join("st3"), "`git st3` is not forbidden");
}

// --- long tokens -----------------------------------------------------------------------------

#[test]
fn a_long_token_is_compared_to_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let tool = copy_program(&touch_program(), dir.path(), "gt-long");
    // 60 bytes; the other differs only in its last byte, past the trie key's 32.
    let forbidden = format!("{}A", "m".repeat(59));
    let other = format!("{}B", "m".repeat(59));
    let rules =
        format!("prefix_rule(pattern=[\"gt-long\", \"{forbidden}\"], decision=\"forbidden\")\n");
    let options = options_for(dir.path());
    let Some(mut session) = session_in_or_skip(dir, &rules, options) else {
        return;
    };
    let work = fresh_dir(session.path(), "work");
    assert_ran(
        "a long token that differs after byte 32",
        run(&session, Command::new(&tool).arg(&other).current_dir(&work)),
    );
    assert_exists(
        &work.join(&other),
        "`guard check` allows it, and so does the kernel",
    );
    let result = run(
        &session,
        Command::new(&tool).arg(&forbidden).current_dir(&work),
    );
    assert!(
        matches!(&result, Ok(output) if killed(&output.status)),
        "the exact long token: expected SIGKILL, got {result:?}"
    );
    assert_absent(&work.join(&forbidden), "the long token is forbidden");
    let event = session.expect_event("the long token's refusal", EVENT_TIMEOUT, |e| {
        e.kind == EventKind::Exec && e.argv.iter().any(|a| a == &forbidden)
    });
    // The message quotes what ran.
    let message = session.describe(&event);
    assert!(
        message.contains(&format!("`gt-long {forbidden}`")),
        "{message}"
    );
}

// --- devices ---------------------------------------------------------------------------------

/// A block device of this machine, as `major:minor` from sysfs (a loop device, a disk).
fn some_block_device() -> Option<(u32, u32)> {
    let mut found: Vec<(u32, u32)> = std::fs::read_dir("/sys/class/block")
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|entry| {
            let dev = std::fs::read_to_string(entry.path().join("dev")).ok()?;
            let (major, minor) = dev.trim().split_once(':')?;
            Some((major.parse().ok()?, minor.parse().ok()?))
        })
        .collect();
    found.sort();
    found.into_iter().next()
}

#[test]
fn root_in_scope_makes_no_device_node_and_writes_no_block_device() {
    let dir = tempfile::tempdir().unwrap();
    let rules = "prefix_rule(pattern=[\"gt-unrelated\"], decision=\"forbidden\")\n";
    let Some(session) = session_in_or_skip(dir, rules, SessionOptions::default()) else {
        return;
    };
    // A block device of this machine, else the first loop device's number (a node for it is
    // refused on open whether or not the driver is there).
    let (major, minor) = some_block_device().unwrap_or((7, 0));
    // A node made outside the scope (this test is root there): the kernel decides by the
    // device, whatever the path. Opening it for writing writes nothing.
    let node = session.path().join("disk");
    let name = std::ffi::CString::new(node.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mknod of a NUL-terminated path.
    let made = unsafe {
        libc::mknod(
            name.as_ptr(),
            libc::S_IFBLK | 0o600,
            libc::makedev(major, minor),
        )
    };
    assert_eq!(
        made,
        0,
        "mknod outside the scope: {}",
        io::Error::last_os_error()
    );
    let escape = scope_escape();
    let said = |args: &[&std::ffi::OsStr]| {
        let output = run(&session, Command::new(&escape).args(args)).expect("the helper ran");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };

    assert!(
        said(&["open-device".as_ref(), node.as_os_str(), "write".as_ref()])
            .contains("open-device: EPERM"),
        "a block device is not opened for writing in scope ({major}:{minor})"
    );
    // Past guard, the driver answers (ENXIO for a loop device with no driver).
    let read = said(&["open-device".as_ref(), node.as_os_str(), "read".as_ref()]);
    assert!(!read.contains("EPERM"), "reading it is not refused: {read}");
    assert!(
        said(&[
            "open-device".as_ref(),
            "/dev/null".as_ref(),
            "write".as_ref()
        ])
        .contains("open-device: ok"),
        "character devices are written as ever"
    );
    let inside = session.path().join("made-inside");
    assert!(
        said(&["mknod".as_ref(), inside.as_os_str()]).contains("mknod: EPERM"),
        "root in scope (CAP_MKNOD kept here) makes no device node"
    );
    assert_absent(&inside, "mknod was refused");
}

// --- unix sockets ----------------------------------------------------------------------------

/// A unix stream listener and a datagram socket outside the scope (this test's own), at paths
/// under `dir` and at abstract names (unique to this process).
struct UnixServers {
    _stream: Vec<std::os::unix::net::UnixListener>,
    _datagram: Vec<std::os::unix::net::UnixDatagram>,
}

fn unix_servers(paths: &[&Path], abstract_names: &[&str], datagram: &[&Path]) -> UnixServers {
    use std::os::linux::net::SocketAddrExt;
    let mut stream: Vec<_> = paths
        .iter()
        .map(|path| std::os::unix::net::UnixListener::bind(path).unwrap())
        .collect();
    for name in abstract_names {
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        stream.push(std::os::unix::net::UnixListener::bind_addr(&addr).unwrap());
    }
    let datagram = datagram
        .iter()
        .map(|path| std::os::unix::net::UnixDatagram::bind(path).unwrap())
        .collect();
    UnixServers {
        _stream: stream,
        _datagram: datagram,
    }
}

#[test]
fn unix_sockets_are_decided_by_path_and_abstract_name() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().to_path_buf();
    let tag = std::process::id();
    let (open, closed, dgram) = (
        base.join("open.sock"),
        base.join("closed.sock"),
        base.join("closed.dgram"),
    );
    let rules = format!(
        "unix_rule(socket=\"{open}\", decision=\"allow\")\n\
         unix_rule(socket=\"@gt-open-{tag}\", decision=\"allow\")\n\
         unix_rule(socket=\"{closed}\", decision=\"forbidden\", justification=\"not for agents\")\n\
         unix_rule(socket=\"{dgram}\", decision=\"deny\")\n\
         unix_rule(socket=\"@gt-closed-{tag}*\", decision=\"forbidden\")\n",
        open = open.display(),
        closed = closed.display(),
        dgram = dgram.display(),
    );
    let Some(mut session) = session_in_or_skip(dir, &rules, SessionOptions::default()) else {
        return;
    };
    if !session.session.enforcer().decides_unix_sockets() {
        skip("this kernel has no unix socket hooks (cgroup/connect_unix needs Linux 6.7)");
        return;
    }
    let (open_abstract, closed_abstract) = (format!("gt-open-{tag}"), format!("gt-closed-{tag}-x"));
    let _servers = unix_servers(
        &[&open, &closed],
        &[&open_abstract, &closed_abstract],
        &[&dgram],
    );
    let escape = scope_escape();
    let said = |session: &TestSession, args: &[&str], cwd: &Path| {
        let output = run(session, Command::new(&escape).args(args).current_dir(cwd))
            .expect("the helper ran");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let path = |p: &Path| p.display().to_string();

    assert!(said(&session, &["unix-connect", &path(&open)], &base).contains(": ok"));
    assert!(
        said(
            &session,
            &["unix-connect", &format!("@{open_abstract}")],
            &base
        )
        .contains(": ok"),
        "an abstract name a rule allows"
    );
    assert!(
        said(&session, &["unix-connect", &path(&closed)], &base).contains(": EPERM"),
        "a path a rule forbids"
    );
    let event = session.expect_event("the refused connect", EVENT_TIMEOUT, |e| {
        e.kind == EventKind::Unix && e.unix.as_ref().is_some_and(|u| u.address == path(&closed))
    });
    assert_eq!(event.decision, Decision::Forbidden);
    assert_eq!(event.unix.as_ref().unwrap().call, "connect");
    let line = session.session.describe(&event);
    assert!(
        line.contains("refused connect to unix socket") && line.contains("not for agents"),
        "{line}"
    );
    assert!(
        said(
            &session,
            &["unix-connect", &format!("@{closed_abstract}")],
            &base
        )
        .contains(": EPERM"),
        "an abstract name under a forbidden prefix"
    );
    session.expect_event("the refused abstract connect", EVENT_TIMEOUT, |e| {
        e.unix
            .as_ref()
            .is_some_and(|u| u.address == format!("@{closed_abstract}"))
    });
    assert!(
        said(&session, &["unix-send", &path(&dgram)], &base).contains(": EPERM"),
        "a datagram to a forbidden path"
    );
    assert!(
        said(&session, &["unix-connect", "closed.sock"], &base).contains(": EPERM"),
        "the same socket by a relative path, which no rule could name"
    );
    assert!(
        said(&session, &["unix-connect", "open.sock"], &base).contains(": EPERM"),
        "any relative path"
    );
}

#[test]
fn the_unix_default_refuses_sockets_no_rule_names_whatever_the_network_default() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().to_path_buf();
    let (named, other) = (base.join("named.sock"), base.join("other.sock"));
    let rules = format!(
        "enforcement(unmatched_network=\"allow\")\n\
         unix_rule(socket=\"{named}\", decision=\"allow\")\n",
        named = named.display(),
    );
    let Some(session) = session_in_or_skip(dir, &rules, SessionOptions::default()) else {
        return;
    };
    if !session.session.enforcer().decides_unix_sockets() {
        skip("this kernel has no unix socket hooks (cgroup/connect_unix needs Linux 6.7)");
        return;
    }
    let _servers = unix_servers(&[&named, &other], &[], &[]);
    let escape = scope_escape();
    let said = |address: &Path| {
        let output = run(
            &session,
            Command::new(&escape).arg("unix-connect").arg(address),
        )
        .unwrap();
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    assert!(said(&named).contains(": ok"), "the socket a rule allows");
    assert!(said(&other).contains(": EPERM"), "one no rule names");
}

#[test]
fn servers_that_run_commands_are_refused_under_every_policy() {
    // The built-in list: a tmux server's socket (its default folder is /tmp/tmux-UID).
    let dir = tempfile::tempdir().unwrap();
    let Some(session) = session_in_or_skip(dir, "", SessionOptions::default()) else {
        return;
    };
    if !session.session.enforcer().decides_unix_sockets() {
        skip("this kernel has no unix socket hooks (cgroup/connect_unix needs Linux 6.7)");
        return;
    }
    let folder = tempfile::Builder::new()
        .prefix("tmux-gt-")
        .tempdir_in("/tmp")
        .unwrap();
    let socket = folder.path().join("default");
    let _servers = unix_servers(&[&socket], &[], &[]);
    let escape = scope_escape();
    let output = run(
        &session,
        Command::new(&escape).arg("unix-connect").arg(&socket),
    )
    .unwrap();
    assert!(
        String::from_utf8_lossy(&output.stdout).contains(": EPERM"),
        "a tmux server's socket is refused with no rule about it"
    );
}

// --- programs by any name --------------------------------------------------------------------

#[test]
fn a_one_token_rule_holds_for_a_multi_call_programs_applet_and_under_argv0() {
    let dir = tempfile::tempdir().unwrap();
    // A file named busybox: the kernel decides by the executed file's name and argv, so a copy
    // of `touch` under that name stands for busybox (it makes the files its arguments name).
    let busybox = copy_program(&touch_program(), dir.path(), "busybox");
    let rules = "prefix_rule(pattern=[\"touch\"], decision=\"forbidden\")\n";
    let Some(session) = session_in_or_skip(dir, rules, options_for(Path::new("/nonexistent")))
    else {
        return;
    };
    let work = fresh_dir(session.path(), "work");

    assert_refused(
        "busybox touch",
        run(
            &session,
            Command::new(&busybox)
                .args(["touch", "applet-made"])
                .current_dir(&work),
        ),
    );
    assert_absent(
        &work.join("applet-made"),
        "the applet from argv[1] is decided",
    );

    let link = work.join("touch");
    std::os::unix::fs::symlink(&busybox, &link).unwrap();
    assert_refused(
        "a link named touch",
        run(
            &session,
            Command::new(&link).arg("link-made").current_dir(&work),
        ),
    );
    assert_absent(&work.join("link-made"), "argv[0] names the applet");

    assert_ran(
        "another applet",
        run(
            &session,
            Command::new(&busybox)
                .args(["other", "other-made"])
                .current_dir(&work),
        ),
    );
    assert_exists(&work.join("other-made"), "what no rule names runs");
}

#[test]
fn a_script_forbidden_by_its_path_does_not_run_by_that_path() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().to_path_buf();
    let script = base.join("evil.sh");
    let other = base.join("fine.sh");
    for path in [&script, &other] {
        std::fs::write(path, "#!/bin/sh\ntouch \"$1\"\n").unwrap();
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
    }
    let rules = format!(
        "prefix_rule(pattern=[\"{}\"], decision=\"forbidden\")\n",
        script.display()
    );
    let Some(session) = session_in_or_skip(dir, &rules, SessionOptions::default()) else {
        return;
    };
    let work = fresh_dir(session.path(), "work");

    assert_refused(
        "the script by its path",
        run(
            &session,
            Command::new(&script).arg("by-path").current_dir(&work),
        ),
    );
    assert_absent(&work.join("by-path"), "the script did not run");
    assert_ran(
        "another script",
        run(
            &session,
            Command::new(&other).arg("fine").current_dir(&work),
        ),
    );
    assert_exists(&work.join("fine"), "a script no rule names runs");
    assert_ran(
        "the shell itself",
        run(
            &session,
            Command::new(shell_program())
                .args(["-c", "touch shell-made"])
                .current_dir(&work),
        ),
    );
    assert_exists(&work.join("shell-made"), "the interpreter is not refused");
}

#[test]
fn under_an_exec_allowlist_a_copy_named_like_an_allowed_program_does_not_run() {
    let dir = tempfile::tempdir().unwrap();
    // Copies of `touch` under the names the policy allows, in a folder no PATH lookup of the
    // policy's names finds.
    let copies = fresh_dir(dir.path(), "copies");
    let fake_cat = copy_program(&touch_program(), &copies, "cat");
    let fake_true = copy_program(&touch_program(), &copies, "true");
    let rules = "enforcement(unmatched_exec=\"deny\")\n\
                 prefix_rule(pattern=[\"cat\"], decision=\"allow\")\n\
                 prefix_rule(pattern=[\"true\", \"x\"], decision=\"allow\")\n";
    let Some(session) = session_in_or_skip(dir, rules, SessionOptions::default()) else {
        return;
    };
    let work = fresh_dir(session.path(), "work");

    assert_refused(
        "a copy named cat",
        run(
            &session,
            Command::new(&fake_cat).arg("cat-made").current_dir(&work),
        ),
    );
    assert_absent(&work.join("cat-made"), "an allow by name admits no copy");
    assert_refused(
        "a copy named true, with the allowed argv",
        run(
            &session,
            Command::new(&fake_true).arg("x").current_dir(&work),
        ),
    );
    assert_absent(
        &work.join("x"),
        "an argv rule's allow holds for the real file only",
    );
    assert_refused(
        "a copy run as argv[0] cat",
        run(
            &session,
            Command::new(&fake_true)
                .arg0("cat")
                .arg("argv0-made")
                .current_dir(&work),
        ),
    );
    assert_absent(&work.join("argv0-made"), "argv[0] allows nothing");

    // The files the names resolve to run.
    let real_cat = system_program(&["/usr/bin/cat", "/bin/cat"]);
    assert_ran(
        "the real cat",
        run(&session, Command::new(&real_cat).arg("/dev/null")),
    );
    let real_true = system_program(&["/usr/bin/true", "/bin/true"]);
    assert_ran(
        "the real true x",
        run(&session, Command::new(&real_true).arg("x")),
    );
}
