//! The calls that leave the scope, or reach guard itself, without any hook seeing them, refused
//! for the command `guard run` starts by a seccomp filter (inherited by everything it starts,
//! and no process can take it off, root included):
//!
//! - `clone3`, which alone can start a child in another cgroup (`CLONE_INTO_CGROUP`, given a
//!   descriptor of that cgroup's folder: the cgroup file system's read-only bind does not stop
//!   it, since the kernel checks the folder's own permissions). It fails with `ENOSYS`, as on a
//!   kernel without it, so the C library falls back to `clone`, which has no such flag (the
//!   default profile of container engines does the same).
//! - `ioctl(TIOCSTI)` and `ioctl(TIOCLINUX)`, which push keystrokes into a terminal's input:
//!   the shell that started `guard run` would read and run them after the command ends, outside
//!   every scope. They fail with `EPERM`; the terminal works as ever otherwise.
//! - `bpf`, every command of it: guard's own programs and links are BPF objects, and on 6.5+
//!   `BPF_OBJ_GET` of a pinned link and `BPF_LINK_DETACH` check no capability, only the pin's
//!   file permissions, which root passes. A command never needs BPF; it fails with `EPERM`.
//! - A new user namespace (`unshare` or `clone` with `CLONE_NEWUSER`) and `setns`: inside a
//!   user namespace of its own a process holds every capability over its own mount namespace,
//!   so it could mount over the read-only binds that keep guard's files and the allowed unix
//!   sockets in place, and `setns` could join one made outside. Both fail with `EPERM` (so a
//!   nested sandbox such as bubblewrap cannot start inside a run; docs/limits.md).
//!
//! Every ABI the kernel runs is covered (x86_64's native and x32 numbers and i386's; aarch64's
//! and arm's), so a 32-bit call is no way around it. The command's own `ioctl` argument is 32
//! bits in the kernel (`unsigned int cmd`), so only the low half is compared: a caller cannot
//! hide `TIOCSTI` behind high bits the kernel drops. `CLONE_NEWUSER` is a bit of the low half of
//! the flags on every ABI, so that half is tested.

use std::io;

/// `TIOCSTI` and `TIOCLINUX` (`asm-generic/ioctls.h`, the same on x86 and arm).
pub const REFUSED_IOCTLS: [(u32, &str); 2] = [(0x5412, "TIOCSTI"), (0x541C, "TIOCLINUX")];

/// `CLONE_NEWUSER` (`linux/sched.h`).
pub const CLONE_NEWUSER: u32 = 0x1000_0000;

/// `offsetof(struct seccomp_data, nr)`, `arch`, `args[0]` and `args[1]` (their low halves on
/// little-endian).
const DATA_NR: u32 = 0;
const DATA_ARCH: u32 = 4;
const DATA_ARG0_LOW: u32 = 16;
const DATA_ARG1_LOW: u32 = 16 + 8;

/// One ABI's numbers for the calls the filter looks at.
struct Abi {
    arch: u32,
    clone3: &'static [u32],
    ioctl: &'static [u32],
    /// Refused whatever their arguments: `bpf`, `setns`.
    refused: &'static [u32],
    /// Refused when their first argument (the flags) asks for a new user namespace: `unshare`,
    /// `clone`.
    new_namespace: &'static [u32],
}

/// x32 calls come through x86_64's arch with this bit set in the number.
#[cfg(target_arch = "x86_64")]
const X32: u32 = 0x4000_0000;

#[cfg(target_arch = "x86_64")]
const ABIS: [Abi; 2] = [
    Abi {
        arch: 0xC000_003E, // AUDIT_ARCH_X86_64
        clone3: &[435, X32 | 435],
        ioctl: &[16, X32 | 514],
        // bpf, setns
        refused: &[321, X32 | 321, 308, X32 | 308],
        // unshare, clone
        new_namespace: &[272, X32 | 272, 56, X32 | 56],
    },
    Abi {
        arch: 0x4000_0003, // AUDIT_ARCH_I386
        clone3: &[435],
        ioctl: &[54],
        refused: &[357, 346],
        new_namespace: &[310, 120],
    },
];

#[cfg(target_arch = "aarch64")]
const ABIS: [Abi; 2] = [
    Abi {
        arch: 0xC000_00B7, // AUDIT_ARCH_AARCH64
        clone3: &[435],
        ioctl: &[29],
        refused: &[280, 268],
        new_namespace: &[97, 220],
    },
    Abi {
        arch: 0x4000_0028, // AUDIT_ARCH_ARM
        clone3: &[435],
        ioctl: &[54],
        refused: &[386, 375],
        new_namespace: &[337, 120],
    },
];

/// Where a jump goes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Label {
    Next,
    /// The start of the checks of `ABIS[i]` (past the last: allowed).
    Abi(usize),
    /// The ioctl command check.
    Ioctl,
    /// The new-user-namespace flag check.
    NewUser,
    Allow,
    NoSys,
    Refuse,
}

type Instruction = (libc::sock_filter, Label, Label);

