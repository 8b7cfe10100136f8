//! guard's kernel programs: one module per hook family. Entry points are thin; each says whether
//! an error lets the call through (fails open) or refuses it (fails closed), and why.
//!
//! Backends (docs/design.md, "Backends"):
//! - `cgroup`: `tp_btf/sched_process_exec` decides every exec (identity, name, argv) after the new
//!   image is installed and kills it with SIGKILL before it runs; `cgroup/connect4|6` and
//!   `cgroup/sendmsg4|6` refuse destinations with EPERM; `cgroup/sock_create` refuses the
//!   socket kinds those never see (raw, ping, UDP-Lite, SCTP), on both backends.
//! - `lsm`: `lsm/bprm_check_security` refuses by identity and name with EPERM before the exec,
//!   `lsm/socket_connect` and `lsm/socket_sendmsg` refuse destinations; argv rules still go
//!   through `sched_process_exec`, because only there is argv the new image's own. The file
//!   hooks (`lsm/file_open`, `lsm/path_*`) refuse reads and writes with EACCES.
//! - both: `cgroup/dev` refuses device nodes and block-device writes in scope.
//! - both, while prompted connects are held: `cgroup_skb/egress` and `sock_ops` hold them
//!   (`held`), `cgroup/getpeername4|6` name the stand-in a connect sent to guard's splice
//!   listener went to (`splice_peer`).
//! - both: `tp_btf/sys_exit`, attached only while a sandbox mode is held, reports the writes it
//!   refused (Landlock decides them; it tells nobody).
#![no_std]
#![no_main]

mod approvals;
mod argv;
mod devices;
mod dns;
mod events;
mod exec;
mod files;
mod held;
mod kernel;
mod maps;
mod net;
mod patterns;
mod sandbox;
mod scope;
mod sockets;
mod splice_peer;
mod stand_in;
mod unix;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // SAFETY: BPF programs cannot panic at run time; the verifier rejects unreachable loops.
    unsafe { core::hint::unreachable_unchecked() }
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
