//! What the daemon answers for `guard console`: a one-time login link for the caller, and the
//! rules in force for the page's policy list.

use super::Daemon;
use crate::daemon::console::{ConsoleUser, LINK_TTL};
use crate::daemon::peer::{PeerCredentials, user_name};
use crate::daemon::scopes::Membership;
use crate::daemon::wire::protocol::ErrorCode;
use crate::daemon::wire::responses::{ConsoleLink, PolicyRuleView};

impl Daemon {
    /// A link that signs `peer`'s user in to the console, once. Refused from inside a guard
    /// scope (a guarded program must not get a page that answers its own asks) and when no
    /// `[console] listen` is set.
    pub(super) fn console_login(
        &self,
        peer: &PeerCredentials,
        membership: Membership,
    ) -> Result<ConsoleLink, (ErrorCode, String)> {
        if membership.is_confined() {
            return Err((
                ErrorCode::Unauthorized,
                format!(
                    "not authorized: `guard console` came from pid {} inside a guard scope ({}): \
                     a guarded process may not open the page that answers its asks; run it \
                     from outside the scope",
                    peer.pid.map_or("?".to_string(), |p| p.to_string()),
                    membership.as_str()
                ),
            ));
        }
        let (Some(logins), Some(listen)) = (&self.console_logins, self.config.console.listen)
        else {
            return Err((
                ErrorCode::Failed,
                "the console is off: set `[console] listen = \"127.0.0.1:9478\"` in guard.toml \
                 and restart the daemon"
                    .to_string(),
            ));
        };
        let user = ConsoleUser {
            uid: peer.uid,
            gid: peer.gid,
        };
        let token = logins
            .mint(user)
            .map_err(|err| (ErrorCode::Failed, format!("making a login link: {err}")))?;
        let host = if listen.ip().is_unspecified() {
            format!("localhost:{}", listen.port())
        } else {
            listen.to_string()
        };
        Ok(ConsoleLink {
            url: format!("http://{host}/login?token={token}"),
            expires_in_secs: LINK_TTL.as_secs(),
            user: user_name(peer.uid),
        })
    }

    /// Every rule in force, in the image's order (prefix, network, address rules), with where
    /// it is written.
    pub(super) fn policy_view(&self) -> Vec<PolicyRuleView> {
        self.core
            .image()
            .rules
            .iter()
            .map(|rule| PolicyRuleView {
                file: rule.origin.as_ref().map(|o| o.file.to_string()),
                line: rule.origin.as_ref().map(|o| o.line),
                text: rule.text.clone(),
                decision: rule.decision.as_str().to_string(),
                justification: rule.justification.clone(),
            })
            .collect()
    }
}
