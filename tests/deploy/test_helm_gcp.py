"""The Helm chart's GKE Workload Identity values (issue #30): the Google service account the pods act as,
annotated on the Kubernetes ServiceAccount, and the metadata server reachable under restricted egress."""

from __future__ import annotations

from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest

from tests.deploy.test_helm import KUBE_VERSIONS, chart, only, render

__all__ = ["chart"]  # the module-scoped fixture, shared

GSA = "llm-gateway@my-project.iam.gserviceaccount.com"


def test_workload_identity_annotates_the_service_account_and_opens_the_metadata_server(chart: helm.Chart) -> None:
    docs = render(chart, {"serviceAccount": {"gcpServiceAccount": GSA, "annotations": {"team": "platform"}},
                          "networkPolicy": {"egress": {"enabled": True}}})
    sa = only(docs, "ServiceAccount")
    assert sa["metadata"]["annotations"] == {"iam.gke.io/gcp-service-account": GSA, "team": "platform"}
    egress = only(docs, "NetworkPolicy")["spec"]["egress"]
    metadata = [rule for rule in egress if rule.get("to") == [{"ipBlock": {"cidr": "169.254.169.254/32"}}]]
    assert [[p["port"] for p in rule["ports"]] for rule in metadata] == [[80, 988]]
    for doc in docs:
        if doc["kind"] in ("ServiceAccount", "NetworkPolicy"):
            kubernetes_validate.validate(doc, KUBE_VERSIONS[0], strict=True)


def test_without_it_nothing_changes(chart: helm.Chart) -> None:
    docs = render(chart, {"networkPolicy": {"egress": {"enabled": True}}})
    assert "annotations" not in only(docs, "ServiceAccount")["metadata"]
    assert all("to" not in rule for rule in only(docs, "NetworkPolicy")["spec"]["egress"])


@pytest.mark.parametrize("bad", ["not-an-email", "x@gmail.com"])
def test_the_schema_wants_a_google_service_account(chart: helm.Chart, bad: str) -> None:
    values: dict[str, Any] = {"serviceAccount": {"gcpServiceAccount": bad}}
    with pytest.raises(Exception, match="gcpServiceAccount"):
        render(chart, values)
