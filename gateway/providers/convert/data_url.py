"""`data:` URLs, the way OpenAI's requests carry inline images and files: read (only base64 ones: no
provider takes another encoding) and written (a provider's inline data given back as a URL)."""

from __future__ import annotations

import re
from dataclasses import dataclass

# media type, any parameters (`;charset=...`, `;name=...`), then base64 data
_BASE64_URL = re.compile(r"^data:([\w.+-]+/[\w.+-]+)(?:;[\w.+-]+=[^;,]*)*;base64,(.*)$", re.DOTALL)


@dataclass(frozen=True, slots=True)
class InlineData:
    media_type: str
    data: str  # base64, as the URL carried it


def base64_data(url: str) -> InlineData | None:
    """The media type and data of a base64 `data:` URL; None for anything else."""
    m = _BASE64_URL.match(url)
    return InlineData(m.group(1), m.group(2)) if m is not None else None


def data_url(media_type: str, data: str) -> str:
    return f"data:{media_type};base64,{data}"
