//! `guard.toml`: the daemon's configuration. Every key is optional; the defaults below are what a
//! missing key means, and `guard daemon --help` and docs/daemon.md list them. Command-line flags
//! override the file.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::Deserialize;

pub const DEFAULT_CONFIG: &str = "/etc/guard/guard.toml";
pub const DEFAULT_STATE_DIR: &str = "/var/lib/guard";
pub const DEFAULT_SOCKET: &str = "/run/guard/guard.sock";
pub const DEFAULT_PIN_DIR: &str = "/sys/fs/bpf/guard";

/// The whole file. Unknown keys are an error (a typo must not silently fall back to a default).
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Rules files or folders, read in order as one policy. Empty: /etc/guard/rules, else the
    /// embedded default policy. The amendments file `<state_dir>/rules/default.rules` is always
    /// read after these.
    pub rules: Vec<PathBuf>,
    /// Rules parsed on their own and merged on top (managed rules amendments cannot weaken).
    pub overlays: Vec<PathBuf>,
    /// Where the amendments file (`rules/default.rules`) lives.
    pub state_dir: PathBuf,
    /// The control socket.
    pub socket: PathBuf,
    /// The group that owns the control socket (mode 0660); a name or a number. Empty: the
    /// socket is every local user's (mode 0666) and the authorization policy decides.
    pub socket_group: String,
    /// Members of this group may do everything over the control socket (with the built-in
    /// authorization policy). Empty: root only.
    pub admin_group: String,
    /// An authorization policy file (`{"rules": [...]}`); empty: the built-in default.
    pub authz_policy: Option<PathBuf>,
    /// Where the programs' links are pinned, so enforcement survives a restart of the daemon.
    pub pin_dir: PathBuf,
    /// The cgroup (under the cgroup2 mount) that holds the `guard run` scopes.
    pub run_cgroup: String,
    /// `lsm` or `cgroup`; empty: the preferred one this kernel allows.
    pub backend: String,
    /// Resolve host names with this DNS server (IP:PORT) instead of the system's configuration.
    pub nameserver: Option<SocketAddr>,
    /// Record every decision, enforce none.
    pub audit_only: bool,
    /// guard's resolver in the path of the scopes' DNS (`[resolver]`).
    pub resolver: ResolverSection,
    pub audit: AuditConfig,
    pub scope: ScopeConfig,
    pub asks: AskConfig,
    /// The write confinement of every `guard run` under the daemon (`[sandbox]`).
    pub sandbox: SandboxSection,
    /// Prometheus metrics over HTTP (`[metrics]`); off unless `listen` is set.
    pub metrics: MetricsSection,
    /// The layers the daemon must hold to start (`[require]`).
    pub require: RequireSection,
    /// Where else the audit records go (`[export.otlp]`).
    pub export: ExportSection,
    /// The approval console's page (`[console]`); off unless `listen` is set.
    pub console: ConsoleSection,
    /// What `guard node` holds on a Kubernetes node (`[node]`); `guard daemon` ignores it.
    pub node: NodeSection,
    /// Set by `guard node` (not a key): the node's name; the pods of `[node]` are scopes, fed
    /// by the cluster.
    #[serde(skip)]
    pub node_agent: Option<String>,
    /// Extra attributes for the authorization policy, per user name:
    /// `[users.alice] email = "alice@example.com"` and `attrs = { team = ["infra"] }`.
    pub users: BTreeMap<String, UserConfig>,
    /// The file this configuration was read from (not a key: [`Config::load`] sets it).
    #[serde(skip)]
    pub file: Option<PathBuf>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScopeConfig {
    /// Enforce on every process of the host (the daemon's own cgroup is exempt).
    pub host: bool,
    /// cgroup v2 folders (absolute, or relative to the cgroup2 mount) to enforce on, with
    /// everything below them.
    pub cgroups: Vec<PathBuf>,
    /// cgroups by pattern, each with rules of its own held beside the daemon's policy
    /// (`[[scope.patterns]]`): a container started later gets its pattern's rules.
    pub patterns: Vec<PatternConfig>,
}

