"""Which addresses a URL taken from search results may reach: `FetchPolicy`.

A page link, a redirect target or an image URL from a search result is attacker-chosen. By default such a request
may only reach globally routable unicast addresses: loopback, private (RFC 1918, ULA), link-local (cloud metadata at
169.254.169.254), carrier-grade NAT, multicast, reserved, unspecified and documentation addresses are refused, also
when they hide inside an IPv6 address (IPv4-mapped `::ffff:127.0.0.1`, 6to4, Teredo, NAT64). Host names are
resolved first and every address they resolve to must pass; integer and octal/hex spellings (`2130706433`,
`0x7f.1`, `0177.0.0.1`) are read as the IPv4 addresses that resolvers make of them. The checks use `ipaddress`,
never string matching. `allow` (GLASSES_WEB_ALLOW: host names, addresses or CIDR networks) opens exceptions for
tests and intranets.

The transport (glasses_rag.web.guarded_http) applies the policy where connections are made: on the addresses a host
resolves to, before connecting, on every redirect hop, and on the peer address of the connected socket; it connects to
the address it vetted, so a DNS answer that changes between the check and the connect (rebinding) is never used.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
NAT64 = ipaddress.ip_network("64:ff9b::/96")
CGNAT = ipaddress.ip_network("100.64.0.0/10")


class RefusedURL(ValueError):
    """The fetch policy refused the request (the message says which address and why)."""


def parse_allow(entries: Iterable[str]) -> tuple[tuple[IPNetwork, ...], frozenset[str]]:
    """(networks, host names) of an allow-list; an entry that is neither a network nor a host name is an error."""
    nets: list[IPNetwork] = []
    hosts: set[str] = set()
    for raw in entries:
        entry = raw.strip().strip("[]").lower()
        if not entry:
            continue
        try:
            nets.append(ipaddress.ip_network(entry, strict=False))
            continue
        except ValueError:
            pass
        if "/" in entry or not all(part and len(part) < 64 for part in entry.rstrip(".").split(".")):
            raise ValueError(f"allow-list entry {raw!r} is neither an address, a network (CIDR) nor a host name")
        hosts.add(entry.rstrip("."))
    return tuple(nets), frozenset(hosts)


def literal_address(host: str) -> IPAddress | None:
    """The address a host spells directly: dotted, IPv6, or the integer / octal / hex forms of inet_aton."""
    host = host.strip("[]")
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if ":" in host or not host or not all(c in "0123456789abcdefxABCDEFX." for c in host):
        return None
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        return None


def embedded_ipv4(ip: IPAddress) -> IPAddress | None:
    """The IPv4 address an IPv6 address carries (mapped, 6to4, Teredo client, NAT64), else None."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    if ip in NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def address_class(ip: IPAddress) -> str | None:
    """Why `ip` is not a public unicast address ("a loopback address", ...), or None when it is one. An IPv6
    address that carries an IPv4 address is judged by that one too (an IPv4-mapped one only by it)."""
    inner = embedded_ipv4(ip)
    if inner is not None:
        why = address_class(inner)
        if why is not None:
            return f"{why} ({inner} inside {ip})"
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            return None
    for name, bad in (
        ("the unspecified address", ip.is_unspecified),
        ("a loopback address", ip.is_loopback),
        ("a link-local address", ip.is_link_local),
        ("a multicast address", ip.is_multicast),
        ("a carrier-grade NAT address", isinstance(ip, ipaddress.IPv4Address) and ip in CGNAT),
        ("a private address", ip.is_private),
        ("a reserved address", ip.is_reserved),
        ("an address that is not globally routable", not ip.is_global),
    ):
        if bad:
            return name
    return None


def system_resolver(host: str, port: int) -> list[str]:
    """The addresses the system resolver gives for a TCP connection to host:port."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise OSError(f"cannot resolve {host!r}: {e}") from e
    out: list[str] = []
    for info in infos:
        addr = str(info[4][0]).split("%", 1)[0]  # drop an IPv6 scope id
        if addr not in out:
            out.append(addr)
    return out


Resolver = Callable[[str, int], list[str]]


@dataclass(frozen=True)
class FetchPolicy:
    allow_networks: tuple[IPNetwork, ...] = ()
    allow_hosts: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def from_allow(cls, entries: Iterable[str]) -> FetchPolicy:
        nets, hosts = parse_allow(entries)
        return cls(nets, hosts)

    def allowed_host(self, host: str) -> bool:
        return host.strip("[]").lower().rstrip(".") in self.allow_hosts

    def refusal(self, ip: IPAddress) -> str | None:
        """Why the policy refuses `ip`, or None when it may be reached."""
        why = address_class(ip)
        if why is None:
            return None
        inner = embedded_ipv4(ip)
        if any(ip in n or (inner is not None and inner in n) for n in self.allow_networks):
            return None
        return why

    def check_address(self, host: str, ip: IPAddress, what: str = "resolves to") -> None:
        if self.allowed_host(host):
            return
        why = self.refusal(ip)
        if why is not None:
            if literal_address(host) != ip:
                where = f"{host} {what} {ip}, {why}"
            else:
                where = f"{ip} is {why}" if host.strip("[]") == str(ip) else f"{host} means {ip}, {why}"
            raise RefusedURL(f"refused by the fetch policy: {where} (GLASSES_WEB_ALLOW lifts this)")

    def vet(self, host: str, port: int, resolver: Resolver = system_resolver) -> list[IPAddress]:
        """The addresses to connect to for host:port, every one checked; RefusedURL when any is refused (a name
        that resolves to one public and one internal address is refused whole)."""
        literal = literal_address(host)
        ips = [literal] if literal is not None else [ipaddress.ip_address(a) for a in resolver(host, port)]
        if not ips:
            raise OSError(f"cannot resolve {host!r}: no address")
        for ip in ips:
            self.check_address(host, ip)
        return ips
