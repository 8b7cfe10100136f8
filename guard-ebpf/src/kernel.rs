//! Reading kernel structs without CO-RE: member offsets come from the running kernel's BTF,
//! patched into `OFFSETS` by userspace before load.

use aya_ebpf::helpers::{bpf_probe_read_kernel, bpf_probe_read_kernel_str_bytes};
use guard_common::maps::{ExecIdentity, ExecName, KernelOffsets};

#[unsafe(no_mangle)]
static OFFSETS: KernelOffsets = KernelOffsets {
    bprm_file: 0,
    bprm_filename: 0,
    file_f_inode: 0,
    file_dentry: 0,
    dentry_name: 0,
    inode_i_ino: 0,
    inode_i_sb: 0,
    sb_s_dev: 0,
    task_mm: 0,
    task_real_parent: 0,
    task_tgid: 0,
    mm_arg_start: 0,
    mm_arg_end: 0,
    socket_type: 0,
    msghdr_msg_name: 0,
    msghdr_msg_namelen: 0,
    file_f_path: 0,
    file_f_mode: 0,
    dentry_d_hash_pprev: 0,
    socket_sk: 0,
    sock_rcv_saddr: 0,
    sock_v6_rcv_saddr: 0,
    msghdr_msg_controllen: 0,
    sock_addr_uaddr: 0,
    sock_addr_uaddrlen: 0,
};

#[inline(always)]
pub fn offsets() -> KernelOffsets {
    // SAFETY: a read of our own static; volatile so the compiler keeps the patched value.
    unsafe { core::ptr::read_volatile(&OFFSETS) }
}

/// Reads a `T` at `base + off` in kernel memory.
#[inline(always)]
pub unsafe fn read_at<T>(base: *const u8, off: u32) -> Result<T, i32> {
    unsafe { bpf_probe_read_kernel(base.add(off as usize).cast::<T>()) }
}

/// The identity and name of an open file (the `struct file *` of an exec).
#[inline(always)]
pub unsafe fn file_identity(file: *const u8, name: &mut ExecName) -> Result<ExecIdentity, i32> {
    let off = offsets();
    unsafe {
        let inode: *const u8 = read_at(file, off.file_f_inode)?;
        let ino: u64 = read_at(inode, off.inode_i_ino)?;
        let sb: *const u8 = read_at(inode, off.inode_i_sb)?;
        let dev: u32 = read_at(sb, off.sb_s_dev)?;
        let dentry: *const u8 = read_at(file, off.file_dentry)?;
        let name_ptr: *const u8 = read_at(dentry, off.dentry_name)?;
        name.name = [0u8; guard_common::limits::NAME_LEN];
        // A name longer than the key cannot match a name rule; identity still decides.
        let _ = bpf_probe_read_kernel_str_bytes(name_ptr, &mut name.name);
        Ok(ExecIdentity {
            dev: dev as u64,
            ino,
        })
    }
}

/// Whether no path names the open file `file`: its dentry is not in the dentry cache's hash
/// (a memfd or other pseudo file, a file deleted or made with O_TMPFILE), so lookup by any path
/// cannot reach it and no rule can name it.
#[inline(always)]
pub unsafe fn file_is_anonymous(file: *const u8) -> Result<bool, i32> {
    let off = offsets();
    unsafe {
        let dentry: *const u8 = read_at(file, off.file_dentry)?;
        let pprev: *const u8 = read_at(dentry, off.dentry_d_hash_pprev)?;
        Ok(pprev.is_null())
    }
}

/// The largest errno an LSM hook may return (the kernel's `MAX_ERRNO`).
const MAX_ERRNO: i32 = 4095;

/// What an LSM program returns, in the range the verifier accepts. Since Linux 6.12 the verifier
/// loads an LSM program only if it can prove every return value is 0 or -errno (-4095..=0), and
/// two of ours are unknown to it: a previous BPF program's refusal read from the context, and
/// `-EPERM`, which LLVM computes as the negation of a flag (the 6.12 verifier knows nothing of a
/// negated register). So the value is clamped, and first passed through a volatile stack slot so
/// that LLVM, which knows the range already, keeps the clamp: two compare-and-set branches on one
/// register, which the verifier follows. Values already in range are unchanged.
#[inline(always)]
pub fn lsm_return(ret: i32) -> i32 {
    let mut slot = 0i32;
    // SAFETY: a local, written then read.
    let ret = unsafe {
        core::ptr::write_volatile(&mut slot, ret);
        core::ptr::read_volatile(&slot)
    };
    ret.max(-MAX_ERRNO).min(0)
}
