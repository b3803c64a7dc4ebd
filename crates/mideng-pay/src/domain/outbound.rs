//! The outbound-address rule: which addresses this service connects to on a tenant's behalf
//! (its webhook endpoints), and which host names a tenant may not register. Pure, no I/O.
//!
//! A tenant chooses the URL and the service makes the request, so a URL that reaches into our
//! own network (the channel simulator on loopback, a database on a private address, a cloud
//! metadata service on 169.254.169.254) is a server-side request forgery. The rule, after
//! Stripe's and Svix's smokescreen, allows only globally routable unicast:
//! - every range of IANA's IPv4 and IPv6 Special-Purpose Address Registries is refused, even
//!   those the registries mark globally reachable (AS112, AMT, the anycast services…): no
//!   merchant's endpoint lives there, and a rule without exceptions is simpler to trust;
//! - so are IPv4 multicast (224.0.0.0/4), and, in IPv6, everything outside global unicast
//!   2000::/3 (unique-local, link-local, site-local, multicast, discard-only…);
//! - the IPv6 forms that carry an IPv4 address (IPv4-mapped, IPv4-compatible, NAT64 64:ff9b::/96,
//!   6to4, Teredo) are not refused as such but judged as the IPv4 they carry, since a
//!   connection to them is one to that IPv4 (`[::ffff:0.0.0.0]` reaches our loopback, and a
//!   DNS64 resolver answers a public host with a NAT64 address). Local-use NAT64
//!   (64:ff9b:1::/48) translates into a network of its operator's: refused.
//!
//! Registration ([`crate::domain::webhook::checked_url`]) judges IP literals with
//! [`is_global`] and refuses the special-use names of [`SPECIAL_USE_NAMES`]; the dispatcher
//! ([`crate::workers::webhooks`]) judges every address a name resolves to, and the literal of
//! every URL it sends to, with the same [`is_global`].

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// A range of IPv4 addresses: its first address, its prefix length and its registry name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Range {
    /// The first address (the host bits are zero).
    pub prefix: Ipv4Addr,
    /// The prefix length, 0 to 32.
    pub length: u8,
    /// Its name in the registry.
    pub name: &'static str,
}

/// A range of IPv6 addresses: its first address, its prefix length, its registry name and how
/// an address in it is judged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv6Range {
    /// The first address (the host bits are zero).
    pub prefix: Ipv6Addr,
    /// The prefix length, 0 to 128.
    pub length: u8,
    /// Its name in the registry.
    pub name: &'static str,
    /// Refused, or judged as the IPv4 it carries.
    pub treatment: Treatment,
}

/// How an address in an IPv6 range is judged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Treatment {
    /// Never connected to.
    Refused,
    /// Judged as the IPv4 address (or addresses) it carries: global only if each is.
    Carries(Embedding),
}

/// Where an IPv6 address carries an IPv4 address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Embedding {
    /// In its last 32 bits (IPv4-mapped, IPv4-compatible, NAT64).
    Last32,
    /// In bits 16 to 48 (6to4, RFC 3056).
    SixToFour,
    /// Teredo (RFC 4380): the server in bits 32 to 64, the client in the last 32 bits,
    /// inverted. A connection goes through the one to the other, so both are judged.
    Teredo,
}

const fn ipv4_range(a: u8, b: u8, c: u8, d: u8, length: u8, name: &'static str) -> Ipv4Range {
    Ipv4Range {
        prefix: Ipv4Addr::new(a, b, c, d),
        length,
        name,
    }
}

const fn ipv6_range(
    segments: [u16; 8],
    length: u8,
    name: &'static str,
    treatment: Treatment,
) -> Ipv6Range {
    let [a, b, c, d, e, f, g, h] = segments;
    Ipv6Range {
        prefix: Ipv6Addr::new(a, b, c, d, e, f, g, h),
        length,
        name,
        treatment,
    }
}

use Embedding::{Last32, SixToFour, Teredo};
use Treatment::{Carries, Refused};

