//! `address_rule` values: addresses, CIDRs and host names, ports and transports, each with an
//! error that names the bad value.

use std::net::IpAddr;

use ipnetwork::IpNetwork;

use super::error::{PolicyError, Result};
use super::host::normalize_network_host;
use super::rule::{AddressTarget, Transport, canonical_ip};

fn invalid_address(raw: &str, why: impl std::fmt::Display) -> PolicyError {
    PolicyError::InvalidRule(format!("invalid address {raw:?} in address_rule: {why}"))
}

/// One element of `addresses=[...]`: an IP address (`10.0.0.1`, `::1`, `[::1]`), a CIDR
/// (`10.0.0.0/8`, `fd00::/8`), a host name (normalised like a `network_rule` host) or a host
/// pattern (`*.example.com`, `**.example.com`: [`super::host::HostPattern`]).
///
/// A CIDR with host bits set (`10.1.2.3/8`) stands for its network (`10.0.0.0/8`), and an
/// IPv4-mapped IPv6 address or network (`::ffff:10.0.0.0/104`) is written as IPv4, the way the
/// kernel looks such addresses up. A port in the address (`example.com:443`) is refused: ports go
/// in `ports=[...]`.
pub fn parse_address_target(raw: &str) -> Result<AddressTarget> {
    let text = raw.trim();
    if text.is_empty() {
        return Err(invalid_address(raw, "an address cannot be empty"));
    }
    if let Some((address, length)) = text.split_once('/') {
        return parse_cidr(raw, address, length).map(AddressTarget::Network);
    }
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Ok(AddressTarget::Network(AddressTarget::single(ip)));
    }
    if let Some(pattern) = super::host::HostPattern::parse(text) {
        return pattern
            .map(|pattern| AddressTarget::Host(pattern.to_string()))
            .map_err(|err| match err {
                PolicyError::InvalidRule(message) => invalid_address(raw, message),
                other => other,
            });
    }
    if has_port_suffix(text) {
        return Err(invalid_address(
            raw,
            "a port cannot be part of the address; give it in ports=[...]",
        ));
    }
    let host = normalize_network_host(text).map_err(|err| match err {
        PolicyError::InvalidRule(message) => invalid_address(
            raw,
            message.strip_prefix("network_rule ").unwrap_or(&message),
        ),
        other => other,
    })?;
    Ok(match host.parse::<IpAddr>() {
        Ok(ip) => AddressTarget::Network(AddressTarget::single(ip)),
        Err(_) => AddressTarget::Host(host),
    })
}

fn parse_cidr(raw: &str, address: &str, length: &str) -> Result<IpNetwork> {
    let ip: IpAddr = address.parse().map_err(|_| {
        invalid_address(
            raw,
            format!("{address:?} is not an IP address (a CIDR is ADDRESS/LENGTH, like 10.0.0.0/8)"),
        )
    })?;
    let most: u8 = if ip.is_ipv4() { 32 } else { 128 };
    let family = if ip.is_ipv4() { "IPv4" } else { "IPv6" };
    if length.is_empty() || !length.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid_address(
            raw,
            format!("prefix length {length:?} is not a number from 0 to {most}"),
        ));
    }
    let prefix = match length.parse::<u8>() {
        Ok(prefix) if prefix <= most => prefix,
        _ => {
            return Err(invalid_address(
                raw,
                format!(
                    "prefix length {length} is more than {most}, the most an {family} network has"
                ),
            ));
        }
    };
    let network = IpNetwork::new(ip, prefix)
        .and_then(|net| IpNetwork::new(net.network(), prefix))
        .map_err(|err| invalid_address(raw, err))?;
    Ok(canonical_network(network))
}

/// `::ffff:a.b.c.d/N` with N >= 96 as the IPv4 network `a.b.c.d/(N-96)`; anything else as is.
pub fn canonical_network(network: IpNetwork) -> IpNetwork {
    match (network, canonical_ip(network.ip())) {
        (IpNetwork::V6(v6), IpAddr::V4(v4)) if v6.prefix() >= 96 => {
            IpNetwork::new(IpAddr::V4(v4), v6.prefix() - 96).unwrap_or(network)
        }
        _ => network,
    }
}

/// `name:443` (exactly one colon, digits after it) or `[v6]:443`.
fn has_port_suffix(text: &str) -> bool {
    let digits = |port: &str| !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit());
    if let Some(bracketed) = text.strip_prefix('[') {
        return bracketed
            .split_once(']')
            .and_then(|(_, suffix)| suffix.strip_prefix(':'))
            .is_some_and(digits);
    }
    text.matches(':').count() == 1
        && text
            .split_once(':')
            .is_some_and(|(name, port)| !name.is_empty() && digits(port))
}

/// `transport=`: `tcp`, `udp` or `any`, case-sensitive.
pub fn parse_transport(raw: &str) -> Result<Transport> {
    Transport::parse(raw).ok_or_else(|| {
        PolicyError::InvalidRule(format!(
            "address_rule transport must be one of tcp, udp, any (got {raw})"
        ))
    })
}

