//! `cgroup/dev`: a process in scope makes no device node and writes no block device, under
//! every policy. A block device is the disk below every file rule (a root command could rewrite
//! a protected rules file through a loop device or a node it made), and a node made with
//! `mknod` names any device under a path no rule knows. Character devices (terminals,
//! `/dev/null`) and block-device reads are let through. The kernel runs this program for every
//! device node a process in the cgroup opens or makes (`devcgroup_check_permission`), not for
//! FIFOs or sockets.

use aya_ebpf::bindings::{BPF_DEVCG_ACC_MKNOD, BPF_DEVCG_ACC_WRITE, BPF_DEVCG_DEV_BLOCK};
use aya_ebpf::macros::cgroup_device;
use aya_ebpf::programs::DeviceContext;
use guard_common::maps::counter;

use crate::maps::{count, settings};
use crate::scope::current_in_scope;

// cgroup device programs: return 1 to let the access happen, 0 to fail it with EPERM.
#[cgroup_device]
pub fn device_access(ctx: DeviceContext) -> i32 {
    // SAFETY: the context pointer the kernel passed.
    let access_type = unsafe { (*ctx.device).access_type };
    // The low half is the device's type, the high half the access asked for.
    let (device_type, access) = (access_type & 0xffff, access_type >> 16);
    let mknod = access & BPF_DEVCG_ACC_MKNOD != 0;
    let block_write = device_type == BPF_DEVCG_DEV_BLOCK && access & BPF_DEVCG_ACC_WRITE != 0;
    if !mknod && !block_write {
        return 1;
    }
    // Not configured or not in scope: let through (fails open, as every hook: nothing is
    // enforced before the maps are filled, and processes outside the scope are not guard's).
    let Some(settings) = settings() else {
        return 1;
    };
    if !current_in_scope() {
        return 1;
    }
    count(counter::DEVICE_REFUSED);
    if settings.audit_only != 0 {
        count(counter::AUDIT_ONLY);
        return 1;
    }
    0
}
