"""What every request and response of the UI passes through, ahead of the routes (a plain ASGI middleware).

- **Host.** A page on another site can make a browser resolve its own name to 127.0.0.1 (DNS rebinding)
  and then read this UI as if it were that site. The browser still sends that site's name in `Host`,
  so a `Host` that is not a name or address this server was bound to is refused (400) before any route runs.
- **HEAD.** Answered as GET, without the body (the headers, Content-Length included, are GET's).
- **Headers.** Every response says what the browser may run and load: a Content-Security-Policy with no
  inline script or style (the pages have none: their CSS is `/static/ui.css`), no framing, no sniffing.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "[::1]"})
WILDCARD_ADDRESSES = frozenset({"0.0.0.0", "::", ""})

# Only what the pages use: their own stylesheet, thumbnails, forms posting to the UI itself. No script at all.
CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                           "form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


@dataclasses.dataclass(frozen=True)
class AllowedHosts:
    """The `Host` values this UI answers: a name or address it was bound to, with its port.

    `names`: host names and addresses as a `Host` header writes them (IPv6 in brackets), lower case;
    `port`: the bound port (None: any, for an app not yet bound); `any_address`: bound to every address
    (0.0.0.0), so any IP address literal is one of this machine's (a rebinding attack needs a *name*).
    """

    names: frozenset[str] = LOOPBACK_NAMES
    port: int | None = None
    any_address: bool = False

    def allows(self, host: str) -> bool:
        """Whether a `Host` header value names this server."""
        host = host.strip().lower()
        if host.endswith("]") or ":" not in host:  # No port given: only right when the port is HTTP's default.
            name, port = host, "80"
        else:
            name, _, port = host.rpartition(":")
        if self.port is not None and port != str(self.port):
            return False
        if name in self.names:
            return True
        if self.any_address:
            try:
                ipaddress.ip_address(name.removeprefix("[").removesuffix("]"))
            except ValueError:
                return False
            return True
        return False


def allowed_hosts(host: str, port: int) -> AllowedHosts:
    """The `Host` values of a UI bound to `host`:`port`: the loopback names, and `host` itself when it is another
    address (every IP address of the machine, and its host name, when it is 0.0.0.0 or ::)."""
    import socket

    names = set(LOOPBACK_NAMES)
    wildcard = host in WILDCARD_ADDRESSES
    if wildcard:
        names.add(socket.gethostname().lower())
    else:
        names.add(f"[{host.lower()}]" if ":" in host else host.lower())
    return AllowedHosts(frozenset(names), port, wildcard)


class Guard:
    """ASGI middleware: the Host check, HEAD as GET without a body, the security headers on every response."""

    def __init__(self, app: Callable[..., Awaitable[None]], hosts: AllowedHosts,
                 refusal: Callable[[Scope, int, str], Any]) -> None:
        self.app = app
        self.hosts = hosts
        self.refusal = refusal  # (scope, status, message) -> an ASGI response (the UI's error page).

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        head = scope["method"] == "HEAD"
        if head:
            scope = dict(scope, method="GET")

        async def guarded_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = dict(message)
                message["headers"] = [*message.get("headers", []),
                                      *((name.lower().encode(), value.encode()) for name, value in
                                        SECURITY_HEADERS.items())]
            elif head and message["type"] == "http.response.body":
                message = dict(message, body=b"")
            await send(message)

        hosts = [value.decode("latin-1") for name, value in scope["headers"] if name == b"host"]
        if len(hosts) != 1 or not self.hosts.allows(hosts[0]):
            shown = repr(hosts[0][:100]) if hosts else "none"
            await self.refusal(scope, 400, f"Host {shown} is not this UI's address: open it by the address it "
                                           "printed (a page of another site may not read it)")(
                scope, receive, guarded_send)
            return
        await self.app(scope, receive, guarded_send)