/// One element of `ports=[...]`, already known to be an integer.
pub fn parse_port(port: i64) -> Result<u16> {
    u16::try_from(port)
        .ok()
        .filter(|port| *port != 0)
        .ok_or_else(|| {
            PolicyError::InvalidRule(format!(
                "invalid port {port} in address_rule: ports are 1 to 65535"
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn network(text: &str) -> AddressTarget {
        AddressTarget::Network(text.parse().unwrap())
    }

    #[test]
    fn addresses_cidrs_and_names() {
        for (raw, want) in [
            ("10.0.0.1", network("10.0.0.1/32")),
            (" 10.0.0.0/8 ", network("10.0.0.0/8")),
            ("10.1.2.3/8", network("10.0.0.0/8")),
            ("0.0.0.0/0", network("0.0.0.0/0")),
            ("fd00::/8", network("fd00::/8")),
            ("::1", network("::1/128")),
            ("[::1]", network("::1/128")),
            ("[FE80::1]", network("fe80::1/128")),
            ("::ffff:10.0.0.1", network("10.0.0.1/32")),
            ("::ffff:10.0.0.0/104", network("10.0.0.0/8")),
            ("Example.COM.", AddressTarget::Host("example.com".into())),
            ("localhost", AddressTarget::Host("localhost".into())),
            (
                "*.CDN.example.",
                AddressTarget::Host("*.cdn.example".into()),
            ),
            (
                "**.example.com",
                AddressTarget::Host("**.example.com".into()),
            ),
        ] {
            assert_eq!(parse_address_target(raw).unwrap(), want, "{raw:?}");
        }
    }

    #[test]
    fn address_errors_name_the_value() {
        for (raw, want) in [
            (
                "10.0.0.0/33",
                r#"invalid rule: invalid address "10.0.0.0/33" in address_rule: prefix length 33 is more than 32, the most an IPv4 network has"#,
            ),
            (
                "fd00::/129",
                r#"invalid rule: invalid address "fd00::/129" in address_rule: prefix length 129 is more than 128, the most an IPv6 network has"#,
            ),
            (
                "10.0.0.0/999",
                r#"invalid rule: invalid address "10.0.0.0/999" in address_rule: prefix length 999 is more than 32, the most an IPv4 network has"#,
            ),
            (
                "10.0.0.0/x",
                r#"invalid rule: invalid address "10.0.0.0/x" in address_rule: prefix length "x" is not a number from 0 to 32"#,
            ),
            (
                "10.0.0.0/",
                r#"invalid rule: invalid address "10.0.0.0/" in address_rule: prefix length "" is not a number from 0 to 32"#,
            ),
            (
                "example.com/8",
                r#"invalid rule: invalid address "example.com/8" in address_rule: "example.com" is not an IP address (a CIDR is ADDRESS/LENGTH, like 10.0.0.0/8)"#,
            ),
            (
                "https://x",
                r#"invalid rule: invalid address "https://x" in address_rule: "https:" is not an IP address (a CIDR is ADDRESS/LENGTH, like 10.0.0.0/8)"#,
            ),
            (
                "",
                r#"invalid rule: invalid address "" in address_rule: an address cannot be empty"#,
            ),
            (
                "  ",
                r#"invalid rule: invalid address "  " in address_rule: an address cannot be empty"#,
            ),
            (
                "example.com:443",
                r#"invalid rule: invalid address "example.com:443" in address_rule: a port cannot be part of the address; give it in ports=[...]"#,
            ),
            (
                "[::1]:443",
                r#"invalid rule: invalid address "[::1]:443" in address_rule: a port cannot be part of the address; give it in ports=[...]"#,
            ),
            (
                "a*b.example.com",
                r#"invalid rule: invalid address "a*b.example.com" in address_rule: host pattern "a*b.example.com" must be `*.DOMAIN` (names below DOMAIN) or `**.DOMAIN` (DOMAIN and the names below it)"#,
            ),
            (
                "*.com",
                r#"invalid rule: invalid address "*.com" in address_rule: host pattern "*.com" must name a domain of two labels or more (like *.example.com), not a top-level domain or an address"#,
            ),
            (
                "exa mple.com",
                r#"invalid rule: invalid address "exa mple.com" in address_rule: host cannot contain whitespace"#,
            ),
            (
                "x?q",
                r#"invalid rule: invalid address "x?q" in address_rule: host must be a hostname or IP literal (without scheme or path)"#,
            ),
            (
                "[::1",
                r#"invalid rule: invalid address "[::1" in address_rule: host has an invalid bracketed IPv6 literal"#,
            ),
        ] {
            let err = parse_address_target(raw).unwrap_err();
            assert_eq!(err.to_string(), want, "{raw:?}");
        }
    }

    #[test]
    fn transports_and_ports() {
        assert_eq!(parse_transport("tcp").unwrap(), Transport::Tcp);
        assert_eq!(parse_transport("udp").unwrap(), Transport::Udp);
        assert_eq!(parse_transport("any").unwrap(), Transport::Any);
        for raw in ["TCP", "", "sctp", "both"] {
            assert_eq!(
                parse_transport(raw).unwrap_err().to_string(),
                format!(
                    "invalid rule: address_rule transport must be one of tcp, udp, any (got {raw})"
                )
            );
        }
        assert_eq!(parse_port(1).unwrap(), 1);
        assert_eq!(parse_port(65535).unwrap(), 65535);
        for bad in [0, -1, 65536, i64::MAX] {
            assert_eq!(
                parse_port(bad).unwrap_err().to_string(),
                format!("invalid rule: invalid port {bad} in address_rule: ports are 1 to 65535")
            );
        }
    }
}
