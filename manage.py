#!/usr/bin/env python
"""Django's command-line utility for administrative tasks."""

from __future__ import annotations

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stepwise.settings")
    if sys.argv[1:2] == ["diagnose"]:
        # the job's TSDB starts being served while Django starts (see investigations/management/early_serve.py)
        from investigations.management import early_serve

        early_serve.start(sys.argv[2:])
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
