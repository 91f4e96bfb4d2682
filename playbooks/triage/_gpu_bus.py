"""Which GPU index sits on which PCI bus, and the bus key every source is compared by.

An Xid names the bus (`NVRM: Xid (PCI:0000:3b:00): 79`), not the GPU index. `nvidia-smi` printed in the
job log gives both: its table (`|   0  NVIDIA H100 ...  On  |   00000000:3B:00.0 Off |`) or its CSV
(`--query-gpu=index,pci.bus_id`: `0, 00000000:3B:00.0`); DCGM labels each GPU's series with `pci_bus_id`.
`bus_key` writes any of them as `dddd:bb:dd` (domain, bus, device; lower case, the function dropped).
"""

from __future__ import annotations

import re

__all__ = ["bus_key", "smi_line"]

_BUS = re.compile(r"(?:PCI:)?(?:([0-9A-Fa-f]{1,8}):)?([0-9A-Fa-f]{1,2}):([0-9A-Fa-f]{1,2})(?:\.[0-7])?")
_ADDR = r"([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])"
_SMI_TABLE = re.compile(r"^\|\s+(\d{1,2})\s+[^|]*\|\s*" + _ADDR + r"\s")
_SMI_CSV = re.compile(r"^(\d{1,2}),\s*" + _ADDR + r"\s*$")


def bus_key(text: str) -> str | None:
    """Return the `dddd:bb:dd` key of a PCI address as an Xid, nvidia-smi or DCGM writes it, or None."""
    m = _BUS.fullmatch(text.strip())
    if not m:
        return None
    domain, bus, device = m.groups()
    return f"{int(domain or '0', 16) & 0xFFFF:04x}:{int(bus, 16):02x}:{int(device, 16):02x}"


def smi_line(msg: str) -> tuple[str, str] | None:
    """Return (GPU index, bus key) of an nvidia-smi table row or CSV line, or None."""
    m = _SMI_TABLE.match(msg) or _SMI_CSV.match(msg.strip())
    if not m:
        return None
    key = bus_key(m.group(2))
    return (str(int(m.group(1))), key) if key else None
