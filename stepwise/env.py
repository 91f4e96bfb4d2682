"""Typed readers of the environment for `stepwise.settings`.

Each raises ImproperlyConfigured with the variable's name and the accepted values when a value is wrong,
and accepts NAME_FILE (a path whose contents are the value) wherever NAME is accepted, for Docker secrets.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import overload

from django.core.exceptions import ImproperlyConfigured

#: The repository: relative paths in the environment are taken from here.
BASE_DIR = Path(__file__).resolve().parent.parent

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


@overload
def envstr(name: str) -> str | None: ...
@overload
def envstr(name: str, default: str) -> str: ...
@overload
def envstr(name: str, default: None) -> str | None: ...


def envstr(name: str, default: str | None = None) -> str | None:
    """Return NAME, else the contents of the file named by NAME_FILE, else `default`."""
    if name in os.environ:
        return os.environ[name]
    file_name = os.environ.get(f"{name}_FILE")
    if file_name:
        try:
            return Path(file_name).read_text().rstrip("\r\n")
        except OSError as exc:
            raise ImproperlyConfigured(
                f"{name}_FILE={file_name!r} cannot be read: {exc.strerror or exc}"
            ) from exc
    return default


def envbool(name: str, default: bool) -> bool:
    """Return NAME as a boolean (1/0, true/false, yes/no, on/off)."""
    value = envstr(name)
    if value is None:
        return default
    folded = value.strip().lower()
    if folded in _TRUE:
        return True
    if folded in _FALSE:
        return False
    raise ImproperlyConfigured(
        f"{name}={value!r} is not a boolean: use 1 or 0 (or true/false, yes/no, on/off)"
    )


def envint(name: str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """Return NAME as an integer within [minimum, maximum]."""
    value = envstr(name)
    if value is None or value.strip() == "":
        return default
    try:
        number = int(value.strip())
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not an integer") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={number} is below the minimum of {minimum}")
    if maximum is not None and number > maximum:
        raise ImproperlyConfigured(f"{name}={number} is above the maximum of {maximum}")
    return number


def envlist(name: str, default: str, *, sep: str = ",") -> list[str]:
    """Return NAME split on `sep`, items stripped, empty items dropped."""
    value = envstr(name)
    if value is None:
        value = default
    return [item.strip() for item in value.split(sep) if item.strip()]


def envpath(name: str, default: Path) -> Path:
    """Return NAME as an absolute path (~ expanded); relative paths are taken from the repository."""
    value = envstr(name)
    if value is None or value.strip() == "":
        return default
    return abspath(value)


def abspath(value: str) -> Path:
    """Return `value` as an absolute path (~ expanded); a relative path is taken from the repository."""
    path = Path(value.strip()).expanduser()
    return path if path.is_absolute() else (BASE_DIR / path)


def envsecret(name: str, generated_file: Path) -> str:
    """Return NAME (or NAME_FILE), else a random value generated once into `generated_file`.

    The generated file is written with mode 0600 through a temporary file and a hard link, so that
    the web server and the worker starting at the same moment agree on one value.
    """
    value = envstr(name)
    if value is not None:
        if len(value) < 32:
            raise ImproperlyConfigured(f"{name} is too short ({len(value)} characters): use at least 32")
        return value
    try:
        return generated_file.read_text().strip()
    except FileNotFoundError:
        pass
    generated_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = generated_file.with_name(f".{generated_file.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(secrets.token_urlsafe(50) + "\n")
    try:
        os.link(tmp, generated_file)
    except FileExistsError:
        pass  # another process won the race; use its value
    finally:
        tmp.unlink(missing_ok=True)
    return generated_file.read_text().strip()


def envbind(name: str, default: str) -> str:
    """Return NAME as HOST:PORT (IPv6 hosts in brackets)."""
    value = (envstr(name) or default).strip()
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ImproperlyConfigured(f"{name}={value!r} is not HOST:PORT (for example 127.0.0.1:8000)")
    return value