/// `[[scope.patterns]]`: the cgroups one pattern matches, and their rules.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PatternConfig {
    /// A cgroup v2 path below the cgroup2 mount whose last part may have `*`, `?` and `[...]`
    /// wildcards: `machine.slice/libpod-*.scope`, `system.slice/docker-*.scope`.
    pub cgroup: String,
    /// Rules files (or folders of `*.rules`) its cgroups hold beside the daemon's policy: the
    /// stronger decision of the two wins.
    pub rules: Vec<PathBuf>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AskConfig {
    /// An unanswered ask expires after this many seconds.
    pub timeout_secs: u64,
    /// What an expired ask becomes: `deny` (the request stays refused). Nothing an ask does by
    /// itself is ever written to a rules file.
    pub expire: String,
    /// Identical asks within this many seconds are one ask.
    pub dedupe_secs: u64,
    /// `guard approve --once`: the same request succeeds when retried within this many seconds.
    pub once_secs: u64,
    /// The approval policy (the Codex CLI's): `on-request` (asks are raised), `on-failure` (the
    /// same here), `never` (a prompt is refused at once, no ask), `granular:rules=BOOL,
    /// sandbox_approval=BOOL` (a `false` category is refused at once) or `untrusted` (every exec
    /// that is not known-safe asks).
    pub approval: String,
    /// The most asks one scope may have pending at once; past it a new prompt of that scope is
    /// refused at once (a repeat of a pending ask is still counted on it).
    pub max_pending_per_scope: usize,
}

impl AskConfig {
    /// [`AskConfig::approval`], parsed (checked when the configuration is read).
    pub fn approval(&self) -> crate::policy::approval::ApprovalPolicy {
        self.approval.parse().unwrap_or_default()
    }
}

/// `[audit]`: the audit log's file, rotation, flush policy, and what else gets the records.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuditConfig {
    /// The audit log (JSON lines, schema version 1).
    pub path: PathBuf,
    /// A file is rotated (to `PATH.1`, ...) before it would grow past this many MiB.
    pub max_file_mb: u64,
    /// Rotated files kept besides the current one (the oldest goes).
    pub keep_files: usize,
    /// Records are written out when the writer has nothing queued, and at least this often
    /// (milliseconds) under load: a kill -9 loses at most this long's records plus the queue.
    pub flush_ms: u64,
    /// fsync the log at least this often (seconds); 0: never (a daemon crash loses nothing
    /// written; this bounds what a crash of the machine can take).
    pub fsync_secs: u64,
    /// Records queued for the writer before new ones are counted as lost (`loss` records,
    /// `guard status`). No record is ever sampled away: past its scope's share, a record is
    /// folded into a counted one (`scope_records`).
    pub queue_records: usize,
    /// Records of one scope's processes (decisions, its resolver's names) written per
    /// `scope_window_secs`; past that, its records are folded into one `folded` record per kind
    /// with their count when the window ends, so one scope's flood does not rotate the other
    /// scopes' records out of the log. 0: no share.
    pub scope_records: u64,
    /// The window of `scope_records`, in seconds.
    pub scope_window_secs: u64,
    /// Record allowed execs and connections too (the kernel sends an event for every decision
    /// in scope; `guard replay` then sees all traffic). Off: refusals, asks and audit-only
    /// matches only.
    pub record_allowed: bool,
    /// Also send every record to this syslog receiver, as RFC 5424: `udp://HOST:PORT`,
    /// `tcp://HOST:PORT` or `unix:///dev/log`. Empty: none.
    pub syslog: String,
    /// The syslog facility: `authpriv` (kept out of general logs: the records hold command
    /// lines and user names), `auth`, `daemon`, `user`, `local0` ... `local7`.
    pub syslog_facility: String,
}

