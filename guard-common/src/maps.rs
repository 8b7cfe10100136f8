//! Map keys and values, shared by the kernel programs and the userspace map sync.

use crate::decision::Decision;
use crate::limits::{
    NAME_LEN, NO_RULE, TOKEN_BY_ID, TOKEN_LEN, TOKEN_MAX_LEN, TOKEN_SCAN_LEN, TOKEN_TOO_LONG,
    UNIX_PATH_LEN,
};

/// No decision stored here (an argv trie node that only leads further).
pub const DECISION_NONE: u8 = 0xff;
/// [`Verdict::flags`]: the rule is audit-only (record, let through).
pub const VERDICT_AUDIT_ONLY: u8 = 1;
/// [`Verdict::flags`]: a person approved one exact request. In an [`ArgvNode::here`]: the argv
/// that ends exactly at this node, so an exec whose argv is exactly this token path and whose
/// decision is `prompt` runs. On a destination entry of exact transport, exact port and a full
/// address (/32, /128): a connection to exactly that address, port and transport whose
/// decision is `prompt` goes through. Never in `below`, never on identity or name entries, and
/// never an override of `forbidden`.
///
/// A node that carries only an approval (no rule of its own ends there) has a `here` of
/// decision [`DECISION_NONE`] with this flag and the approval's rule id: it decides nothing
/// itself, so an argv that passes through it on the way to more tokens is decided exactly as
/// before the approval (an allow there would turn "unmatched" into "allowed").
pub const VERDICT_APPROVAL: u8 = 2;

/// A rule's decision as the kernel stores it: the decision code, flags and the kernel rule id
/// (an index into the userspace rule table, which maps it back to file and line).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Verdict {
    pub decision: u8,
    pub flags: u8,
    pub _pad: u16,
    pub rule: u32,
}

impl Verdict {
    pub const NONE: Verdict = Verdict {
        decision: DECISION_NONE,
        flags: 0,
        _pad: 0,
        rule: NO_RULE,
    };

    pub const fn new(decision: Decision, rule: u32, audit_only: bool) -> Self {
        Verdict {
            decision: decision as u8,
            flags: if audit_only { VERDICT_AUDIT_ONLY } else { 0 },
            _pad: 0,
            rule,
        }
    }

    pub const fn is_none(&self) -> bool {
        self.decision == DECISION_NONE
    }

    pub const fn audit_only(&self) -> bool {
        self.flags & VERDICT_AUDIT_ONLY != 0
    }

    /// The node this verdict is the `here` of ends an approved argv ([`VERDICT_APPROVAL`]).
    pub const fn approved(&self) -> bool {
        self.flags & VERDICT_APPROVAL != 0
    }

    /// An approval's mark on an argv node: no decision of its own, only the flag.
    pub const fn approval(rule: u32) -> Self {
        Verdict {
            decision: DECISION_NONE,
            flags: VERDICT_APPROVAL,
            _pad: 0,
            rule,
        }
    }

    /// Strongest wins (`forbidden` > `prompt` > `allow` > none); on a tie the first is kept, so
    /// the rule that decided first is the one reported. An enforced verdict beats an audit-only
    /// one of the same decision.
    #[inline(always)]
    pub fn strongest(self, other: Verdict) -> Verdict {
        if self.is_none() {
            return other;
        }
        if other.is_none() {
            return self;
        }
        if other.decision > self.decision
            || (other.decision == self.decision && self.audit_only() && !other.audit_only())
        {
            other
        } else {
            self
        }
    }
}

/// One scope's share of the event ring buffer on one CPU (`SCOPE_EVENTS`, per CPU, keyed by the
/// scope's cgroup id): the events it made this second, and what it put in and lost in all. A
/// scope past [`crate::limits::SCOPE_EVENTS_PER_SECOND`] in a second while the ring is more
/// than half full loses its own events (the decisions stand), so a flooding scope cannot fill
/// the ring that every scope shares.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScopeEvents {
    /// The boot-time second `in_second` counts in.
    pub second: u64,
    pub in_second: u64,
    /// Events put in the ring buffer.
    pub submitted: u64,
    /// Events lost: past the scope's budget, or the ring buffer full.
    pub lost: u64,
}

