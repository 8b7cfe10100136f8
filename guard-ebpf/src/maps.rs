//! The maps the programs share. Userspace (guard-user `kernel::maps`) is their one writer.

use aya_ebpf::macros::map;
use aya_ebpf::maps::{Array, HashMap, LpmTrie, LruHashMap, LruPerCpuHashMap, PerCpuArray, RingBuf};
use guard_common::dfa::{DFA_HEADER_ENTRIES, DFA_ROW_ENTRIES, DfaHeader, DfaRow, table};
use guard_common::event::TaskInfo;

use crate::argv::ArgvWalk;
use crate::patterns::{PatternInput, PatternReadings};
use guard_common::limits::{
    EVENTS_BYTES, FILE_PATH_BUF, MAX_APPROVALS, MAX_ARGV_EDGES, MAX_EXEC_ENTRIES, MAX_HELD_SOCKETS,
    MAX_LONG_TOKENS, MAX_NET_ENTRIES, MAX_SCOPES, MAX_SPLICED_PEERS, MAX_STAND_INS, MAX_TASKS,
    MAX_UNIX_ENTRIES, PATTERN_ARGV_LEN, TOKEN_SCAN_LEN, UNIX_PATH_LEN,
};
use guard_common::maps::{
    ArgvEdge, ArgvNode, DestV4, DestV6, DnsOriginal, DnsRedirect, ExecIdentity, ExecName,
    HeldSocket, LongToken, NetHold, ScopeEvents, ScopedApproval, Settings, SplicedPeer, UnixKey,
    Verdict, counter,
};

#[map]
pub static SETTINGS: Array<Settings> = Array::with_max_entries(1, 0);

/// Where the scope's DNS goes (index 0; port 0: not redirected), written once by userspace.
#[map]
pub static DNS_REDIRECT: Array<DnsRedirect> = Array::with_max_entries(1, 0);

/// Each redirected socket's original destination (by socket cookie), for its replies. LRU: a
/// socket that is gone needs no entry, and the oldest go first.
#[map]
pub static DNS_ORIGINALS: LruHashMap<u64, DnsOriginal> = LruHashMap::with_max_entries(4096, 0);

/// Stand-in address → the real address its name resolved to (both IPv4, as the kernel stores
/// them: network-order bytes in a native word), for the names a person approved or a rule
/// names (`stand_in`).
#[map]
pub static STAND_INS: HashMap<u32, u32> = HashMap::with_max_entries(MAX_STAND_INS, 0);

/// Whether prompted connects and sends are held rather than refused (`held`).
#[map]
pub static NET_HOLD: Array<NetHold> = Array::with_max_entries(1, 0);

/// The scopes (cgroup ids, as `scope::current_scope` gives them) whose prompted connects are
/// held rather than refused (`held`): the ones someone answers for.
#[map]
pub static HOLD_SCOPES: HashMap<u64, u8> = HashMap::with_max_entries(MAX_SCOPES, 0);

/// Held sockets by cookie (`held`): written by the connect and sendmsg programs, updated by the
/// egress and sock_ops programs, read and cleared by userspace.
#[map]
pub static HELD_SOCKETS: HashMap<u64, HeldSocket> = HashMap::with_max_entries(MAX_HELD_SOCKETS, 0);

/// The stand-in each socket sent to guard's splice listener connected to (by cookie), for its
/// `getpeername` (`splice_peer`): written by the connect programs, removed by the sock_ops
/// program when the socket closes. LRU: an entry a missed close left goes first.
#[map]
pub static SPLICED_PEERS: LruHashMap<u64, SplicedPeer> =
    LruHashMap::with_max_entries(MAX_SPLICED_PEERS, 0);

/// cgroup v2 ids listed for scope: 1 = under enforcement, 0 = exempt. The deepest listed
/// cgroup among a process's cgroup and its ancestors decides (`scope::current_in_scope`).
/// Which scope was given each approval the tries mark (`approvals.rs`).
#[map]
pub static APPROVALS: HashMap<ScopedApproval, u32> = HashMap::with_max_entries(MAX_APPROVALS, 0);

#[map]
pub static SCOPES: HashMap<u64, u32> = HashMap::with_max_entries(MAX_SCOPES, 0);

#[map]
pub static EXEC_IDENTITIES: HashMap<ExecIdentity, Verdict> =
    HashMap::with_max_entries(MAX_EXEC_ENTRIES, 0);

#[map]
pub static EXEC_NAMES: HashMap<ExecName, Verdict> = HashMap::with_max_entries(MAX_EXEC_ENTRIES, 0);

#[map]
pub static ARGV_TRIE: HashMap<ArgvEdge, ArgvNode> = HashMap::with_max_entries(MAX_ARGV_EDGES, 0);

/// Each argv token of the rules longer than a trie key holds (whole, NUL-padded) → its id,
/// which the trie keys it by (`argv`).
#[map]
pub static LONG_TOKEN_IDS: HashMap<LongToken, u32> = HashMap::with_max_entries(MAX_LONG_TOKENS, 0);

/// The argv trie node of the program whose file this is (device + inode), so a program's argv
/// rules hold under any name it is run by (a hard link, a copy of the path).
#[map]
pub static ARGV_ROOTS: HashMap<ExecIdentity, ArgvNode> =
    HashMap::with_max_entries(MAX_EXEC_ENTRIES, 0);

#[map]
pub static DEST_V4: LpmTrie<DestV4, Verdict> = LpmTrie::with_max_entries(MAX_NET_ENTRIES, 0);

#[map]
pub static DEST_V6: LpmTrie<DestV6, Verdict> = LpmTrie::with_max_entries(MAX_NET_ENTRIES, 0);