impl Default for AuditConfig {
    fn default() -> Self {
        AuditConfig {
            path: PathBuf::from("/var/log/guard/audit.jsonl"),
            max_file_mb: 64,
            keep_files: 8,
            flush_ms: 200,
            fsync_secs: 5,
            queue_records: 65_536,
            scope_records: 10_000,
            scope_window_secs: 10,
            record_allowed: false,
            syslog: String::new(),
            syslog_facility: "authpriv".to_string(),
        }
    }
}

impl AuditConfig {
    /// `syslog` and `syslog_facility` checked and connected; `None` when `syslog` is empty.
    pub fn syslog_forwarder(&self) -> Result<Option<crate::audit::forward::SyslogForwarder>> {
        use crate::audit::syslog::{Facility, SyslogTarget};
        if self.syslog.is_empty() {
            return Ok(None);
        }
        let target: SyslogTarget = self
            .syslog
            .parse()
            .map_err(|e| anyhow::anyhow!("[audit] syslog: {e}"))?;
        let facility: Facility = self
            .syslog_facility
            .parse()
            .map_err(|e| anyhow::anyhow!("[audit] syslog_facility: {e}"))?;
        crate::audit::forward::SyslogForwarder::start(target, facility, self.queue_records)
            .map(Some)
    }

    /// Each scope's share of the log, its window starting now.
    pub fn scope_budget(&self) -> super::audit_budget::ScopeBudget {
        super::audit_budget::ScopeBudget::new(
            self.scope_records,
            Duration::from_secs(self.scope_window_secs.max(1)),
            std::time::Instant::now(),
        )
    }

    pub fn writer_config(&self) -> crate::audit::writer::WriterConfig {
        crate::audit::writer::WriterConfig {
            path: self.path.clone(),
            max_file_bytes: self.max_file_mb.max(1) * 1024 * 1024,
            keep_files: self.keep_files,
            flush_interval: Duration::from_millis(self.flush_ms.max(1)),
            fsync_interval: Duration::from_secs(self.fsync_secs),
            queue_records: self.queue_records,
        }
    }
}

/// `[resolver]`: every DNS query of a scope goes to guard's resolver, which refuses the names
/// the policy forbids and puts the answered addresses in force before it answers.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ResolverSection {
    /// `false`: the scopes' DNS goes where it is sent, decided by address.
    pub enabled: bool,
    /// How a forbidden name is answered: `refused` or `nxdomain`.
    pub refusal: crate::resolve::Refusal,
}

impl Default for ResolverSection {
    fn default() -> Self {
        ResolverSection {
            enabled: true,
            refusal: crate::resolve::Refusal::Refused,
        }
    }
}

/// `[metrics]`: the daemon's Prometheus metrics (text exposition at `http://LISTEN/metrics`,
/// no authentication: listen on loopback or a management interface).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsSection {
    /// `IP:PORT` to serve `/metrics` on; unset: no metrics listener.
    pub listen: Option<SocketAddr>,
}

/// `[console]`: `guard console`'s page, served by the daemon. Each person signs in with a
/// one-time link `guard console` gets over the control socket; listen on loopback.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConsoleSection {
    /// `IP:PORT` to serve the page on, e.g. `127.0.0.1:9478`; unset: no console.
    pub listen: Option<SocketAddr>,
}

/// `[node]`: where a Kubernetes node's pods are and what holds a pod before its policies do.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodeSection {
    /// The pods' parent cgroup, below the cgroup2 mount: `kubepods` with the kubelet's
    /// `cgroupfs` driver, `kubepods.slice` with `systemd`.
    pub pods_cgroup: PathBuf,
    /// How the kubelet names pods' cgroups: `cgroupfs` or `systemd`.
    pub cgroup_driver: String,
    /// What holds a pod's processes from their first moment until its policies are in force
    /// (a pod created while the agent is down, or not yet seen): `deny` refuses every exec
    /// and connect (fails closed); `floor` leaves the node's own policy alone in force.
    pub unready: String,
}