/// Every IPv4 range refused: IANA's IPv4 Special-Purpose Address Registry (all of it, nested
/// entries too), then multicast from the IPv4 Multicast Address Space Registry. Whatever is
/// in none of them is globally routable unicast.
#[rustfmt::skip]
pub const IPV4_RANGES: [Ipv4Range; 26] = [
    ipv4_range(0, 0, 0, 0,         8,  "\"This network\" (RFC 791)"),
    ipv4_range(0, 0, 0, 0,         32, "\"This host on this network\" (RFC 1122)"),
    ipv4_range(10, 0, 0, 0,        8,  "Private-Use (RFC 1918)"),
    ipv4_range(100, 64, 0, 0,      10, "Shared Address Space (RFC 6598)"),
    ipv4_range(127, 0, 0, 0,       8,  "Loopback (RFC 1122)"),
    ipv4_range(169, 254, 0, 0,     16, "Link Local (RFC 3927)"),
    ipv4_range(172, 16, 0, 0,      12, "Private-Use (RFC 1918)"),
    ipv4_range(192, 0, 0, 0,       24, "IETF Protocol Assignments (RFC 6890)"),
    ipv4_range(192, 0, 0, 0,       29, "IPv4 Service Continuity Prefix (RFC 7335)"),
    ipv4_range(192, 0, 0, 8,       32, "IPv4 dummy address (RFC 7600)"),
    ipv4_range(192, 0, 0, 9,       32, "Port Control Protocol Anycast (RFC 7723)"),
    ipv4_range(192, 0, 0, 10,      32, "Traversal Using Relays around NAT Anycast (RFC 8155)"),
    ipv4_range(192, 0, 0, 170,     32, "NAT64/DNS64 Discovery (RFC 7050)"),
    ipv4_range(192, 0, 0, 171,     32, "NAT64/DNS64 Discovery (RFC 7050)"),
    ipv4_range(192, 0, 2, 0,       24, "Documentation, TEST-NET-1 (RFC 5737)"),
    ipv4_range(192, 31, 196, 0,    24, "AS112-v4 (RFC 7535)"),
    ipv4_range(192, 52, 193, 0,    24, "AMT (RFC 7450)"),
    ipv4_range(192, 88, 99, 0,     24, "Deprecated, 6to4 Relay Anycast (RFC 7526)"),
    ipv4_range(192, 168, 0, 0,     16, "Private-Use (RFC 1918)"),
    ipv4_range(192, 175, 48, 0,    24, "Direct Delegation AS112 Service (RFC 7534)"),
    ipv4_range(198, 18, 0, 0,      15, "Benchmarking (RFC 2544)"),
    ipv4_range(198, 51, 100, 0,    24, "Documentation, TEST-NET-2 (RFC 5737)"),
    ipv4_range(203, 0, 113, 0,     24, "Documentation, TEST-NET-3 (RFC 5737)"),
    ipv4_range(240, 0, 0, 0,       4,  "Reserved (RFC 1112)"),
    ipv4_range(255, 255, 255, 255, 32, "Limited Broadcast (RFC 919)"),
    // Beyond the special-purpose registry.
    ipv4_range(224, 0, 0, 0,       4,  "Multicast (RFC 5771)"),
];

