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