impl Default for NodeSection {
    fn default() -> Self {
        NodeSection {
            pods_cgroup: PathBuf::from("kubepods"),
            cgroup_driver: "cgroupfs".to_string(),
            unready: "deny".to_string(),
        }
    }
}

/// `[export]`: the audit records sent on as they are made, besides the log.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExportSection {
    pub otlp: OtlpSection,
}

/// `[export.otlp]`: every record as an OTLP log record (OCSF's shape) to an OTLP/HTTP
/// receiver (an OpenTelemetry Collector); off unless `endpoint` is set.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OtlpSection {
    /// `http://HOST:PORT` (`/v1/logs` is added) or the full logs URL. Empty: no export.
    pub endpoint: String,
    /// Extra request headers, e.g. `{ "x-api-key" = "..." }`.
    pub headers: BTreeMap<String, String>,
    /// Records queued for the receiver before new ones are counted as lost.
    pub queue_records: usize,
    /// Records per request at most.
    pub batch_records: usize,
    /// One request's bound, in seconds.
    pub timeout_secs: u64,
    /// Attempts per batch before it is counted as failed (backoff from 0.25 s, doubling, at
    /// most 8 s; a receiver's `Retry-After` is honoured up to that).
    pub attempts: u32,
}

impl Default for OtlpSection {
    fn default() -> Self {
        OtlpSection {
            endpoint: String::new(),
            headers: BTreeMap::new(),
            queue_records: 16_384,
            batch_records: 512,
            timeout_secs: 5,
            attempts: 5,
        }
    }
}

impl OtlpSection {
    /// Where to send, checked; `None` when no endpoint is set.
    pub fn target(&self) -> Result<Option<crate::audit::otlp_sender::OtlpTarget>> {
        use crate::audit::otlp_sender::OtlpTarget;
        if self.endpoint.is_empty() {
            return Ok(None);
        }
        let url = OtlpTarget::logs_url(&self.endpoint)
            .map_err(|e| anyhow::anyhow!("[export.otlp] endpoint: {e:#}"))?;
        if self.timeout_secs == 0 || self.attempts == 0 || self.batch_records == 0 {
            bail!("[export.otlp]: timeout_secs, attempts and batch_records must be at least 1");
        }
        Ok(Some(OtlpTarget {
            url,
            headers: self.headers.clone().into_iter().collect(),
            queue_records: self.queue_records,
            batch_records: self.batch_records,
            timeout: Duration::from_secs(self.timeout_secs),
            attempts: self.attempts,
        }))
    }

    /// The sender, started; `None` when no endpoint is set.
    pub fn sender(&self) -> Result<Option<crate::audit::otlp_sender::OtlpSender>> {
        self.target()?
            .map(crate::audit::otlp_sender::OtlpSender::start)
            .transpose()
    }
}

/// `[require]`: layers of enforcement the daemon refuses to start without
/// ([`crate::kernel::layers`]), so a host that must not run unprotected fails loudly.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RequireSection {
    /// exec, network, unix, devices, dns, hold, files, audit, export.
    pub layers: Vec<crate::kernel::layers::Layer>,
}

/// `[sandbox]`: the sandbox mode each `guard run` under the daemon holds for its command
/// (`guard run --sandbox`'s modes); empty: the rules' `sandbox(...)`, else none.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxSection {
    /// `read-only`, `workspace-write` or `danger-full-access`; empty: the rules decide.
    pub mode: String,
    /// Extra writable roots under workspace-write (the workspace is the run's current folder).
    pub writable: Vec<PathBuf>,
}

