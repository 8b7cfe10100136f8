//! `guard console`: a one-time link to the daemon's approval page, for the person who runs it.

use std::process::{Command, ExitCode, Stdio};

use anstream::println;
use clap::Args;

use super::control::{SocketArgs, call};
use crate::cli::output::print_json;
use crate::daemon::wire::protocol::Request;
use crate::daemon::wire::responses::{ConsoleLink, to_json};

#[derive(Args, Debug)]
#[command(after_help = "The daemon serves the page when guard.toml sets
  [console]
  listen = \"127.0.0.1:9478\"

`guard console` asks the daemon over its control socket, which knows who you are, for a link
that signs you in once (within two minutes); the page then shows the asks you may answer as
they arrive, with buttons (or the keys o, s, a, d) for once, session, always and deny, your
recent decisions with filters, the runs and scopes, the layers and the policy in force, and
does only what you could do with `guard approve` yourself. Nothing on the page comes from
outside the machine. From inside a guard scope the link is refused.

Examples:
  guard console            # print the link, and open it when a desktop session is there
  guard console --print    # print the link only (e.g. to open it on an SSH-forwarded port)")]
pub struct ConsoleArgs {
    #[command(flatten)]
    socket: SocketArgs,
    /// Print the link only; do not start a browser.
    #[arg(long)]
    print: bool,
    /// The link as JSON (`url`, `expires_in_secs`, `user`).
    #[arg(long)]
    json: bool,
}

pub fn console(args: &ConsoleArgs) -> ExitCode {
    let link = match call::<ConsoleLink>(&args.socket.socket, Request::ConsoleLogin) {
        Ok(link) => link,
        Err(code) => return code,
    };
    if args.json {
        print_json(&to_json(&link));
        return ExitCode::SUCCESS;
    }
    println!(
        "Open this link to sign in to the console as {} (it works once, within {} s):\n  {}",
        link.user, link.expires_in_secs, link.url
    );
    if !args.print && has_desktop() {
        // The desktop's own opener; where it fails the printed link is still there.
        let _ = Command::new("xdg-open")
            .arg(&link.url)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
    }
    ExitCode::SUCCESS
}

fn has_desktop() -> bool {
    ["DISPLAY", "WAYLAND_DISPLAY"]
        .iter()
        .any(|name| std::env::var_os(name).is_some_and(|v| !v.is_empty()))
}