/// Every IPv6 range judged specially: IANA's IPv6 Special-Purpose Address Registry (all of
/// it), then the deprecated and multicast ranges outside it. An address is judged by the most
/// specific range it is in (Teredo, 2001::/32, decides within 2001::/23; `::` and `::1` within
/// `::/96`); one in none is global if it is in 2000::/3.
#[rustfmt::skip]
pub const IPV6_RANGES: [Ipv6Range; 28] = [
    ipv6_range([0, 0, 0, 0, 0, 0, 0, 1],          128, "Loopback Address (RFC 4291)", Refused),
    ipv6_range([0, 0, 0, 0, 0, 0, 0, 0],          128, "Unspecified Address (RFC 4291)", Refused),
    ipv6_range([0, 0, 0, 0, 0, 0xffff, 0, 0],     96,  "IPv4-mapped Address (RFC 4291)", Carries(Last32)),
    ipv6_range([0x64, 0xff9b, 0, 0, 0, 0, 0, 0],  96,  "IPv4-IPv6 Translation (RFC 6052)", Carries(Last32)),
    ipv6_range([0x64, 0xff9b, 1, 0, 0, 0, 0, 0],  48,  "IPv4-IPv6 Translation, local use (RFC 8215)", Refused),
    ipv6_range([0x100, 0, 0, 0, 0, 0, 0, 0],      64,  "Discard-Only Address Block (RFC 6666)", Refused),
    ipv6_range([0x100, 0, 0, 1, 0, 0, 0, 0],      64,  "Dummy IPv6 Prefix (RFC 9780)", Refused),
    ipv6_range([0x2001, 0, 0, 0, 0, 0, 0, 0],     23,  "IETF Protocol Assignments (RFC 2928)", Refused),
    ipv6_range([0x2001, 0, 0, 0, 0, 0, 0, 0],     32,  "TEREDO (RFC 4380)", Carries(Teredo)),
    ipv6_range([0x2001, 1, 0, 0, 0, 0, 0, 1],     128, "Port Control Protocol Anycast (RFC 7723)", Refused),
    ipv6_range([0x2001, 1, 0, 0, 0, 0, 0, 2],     128, "Traversal Using Relays around NAT Anycast (RFC 8155)", Refused),
    ipv6_range([0x2001, 1, 0, 0, 0, 0, 0, 3],     128, "DNS-SD Service Registration Protocol Anycast (RFC 9665)", Refused),
    ipv6_range([0x2001, 2, 0, 0, 0, 0, 0, 0],     48,  "Benchmarking (RFC 5180)", Refused),
    ipv6_range([0x2001, 3, 0, 0, 0, 0, 0, 0],     32,  "AMT (RFC 7450)", Refused),
    ipv6_range([0x2001, 4, 0x112, 0, 0, 0, 0, 0], 48,  "AS112-v6 (RFC 7535)", Refused),
    ipv6_range([0x2001, 0x10, 0, 0, 0, 0, 0, 0],  28,  "Deprecated, previously ORCHID (RFC 4843)", Refused),
    ipv6_range([0x2001, 0x20, 0, 0, 0, 0, 0, 0],  28,  "ORCHIDv2 (RFC 7343)", Refused),
    ipv6_range([0x2001, 0x30, 0, 0, 0, 0, 0, 0],  28,  "Drone Remote ID Protocol Entity Tags (RFC 9374)", Refused),
    ipv6_range([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32,  "Documentation (RFC 3849)", Refused),
    ipv6_range([0x2002, 0, 0, 0, 0, 0, 0, 0],     16,  "6to4 (RFC 3056)", Carries(SixToFour)),
    ipv6_range([0x2620, 0x4f, 0x8000, 0, 0, 0, 0, 0], 48, "Direct Delegation AS112 Service (RFC 7534)", Refused),
    ipv6_range([0x3fff, 0, 0, 0, 0, 0, 0, 0],     20,  "Documentation (RFC 9637)", Refused),
    ipv6_range([0x5f00, 0, 0, 0, 0, 0, 0, 0],     16,  "Segment Routing (SRv6) SIDs (RFC 9602)", Refused),
    ipv6_range([0xfc00, 0, 0, 0, 0, 0, 0, 0],     7,   "Unique-Local (RFC 4193)", Refused),
    ipv6_range([0xfe80, 0, 0, 0, 0, 0, 0, 0],     10,  "Link-Local Unicast (RFC 4291)", Refused),
    // Beyond the special-purpose registry (each outside 2000::/3 as well).
    ipv6_range([0, 0, 0, 0, 0, 0, 0, 0],          96,  "IPv4-compatible, deprecated (RFC 4291)", Carries(Last32)),
    ipv6_range([0xfec0, 0, 0, 0, 0, 0, 0, 0],     10,  "Site-Local, deprecated (RFC 3879)", Refused),
    ipv6_range([0xff00, 0, 0, 0, 0, 0, 0, 0],     8,   "Multicast (RFC 4291)", Refused),
];

/// Global unicast, 2000::/3 (RFC 4291): the only IPv6 addresses eligible at all.
const IPV6_GLOBAL_UNICAST: (Ipv6Addr, u8) = (Ipv6Addr::new(0x2000, 0, 0, 0, 0, 0, 0, 0), 3);

/// Host names a tenant may not register, with every name under them: they name this machine
/// or its own networks, never a merchant's public endpoint (RFC 6761's `localhost`, `invalid`
/// and `test`, mDNS's `local` of RFC 6762, `home.arpa` of RFC 8375, ICANN's `internal`).
pub const SPECIAL_USE_NAMES: [&str; 6] = [
    "localhost",
    "local",
    "internal",
    "home.arpa",
    "invalid",
    "test",
];

impl Ipv4Range {
    /// Whether `address` is in the range.
    pub fn contains(&self, address: Ipv4Addr) -> bool {
        let mask = u32::MAX
            .checked_shl(32 - u32::from(self.length))
            .unwrap_or(0);
        address.to_bits() & mask == self.prefix.to_bits()
    }
}

impl Ipv6Range {
    /// Whether `address` is in the range.
    pub fn contains(&self, address: Ipv6Addr) -> bool {
        ipv6_in(address, self.prefix, self.length)
    }
}

fn ipv6_in(address: Ipv6Addr, prefix: Ipv6Addr, length: u8) -> bool {
    let mask = u128::MAX.checked_shl(128 - u32::from(length)).unwrap_or(0);
    address.to_bits() & mask == prefix.to_bits()
}

/// Whether this service may connect to `address` on a tenant's behalf: globally routable
/// unicast only (see the module's doc).
pub fn is_global(address: IpAddr) -> bool {
    match address {
        IpAddr::V4(address) => ipv4_is_global(address),
        IpAddr::V6(address) => ipv6_is_global(address),
    }
}

fn ipv4_is_global(address: Ipv4Addr) -> bool {
    !IPV4_RANGES.iter().any(|range| range.contains(address))
}

fn ipv6_is_global(address: Ipv6Addr) -> bool {
    let most_specific = IPV6_RANGES
        .iter()
        .filter(|range| range.contains(address))
        .max_by_key(|range| range.length);
    match most_specific.map(|range| range.treatment) {
        Some(Treatment::Refused) => false,
        Some(Treatment::Carries(embedding)) => {
            carried(address, embedding).into_iter().all(ipv4_is_global)
        }
        None => ipv6_in(address, IPV6_GLOBAL_UNICAST.0, IPV6_GLOBAL_UNICAST.1),
    }
}

/// The IPv4 addresses an IPv6 address carries by `embedding`.
fn carried(address: Ipv6Addr, embedding: Embedding) -> Vec<Ipv4Addr> {
    let [.., a, b, c, d] = address.octets();
    let octets = address.octets();
    match embedding {
        Embedding::Last32 => vec![Ipv4Addr::new(a, b, c, d)],
        Embedding::SixToFour => vec![Ipv4Addr::new(octets[2], octets[3], octets[4], octets[5])],
        Embedding::Teredo => vec![
            Ipv4Addr::new(octets[4], octets[5], octets[6], octets[7]),
            Ipv4Addr::new(!a, !b, !c, !d),
        ],
    }
}

/// The address of an IP-literal host (`127.1`, `0`, `[::ffff:0.0.0.0]`, parsed by the URL
/// standard into the addresses they are); `None` for a name or no host.
pub fn literal_address(url: &url::Url) -> Option<IpAddr> {
    match url.host()? {
        url::Host::Ipv4(address) => Some(IpAddr::V4(address)),
        url::Host::Ipv6(address) => Some(IpAddr::V6(address)),
        url::Host::Domain(_) => None,
    }
}

/// Where the service may connect on a tenant's behalf: the outbound-address rule, and the two
/// ways an operator widens it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TargetPolicy {
    /// Any address at all (`[webhooks] allow_private_targets`, a laptop's demo).
    pub allow_private: bool,
    /// These IP and port pairs as well (`[webhooks] allowed_targets`): receivers of the
    /// operator's own on a private network. A URL matches only when its host is that IP
    /// literal and its port that port, so one trusted receiver opens nothing else on its host
    /// (`[::ffff:127.0.0.1]:p` is not `127.0.0.1:p`), and a name never matches: what it
    /// resolves to is judged by the rule alone.
    pub allowed: Vec<SocketAddr>,
}