impl SandboxSection {
    /// The configured mode as a setting; `None` when the rules decide.
    pub fn setting(&self) -> Result<Option<crate::policy::sandbox::SandboxSetting>> {
        if self.mode.is_empty() {
            return Ok(None);
        }
        let Some(mode) = crate::policy::sandbox::SandboxMode::runnable(&self.mode) else {
            bail!(
                "sandbox.mode = {:?}: use \"read-only\", \"workspace-write\" or \
                 \"danger-full-access\" (or leave it empty for the rules' sandbox(...))",
                self.mode
            );
        };
        Ok(Some(crate::policy::sandbox::SandboxSetting {
            mode,
            writable: self.writable.clone(),
            from: crate::confine::sandbox::DAEMON_SANDBOX.to_string(),
        }))
    }
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UserConfig {
    pub email: Option<String>,
    pub attrs: BTreeMap<String, Vec<String>>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            rules: Vec::new(),
            overlays: Vec::new(),
            state_dir: PathBuf::from(DEFAULT_STATE_DIR),
            socket: PathBuf::from(DEFAULT_SOCKET),
            socket_group: String::new(),
            admin_group: String::new(),
            authz_policy: None,
            pin_dir: PathBuf::from(DEFAULT_PIN_DIR),
            run_cgroup: "guard-daemon".to_string(),
            backend: String::new(),
            nameserver: None,
            audit_only: false,
            resolver: ResolverSection::default(),
            audit: AuditConfig::default(),
            scope: ScopeConfig::default(),
            asks: AskConfig::default(),
            sandbox: SandboxSection::default(),
            metrics: MetricsSection::default(),
            require: RequireSection::default(),
            export: ExportSection::default(),
            console: ConsoleSection::default(),
            node: NodeSection::default(),
            node_agent: None,
            users: BTreeMap::new(),
            file: None,
        }
    }
}

impl Default for AskConfig {
    fn default() -> Self {
        AskConfig {
            timeout_secs: 300,
            expire: "deny".to_string(),
            dedupe_secs: 60,
            once_secs: 60,
            approval: "on-request".to_string(),
            max_pending_per_scope: crate::asks::book::PENDING_PER_SCOPE,
        }
    }
}

impl AskConfig {
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_secs)
    }
    pub fn dedupe(&self) -> Duration {
        Duration::from_secs(self.dedupe_secs)
    }
    pub fn once(&self) -> Duration {
        Duration::from_secs(self.once_secs)
    }
}

impl Config {
    /// Reads `path`; a missing file is the defaults only when `required` is false (the default
    /// path may be absent, a path someone named must exist).
    pub fn load(path: &Path, required: bool) -> Result<Config> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound && !required => {
                return Ok(Config::default());
            }
            Err(err) => return Err(err).with_context(|| format!("reading {}", path.display())),
        };
        let mut config: Config = toml::from_str(&text)
            .map_err(|err| anyhow::anyhow!("{}: {}", path.display(), err.to_string().trim_end()))?;
        config
            .validate()
            .with_context(|| path.display().to_string())?;
        config.file = Some(path.to_path_buf());
        Ok(config)
    }

    pub fn validate(&self) -> Result<()> {
        self.sandbox.setting()?;
        self.export.otlp.target()?;
        if self.asks.expire != "deny" {
            bail!(
                "asks.expire = {:?}: the only supported value is \"deny\"",
                self.asks.expire
            );
        }
        if !matches!(self.node.cgroup_driver.as_str(), "cgroupfs" | "systemd") {
            bail!(
                "node.cgroup_driver = {:?}: use \"cgroupfs\" or \"systemd\", as the kubelet's \
                 cgroupDriver says",
                self.node.cgroup_driver
            );
        }
        if !matches!(self.node.unready.as_str(), "deny" | "floor") {
            bail!(
                "node.unready = {:?}: use \"deny\" (fails closed) or \"floor\"",
                self.node.unready
            );
        }
        if !matches!(self.backend.as_str(), "" | "lsm" | "cgroup") {
            bail!("backend = {:?}: use \"lsm\" or \"cgroup\"", self.backend);
        }
        if let Err(why) = self
            .asks
            .approval
            .parse::<crate::policy::approval::ApprovalPolicy>()
        {
            bail!("asks.approval = {:?}: {why}", self.asks.approval);
        }
        if self.asks.once_secs == 0 || self.asks.timeout_secs == 0 {
            bail!("asks.once_secs and asks.timeout_secs must be at least 1");
        }
        for pattern in &self.scope.patterns {
            crate::daemon::scopes::CgroupPattern::parse(&pattern.cgroup)?;
            if pattern.rules.is_empty() {
                bail!(
                    "scope.patterns: {:?} has no rules: name its rules files (`rules = [...]`)",
                    pattern.cgroup
                );
            }
        }
        Ok(())
    }

    /// The amendments file: approvals with `--always` and the amendment verbs append here.
    pub fn amendments_file(&self) -> PathBuf {
        self.state_dir.join("rules").join("default.rules")
    }

    /// The paths besides the rules that a guarded process must never change, and why: the
    /// state folder (with the amendments file), the control socket, the audit log, this file
    /// and the authorization policy. The daemon adds them to its policy's protected paths
    /// (`policy::protected`), wherever they are configured.
    pub fn protected_paths(&self) -> Vec<(PathBuf, &'static str)> {
        let mut paths = vec![
            (
                self.state_dir.clone(),
                "the daemon's state folder, with the amendments file rules/default.rules",
            ),
            (self.socket.clone(), "the daemon's control socket"),
            (self.audit.path.clone(), "the daemon's audit log"),
        ];
        if let Some(file) = &self.file {
            paths.push((file.clone(), "the daemon's configuration"));
        }
        if let Some(authz) = &self.authz_policy {
            paths.push((authz.clone(), "the control socket's authorization policy"));
        }
        paths
    }
}

