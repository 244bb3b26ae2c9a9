"""Secrets never leave the process: the one place that removes passwords from text before it is shown or written.

    redact("cannot connect to postgresql://reader:s3cret@db/x")  -> 'cannot connect to postgresql://reader:***@db/x'

Every path by which text reaches a user or a file goes through `redact`: the
lock file's command line, notices and refusals, the one-line errors, the run
log with its tracebacks, and what Beam's workers relay. It removes the password
of any URL (`scheme://user:password@host`), `password=...` in libpq key-value
strings, and every value `register` was given (a password seen in this process,
wherever else it may be quoted, e.g. percent-decoded in an exception).
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable

MASK = "***"
# scheme://user:password@ : the password is whatever stands between the first ':' after the
# user and the last '@' before the host (passwords may hold '@' when percent-encoded or not).
_URL_PASSWORD = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]*:)(?P<password>[^\s/]*)@")
_KEYWORD_PASSWORD = re.compile(r"(?P<head>\bpassword\s*=\s*)(?P<password>'(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)
_registered: set[str] = set()


def register(secret: str | None) -> None:
    """Remembers a secret (and its percent-decoded form) so that `redact` removes it wherever it appears."""
    if secret:
        _registered.add(secret)
        _registered.add(urllib.parse.unquote(secret))


def register_url(url: str | None) -> None:
    """Registers the password of a URL, if it has one."""
    if url and "://" in url:
        try:
            register(urllib.parse.urlsplit(url).password)
        except ValueError:
            pass  # Not a URL urllib can split (a bad port): the pattern below still masks it.


def redact(text: str) -> str:
    """`text` with every password in it replaced by ***."""
    if not text:
        return text
    text = _URL_PASSWORD.sub(lambda m: m.group("head") + (MASK if m.group("password") else "") + "@", text)
    text = _KEYWORD_PASSWORD.sub(lambda m: m.group("head") + MASK, text)
    for secret in sorted(_registered, key=len, reverse=True):
        if len(secret) >= 3:  # A one- or two-character 'password' would blank out ordinary text.
            text = text.replace(secret, MASK)
    return text


def redact_argv(argv: Iterable[str]) -> str:
    """A command line as one redacted string, registering the passwords of the URLs in it."""
    for argument in argv:
        for candidate in re.findall(r"[a-zA-Z][a-zA-Z0-9+.-]*://\S+", argument):
            register_url(candidate)
    return redact(" ".join(argv))


def redact_url(url: str) -> str:
    """`url` with its password replaced by ***, structurally (the user name stays): for a URL row, once.

    Not `register`: a CSV may hold a password per row, and a registered secret is searched in every
    later `redact` call. A URL whose user:password@ a parser would split elsewhere (a raw '/', '?' or
    '#' in the password, characters NFKC changes) is masked from the first ':' after the user to its
    last '@': a path that holds '@' then shows masked too, which is the safe mistake.
    """
    try:
        parts = urllib.parse.urlsplit(url)
        password = parts.password
        _ = parts.port, parts.hostname
        clean = True
    except ValueError:
        clean, password = False, None
    if clean and password is not None:
        userinfo, _, hostport = parts.netloc.rpartition("@")
        user = userinfo.partition(":")[0]
        head = f"{parts.scheme}://{user}:{MASK}@{hostport}"
        tail = urllib.parse.urlunsplit(parts._replace(netloc=f"{user}:{MASK}@{hostport}"))[len(head):]
        return redact(head + _masked_everywhere(tail, password))
    unclear = _UNCLEAR_USERINFO.match(url)
    if unclear and (not clean or "@" not in parts.netloc):
        return redact(f"{unclear.group('head')}{MASK}@{url[unclear.end():]}")
    return redact(url)


def _masked_everywhere(text: str, password: str) -> str:
    """`text` (a URL's path, query and fragment) with every occurrence of `password` masked: as written, decoded
    and encoded, as `redact` masks a registered secret (so one of under 3 characters is left, as there)."""
    forms = {password, urllib.parse.unquote(password), urllib.parse.quote(urllib.parse.unquote(password), safe="")}
    for secret in sorted(forms, key=len, reverse=True):
        if len(secret) >= 3:
            text = text.replace(secret, MASK)
    return text


# scheme://user: ... @ up to the last '@' of the text (greedy): a password a URL parser cannot delimit.
_UNCLEAR_USERINFO = re.compile(r"(?s)(?P<head>\s*[a-zA-Z][a-zA-Z0-9+.-]*://[^/?#@:\s]*:)(?P<password>.*)@")
