//! Kernel struct member offsets from the running kernel's BTF (`/sys/kernel/btf/vmlinux`).
//!
//! Rust BPF code gets no CO-RE relocations, so the programs read kernel structs at offsets
//! userspace looks up here and patches into their `OFFSETS` global before load.

use std::sync::OnceLock;

use anyhow::{Context, Result, anyhow, bail};
use btf_rs::{Btf, Type};
use guard_common::maps::KernelOffsets;

pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Every offset the programs use, for this kernel. Read once per process: parsing the kernel's
/// BTF takes a noticeable fraction of a second (and far longer under emulation).
pub fn kernel_offsets() -> Result<KernelOffsets> {
    static OFFSETS: OnceLock<Result<KernelOffsets, String>> = OnceLock::new();
    OFFSETS
        .get_or_init(|| {
            let read = || -> Result<KernelOffsets> {
                let bytes = std::fs::read(VMLINUX_BTF)
                    .with_context(|| format!("reading the kernel's BTF from {VMLINUX_BTF}"))?;
                let btf = Btf::from_bytes(&bytes)
                    .with_context(|| format!("parsing the kernel's BTF from {VMLINUX_BTF}"))?;
                offsets_from(&btf)
            };
            read().map_err(|err| format!("{err:#}"))
        })
        .clone()
        .map_err(|err| anyhow!(err))
}

/// The kernel's BTF as aya reads it (for loading `tp_btf` and `lsm` programs), parsed once per
/// process.
pub fn aya_kernel_btf() -> Result<&'static aya::Btf> {
    static BTF: OnceLock<Result<aya::Btf, String>> = OnceLock::new();
    BTF.get_or_init(|| {
        aya::Btf::from_sys_fs().map_err(|err| format!("reading the kernel's BTF: {err}"))
    })
    .as_ref()
    .map_err(|err| anyhow!("{err}"))
}

fn offsets_from(btf: &Btf) -> Result<KernelOffsets> {
    let at = |strukt: &str, path: &[&str]| member_offset(btf, strukt, path);
    Ok(KernelOffsets {
        bprm_file: at("linux_binprm", &["file"])?,
        bprm_filename: at("linux_binprm", &["filename"])?,
        file_f_inode: at("file", &["f_inode"])?,
        file_dentry: at("file", &["f_path", "dentry"])?,
        dentry_name: at("dentry", &["d_name", "name"])?,
        inode_i_ino: at("inode", &["i_ino"])?,
        inode_i_sb: at("inode", &["i_sb"])?,
        sb_s_dev: at("super_block", &["s_dev"])?,
        task_mm: at("task_struct", &["mm"])?,
        task_real_parent: at("task_struct", &["real_parent"])?,
        task_tgid: at("task_struct", &["tgid"])?,
        mm_arg_start: at("mm_struct", &["arg_start"])?,
        mm_arg_end: at("mm_struct", &["arg_end"])?,
        socket_type: at("socket", &["type"])?,
        msghdr_msg_name: at("msghdr", &["msg_name"])?,
        msghdr_msg_namelen: at("msghdr", &["msg_namelen"])?,
        file_f_path: at("file", &["f_path"])?,
        file_f_mode: at("file", &["f_mode"])?,
        dentry_d_hash_pprev: at("dentry", &["d_hash", "pprev"])?,
        socket_sk: at("socket", &["sk"])?,
        sock_rcv_saddr: at("sock", &["__sk_common", "skc_rcv_saddr"])?,
        sock_v6_rcv_saddr: at("sock", &["__sk_common", "skc_v6_rcv_saddr"])?,
        msghdr_msg_controllen: at("msghdr", &["msg_controllen"])?,
        // Only kernels with the unix hooks (6.7+) have `uaddrlen`; elsewhere they are not
        // loaded and the offsets stay 0.
        sock_addr_uaddr: at("bpf_sock_addr_kern", &["uaddrlen"])
            .and_then(|_| at("bpf_sock_addr_kern", &["uaddr"]))
            .unwrap_or(0),
        sock_addr_uaddrlen: at("bpf_sock_addr_kern", &["uaddrlen"]).unwrap_or(0),
    })
}

/// Byte offset of `path` (member, member of that member, ...) inside `struct strukt`. Members of
/// anonymous structs and unions are found as if they were direct members, as in C.
pub fn member_offset(btf: &Btf, strukt: &str, path: &[&str]) -> Result<u32> {
    let mut current = named_struct(btf, strukt)?;
    let mut bits = 0u32;
    for (i, name) in path.iter().enumerate() {
        let (offset, member_type) = find_member(btf, &current, name)?
            .ok_or_else(|| anyhow!("struct {strukt} has no member {}", path[..=i].join(".")))?;
        bits += offset;
        if i + 1 < path.len() {
            current = match strip(btf, member_type)? {
                Type::Struct(s) | Type::Union(s) => s,
                other => bail!("{strukt}.{name} is a {}, not a struct", other.name()),
            };
        }
    }
    if !bits.is_multiple_of(8) {
        bail!("{strukt}.{} is a bitfield", path.join("."));
    }
    Ok(bits / 8)
}

fn named_struct(btf: &Btf, name: &str) -> Result<btf_rs::Struct> {
    btf.resolve_types_by_name(name)
        .with_context(|| format!("struct {name} is not in the kernel's BTF"))?
        .into_iter()
        .find_map(|t| match t {
            Type::Struct(s) if !s.members.is_empty() => Some(s),
            _ => None,
        })
        .ok_or_else(|| anyhow!("struct {name} is not in the kernel's BTF"))
}

/// The member's bit offset and type, searching anonymous members depth-first.
fn find_member(btf: &Btf, strukt: &btf_rs::Struct, name: &str) -> Result<Option<(u32, Type)>> {
    for member in &strukt.members {
        let member_name = btf.resolve_name(member).unwrap_or_default();
        let member_type = btf.resolve_chained_type(member)?;
        if member_name == name {
            return Ok(Some((member.bit_offset(), member_type)));
        }
        if member_name.is_empty()
            && let Type::Struct(inner) | Type::Union(inner) = strip(btf, member_type)?
            && let Some((offset, found)) = find_member(btf, &inner, name)?
        {
            return Ok(Some((member.bit_offset() + offset, found)));
        }
    }
    Ok(None)
}

/// Looks through typedefs and qualifiers.
fn strip(btf: &Btf, mut t: Type) -> Result<Type> {
    for _ in 0..16 {
        t = match &t {
            Type::Typedef(x) => btf.resolve_chained_type(x)?,
            Type::Const(x) | Type::Volatile(x) | Type::Restrict(x) => {
                btf.resolve_chained_type(x)?
            }
            Type::TypeTag(x) => btf.resolve_chained_type(x)?,
            _ => return Ok(t),
        };
    }
    bail!("type chain too deep")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads this machine's BTF: the offsets must be found and plausible.
    #[test]
    fn finds_every_offset_on_this_kernel() {
        if !std::path::Path::new(VMLINUX_BTF).exists() {
            eprintln!("skipped: {VMLINUX_BTF} does not exist on this kernel");
            return;
        }
        let off = kernel_offsets().unwrap();
        assert!(off.bprm_file > 0 && off.task_mm > 0 && off.mm_arg_end > off.mm_arg_start);
        assert_eq!(off.mm_arg_end - off.mm_arg_start, 8);
        assert_eq!(off.msghdr_msg_name, 0);
    }
}