impl TargetPolicy {
    /// Whether a URL whose host is the IP literal `address` (with its port) may be sent to.
    pub fn permits_literal(&self, address: SocketAddr) -> bool {
        self.allow_private || is_global(address.ip()) || self.allowed.contains(&address)
    }

    /// Whether an address a name resolved to may be connected to.
    pub fn permits_resolved(&self, address: IpAddr) -> bool {
        self.allow_private || is_global(address)
    }

    /// Whether `url` may be sent to, as far as its text tells: an IP literal is judged with its
    /// port, a name refused when special-use (what it resolves to is judged at the connection).
    pub fn permits_url(&self, url: &url::Url) -> bool {
        match (literal_address(url), url.port_or_known_default()) {
            (Some(address), Some(port)) => self.permits_literal(SocketAddr::new(address, port)),
            (Some(address), None) => self.permits_resolved(address),
            (None, _) => {
                self.allow_private
                    || url
                        .host_str()
                        .is_some_and(|name| !is_special_use_name(name))
            }
        }
    }
}

/// Whether `name` is, or is under, one of [`SPECIAL_USE_NAMES`], with or without the trailing
/// dot of a fully qualified name.
pub fn is_special_use_name(name: &str) -> bool {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    SPECIAL_USE_NAMES.iter().any(|special| {
        name == *special
            || name
                .strip_suffix(special)
                .is_some_and(|above| above.ends_with('.'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn global(text: &str) -> bool {
        is_global(text.parse().expect("an address"))
    }

    #[test]
    fn an_allowed_pair_opens_that_literal_and_port_only() {
        let policy = TargetPolicy {
            allow_private: false,
            allowed: vec!["127.0.0.1:9000".parse().expect("pair")],
        };
        let permits = |text: &str| policy.permits_url(&url::Url::parse(text).expect("url"));
        assert!(permits("http://127.0.0.1:9000/hooks"));
        for refused in [
            "http://127.0.0.1:9001/hooks",
            "http://127.0.0.1/hooks",
            "http://[::ffff:127.0.0.1]:9000/hooks",
            "http://127.1:9001/",
            "http://0:9000/",
            "http://localhost:9000/",
        ] {
            assert!(!permits(refused), "{refused}");
        }
        assert!(permits("https://merchant.example:9000/"), "a public name");
        assert!(!policy.permits_resolved("127.0.0.1".parse().expect("address")));
        let anywhere = TargetPolicy {
            allow_private: true,
            allowed: Vec::new(),
        };
        assert!(anywhere.permits_url(&url::Url::parse("http://localhost:1/").expect("url")));
    }

    fn ipv4_last(range: &Ipv4Range) -> Ipv4Addr {
        let host = u32::MAX.checked_shr(u32::from(range.length)).unwrap_or(0);
        Ipv4Addr::from_bits(range.prefix.to_bits() | host)
    }

    fn ipv6_last(range: &Ipv6Range) -> Ipv6Addr {
        let host = u128::MAX.checked_shr(u32::from(range.length)).unwrap_or(0);
        Ipv6Addr::from_bits(range.prefix.to_bits() | host)
    }

    #[test]
    fn the_table_is_well_formed() {
        for range in IPV4_RANGES {
            assert!(range.length <= 32, "{range:?}");
            assert!(
                range.contains(range.prefix),
                "host bits are zero: {range:?}"
            );
            assert!(range.contains(ipv4_last(&range)), "{range:?}");
        }
        for range in IPV6_RANGES {
            assert!(range.length <= 128, "{range:?}");
            assert!(
                range.contains(range.prefix),
                "host bits are zero: {range:?}"
            );
            assert!(range.contains(ipv6_last(&range)), "{range:?}");
        }
        for (index, range) in IPV6_RANGES.iter().enumerate() {
            assert!(
                IPV6_RANGES[index + 1..]
                    .iter()
                    .all(|other| (other.prefix, other.length) != (range.prefix, range.length)),
                "one entry per range: {range:?}"
            );
        }
    }

    #[test]
    fn every_special_ipv4_range_is_refused_from_its_first_address_to_its_last() {
        for range in IPV4_RANGES {
            for address in [range.prefix, ipv4_last(&range)] {
                assert!(!is_global(address.into()), "{address} ({})", range.name);
            }
        }
    }

    #[test]
    fn every_refused_ipv6_range_is_refused_from_its_first_address_to_its_last() {
        for range in IPV6_RANGES
            .iter()
            .filter(|range| range.treatment == Treatment::Refused)
        {
            for address in [range.prefix, ipv6_last(range)] {
                assert!(!is_global(address.into()), "{address} ({})", range.name);
            }
        }
    }

    #[test]
    fn the_addresses_just_outside_the_special_ipv4_ranges_are_global() {
        // The neighbours of each range that are in no range of their own.
        for address in [
            "1.0.0.0",
            "9.255.255.255",
            "11.0.0.0",
            "100.63.255.255",
            "100.128.0.0",
            "126.255.255.255",
            "128.0.0.0",
            "169.253.255.255",
            "169.255.0.0",
            "172.15.255.255",
            "172.32.0.0",
            "191.255.255.255",
            "192.0.1.0",
            "192.0.3.0",
            "192.31.195.255",
            "192.31.197.0",
            "192.52.192.255",
            "192.52.194.0",
            "192.88.98.255",
            "192.88.100.0",
            "192.167.255.255",
            "192.169.0.0",
            "192.175.47.255",
            "192.175.49.0",
            "198.17.255.255",
            "198.20.0.0",
            "198.51.99.255",
            "198.51.101.0",
            "203.0.112.255",
            "203.0.114.0",
            "223.255.255.255",
            "8.8.8.8",
        ] {
            assert!(global(address), "{address}");
        }
        // Inside 192.0.0.0/24 but outside its nested entries: still refused by the /24.
        for address in ["192.0.0.11", "192.0.0.169", "192.0.0.172", "192.0.0.255"] {
            assert!(!global(address), "{address}");
        }
    }

    #[test]
    fn the_addresses_just_outside_the_special_ipv6_ranges_are_judged_by_their_neighbourhood() {
        for address in [
            "2001:200::",
            "2000:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "2001:db7:ffff:ffff:ffff:ffff:ffff:ffff",
            "2001:db9::",
            "2003::",
            "2001:4860:4860::8888",
            "2620:4f:7fff:ffff:ffff:ffff:ffff:ffff",
            "2620:4f:8001::",
            "3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "3fff:1000::",
            "2000::",
        ] {
            assert!(global(address), "{address}");
        }
        // Outside 2000::/3, and in no range of the table: refused all the same.
        for address in [
            "1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "4000::",
            "5eff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "100:0:0:2::",
            "64:ff9b:2::",
            "64:ff9b:0:0:0:1::",
            "::1:0:0:0",
            "fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "e000::",
        ] {
            assert!(!global(address), "{address}");
        }
        // Inside 2001::/23 but outside its nested entries: refused by the /23.
        for address in [
            "2001:5::1",
            "2001:100::",
            "2001:1::4",
            "2001:1::",
            "2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff",
        ] {
            assert!(!global(address), "{address}");
        }
    }

    #[test]
    fn an_ipv6_address_carrying_a_local_ipv4_is_refused() {
        for address in [
            "::ffff:127.0.0.1",
            "::ffff:0.0.0.0",
            "::ffff:10.0.0.1",
            "::ffff:169.254.169.254",
            "::ffff:100.64.0.1",
            "::ffff:224.0.0.1",
            "::ffff:255.255.255.255",
            "::127.0.0.1",
            "::169.254.169.254",
            "::0.0.0.2",
            "64:ff9b::7f00:1",
            "64:ff9b::a9fe:a9fe",
            "64:ff9b::c0a8:1",
            "2002:7f00:1::",
            "2002:a9fe:a9fe::1",
            "2002:0:0::",
            "2002:c0a8:101:1::1",
            // Teredo, server 8.8.8.8 (global), client 127.0.0.1 (inverted: 80ff:fffe).
            "2001:0:808:808:0:0:80ff:fffe",
            // Teredo, server 192.168.0.1, client 8.8.8.8 (inverted: f7f7:f7f7).
            "2001:0:c0a8:1:0:0:f7f7:f7f7",
            // Teredo, both local.
            "2001:0:7f00:1::",
        ] {
            assert!(!global(address), "{address}");
        }
    }

    #[test]
    fn an_ipv6_address_carrying_a_global_ipv4_is_judged_as_that_ipv4() {
        for address in [
            "::ffff:8.8.8.8",
            "::8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::1",
            // Teredo, server 8.8.8.8, client 1.1.1.1 (inverted: fefe:fefe).
            "2001:0:808:808:0:0:fefe:fefe",
        ] {
            assert!(global(address), "{address}");
        }
        assert!(!global("::"), "the unspecified address, within ::/96");
        assert!(!global("::1"), "loopback, within ::/96");
    }

    #[test]
    fn local_names_are_special_use_with_or_without_their_trailing_dot() {
        for name in [
            "localhost",
            "localhost.",
            "LOCALHOST",
            "a.localhost",
            "a.b.localhost.",
            "printer.local",
            "metadata.google.internal",
            "router.home.arpa",
            "invalid",
            "x.invalid",
            "merchant.test",
            "localhost..",
            "local",
        ] {
            assert!(is_special_use_name(name), "{name}");
        }
        for name in [
            "merchant.example",
            "notlocalhost",
            "localhost.merchant.example",
            "mylocal",
            "internal.merchant.example",
        ] {
            assert!(!is_special_use_name(name), "{name}");
        }
    }

    #[test]
    fn an_ip_literal_is_read_as_the_address_it_is() {
        for (text, address) in [
            ("http://0:80/", "0.0.0.0"),
            ("http://127.1/", "127.0.0.1"),
            ("http://0x7f.1/", "127.0.0.1"),
            ("http://2130706433/", "127.0.0.1"),
            ("http://[::ffff:0.0.0.0]/", "::ffff:0.0.0.0"),
            ("http://[::127.0.0.1]/", "::7f00:1"),
        ] {
            let url = url::Url::parse(text).expect("a URL");
            assert_eq!(
                literal_address(&url),
                Some(address.parse().expect("an address")),
                "{text}"
            );
        }
        let named = url::Url::parse("http://merchant.example/").expect("a URL");
        assert_eq!(literal_address(&named), None);
    }

    /// The rule as the table states it, written independently of [`is_global`]: membership
    /// bit by bit, the most specific range by a scan, the carried IPv4 by shifts.
    mod oracle {
        use super::super::*;

        fn leading_bits_equal(a: u128, b: u128, bits_total: u32, length: u8) -> bool {
            (0..u32::from(length)).all(|bit| {
                let shift = bits_total - 1 - bit;
                (a >> shift) & 1 == (b >> shift) & 1
            })
        }

        pub(super) fn ipv4(address: u32) -> bool {
            IPV4_RANGES.iter().all(|range| {
                !leading_bits_equal(
                    u128::from(address),
                    u128::from(range.prefix.to_bits()),
                    32,
                    range.length,
                )
            })
        }

        fn low32(value: u128) -> u32 {
            u32::try_from(value & 0xffff_ffff).expect("masked to 32 bits")
        }

        pub(super) fn ipv6(address: u128) -> bool {
            let mut best: Option<&Ipv6Range> = None;
            for range in &IPV6_RANGES {
                if leading_bits_equal(address, range.prefix.to_bits(), 128, range.length)
                    && best.is_none_or(|best| range.length > best.length)
                {
                    best = Some(range);
                }
            }
            match best.map(|range| range.treatment) {
                Some(Treatment::Refused) => false,
                Some(Treatment::Carries(Embedding::Last32)) => ipv4(low32(address)),
                Some(Treatment::Carries(Embedding::SixToFour)) => ipv4(low32(address >> 80)),
                Some(Treatment::Carries(Embedding::Teredo)) => {
                    ipv4(low32(address >> 64)) && ipv4(!low32(address))
                }
                None => address >> 125 == 0b001,
            }
        }
    }

    use proptest::prelude::*;

    /// Addresses near the table: in a range with random host bits, or one bit away from it,
    /// so that the property explores the boundaries and not only the vast global space.
    fn ipv4_addresses() -> impl Strategy<Value = u32> {
        prop_oneof![
            any::<u32>(),
            (0..IPV4_RANGES.len(), any::<u32>(), 0..33_u32).prop_map(|(index, noise, flip)| {
                let range = IPV4_RANGES[index];
                let host = u32::MAX.checked_shr(u32::from(range.length)).unwrap_or(0);
                let inside = range.prefix.to_bits() | (noise & host);
                inside ^ 1_u32.checked_shl(flip).unwrap_or(0)
            }),
        ]
    }

    fn ipv6_addresses() -> impl Strategy<Value = u128> {
        prop_oneof![
            any::<u128>(),
            (0..IPV6_RANGES.len(), any::<u128>(), 0..129_u32).prop_map(|(index, noise, flip)| {
                let range = IPV6_RANGES[index];
                let host = u128::MAX.checked_shr(u32::from(range.length)).unwrap_or(0);
                let inside = range.prefix.to_bits() | (noise & host);
                inside ^ 1_u128.checked_shl(flip).unwrap_or(0)
            }),
            // A carrier holding an address near an IPv4 range.
            (
                0..IPV6_RANGES.len(),
                ipv4_addresses(),
                ipv4_addresses(),
                any::<u32>()
            )
                .prop_map(|(index, first, second, noise)| {
                    let range = IPV6_RANGES[index];
                    let prefix = range.prefix.to_bits();
                    match range.treatment {
                        Treatment::Carries(Embedding::Last32) | Treatment::Refused => {
                            prefix | u128::from(first)
                        }
                        Treatment::Carries(Embedding::SixToFour) => {
                            prefix | (u128::from(first) << 80) | u128::from(noise)
                        }
                        Treatment::Carries(Embedding::Teredo) => {
                            prefix | (u128::from(first) << 64) | u128::from(!second)
                        }
                    }
                }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]

        #[test]
        fn is_global_agrees_with_the_table_for_any_ipv4_address(address in ipv4_addresses()) {
            prop_assert_eq!(
                is_global(IpAddr::V4(Ipv4Addr::from_bits(address))),
                oracle::ipv4(address)
            );
        }

        #[test]
        fn is_global_agrees_with_the_table_for_any_ipv6_address(address in ipv6_addresses()) {
            prop_assert_eq!(
                is_global(IpAddr::V6(Ipv6Addr::from_bits(address))),
                oracle::ipv6(address)
            );
        }
    }
}
