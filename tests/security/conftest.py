"""Fixtures of the attack regression suite: the investigations app's users, roots and private views."""

from tests.investigations.conftest import (  # noqa: F401 - fixtures
    _fast_password_hashing,
    _private_tsdb_views,
    alice,
    alice_client,
    job_root,
)
