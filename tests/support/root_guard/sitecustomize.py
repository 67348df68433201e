"""Loaded by every Python process of a test that hands specmon the root as its state dir
(PYTHONPATH): refuses to change the root's mode or create anything directly in /, /bin or
/usr/bin, so a regression fails the test with EPERM instead of damaging the machine (the
tests run as root in CI)."""

import builtins
import os

_GUARDED = ("/", "/bin", "/usr/bin")


def _guarded(path, dir_fd=None):
    if dir_fd is not None or isinstance(path, int):
        return False
    full = os.path.abspath(os.fsdecode(path))
    return full == "/" or os.path.dirname(full) in _GUARDED


def _refuse(path):
    raise PermissionError(1, "refused by the test's root guard", os.fsdecode(path))


def _wrap(name, creates):
    original = getattr(os, name)

    def guarded(path, *args, **kwargs):
        flags = args[0] if args else kwargs.get("flags", 0)
        if _guarded(path, kwargs.get("dir_fd")) and (not creates or flags & os.O_CREAT):
            _refuse(path)
        return original(path, *args, **kwargs)

    setattr(os, name, guarded)


_wrap("chmod", creates=False)
_wrap("mkdir", creates=False)
_wrap("open", creates=True)

_builtin_open = builtins.open


def _open(file, mode="r", *args, **kwargs):
    if not isinstance(file, int) and set(mode) & set("wax+") and _guarded(file):
        _refuse(file)
    return _builtin_open(file, mode, *args, **kwargs)


builtins.open = _open