/// Settings the programs read on every decision (one entry, index 0).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Decision code for an exec no rule matches.
    pub unmatched_exec: u8,
    /// Decision code for a destination no rule matches.
    pub unmatched_network: u8,
    /// Non-zero: record every decision, enforce none (global audit-only mode).
    pub audit_only: u8,
    /// Non-zero once userspace has filled the maps; before that every program lets calls through.
    pub ready: u8,
    /// Non-zero when the argv trie holds at least one approval ([`VERDICT_APPROVAL`]): then
    /// `lsm/bprm_check_security` lets a `prompt` by identity or name through to
    /// `sched_process_exec`, the only hook that sees argv and so can tell an approved retry.
    pub exec_approvals: u8,
    /// Non-zero: allowed execs and connections are recorded too (`[audit] record_allowed`),
    /// as events with action none, so an audit log holds all traffic for `guard replay`.
    pub record_allowed: u8,
    /// Decision code for an exec of a file no path names (a memfd, a deleted file), which no
    /// rule can name (`enforcement(anonymous_exec=...)`).
    pub anonymous_exec: u8,
    /// The socket kinds the policy allows in scope (`crate::sockets::kind` bits,
    /// `enforcement(socket_kinds=[...])`); the rest are refused at creation.
    pub socket_kinds: u8,
}

/// Where the scope's DNS traffic goes (one entry, index 0): guard's resolver, listening on
/// 127.0.0.1 and ::1 at `port`. The cgroup connect and sendmsg programs send every TCP and UDP
/// call to [`DNS_PORT`] there instead, and the recvmsg programs make its replies seem to come
/// from the address that was asked.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DnsRedirect {
    /// The resolver's port (host order); 0: DNS is not redirected.
    pub port: u16,
    /// Non-zero on the `lsm` backend: the cgroup programs only redirect, the LSM hooks decide.
    pub redirect_only: u8,
    /// Non-zero in a program set stacked on a run's scope beside the daemon's own (an overlay,
    /// `guard run --overlay`): the daemon's set redirects DNS and sends stand-ins on, so this
    /// one only decides (DNS passes, no address is rewritten).
    pub follower: u8,
}

/// The port DNS is asked on (UDP and TCP).
pub const DNS_PORT: u16 = 53;

/// The network guard's resolver takes stand-in addresses from (198.18.0.0/15, reserved for
/// benchmarking by RFC 2544, so no real destination is lost): under
/// `unmatched_network="prompt"` a name no rule names is answered with one of them instead of
/// leaving the host. A connect to a stand-in is decided as any address (its ask names the name
/// it stands for) and, once let through, goes to the real address `STAND_INS` maps it to.
pub const STAND_IN_NET: [u8; 4] = [198, 18, 0, 0];
/// The prefix length of [`STAND_IN_NET`].
pub const STAND_IN_PREFIX: u32 = 15;

/// Whether an IPv4 address (network-order bytes) is a stand-in.
#[inline(always)]
pub fn is_stand_in(addr: [u8; 4]) -> bool {
    addr[0] == STAND_IN_NET[0] && addr[1] & 0xfe == STAND_IN_NET[1]
}

/// A redirected socket's destination as the program gave it, keyed by socket cookie.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DnsOriginal {
    /// The address (IPv4: the first 4 bytes), network order.
    pub addr: [u8; 16],
    /// Network order.
    pub port: u16,
    /// AF_INET or AF_INET6.
    pub family: u16,
    /// The process (thread group id) that sent it: guard's resolver names it in its records
    /// without looking through `/proc` for the socket's holder.
    pub pid: u32,
    /// The scope that sent it (`scope::current_scope`): guard's resolver puts the addresses it
    /// answers in force for this scope alone.
    pub scope: u64,
}

