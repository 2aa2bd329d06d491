"""URLs and hosts: which host is this machine (loopback), and a URL with its user name and password taken out.

The one home of both rules: SAMP (`speco3.interop.fetch`) reads only loopback URLs; the model server client
(`speco3.engine.chatapi`) strips credentials from a ``--server`` URL before it is logged or recorded and warns
when a secret would travel in clear text to another host.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import unquote, urlsplit, urlunsplit


def is_loopback_host(host: str | None) -> bool:
    """``localhost`` or an IP literal of the loopback network (127.0.0.0/8, ::1); no name is looked up."""
    if not host:
        return False
    host = host.strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def split_credentials(url: str) -> tuple[str, tuple[str, str] | None]:
    """(``url`` without ``user:password@``, (user, password) or None). Percent-escapes in the credentials are
    decoded, as a browser or curl does; the rest of the URL is kept as written."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    return urlunsplit(parts._replace(netloc=hostport)), (unquote(user), unquote(password))


def redact(url: str) -> str:
    """``url`` safe to show: any ``user:password@`` replaced by ``***@``."""
    clean, creds = split_credentials(url)
    if creds is None:
        return url
    parts = urlsplit(clean)
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc))
