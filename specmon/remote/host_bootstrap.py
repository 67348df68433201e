"""The fixed first step of everything specmon runs from a host's state dir (the helper, the
GPU agent). It travels in the command line itself (``python3 -c ...``, see helper_client), so
nothing in the state dir decides whether it runs: it checks the directories, hashes the file
and runs the very bytes it hashed (no second read for anyone to swap). Standard library only,
Python 3.8+.

Arguments: MODE SHA256 STATE_DIR NAME [ARG...]
  run      run STATE_DIR/bin/NAME with ARGs, if its bytes hash to SHA256
  install  take the bytes from stdin (they must hash to SHA256), write them to bin/NAME, then
           run them with ARGs (no ARGs: only write)

Refused, in one JSON line naming the path, its owner and its mode (exit 3):
  - a directory on the way to the state dir, or the state dir, that is not a directory of
    this user or root, or that group or others may write without the sticky bit (its owner
    or writers could swap the state dir's bin/ or runs/); a symbolic link on the way that
    is not this user's or root's;
  - bin/ or runs/ (created 0700 when missing) not a directory of this user, or writable by
    group or others;
  - bin/NAME not a regular file of this user with one link, or writable by group or others.
A missing or different bin/NAME in run mode answers {"ok": false, "install": true}.
"""

from __future__ import annotations

import sys

if __name__ == "__main__" and sys.path[:1] == [""]:
    del sys.path[0]  # -c put the working directory first: import nothing from there

import contextlib
import hashlib
import json
import os
import pwd
import stat
import types

REFUSED = 3
PRIVATE_HINT = "remove it or choose another state dir"


class Refused(Exception):
    """A path specmon must not trust; the message names it, its owner and its mode."""


def owner_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def refused(path: str, info: os.stat_result, why: str) -> Refused:
    owner, mode = owner_name(info.st_uid), stat.S_IMODE(info.st_mode)
    return Refused(f"refused {path} (owner {owner}, mode {mode:04o}): {why}")


def prefixes(path: str) -> list[str]:
    """'/', '/a', '/a/b' ... of an absolute path."""
    parts = [part for part in path.split("/") if part]
    return ["/"] + ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def check_above(path: str, info: os.stat_result) -> None:
    """A directory on the way to bin/ and runs/ (the state dir included): this user's or
    root's, and writable by group or others only when sticky (a /tmp-like directory)."""
    me = os.geteuid()
    if stat.S_ISLNK(info.st_mode):
        if info.st_uid in (me, 0):
            return  # the directory holding it is checked, and so is the chain it leads to
        raise refused(path, info, "a symbolic link another user could repoint; " + PRIVATE_HINT)
    if not stat.S_ISDIR(info.st_mode):
        raise refused(path, info, "not a directory; choose another state dir")
    if info.st_uid not in (me, 0):
        why = f"its owner could swap the state dir: it must be {owner_name(me)}'s or root's"
        raise refused(path, info, why + "; choose another state dir")
    if info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
        why = "group or others may write it and it is not sticky, so they could swap the state"
        raise refused(path, info, why + " dir; choose another state dir")


def check_own(path: str, info: os.stat_result, what: str) -> None:
    """bin/, runs/ and the files run from bin/: this user's, not writable by group or others."""
    if info.st_uid == os.geteuid() and not info.st_mode & 0o022:
        return
    me = owner_name(os.geteuid())
    why = f"specmon runs code and keeps runs in it as {me}, so the {what} must be {me}'s and "
    raise refused(path, info, why + "not writable by group or others; " + PRIVATE_HINT)


def state_tree(given: str) -> str:
    """The state dir, resolved: every directory on its way checked, missing ones created 0700
    (each after its parent was checked), bin/ and runs/ created 0700 and checked."""
    path = os.path.abspath(os.path.expanduser(given))
    for prefix in prefixes(path):  # the path as given: the directories holding its links
        try:
            check_above(prefix, os.lstat(prefix))
        except FileNotFoundError:
            break
    real = os.path.realpath(path)
    if real == "/":
        raise Refused(f"state dir {given!r} refused: never the root")
    for prefix in prefixes(real):
        try:
            info = os.lstat(prefix)
        except FileNotFoundError:
            with contextlib.suppress(FileExistsError):
                os.mkdir(prefix, 0o700)
            info = os.lstat(prefix)
        if stat.S_ISLNK(info.st_mode):
            raise refused(prefix, info, "a symbolic link appeared while it was checked")
        check_above(prefix, info)
    for sub in ("bin", "runs"):
        entry = os.path.join(real, sub)
        with contextlib.suppress(FileExistsError):
            os.mkdir(entry, 0o700)
        info = os.lstat(entry)
        if not stat.S_ISDIR(info.st_mode):
            raise refused(entry, info, "not a directory; " + PRIVATE_HINT)
        check_own(entry, info, "directory")
    return real


def read_own(path: str) -> bytes | None:
    """The bytes of bin/NAME once it is checked, or None when it is missing."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError:  # a symbolic link (ELOOP), or worse
        raise refused(path, os.lstat(path), "not a regular file; " + PRIVATE_HINT) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
            raise refused(path, info, "not a regular file of one link; " + PRIVATE_HINT)
        check_own(path, info, "file")
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def write_own(path: str, data: bytes) -> None:
    """Write bin/NAME 0600 through a fresh temporary file and a rename."""
    temporary = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{os.getpid()}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def answer(reply: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(reply) + "\n")
    sys.stdout.flush()


def digest_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def run_bytes(path: str, data: bytes, args: list[str]) -> int:
    """Run ``data`` as ``python3 path ARGS`` would: a fresh __main__, its own argv."""
    code = compile(data, path, "exec", dont_inherit=True)
    module = types.ModuleType("__main__")
    module.__file__ = path
    sys.modules["__main__"] = module
    sys.argv = [path, *args]
    exec(code, module.__dict__)
    return 0


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[0] not in ("run", "install") or "/" in argv[3] or not argv[2]:
        answer({"ok": False, "error": "usage: run|install SHA256 STATE_DIR NAME [ARG...]"})
        return REFUSED
    mode, digest, given, name, args = argv[0], argv[1], argv[2], argv[3], argv[4:]
    try:
        path = os.path.join(state_tree(given), "bin", name)
        if mode == "install":
            data = sys.stdin.buffer.read()
            if digest_of(data) != digest:
                error = f"{path}: the upload hashes to {digest_of(data)}, not {digest}"
                answer({"ok": False, "error": error})
                return REFUSED
            try:
                current = read_own(path)
            except Refused:  # our own bin/ holds it: replace it
                current = None
            if current != data:
                write_own(path, data)
            if not args:
                answer({"ok": True, "path": path})
                return 0
        else:
            found = read_own(path)
            if found is None or digest_of(found) != digest:
                what = "missing" if found is None else "not the version this specmon ships"
                answer({"ok": False, "install": True, "error": f"{path} is {what}"})
                return REFUSED
            data = found
    except Refused as exc:
        answer({"ok": False, "error": str(exc)})
        return REFUSED
    except OSError as exc:
        answer({"ok": False, "error": f"{exc.filename or given}: {exc.strerror or exc}"})
        return REFUSED
    return run_bytes(path, data, args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
