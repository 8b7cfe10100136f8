//! Socket kinds the connect and sendmsg hooks never see, decided once at socket creation
//! (`cgroup/sock_create`). Shared by the kernel program and userspace, so the classification
//! the kernel enforces is the one `guard` reports and host tests check.
//!
//! Why each kind needs deciding at creation: the `cgroup/connect*` and `cgroup/sendmsg*` hooks
//! run only from the TCP and UDP protocols' own `pre_connect`/`sendmsg`, so a UDP-Lite, SCTP,
//! ping or raw socket reaches any address without a decision.

/// Bits of `Settings::socket_kinds`: which kinds a policy allows (`enforcement(socket_kinds=[...])`).
pub mod kind {
    /// ICMP / ICMPv6 datagram sockets (`SOCK_DGRAM`, `IPPROTO_ICMP[V6]`): unprivileged ping.
    pub const PING: u8 = 1;
    /// `SOCK_RAW`, any protocol: whole IP packets to anywhere.
    pub const RAW: u8 = 2;
    /// `IPPROTO_UDPLITE`: UDP's twin, which the UDP hooks do not see.
    pub const UDPLITE: u8 = 4;
    /// `IPPROTO_SCTP`, where the kernel has it.
    pub const SCTP: u8 = 8;
    /// Any other AF_INET/AF_INET6 protocol that is not plain TCP, MPTCP or UDP.
    pub const OTHER: u8 = 16;

    /// Policy names, in bit order.
    pub const NAMES: [(&str, u8); 5] = [
        ("ping", PING),
        ("raw", RAW),
        ("udplite", UDPLITE),
        ("sctp", SCTP),
        ("other", OTHER),
    ];

    /// The policy name of one kind bit.
    pub fn name(bit: u8) -> &'static str {
        let mut i = 0;
        while i < NAMES.len() {
            if NAMES[i].1 == bit {
                return NAMES[i].0;
            }
            i += 1;
        }
        "other"
    }
}

pub const AF_INET: u32 = 2;
pub const AF_INET6: u32 = 10;
pub const SOCK_STREAM: u32 = 1;
pub const SOCK_DGRAM: u32 = 2;
pub const SOCK_RAW: u32 = 3;
pub const IPPROTO_ICMP: u32 = 1;
pub const IPPROTO_TCP: u32 = 6;
pub const IPPROTO_UDP: u32 = 17;
pub const IPPROTO_ICMPV6: u32 = 58;
pub const IPPROTO_SCTP: u32 = 132;
pub const IPPROTO_UDPLITE: u32 = 136;
/// MPTCP's connects go through TCP's `pre_connect` (measured on 6.18: `cgroup/connect4`
/// refuses them like TCP), so it is TCP here.
pub const IPPROTO_MPTCP: u32 = 262;

/// The kind of an IP socket that needs the policy's leave, or `None` for the sockets the
/// connect and sendmsg hooks decide (TCP, MPTCP, UDP) and for other families (not IP: no
/// destination guard rules on). `protocol` is the one the kernel settled on (`sk_protocol`:
/// 0 has been resolved to the type's default by then).
pub fn classify(family: u32, ty: u32, protocol: u32) -> Option<u8> {
    if family != AF_INET && family != AF_INET6 {
        return None;
    }
    // SOCK_NONBLOCK / SOCK_CLOEXEC are flags of the call, not of the socket; masked anyway.
    let ty = ty & 0xf;
    if ty == SOCK_RAW {
        return Some(kind::RAW);
    }
    match protocol {
        IPPROTO_TCP | IPPROTO_MPTCP if ty == SOCK_STREAM => None,
        IPPROTO_UDP if ty == SOCK_DGRAM => None,
        IPPROTO_ICMP | IPPROTO_ICMPV6 if ty == SOCK_DGRAM => Some(kind::PING),
        IPPROTO_UDPLITE => Some(kind::UDPLITE),
        IPPROTO_SCTP => Some(kind::SCTP),
        _ => Some(kind::OTHER),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_mptcp_and_udp_are_the_connect_hooks_and_the_rest_needs_leave() {
        for family in [AF_INET, AF_INET6] {
            assert_eq!(classify(family, SOCK_STREAM, IPPROTO_TCP), None);
            assert_eq!(classify(family, SOCK_STREAM, IPPROTO_MPTCP), None);
            assert_eq!(classify(family, SOCK_DGRAM, IPPROTO_UDP), None);
            assert_eq!(classify(family, SOCK_RAW, IPPROTO_TCP), Some(kind::RAW));
            assert_eq!(classify(family, SOCK_RAW, 255), Some(kind::RAW));
            assert_eq!(classify(family, SOCK_DGRAM, IPPROTO_ICMP), Some(kind::PING));
            assert_eq!(
                classify(family, SOCK_DGRAM, IPPROTO_ICMPV6),
                Some(kind::PING)
            );
            assert_eq!(
                classify(family, SOCK_DGRAM, IPPROTO_UDPLITE),
                Some(kind::UDPLITE)
            );
            assert_eq!(
                classify(family, SOCK_STREAM, IPPROTO_SCTP),
                Some(kind::SCTP)
            );
            assert_eq!(classify(family, 5, IPPROTO_SCTP), Some(kind::SCTP));
            assert_eq!(classify(family, 6, 33), Some(kind::OTHER));
        }
        // Not IP (AF_UNIX, AF_NETLINK): no destination to decide.
        assert_eq!(classify(1, SOCK_RAW, 0), None);
        assert_eq!(classify(16, SOCK_RAW, 0), None);
        assert_eq!(kind::name(kind::UDPLITE), "udplite");
    }
}
