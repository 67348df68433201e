"""Who may scrape `specmon export` when it listens beyond loopback: a bearer token or basic-auth
users, each read from a file (the forms Prometheus's scrape config sends:
``authorization: {credentials_file: ...}`` and ``basic_auth: {username, password_file}``).

The files hold secrets, so each must be a regular file owned by the user running specmon and
not readable or writable by group or other (as OpenSSH asks of a private key); compared in
constant time, and never printed."""

from __future__ import annotations

import base64
import binascii
import hmac
import os
import stat
from dataclasses import dataclass, field

from aiohttp import web
from aiohttp.typedefs import Handler

from specmon.model.errors import UsageError

MAX_SECRET_FILE_BYTES = 64 * 1024
REALM = 'realm="specmon export"'


def read_secret_file(path: str, option: str) -> str:
    """The text of a secret file, refused in one line unless it is a regular file of this user
    with no group/other permission (opened without following a symlink, checked on the open
    file so it cannot be swapped between the check and the read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise UsageError(f"{option} {path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise UsageError(f"{option} {path}: not a regular file")
        if info.st_uid != os.geteuid():
            raise UsageError(f"{option} {path}: owned by uid {info.st_uid}, not by this user")
        if info.st_mode & 0o077:
            mode = stat.S_IMODE(info.st_mode)
            raise UsageError(
                f"{option} {path}: mode {mode:04o} lets group or other read it; "
                f"run chmod 600 {path}"
            )
        data = file.read(MAX_SECRET_FILE_BYTES + 1)
    if len(data) > MAX_SECRET_FILE_BYTES:
        raise UsageError(f"{option} {path}: larger than {MAX_SECRET_FILE_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{option} {path}: not UTF-8 text") from None


@dataclass
class ScrapeAuth:
    """The accepted credentials: a bearer token, basic-auth users, or both."""

    bearer_token: bytes | None = None
    users: list[tuple[bytes, bytes]] = field(default_factory=list)

    @classmethod
    def from_files(cls, bearer_token_file: str | None, basic_auth_file: str | None) -> ScrapeAuth:
        auth = cls()
        if bearer_token_file is not None:
            option = "--bearer-token-file"
            token = read_secret_file(bearer_token_file, option).strip()
            if not token or any(c.isspace() for c in token):
                raise UsageError(f"{option} {bearer_token_file}: expected one token, no spaces")
            auth.bearer_token = token.encode()
        if basic_auth_file is not None:
            option = "--basic-auth-file"
            text = read_secret_file(basic_auth_file, option)
            for number, line in enumerate(text.splitlines(), start=1):
                if not line.strip() or line.lstrip().startswith("#"):
                    continue
                user, sep, password = line.partition(":")
                if not sep or not user or not password:
                    raise UsageError(f"{option} {basic_auth_file}:{number}: expected USER:PASSWORD")
                auth.users.append((user.encode(), password.encode()))
            if not auth.users:
                raise UsageError(f"{option} {basic_auth_file}: no USER:PASSWORD line")
        return auth

    @property
    def schemes(self) -> str:
        return " and ".join(
            name
            for name, used in (("a bearer token", self.bearer_token), ("basic auth", self.users))
            if used
        )

    def accepts(self, authorization: str | None) -> bool:
        """Whether an ``Authorization`` header carries accepted credentials (every stored
        credential is compared, each in constant time)."""
        if authorization is None:
            return False
        scheme, _, value = authorization.strip().partition(" ")
        value = value.strip()
        if scheme.lower() == "bearer" and self.bearer_token is not None:
            return hmac.compare_digest(value.encode(), self.bearer_token)
        if scheme.lower() == "basic" and self.users:
            try:
                user, sep, password = base64.b64decode(value, validate=True).partition(b":")
            except (binascii.Error, ValueError):
                return False
            matched = False
            for known_user, known_password in self.users:
                same_user = hmac.compare_digest(user, known_user)
                same_password = hmac.compare_digest(password, known_password)
                matched |= bool(sep) and same_user and same_password
            return matched
        return False

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if self.accepts(request.headers.get("Authorization")):
            return await handler(request)
        challenges = []
        if self.bearer_token is not None:
            challenges.append(f"Bearer {REALM}")
        if self.users:
            challenges.append(f"Basic {REALM}")
        return web.Response(
            status=401,
            text="specmon export: credentials required\n",
            headers={"WWW-Authenticate": ", ".join(challenges)},
        )
