"""What every task that is about to query a data source does first: stop what nobody uses any more."""

from __future__ import annotations

from investigations import services
from investigations.services import tunnels as tunnel_services


def prune_idle() -> None:
    """Stop served TSDB copies and close SSH tunnels left idle (or no longer needed); never raises."""
    services.tsdb_views_prune()
    tunnel_services.tunnels_prune()