/// Which slot of each pattern table is in force (`guard_common::dfa::table`), 0 or 1.
#[map]
pub static DFA_SLOTS: Array<u32> = Array::with_max_entries(table::COUNT, 0);

/// Pattern table headers, by `guard_common::dfa::header_index`.
#[map]
pub static DFA_HEADERS: Array<DfaHeader> = Array::with_max_entries(DFA_HEADER_ENTRIES, 0);

/// Pattern table rows, by `guard_common::dfa::row_index`.
#[map]
pub static DFA_ROWS: Array<DfaRow> = Array::with_max_entries(DFA_ROW_ENTRIES, 0);

/// What each scoped process last executed, so its connect events can name it.
#[map]
pub static TASKS: LruHashMap<u32, TaskInfo> = LruHashMap::with_max_entries(MAX_TASKS, 0);

#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(EVENTS_BYTES, 0);

/// Each scope's share of `EVENTS` (`guard_common::maps::ScopeEvents`), per CPU: LRU, so a
/// scope that is gone gives its entry up.
#[map]
pub static SCOPE_EVENTS: LruPerCpuHashMap<u64, ScopeEvents> =
    LruPerCpuHashMap::with_max_entries(MAX_SCOPES, 0);

#[map]
pub static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(counter::COUNT, 0);

/// Scratch space too big for the 512-byte BPF stack, one per CPU. Each program family has its
/// own, since programs on one CPU can interleave (preemptible kernel).
#[repr(C)]
pub struct ExecScratch {
    pub task: TaskInfo,
    pub scan: [u8; TOKEN_SCAN_LEN],
    pub name: ExecName,
    /// The argv trie walk under each reading of token 0 (`argv`).
    pub argv: ArgvWalk,
    /// Where the pattern tables' input lies (kept in map memory for the same reason as
    /// `WalkEnd`: read back, it is one unknown on every way out of the loops that found it).
    pub patterns: PatternInput,
    /// What the pattern tables decided, read back after the argv walk.
    pub pattern_verdict: Verdict,
    /// The identity and name verdict, and whether the file has no path (1), kept here across
    /// the pattern tables and the argv walk: read back, each is one unknown to the verifier,
    /// so the walk is not verified again for every way these were found.
    pub identity_verdict: Verdict,
    pub anonymous: u32,
    /// The readings of the program token the pattern tables walk, and their verdict.
    pub pattern_readings: PatternReadings,
    /// argv as the pattern tables read it: up to `PATTERN_ARGV_LEN` bytes, more than the
    /// event's copy in `task`.
    pub pattern_argv: [u8; PATTERN_ARGV_LEN],
}

#[map]
pub static EXEC_SCRATCH: PerCpuArray<ExecScratch> = PerCpuArray::with_max_entries(1, 0);

/// `lsm/bprm_check_security`'s scratch: the file's name, and what its events say about the exec
/// (the path given to it and the parent; argv is not readable yet, the new image does not exist).
#[repr(C)]
pub struct LsmScratch {
    pub task: TaskInfo,
    pub name: ExecName,
}

#[map]
pub static LSM_SCRATCH: PerCpuArray<LsmScratch> = PerCpuArray::with_max_entries(1, 0);

/// Unix socket addresses decided whole (`unix_rule(path=...)`, the built-in lists).
#[map]
pub static UNIX_EXACT: HashMap<UnixKey, Verdict> = HashMap::with_max_entries(MAX_UNIX_ENTRIES, 0);

/// Unix socket address prefixes (`unix_rule(path="/tmp/tmux-*")`), and the defaults: `/` for
/// pathnames, the NUL of abstract names, and the empty prefix for what is neither (a relative
/// path). The longest match decides.
#[map]
pub static UNIX_PREFIX: LpmTrie<[u8; UNIX_PATH_LEN], Verdict> =
    LpmTrie::with_max_entries(MAX_UNIX_ENTRIES, 0);

/// The unix hooks' scratch: the address as the exact table and the prefix trie are keyed, and
/// the event's copy of it.
#[repr(C)]
pub struct UnixScratch {
    pub key: UnixKey,
    pub prefix: aya_ebpf::maps::lpm_trie::Key<[u8; UNIX_PATH_LEN]>,
    pub event_path: [u8; FILE_PATH_BUF],
}

#[map]
pub static UNIX_SCRATCH: PerCpuArray<UnixScratch> = PerCpuArray::with_max_entries(1, 0);

/// The file hooks' scratch: the path being decided.
#[repr(C)]
pub struct FileScratch {
    pub path: [u8; FILE_PATH_BUF],
}

#[map]
pub static FILE_SCRATCH: PerCpuArray<FileScratch> = PerCpuArray::with_max_entries(1, 0);

#[inline(always)]
pub fn settings() -> Option<Settings> {
    SETTINGS.get(0).copied().filter(|s| s.ready != 0)
}

/// The port of guard's resolver when DNS is redirected, and whether the cgroup programs only
/// redirect (the `lsm` backend's hooks decide).
#[inline(always)]
pub fn dns_redirect() -> Option<DnsRedirect> {
    DNS_REDIRECT.get(0).copied().filter(|r| r.port != 0)
}

#[inline(always)]
pub fn count(slot: u32) {
    if let Some(ptr) = COUNTERS.get_ptr_mut(slot) {
        // SAFETY: per-CPU slot; only this CPU writes it.
        unsafe { *ptr += 1 };
    }
}

/// An LSM hook's answer, or 0 (let the call through) when it could not decide: a fail-open,
/// counted in `slot` so `guard status` and `guard run -v` show it.
#[inline(always)]
pub fn or_failed_open(answer: Result<i32, i32>, slot: u32) -> i32 {
    answer.unwrap_or_else(|_| {
        count(slot);
        0
    })
}