fn load(offset: u32) -> Instruction {
    let insn = libc::sock_filter {
        code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
        jt: 0,
        jf: 0,
        k: offset,
    };
    (insn, Label::Next, Label::Next)
}

fn jump(op: u32, k: u32, yes: Label, no: Label) -> Instruction {
    let insn = libc::sock_filter {
        code: (libc::BPF_JMP | op | libc::BPF_K) as u16,
        jt: 0,
        jf: 0,
        k,
    };
    (insn, yes, no)
}

fn jump_eq(k: u32, yes: Label, no: Label) -> Instruction {
    jump(libc::BPF_JEQ, k, yes, no)
}

fn ret(k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: (libc::BPF_RET | libc::BPF_K) as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

/// The filter: per ABI, `clone3` to `ENOSYS`, `bpf` and `setns` to `EPERM`, `unshare` and
/// `clone` to the flag check and `ioctl` to the command check; a new user namespace and the
/// refused commands to `EPERM`; everything else allowed.
pub fn program() -> Vec<libc::sock_filter> {
    let mut code: Vec<Instruction> = Vec::new();
    let mut abi_starts = Vec::new();
    for (i, abi) in ABIS.iter().enumerate() {
        abi_starts.push(code.len());
        code.push(load(DATA_ARCH));
        code.push(jump_eq(abi.arch, Label::Next, Label::Abi(i + 1)));
        code.push(load(DATA_NR));
        for nr in abi.clone3 {
            code.push(jump_eq(*nr, Label::NoSys, Label::Next));
        }
        for nr in abi.refused {
            code.push(jump_eq(*nr, Label::Refuse, Label::Next));
        }
        for nr in abi.new_namespace {
            code.push(jump_eq(*nr, Label::NewUser, Label::Next));
        }
        let (last, ioctls) = abi.ioctl.split_last().expect("every ABI has an ioctl");
        for nr in ioctls {
            code.push(jump_eq(*nr, Label::Ioctl, Label::Next));
        }
        code.push(jump_eq(*last, Label::Ioctl, Label::Allow));
    }
    let ioctl = code.len();
    code.push(load(DATA_ARG1_LOW));
    for (i, (command, _)) in REFUSED_IOCTLS.iter().enumerate() {
        let no = if i + 1 == REFUSED_IOCTLS.len() {
            Label::Allow
        } else {
            Label::Next
        };
        code.push(jump_eq(*command, Label::Refuse, no));
    }
    let new_user = code.len();
    code.push(load(DATA_ARG0_LOW));
    code.push(jump(
        libc::BPF_JSET,
        CLONE_NEWUSER,
        Label::Refuse,
        Label::Allow,
    ));
    let allow = code.len();
    let (nosys, refuse) = (allow + 1, allow + 2);
    let offset = |at: usize, label: Label| -> u8 {
        let to = match label {
            Label::Next => at + 1,
            Label::Abi(i) => abi_starts.get(i).copied().unwrap_or(allow),
            Label::Ioctl => ioctl,
            Label::NewUser => new_user,
            Label::Allow => allow,
            Label::NoSys => nosys,
            Label::Refuse => refuse,
        };
        u8::try_from(to - at - 1).expect("the filter is shorter than 256 instructions")
    };
    let mut program: Vec<libc::sock_filter> = code
        .iter()
        .enumerate()
        .map(|(at, (insn, yes, no))| libc::sock_filter {
            jt: offset(at, *yes),
            jf: offset(at, *no),
            ..*insn
        })
        .collect();
    program.push(ret(libc::SECCOMP_RET_ALLOW));
    program.push(ret(libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32));
    program.push(ret(libc::SECCOMP_RET_ERRNO | libc::EPERM as u32));
    program
}

/// Installs [`program`] on the calling process between fork and exec (with
/// `no_new_privs` only where the kernel asks for it: [`crate::hold::filter::seccomp_from_pre_exec`]).
/// Fails closed: an error stops the command from starting.
pub fn install_from_pre_exec(program: &[libc::sock_filter]) -> io::Result<()> {
    let fprog = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_ptr() as *mut libc::sock_filter,
    };
    crate::hold::filter::seccomp_from_pre_exec(0, &fprog).map(|_| ())
}