/// How prompted connects and sends are held (one entry, index 0): as a slow network holds them.
/// A prompted TCP connect is let through with its socket listed in `HELD_SOCKETS`, and its SYNs
/// are dropped on the way out until the destination is approved (the program's own timeouts
/// apply; a denial ends the socket from userspace); a prompted UDP datagram is dropped, as a lossy
/// network would. Off (`enabled` 0): a prompt is refused with EPERM.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetHold {
    pub enabled: u8,
    /// Non-zero on the `lsm` backend: its socket hooks let a prompted call through unrecorded,
    /// and the cgroup connect and sendmsg programs (which run after them) hold it.
    pub lsm_defers: u8,
    /// The port of guard's splice listener on 127.0.0.1 (host order; 0: none): a held connect
    /// to a stand-in address with no real address yet goes there, and guard splices it to the
    /// real address once approved.
    pub splice_port: u16,
    /// `TCP_USER_TIMEOUT` of a held TCP socket until it connects: a blocking connect waits up
    /// to this long (the ask's expiry), then fails with ETIMEDOUT.
    pub user_timeout_ms: u32,
}

/// `NetHold`'s states of a held socket ([`HeldSocket::state`]).
pub mod held {
    /// Its packets to the held destination are dropped.
    pub const HELD: u8 = 0;
    /// The destination was approved: its packets go out (set by the egress program).
    pub const RELEASED: u8 = 1;
    /// A held TCP socket that connected (after its release).
    pub const CONNECTED: u8 = 2;
    /// A held TCP socket that closed before it connected: the program gave up, or it was
    /// ended by a denial.
    pub const CLOSED: u8 = 3;
    /// Denied (set by userspace): its packets stay dropped, and at its next SYN retry the
    /// sock_ops program ends the connect (ETIMEDOUT) where userspace could not end it at once.
    pub const DENIED: u8 = 4;
    /// A held connect to a stand-in address with no real address yet, sent to guard's splice
    /// listener on loopback instead: its SYNs are dropped as [`HELD`]'s are until the stand-in
    /// is approved for its scope and mapped to a real address; denied, it is ended.
    pub const SPLICED: u8 = 5;
    /// A [`SPLICED`] connect that was approved: its SYN goes out to the splice listener (set by
    /// the egress program).
    pub const SPLICE_RELEASED: u8 = 6;
    /// A [`SPLICE_RELEASED`] connect that connected to the splice listener (set by the sock_ops
    /// program): the listener takes it and splices it to the real address, even once its
    /// program closed it (what it sent waits at the listener). Stays so until userspace forgets
    /// it.
    pub const SPLICE_CONNECTED: u8 = 7;

    /// Whether a held socket in `state` went to guard's splice listener.
    pub const fn is_spliced(state: u8) -> bool {
        state == SPLICED || state == SPLICE_RELEASED || state == SPLICE_CONNECTED
    }

    /// Whether a held socket in `state` was approved on its way to guard's splice listener, so
    /// the listener may take its connection.
    pub const fn splice_released(state: u8) -> bool {
        state == SPLICE_RELEASED || state == SPLICE_CONNECTED
    }
}

/// What `getpeername` names for a socket guard sent to its splice listener (`SPLICED_PEERS`,
/// by socket cookie): the stand-in address and port its program connected to, not the
/// listener.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SplicedPeer {
    /// The stand-in, as the kernel stores an IPv4 address (network-order bytes in a native
    /// word).
    pub stand_in: u32,
    /// Its port as `bpf_sock_addr.user_port` holds it (network order in the low 16 bits).
    pub port: u32,
}

