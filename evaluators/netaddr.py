"""Whether a host name or address is this machine's loopback: decides where vevo talks or listens without
leaving the box (Ray started locally, OpenAI-compatible servers reached without a proxy, `vevo ui` without a
token)."""
from __future__ import annotations

import ipaddress


def is_loopback_host(host: str | None) -> bool:
    """localhost, 127.0.0.0/8 or ::1 (brackets allowed); anything else, a name included, is not."""
    if not host:
        return False
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