/// The documented example config, every key at its default (shipped as `packaging/guard.toml`,
/// and checked by a test to parse to [`Config::default`]).
pub const EXAMPLE: &str = include_str!("../../../packaging/guard.toml");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_example_is_the_defaults() {
        let parsed: Config = toml::from_str(EXAMPLE).expect("packaging/guard.toml parses");
        let defaults = Config::default();
        assert_eq!(format!("{parsed:?}"), format!("{defaults:?}"));
    }

    #[test]
    fn unknown_keys_and_bad_values_are_errors_that_name_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("guard.toml");
        std::fs::write(&path, "sokcet = \"/x\"\n").unwrap();
        let err = format!("{:#}", Config::load(&path, true).unwrap_err());
        assert!(err.contains("sokcet"), "{err}");
        assert!(err.contains("guard.toml"), "{err}");
        std::fs::write(&path, "[asks]\nexpire = \"allow\"\n").unwrap();
        let err = format!("{:#}", Config::load(&path, true).unwrap_err());
        assert!(err.contains("asks.expire"), "{err}");
        std::fs::write(&path, "[sandbox]\nmode = \"rw\"\n").unwrap();
        let err = format!("{:#}", Config::load(&path, true).unwrap_err());
        assert!(
            err.contains("sandbox.mode = \"rw\": use \"read-only\""),
            "{err}"
        );
        std::fs::write(&path, "[node]\ncgroup_driver = \"systemd-ish\"\n").unwrap();
        let err = format!("{:#}", Config::load(&path, true).unwrap_err());
        assert!(
            err.contains("node.cgroup_driver") && err.contains("\"cgroupfs\" or \"systemd\""),
            "{err}"
        );
        std::fs::write(&path, "[export.otlp]\nendpoint = \"https://c:4318\"\n").unwrap();
        let err = format!("{:#}", Config::load(&path, true).unwrap_err());
        assert!(
            err.contains("[export.otlp] endpoint") && err.contains("http://127.0.0.1:4318"),
            "{err}"
        );
    }

    #[test]
    fn a_missing_default_file_is_the_defaults_but_a_named_one_is_an_error() {
        let missing = Path::new("/nonexistent/guard.toml");
        assert!(Config::load(missing, false).is_ok());
        assert!(Config::load(missing, true).is_err());
    }
}
