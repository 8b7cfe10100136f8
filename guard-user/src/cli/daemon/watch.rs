//! `guard prompts --watch`: asks as they arrive, answered with one key. On a terminal the keys
//! are read raw (no Enter needed; works over ssh, which passes a terminal); without one, one key
//! per line from stdin, so scripts and tests can drive it.

use std::collections::VecDeque;
use std::io::{IsTerminal, Read};
use std::os::fd::AsFd;
use std::path::Path;
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::Duration;

use super::control::{answer, ask_line, client_error};
use crate::asks::Ask;
use crate::daemon::client::Client;
use crate::daemon::wire::protocol::{ApprovalMode, Request};
use crate::daemon::wire::responses::WatchEvent;
use anstream::{eprintln, println};
use nix::sys::termios::{self, LocalFlags, SetArg, Termios};

/// Puts the terminal back as it was, however the loop ends.
struct RawMode(Option<Termios>);

impl RawMode {
    fn enable() -> RawMode {
        let stdin = std::io::stdin();
        if !stdin.is_terminal() {
            return RawMode(None);
        }
        let Ok(saved) = termios::tcgetattr(stdin.as_fd()) else {
            return RawMode(None);
        };
        let mut raw = saved.clone();
        // Keys one at a time, not echoed; signals (Ctrl-C) still work.
        raw.local_flags &= !(LocalFlags::ICANON | LocalFlags::ECHO);
        let _ = termios::tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &raw);
        RawMode(Some(saved))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        if let Some(saved) = &self.0 {
            let _ = termios::tcsetattr(std::io::stdin().as_fd(), SetArg::TCSANOW, saved);
        }
    }
}

enum Input {
    Line(String),
    Key(u8),
    Closed,
}

pub fn watch(socket: &Path) -> ExitCode {
    let mut client = match Client::connect(socket) {
        Ok(client) => client,
        Err(err) => return client_error(&err),
    };
    let pending: Vec<Ask> = match client.call(Request::Watch) {
        Ok(pending) => pending,
        Err(err) => return client_error(&err),
    };
    let (tx, rx) = mpsc::channel::<Input>();
    let lines = tx.clone();
    std::thread::spawn(move || {
        let mut reader = client;
        while let Ok(Some(line)) = reader.next_line() {
            if lines.send(Input::Line(line)).is_err() {
                return;
            }
        }
        let _ = lines.send(Input::Closed);
    });
    let _raw = RawMode::enable();
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut byte = [0u8; 1];
        while let Ok(1) = stdin.read(&mut byte) {
            if !byte[0].is_ascii_whitespace() && tx.send(Input::Key(byte[0])).is_err() {
                return;
            }
        }
        let _ = tx.send(Input::Closed);
    });

    let mut queue: VecDeque<Ask> = pending.into();
    let mut shown: Option<u64> = None;
    println!("watching for asks on {} (q to quit)", socket.display());
    loop {
        if shown.is_none()
            && let Some(ask) = queue.front()
        {
            println!("{}", ask_line(ask));
            println!("  [o]nce  [s]ession  [a]lways  [d]eny  [D]eny always  [n]ext  [q]uit");
            shown = Some(ask.id);
        }
        let input = match rx.recv_timeout(Duration::from_millis(500)) {
            Ok(input) => input,
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => return ExitCode::SUCCESS,
        };
        match input {
            Input::Closed => return ExitCode::SUCCESS,
            Input::Line(line) => {
                // A line of another kind (or a newer daemon's) is not for this loop.
                let Ok(event) = serde_json::from_str::<WatchEvent>(&line) else {
                    continue;
                };
                match event {
                    WatchEvent::Ask { ask } if !queue.iter().any(|a| a.id == ask.id) => {
                        queue.push_back(ask)
                    }
                    WatchEvent::Ask { .. } => {}
                    WatchEvent::Resolved { ask } => {
                        let id = ask.id;
                        queue.retain(|a| a.id != id);
                        if shown == Some(id) {
                            println!("  ask {id} was answered elsewhere");
                            shown = None;
                        }
                    }
                }
            }
            Input::Key(key) => {
                let Some(id) = shown else {
                    if key == b'q' {
                        return ExitCode::SUCCESS;
                    }
                    continue;
                };
                let request = match key {
                    b'o' => Request::Approve {
                        id,
                        mode: ApprovalMode::Once,
                        prefix: None,
                    },
                    b's' => Request::Approve {
                        id,
                        mode: ApprovalMode::Session,
                        prefix: None,
                    },
                    b'a' => Request::Approve {
                        id,
                        mode: ApprovalMode::Always,
                        prefix: None,
                    },
                    b'd' => Request::Deny { id, always: false },
                    b'D' => Request::Deny { id, always: true },
                    b'n' => {
                        if let Some(ask) = queue.pop_front() {
                            queue.push_back(ask);
                        }
                        shown = None;
                        continue;
                    }
                    b'q' => return ExitCode::SUCCESS,
                    _ => continue,
                };
                match answer(socket, request) {
                    Ok(appended) => {
                        let what = appended
                            .map(|l| format!(": appended {}", l.line))
                            .unwrap_or_default();
                        println!("  done{what}");
                        queue.retain(|a| a.id != id);
                        shown = None;
                    }
                    Err(_) => {
                        // The error is printed; the ask stays up for another answer.
                        eprintln!("  (ask {id} is still pending)");
                        shown = None;
                    }
                }
            }
        }
    }
}