/// A socket whose prompted connect (or UDP send) was let through and whose packets are held,
/// keyed by socket cookie in `HELD_SOCKETS`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeldSocket {
    /// The held destination: address (IPv4: the first 4 bytes), network order.
    pub addr: [u8; 16],
    /// The socket's own address once the kernel chose it (TCP, at connect).
    pub local_addr: [u8; 16],
    /// AF_INET or AF_INET6.
    pub family: u16,
    /// Destination port, host order.
    pub port: u16,
    /// Local port, host order (TCP, at connect; 0 before).
    pub local_port: u16,
    pub transport: u8,
    /// [`held`].
    pub state: u8,
    /// `CLOCK_BOOTTIME` nanoseconds: when it was held, and when it was released or connected.
    pub held_ns: u64,
    pub changed_ns: u64,
    /// The scope it was held in: an approval holds it only when that scope was given it.
    pub scope: u64,
}

/// An approval held for one scope (`APPROVALS`; the value is the approval's rule id). An
/// approval mark ([`VERDICT_APPROVAL`]) in the argv trie or a destination trie says some scope
/// was given that exact request; the kernel lets it pass a `prompt` only for a scope listed here
/// with the same key, so a person's answer to one run's ask never answers another scope's.
/// No padding the kernel would hash unset: every byte is a field.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ScopedApproval {
    /// The scope's cgroup id (the deepest listed one, as `SCOPES` decides).
    pub scope: u64,
    /// A destination's address, network order (IPv4: the first 4 bytes); an exec's argv trie
    /// node id, or a unix socket's exact-entry rule id, in the first 4 bytes (native order).
    pub key: [u8; 16],
    /// Destination port, host order (0 for an exec).
    pub port: u16,
    pub transport: u8,
    /// [`approval_kind`].
    pub kind: u8,
    pub _pad: u32,
}

/// What a [`ScopedApproval`] approves.
pub mod approval_kind {
    /// An exec whose argv ends at the key's trie node.
    pub const EXEC: u8 = 1;
    /// A connect or send to the unix socket the exact table's entry of the key's rule id names
    /// (a unix rule names one socket, and an approval-only entry carries its own approval's id).
    pub const UNIX: u8 = 2;
    /// A connection or send to an IPv4 address.
    pub const V4: u8 = 4;
    /// A connection or send to an IPv6 address.
    pub const V6: u8 = 6;
}

impl ScopedApproval {
    /// The approval of an argv ending at trie node `node`, for `scope`.
    pub const fn exec(scope: u64, node: u32) -> Self {
        let id = node.to_ne_bytes();
        let mut key = [0u8; 16];
        key[0] = id[0];
        key[1] = id[1];
        key[2] = id[2];
        key[3] = id[3];
        ScopedApproval {
            scope,
            key,
            port: 0,
            transport: 0,
            kind: approval_kind::EXEC,
            _pad: 0,
        }
    }

    /// The approval of the unix socket whose exact-table entry names rule `entry_rule`, for
    /// `scope`.
    pub const fn unix(scope: u64, entry_rule: u32) -> Self {
        let mut approval = ScopedApproval::exec(scope, entry_rule);
        approval.kind = approval_kind::UNIX;
        approval
    }

    /// The approval of `addr` (IPv4 when `v4`: its first 4 bytes, the rest zero), `port` and
    /// `transport`, for `scope`.
    pub const fn destination(
        scope: u64,
        v4: bool,
        addr: [u8; 16],
        port: u16,
        transport: u8,
    ) -> Self {
        let mut key = addr;
        if v4 {
            let mut i = 4;
            while i < 16 {
                key[i] = 0;
                i += 1;
            }
        }
        ScopedApproval {
            scope,
            key,
            port,
            transport,
            kind: if v4 {
                approval_kind::V4
            } else {
                approval_kind::V6
            },
            _pad: 0,
        }
    }
}

/// Program identity: the executed file's device (kernel `dev_t`: major << 20 | minor) and inode.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ExecIdentity {
    pub dev: u64,
    pub ino: u64,
}

/// An executed file's name (its last path component), NUL-padded.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ExecName {
    pub name: [u8; NAME_LEN],
}

