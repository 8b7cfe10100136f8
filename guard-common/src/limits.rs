//! Bounds the kernel programs work within. Past a bound the programs take the safe answer
//! (see `argv`): an allow rule that cannot be compared in full does not allow.

/// Bytes of one argv token in an argv trie key. A longer token is keyed by its id in
/// `LONG_TOKEN_IDS` (the whole token, looked up once), so every token the kernel can read
/// ([`TOKEN_MAX_LEN`]) is compared exactly.
pub const TOKEN_LEN: usize = 32;
/// The longest argv token the kernel compares (and steps over): its scan buffer less the NUL
/// and one byte to tell "longer" apart.
pub const TOKEN_MAX_LEN: usize = TOKEN_SCAN_LEN - 2;
/// The `len` of an [`crate::maps::ArgvEdge`] whose token is longer than [`TOKEN_MAX_LEN`]: no
/// argv token the kernel reads has it (the walk stops there with the safe answer).
pub const TOKEN_TOO_LONG: u8 = u8::MAX;
/// The `len` of an [`crate::maps::ArgvEdge`] for a token longer than [`TOKEN_LEN`]: its key
/// holds the token's id from `LONG_TOKEN_IDS` instead of its bytes.
pub const TOKEN_BY_ID: u8 = u8::MAX - 1;
/// Distinct long tokens (longer than [`TOKEN_LEN`]) the rules and approvals may hold.
pub const MAX_LONG_TOKENS: u32 = 4096;
/// argv tokens (program name included) the kernel walks through the argv trie.
pub const MAX_ARGV_TOKENS: usize = 8;
/// Longest argv token the kernel can step over to reach the next one.
pub const TOKEN_SCAN_LEN: usize = 256;
/// Bytes of an executed file's name (the dentry name) used for name rules.
pub const NAME_LEN: usize = 64;
/// Bytes of the executable path carried in events.
pub const PATH_LEN: usize = 256;
/// Bytes of argv (NUL-separated) carried in events.
pub const ARGV_LEN: usize = 512;
/// cgroup levels searched for a scoped ancestor.
pub const MAX_SCOPE_DEPTH: u32 = 16;
/// Capacity of the exec maps (identities, names, argv trie roots).
pub const MAX_EXEC_ENTRIES: u32 = 262_144;
/// Capacity of the argv trie (`ARGV_TRIE`): a refusing or asking rule is held three times (as
/// itself and as `busybox`'s and `toybox`'s applet), so 100 000 such rules need about 330 000
/// edges. Preallocated, about 112 bytes an edge.
pub const MAX_ARGV_EDGES: u32 = 524_288;
/// Capacity of each destination trie (IPv4, IPv6).
pub const MAX_NET_ENTRIES: u32 = 262_144;
/// Capacity of the scope map (cgroups under enforcement).
pub const MAX_SCOPES: u32 = 1024;
/// Processes whose exec details are remembered for their connect events.
pub const MAX_TASKS: u32 = 16_384;
/// Size of the event ring buffer, in bytes (a power of two, a multiple of the page size).
pub const EVENTS_BYTES: u32 = 4 << 20;
/// Events one scope may put in the ring buffer per second on each CPU while the ring is more
/// than half full (a reader falling behind); past it the scope loses its own events (counted
/// per scope), so the other half stays for the scopes within theirs. The ring holds ~4 600.
pub const SCOPE_EVENTS_PER_SECOND: u64 = 512;
/// `Verdict::rule` when no rule decided (the policy's unmatched default).
pub const NO_RULE: u32 = u32::MAX;
/// States a pattern table ([`crate::dfa`]) may have: its rows fill an array map of this size.
pub const DFA_MAX_STATES: usize = 1024;
/// Byte classes a pattern table may have: the width of one [`crate::dfa::DfaRow`].
pub const DFA_MAX_CLASSES: usize = 64;
/// Bytes of argv the exec program reads for the pattern tables (more than an event carries, so
/// that a long command line is still read to its end rather than refused as unknown).
pub const PATTERN_ARGV_LEN: usize = 4096;
/// Bytes of input the kernel walks through a pattern table (the file's name and argv after
/// `argv[0]`, or a file's path); past it the walk ends with the safe answer.
pub const DFA_MAX_INPUT: usize = PATTERN_ARGV_LEN;
/// Bytes of a file's path the file hooks read (`bpf_d_path`'s buffer, a power of two); the
/// pattern walk reads at most [`DFA_MAX_INPUT`] of them.
pub const FILE_PATH_LEN: usize = 512;
/// Bytes of the name a path hook appends to its folder's path.
pub const FILE_NAME_LEN: usize = 256;
/// The file hooks' path buffer: a folder's path and one name.
pub const FILE_PATH_BUF: usize = 1024;
/// `sizeof(sockaddr_un.sun_path)`: the longest unix socket address the connect_unix and
/// sendmsg_unix hooks compare.
pub const UNIX_PATH_LEN: usize = 108;
/// Exact unix socket entries (`unix_rule`s and the built-in lists) the kernel holds.
pub const MAX_UNIX_ENTRIES: u32 = 16_384;
/// Stand-in addresses mapped to a real one at once (`STAND_INS`): the names a person approved
/// or a rule named after the resolver answered them with a stand-in.
pub const MAX_STAND_INS: u32 = 16_384;
/// Sockets held at once (`HELD_SOCKETS`): prompted connects and sends waiting for an answer, and
/// the ones answered that userspace has not yet cleared. Past it a prompt is refused as if no
/// hold were on.
pub const MAX_HELD_SOCKETS: u32 = 4096;
/// Sockets sent to guard's splice listener whose `getpeername` names their stand-in
/// (`SPLICED_PEERS`, LRU; an entry goes when its socket closes). Past it the oldest socket's
/// `getpeername` names the listener again (what it reports, never what it reaches).
pub const MAX_SPLICED_PEERS: u32 = 16_384;
/// Approvals held at once, each for its scope (`APPROVALS`): `--once` and `--session` answers.
/// Past it an approval is refused when it is made.
pub const MAX_APPROVALS: u32 = 8192;
