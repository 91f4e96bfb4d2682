"""Secrets kept in the database encrypted at rest: the passwords of URL sources' credentials.

`EncryptedTextField` stores Fernet tokens (AES-128-CBC with HMAC-SHA256, from the `cryptography`
package); Python code reads and writes the clear value, the column never holds it.

Keys, first one encrypts, every one decrypts (`MultiFernet`):

1. `STEPWISE_CREDENTIALS_KEY`: comma-separated Fernet keys (`Fernet.generate_key()`), newest first;
2. else keys derived (HKDF-SHA256) from `SECRET_KEY`, then each of `SECRET_KEY_FALLBACKS`.

Rotation: put the new key first (keep the old ones after it, or move the old SECRET_KEY into
SECRET_KEY_FALLBACKS), restart, run `manage.py credentials_rotate` (every row re-encrypted with the new
key), then drop the old keys. A value no key opens reads as "" and is logged: its source then answers
"credentials refused", and storing the credentials again mends it.
"""

from __future__ import annotations

import base64
import functools
import logging
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.db import models

logger = logging.getLogger(__name__)

_INFO = b"stepwise credentials v1"


def _derived(secret: str) -> bytes:
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO).derive(secret.encode())
    return base64.urlsafe_b64encode(key)


def _keys() -> tuple[bytes, ...]:
    configured = tuple(k.encode() for k in settings.STEPWISE_CREDENTIALS_KEY)
    if configured:
        return configured
    secrets = [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])]
    return tuple(_derived(s) for s in secrets)


@functools.lru_cache(maxsize=4)
def _fernet(keys: tuple[bytes, ...]) -> MultiFernet:
    return MultiFernet([Fernet(k) for k in keys])


def fernet() -> MultiFernet:
    """Return the MultiFernet of the configured keys (the first encrypts)."""
    return _fernet(_keys())


def encrypt(clear: str) -> str:
    return fernet().encrypt(clear.encode()).decode("ascii")


def decrypt(token: str) -> str:
    """Return the clear text of `token`; "" (logged) when no configured key opens it."""
    try:
        return fernet().decrypt(token.encode("ascii")).decode()
    except (InvalidToken, UnicodeError):
        logger.error(
            "a stored credential cannot be decrypted with the configured keys (STEPWISE_CREDENTIALS_KEY, "
            "else SECRET_KEY and SECRET_KEY_FALLBACKS): it reads as empty until stored again"
        )
        return ""


def rotate(token: str) -> str:
    """Return `token` encrypted again with the first key (raises InvalidToken if no key opens it)."""
    return fernet().rotate(token.encode("ascii")).decode("ascii")


class EncryptedTextField(models.TextField):
    """A text column holding Fernet tokens; the model attribute holds the clear text."""

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        return value if value in (None, "") else decrypt(value)

    def get_prep_value(self, value: Any) -> Any:
        value = super().get_prep_value(value)
        return value if value in (None, "") else encrypt(value)
