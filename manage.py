#!/usr/bin/env python
"""Django's command-line utility for administrative tasks."""

from __future__ import annotations

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stepwise.settings")
    diagnose = sys.argv[1:2] == ["diagnose"]
    if diagnose:
        # the job's TSDB starts being served while Django starts (see investigations/management/early_serve.py)
        from investigations.management import early_serve

        early_serve.start(sys.argv[2:])
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
    if diagnose:
        # its result is written: the process ends without freeing the diagnosis object by object
        from investigations.management.quick_exit import exit_now

        exit_now(0)


if __name__ == "__main__":
    main()