impl ExecName {
    /// `None` when the name does not fit (such a rule cannot be held by name).
    pub fn new(name: &[u8]) -> Option<Self> {
        if name.is_empty() || name.len() >= NAME_LEN {
            return None;
        }
        let mut out = [0u8; NAME_LEN];
        out[..name.len()].copy_from_slice(name);
        Some(ExecName { name: out })
    }
}

/// An edge of the argv trie: from node `parent` (0 is the root) on token `token`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ArgvEdge {
    pub parent: u32,
    /// Token length; [`TOKEN_BY_ID`] for a token longer than [`TOKEN_LEN`], whose `token`
    /// holds its id (little-endian u32) from `LONG_TOKEN_IDS`; [`TOKEN_TOO_LONG`] for one longer
    /// than [`TOKEN_MAX_LEN`] (which no exec's argv matches).
    pub len: u8,
    pub _pad: [u8; 3],
    pub token: [u8; TOKEN_LEN],
}

impl ArgvEdge {
    /// The edge for a token of at most [`TOKEN_LEN`] bytes (a longer one: [`ArgvEdge::long`],
    /// or for one past [`TOKEN_MAX_LEN`] an edge nothing matches).
    pub fn new(parent: u32, token: &[u8]) -> Self {
        let mut out = [0u8; TOKEN_LEN];
        let kept = token.len().min(TOKEN_LEN);
        out[..kept].copy_from_slice(&token[..kept]);
        let len = if token.len() > TOKEN_MAX_LEN {
            TOKEN_TOO_LONG
        } else if token.len() > TOKEN_LEN {
            TOKEN_BY_ID
        } else {
            token.len() as u8
        };
        ArgvEdge {
            parent,
            len,
            _pad: [0; 3],
            token: out,
        }
    }

    /// The edge for the long token whose id is `id`.
    pub fn long(parent: u32, id: u32) -> Self {
        let mut token = [0u8; TOKEN_LEN];
        token[..4].copy_from_slice(&id.to_le_bytes());
        ArgvEdge {
            parent,
            len: TOKEN_BY_ID,
            _pad: [0; 3],
            token,
        }
    }
}

/// The whole of a token longer than [`TOKEN_LEN`], NUL-padded: the key of `LONG_TOKEN_IDS`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LongToken {
    pub bytes: [u8; TOKEN_SCAN_LEN],
}

impl LongToken {
    /// `None` for a token that fits an edge key (or is too long for any argv the kernel reads).
    pub fn new(token: &[u8]) -> Option<Self> {
        if token.len() <= TOKEN_LEN || token.len() > TOKEN_MAX_LEN {
            return None;
        }
        let mut bytes = [0u8; TOKEN_SCAN_LEN];
        bytes[..token.len()].copy_from_slice(token);
        Some(LongToken { bytes })
    }
}

/// An argv trie node: the rule that ends here (if any) and the strongest rule anywhere below
/// it, which the kernel takes when it cannot read further tokens (the safe answer).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArgvNode {
    pub id: u32,
    pub here: Verdict,
    pub below: Verdict,
}

/// Transport codes in destination keys and events (IP protocol numbers; 0 = any).
pub const TRANSPORT_ANY: u8 = 0;
pub const TRANSPORT_TCP: u8 = 6;
pub const TRANSPORT_UDP: u8 = 17;

/// The bits of a destination trie key before the address: transport (8) and port (16), always
/// compared in full. The prefix length of a key is `DEST_HEAD_BITS` + the address prefix, and
/// [`DEST_SCOPE_BITS`] more for an entry of one scope.
pub const DEST_HEAD_BITS: u32 = 24;

/// The bits after the address: the scope (its cgroup id, big-endian) whose lookup of a name an
/// entry stands for. A name's addresses are put in force for the scope that asked for them
/// (each scope its own book of answers): its entries are full-length addresses followed by the
/// scope's id, so the kernel's lookup, keyed with the caller's scope, finds them only there;
/// every other entry stops at the address and holds for every scope.
pub const DEST_SCOPE_BITS: u32 = 64;