/// Runs a seccomp program of loads, equality jumps and returns on `data` (a `seccomp_data`) as
/// the kernel would: the return it reaches. For the tests of every filter guard writes.
#[cfg(test)]
pub(crate) fn run_classic_bpf(program: &[libc::sock_filter], data: &[u8; 64]) -> u32 {
    let mut accumulator = 0u32;
    let mut pc = 0;
    for _ in 0..program.len() {
        let insn = program[pc];
        match insn.code as u32 {
            c if c == libc::BPF_LD | libc::BPF_W | libc::BPF_ABS => {
                let at = insn.k as usize;
                accumulator = u32::from_ne_bytes(data[at..at + 4].try_into().unwrap());
                pc += 1;
            }
            c if c == libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K => {
                let skip = if accumulator == insn.k {
                    insn.jt
                } else {
                    insn.jf
                };
                pc += 1 + skip as usize;
            }
            c if c == libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K => {
                let skip = if accumulator & insn.k != 0 {
                    insn.jt
                } else {
                    insn.jf
                };
                pc += 1 + skip as usize;
            }
            c if c == libc::BPF_RET | libc::BPF_K => return insn.k,
            other => panic!("unexpected instruction {other:#x}"),
        }
    }
    panic!("the program ran off its end");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the program on one call as the kernel would: the return it reaches.
    fn verdict(program: &[libc::sock_filter], arch: u32, nr: u32, arg1: u64) -> u32 {
        verdict_with(program, arch, nr, 0, arg1)
    }

    fn verdict_with(
        program: &[libc::sock_filter],
        arch: u32,
        nr: u32,
        arg0: u64,
        arg1: u64,
    ) -> u32 {
        let mut data = [0u8; 64];
        data[0..4].copy_from_slice(&nr.to_ne_bytes());
        data[4..8].copy_from_slice(&arch.to_ne_bytes());
        data[16..24].copy_from_slice(&arg0.to_ne_bytes());
        data[24..32].copy_from_slice(&arg1.to_ne_bytes());
        run_classic_bpf(program, &data)
    }

    const NOSYS: u32 = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
    const EPERM: u32 = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;

    #[test]
    fn clone3_fails_as_missing_on_every_abi() {
        let program = program();
        for abi in &ABIS {
            for nr in abi.clone3 {
                assert_eq!(
                    verdict(&program, abi.arch, *nr, 0),
                    NOSYS,
                    "{:#x}",
                    abi.arch
                );
            }
        }
    }

    #[test]
    fn keystroke_injection_is_refused_and_other_ioctls_pass_on_every_abi() {
        let program = program();
        for abi in &ABIS {
            for nr in abi.ioctl {
                for (command, name) in REFUSED_IOCTLS {
                    assert_eq!(
                        verdict(&program, abi.arch, *nr, command.into()),
                        EPERM,
                        "{name}"
                    );
                    // High bits the kernel drops hide nothing.
                    let hidden = 0xdead_0000_0000_0000 | u64::from(command);
                    assert_eq!(verdict(&program, abi.arch, *nr, hidden), EPERM, "{name}");
                }
                // TCGETS, TIOCGWINSZ, FIONREAD: the terminal used normally.
                for command in [0x5401u64, 0x5413, 0x541B] {
                    assert_eq!(
                        verdict(&program, abi.arch, *nr, command),
                        libc::SECCOMP_RET_ALLOW
                    );
                }
            }
        }
    }

    #[test]
    fn bpf_and_setns_are_refused_on_every_abi_whatever_their_arguments() {
        let program = program();
        for abi in &ABIS {
            for nr in abi.refused {
                for (arg0, arg1) in [(0, 0), (u64::MAX, u64::MAX), (6, 0x5412)] {
                    assert_eq!(
                        verdict_with(&program, abi.arch, *nr, arg0, arg1),
                        EPERM,
                        "{nr} on {:#x}",
                        abi.arch
                    );
                }
            }
        }
    }

    #[test]
    fn a_new_user_namespace_is_refused_and_other_clones_pass_on_every_abi() {
        let program = program();
        // What fork, threads and `unshare -m`-like calls ask: no user namespace.
        let ordinary = [0x0001_1200_u64 | 17, 0x003d_0f00, 0x0002_0000, 0];
        for abi in &ABIS {
            for nr in abi.new_namespace {
                for flags in [
                    u64::from(CLONE_NEWUSER),
                    u64::from(CLONE_NEWUSER) | 0x0002_0000,
                ] {
                    assert_eq!(
                        verdict_with(&program, abi.arch, *nr, flags, 0),
                        EPERM,
                        "{nr} on {:#x} with {flags:#x}",
                        abi.arch
                    );
                    // High bits the kernel's int flags drop (unshare) hide nothing.
                    let hidden = flags | 0xffff_0000_0000_0000;
                    assert_eq!(verdict_with(&program, abi.arch, *nr, hidden, 0), EPERM);
                }
                for flags in ordinary {
                    assert_eq!(
                        verdict_with(&program, abi.arch, *nr, flags, 0),
                        libc::SECCOMP_RET_ALLOW,
                        "{nr} on {:#x} with {flags:#x}",
                        abi.arch
                    );
                }
            }
        }
    }

    #[test]
    fn other_calls_and_other_architectures_are_allowed() {
        let program = program();
        for abi in &ABIS {
            // read, write, openat-ish numbers: none is clone3 or ioctl on either ABI.
            for nr in [0u32, 1, 3, 56, 57, 59, 257] {
                if abi.clone3.contains(&nr) || abi.ioctl.contains(&nr) || abi.refused.contains(&nr)
                {
                    continue;
                }
                assert_eq!(
                    verdict(&program, abi.arch, nr, 0x5412),
                    libc::SECCOMP_RET_ALLOW,
                    "{nr} on {:#x}",
                    abi.arch
                );
            }
        }
        assert_eq!(
            verdict(&program, 0x1234_5678, 435, 0),
            libc::SECCOMP_RET_ALLOW
        );
    }
}
