"""The chart as a platform team runs it in production: WebSocket mode and streams through the Ingress,
graceful shutdown, and secrets that stay out of ConfigMaps."""

from __future__ import annotations

from typing import Any

import helm_python as helm
import pytest

from tests.deploy.test_helm import chart, only, render

__all__ = ["chart"]  # the module-scoped fixture, shared

NGINX = "nginx.ingress.kubernetes.io/"


def ingress_annotations(chart: helm.Chart, values: dict[str, Any]) -> dict[str, str]:
    annotations: dict[str, str] = only(render(chart, {"ingress": {"enabled": True}, **values}),
                                       "Ingress")["metadata"]["annotations"]
    return annotations


@pytest.mark.parametrize(("idle_s", "timeout"), [(None, 3600), (300, 3600), (7200, 7230), (5000.5, 5031)])
def test_websocket_sockets_outlast_their_idle_time_at_the_ingress(
    chart: helm.Chart, idle_s: float | None, timeout: int
) -> None:
    """A WebSocket-mode socket stays open while quiet for up to server.websocket_idle_s: ingress-nginx's
    read/send timeouts must be longer, or it cuts the socket first (the chart kept 3600 s whatever the
    gateway's idle time). Streams keep response buffering off."""
    server = {} if idle_s is None else {"websocket_idle_s": idle_s}
    annotations = ingress_annotations(chart, {"config": {"server": server}})
    assert annotations[NGINX + "proxy-read-timeout"] == annotations[NGINX + "proxy-send-timeout"] == str(timeout)
    assert annotations[NGINX + "proxy-buffering"] == "off"
    assert annotations[NGINX + "proxy-http-version"] == "1.1"