/// IPv4 destination trie key data: transport, port (network order), address (network order),
/// scope.
pub type DestV4 = [u8; 15];
/// IPv6 destination trie key data: transport, port (network order), address, scope.
pub type DestV6 = [u8; 27];

/// Builds a destination key's data; `port` 0 means any port. `addr` is the address and, for an
/// entry of one scope, the scope's 8 bytes after it ([`dest_scope`]).
pub fn dest_key<const N: usize>(transport: u8, port: u16, addr: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    out[0] = transport;
    out[1..3].copy_from_slice(&port.to_be_bytes());
    let kept = addr.len().min(N - 3);
    out[3..3 + kept].copy_from_slice(&addr[..kept]);
    out
}

/// A full key's data: the address (4 or 16 bytes) and the scope after it, as the kernel looks
/// a call up.
#[inline(always)]
pub fn dest_scope<const N: usize>(transport: u8, port: u16, addr: &[u8], scope: u64) -> [u8; N] {
    let mut out: [u8; N] = dest_key(transport, port, addr);
    out[N - 8..].copy_from_slice(&scope.to_be_bytes());
    out
}

/// Counter slots of the per-CPU `COUNTERS` array.
pub mod counter {
    pub const EXEC_ALLOW: u32 = 0;
    pub const EXEC_PROMPT: u32 = 1;
    pub const EXEC_FORBIDDEN: u32 = 2;
    pub const NET_ALLOW: u32 = 3;
    pub const NET_PROMPT: u32 = 4;
    pub const NET_FORBIDDEN: u32 = 5;
    /// Decisions recorded but not enforced (audit-only).
    pub const AUDIT_ONLY: u32 = 6;
    /// Events that did not fit in the ring buffer.
    pub const EVENTS_LOST: u32 = 7;
    /// Execs whose argv could not be read (decided on what could be read, safe side).
    pub const ARGV_UNREADABLE: u32 = 8;
    /// Events put in the ring buffer (with `EVENTS_LOST`: every event the programs made).
    pub const EVENTS_SUBMITTED: u32 = 9;
    /// File operations a rule allowed (`lsm` backend).
    pub const FILE_ALLOW: u32 = 10;
    /// File operations refused with EACCES (`lsm` backend).
    pub const FILE_REFUSED: u32 = 11;
    /// Sockets of a kind the policy does not allow, refused at creation (`cgroup/sock_create`).
    pub const SOCKET_REFUSED: u32 = 12;
    /// Exec decisions that failed open: kernel memory the exec hooks needed could not be read
    /// (the file, its identity, the scratch map), so the exec ran undecided.
    pub const EXEC_FAILED_OPEN: u32 = 13;
    /// Connects and sends that failed open (`lsm` backend: the socket or address unreadable).
    pub const NET_FAILED_OPEN: u32 = 14;
    /// File operations that failed open (`lsm` backend: the scratch map or file unreadable).
    pub const FILE_FAILED_OPEN: u32 = 15;
    /// DNS queries (connects and sends to port 53) sent to guard's resolver instead.
    pub const DNS_REDIRECTED: u32 = 16;
    /// Device nodes made, and block devices opened for writing, refused in scope (`cgroup/dev`).
    pub const DEVICE_REFUSED: u32 = 17;
    /// Connects and sends to unix sockets let through (`cgroup/connect_unix|sendmsg_unix`).
    pub const UNIX_ALLOW: u32 = 18;
    /// Connects and sends to unix sockets refused with EPERM (a prompt too: the retry asks).
    pub const UNIX_REFUSED: u32 = 19;
    /// Connects and sends to a stand-in address that were let through but had no real address
    /// to go to yet (refused with EPERM; the name is resolved once an approval covers it).
    pub const STAND_IN_UNMAPPED: u32 = 20;
    /// Events a scope made past its share of the ring buffer in a second (lost, not put in the
    /// ring; the decisions stand). Per scope in `SCOPE_EVENTS`.
    pub const EVENTS_OVER_BUDGET: u32 = 21;
    /// Prompted connects and sends let through with their packets held (`NetHold`).
    pub const NET_HELD: u32 = 22;
    /// Packets of held sockets dropped on the way out, to a destination not yet approved.
    pub const NET_HELD_DROPPED: u32 = 23;
    /// Prompted calls refused because `HELD_SOCKETS` was full (fails closed: as without a hold).
    pub const NET_HOLD_FULL: u32 = 24;
    pub const COUNT: u32 = 25;
    /// The slots that count decisions that failed open: each should stay 0.
    pub const FAILED_OPEN: [u32; 3] = [EXEC_FAILED_OPEN, NET_FAILED_OPEN, FILE_FAILED_OPEN];
    pub const NAMES: [&str; COUNT as usize] = [
        "exec_allow",
        "exec_prompt",
        "exec_forbidden",
        "net_allow",
        "net_prompt",
        "net_forbidden",
        "audit_only",
        "events_lost",
        "argv_unreadable",
        "events_submitted",
        "file_allow",
        "file_refused",
        "socket_refused",
        "exec_failed_open",
        "net_failed_open",
        "file_failed_open",
        "dns_redirected",
        "device_refused",
        "unix_allow",
        "unix_refused",
        "stand_in_unmapped",
        "events_over_budget",
        "net_held",
        "net_held_dropped",
        "net_hold_full",
    ];
}

/// A unix socket address as the connect_unix and sendmsg_unix programs read it and the exact
/// table is keyed: `len` bytes of `path`, the rest zero. A pathname stops before its first NUL
/// (as the kernel reads it); an abstract name keeps its leading NUL and every byte of its
/// length. The prefix table (an LPM trie) takes the same bytes with a length in bits.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct UnixKey {
    pub len: u32,
    pub path: [u8; UNIX_PATH_LEN],
}

/// Kernel struct member offsets, read from the running kernel's BTF by userspace and patched
/// into the programs before load (Rust BPF has no CO-RE relocations).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelOffsets {
    pub bprm_file: u32,
    pub bprm_filename: u32,
    pub file_f_inode: u32,
    /// `file.f_path.dentry`.
    pub file_dentry: u32,
    /// `dentry.d_name.name`.
    pub dentry_name: u32,
    pub inode_i_ino: u32,
    pub inode_i_sb: u32,
    pub sb_s_dev: u32,
    pub task_mm: u32,
    pub task_real_parent: u32,
    pub task_tgid: u32,
    pub mm_arg_start: u32,
    pub mm_arg_end: u32,
    pub socket_type: u32,
    pub msghdr_msg_name: u32,
    pub msghdr_msg_namelen: u32,
    /// `file.f_path` (the `struct path` `bpf_d_path` names).
    pub file_f_path: u32,
    /// `file.f_mode`.
    pub file_f_mode: u32,
    /// `dentry.d_hash.pprev` (NULL: the dentry is unhashed, no path reaches it).
    pub dentry_d_hash_pprev: u32,
    /// `socket.sk`.
    pub socket_sk: u32,
    /// `sock.__sk_common.skc_rcv_saddr` (the bound IPv4 address).
    pub sock_rcv_saddr: u32,
    /// `sock.__sk_common.skc_v6_rcv_saddr` (the bound IPv6 address).
    pub sock_v6_rcv_saddr: u32,
    /// `msghdr.msg_controllen` (ancillary data, which may set a send's source).
    pub msghdr_msg_controllen: u32,
    /// `bpf_sock_addr_kern.uaddr` (the kernel's copy of a unix socket address the
    /// connect_unix and sendmsg_unix programs read); 0 on a kernel without those hooks.
    pub sock_addr_uaddr: u32,
    /// `bpf_sock_addr_kern.uaddrlen`; 0 on a kernel without the unix hooks.
    pub sock_addr_uaddrlen: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strongest_prefers_stronger_then_enforced_then_first() {
        let allow = Verdict::new(Decision::Allow, 1, false);
        let prompt = Verdict::new(Decision::Prompt, 2, false);
        let forbid = Verdict::new(Decision::Forbidden, 3, false);
        let forbid_audit = Verdict::new(Decision::Forbidden, 4, true);
        assert_eq!(Verdict::NONE.strongest(allow), allow);
        assert_eq!(allow.strongest(Verdict::NONE), allow);
        assert_eq!(allow.strongest(prompt), prompt);
        assert_eq!(forbid.strongest(prompt), forbid);
        assert_eq!(forbid_audit.strongest(forbid), forbid);
        assert_eq!(forbid.strongest(forbid_audit), forbid);
        assert_eq!(
            prompt.strongest(Verdict::new(Decision::Prompt, 9, false)),
            prompt
        );
    }

    #[test]
    fn an_approval_mark_decides_nothing() {
        let mark = Verdict::approval(7);
        assert!(mark.is_none() && mark.approved() && !mark.audit_only());
        let prompt = Verdict::new(Decision::Prompt, 2, false);
        assert_eq!(mark.strongest(prompt), prompt);
        assert_eq!(prompt.strongest(mark), prompt);
        assert_eq!(Verdict::NONE.strongest(mark), mark);
    }

    #[test]
    fn settings_stay_eight_bytes() {
        assert_eq!(core::mem::size_of::<Settings>(), 8);
        assert_eq!(core::mem::size_of::<ScopeEvents>(), 32);
        assert_eq!(core::mem::size_of::<NetHold>(), 8);
        assert_eq!(core::mem::size_of::<HeldSocket>(), 64);
        assert_eq!(core::mem::size_of::<SplicedPeer>(), 8);
        assert_eq!(core::mem::size_of::<ScopedApproval>(), 32);
        assert_eq!(core::mem::size_of::<DnsOriginal>(), 32);
        // No padding: the kernel hashes every byte of the key.
        assert_eq!(core::mem::size_of::<UnixKey>(), 4 + UNIX_PATH_LEN);
    }

    #[test]
    fn long_tokens_keep_their_length_and_their_whole_text() {
        let long = [b'a'; TOKEN_LEN + 5];
        assert_eq!(ArgvEdge::new(7, &long).len, TOKEN_BY_ID);
        let edge = ArgvEdge::long(7, 0x0102_0304);
        assert_eq!((edge.parent, edge.len), (7, TOKEN_BY_ID));
        assert_eq!(edge.token[..5], [4, 3, 2, 1, 0]);
        assert_eq!(ArgvEdge::new(0, b"push").len, 4);
        let whole = LongToken::new(&long).unwrap();
        assert_eq!(&whole.bytes[..long.len()], &long[..]);
        assert!(whole.bytes[long.len()..].iter().all(|&b| b == 0));
        assert!(LongToken::new(b"push").is_none());
        let too_long = [b'a'; TOKEN_MAX_LEN + 1];
        assert_eq!(ArgvEdge::new(0, &too_long).len, TOKEN_TOO_LONG);
        assert!(LongToken::new(&too_long).is_none());
    }

    #[test]
    fn dest_keys_put_port_in_network_order() {
        let key: DestV4 = dest_key(TRANSPORT_TCP, 443, &[127, 0, 0, 2]);
        assert_eq!(key, [6, 1, 187, 127, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0]);
        let scoped: DestV4 = dest_scope(TRANSPORT_TCP, 443, &[127, 0, 0, 2], 0x0102);
        assert_eq!(scoped, [6, 1, 187, 127, 0, 0, 2, 0, 0, 0, 0, 0, 0, 1, 2]);
    }

    #[test]
    fn names_must_fit() {
        assert!(ExecName::new(b"git").is_some());
        assert!(ExecName::new(&[b'x'; NAME_LEN]).is_none());
        assert!(ExecName::new(b"").is_none());
    }
}
