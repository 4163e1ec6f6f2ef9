"""The Kubernetes manifests (deploy/kubernetes/): valid against the JSON schemas of a pinned
Kubernetes version (kubernetes-validate, from PyPI, bundles them; no cluster needed), and the
producer's container the same as the compose service's, so that the two cannot drift."""

from __future__ import annotations

import copy
import pathlib
import re
from typing import Any

import kubernetes_validate
import pytest
import yaml
from docker_helpers import ROOT
from swarm_helpers import dockerfile_healthcheck, dockerfile_start_period_s

KUBERNETES_VERSION = "1.33.0"  # the schemas checked against (kubernetes-validate, pinned)
MANIFESTS = sorted((ROOT / "deploy" / "kubernetes").glob("*.yaml"))
DEPLOYMENT = ROOT / "deploy" / "kubernetes" / "producer-deployment.yaml"
# Compose passes the keys' paths through; the manifest fixes them (the Secret's mount).
_ENV_FIXED = {
    "H5FEED_KEY": "/keys/producer.key_secret",
    "H5FEED_SERVER_KEY": "/keys/trainer.key",
    "H5FEED_INSECURE": "",
    "H5FEED_CONNECT": "tcp://h5feed-trainer:5555",
}


def documents(path: pathlib.Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_each_manifest_is_valid_against_the_pinned_schemas(path: pathlib.Path) -> None:
    for document in documents(path):
        kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


def test_the_validator_refuses_what_is_wrong() -> None:
    (deployment,) = documents(DEPLOYMENT)
    unknown = copy.deepcopy(deployment)
    unknown["spec"]["template"]["spec"]["containers"][0]["probe"] = {}  # no such field
    wrong_type = copy.deepcopy(deployment)
    wrong_type["spec"]["replicas"] = "two"
    strategy = copy.deepcopy(deployment)
    strategy["spec"]["strategy"]["rollingUpdate"]["maxSurge"] = [1]  # an int or a percentage
    for broken in (unknown, wrong_type, strategy):
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_a_rollout_adds_a_pod_before_it_stops_one_and_gives_it_its_stop_wait() -> None:
    """``kubectl set image``: one pod more at a time, none fewer than asked for; a new pod
    counts once ready for ``minReadySeconds`` (at least the image's health start period, so a
    producer refused by the trainer, which exits within seconds, never replaces a working
    one); the grace period covers the producer's stop wait and its exit."""
    from h5feed.common.worker_settings import DEFAULT_STOP_WAIT_S
    from h5feed.producer.service.server import STOP_EXIT_MARGIN_S

    (deployment,) = documents(DEPLOYMENT)
    spec = deployment["spec"]
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    container = _container(deployment)
    start_period = container["livenessProbe"]["initialDelaySeconds"]
    assert start_period == dockerfile_start_period_s()
    assert spec["minReadySeconds"] >= start_period
    assert spec["progressDeadlineSeconds"] > spec["minReadySeconds"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert "H5FEED_STOP_WAIT_S" not in env  # the service's default is the one to cover
    grace = spec["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace >= DEFAULT_STOP_WAIT_S + STOP_EXIT_MARGIN_S


def compose_default(value: str) -> str:
    """A compose value with each ``${VAR:-default}`` as its default (what runs when unset)."""
    return re.sub(r"\$\{\w+(?::-([^}]*))?\}", lambda m: m.group(1) or "", value)


def _container(deployment: dict[str, Any]) -> dict[str, Any]:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container  # type: ignore[no-any-return]


def _dockerfile_cmd() -> list[str]:
    line = next(x for x in (ROOT / "Dockerfile").read_text().splitlines() if x.startswith("CMD"))
    command: list[str] = yaml.safe_load(line.removeprefix("CMD "))
    return command


def test_the_deployment_runs_what_the_compose_service_runs() -> None:
    (deployment,) = documents(DEPLOYMENT)
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["producer"]
    container = _container(deployment)
    pod = deployment["spec"]["template"]["spec"]
    # The command: the image's (dumb-init stays PID 1); compose states none either.
    assert "command" not in container and "command" not in compose
    assert container["args"] == _dockerfile_cmd() == ["h5feed", "produce"]
    # The environment: the same variables; the same values but for the keys' paths.
    env = {e["name"]: e["value"] for e in container["env"]}
    assert set(env) == set(compose["environment"])
    for key, value in compose["environment"].items():
        assert env[key] == _ENV_FIXED.get(key, compose_default(value)), key
    # Probes: the image's HEALTHCHECK, with its timings.
    health = dockerfile_healthcheck()
    for probe in (container["livenessProbe"], container["readinessProbe"]):
        assert probe["exec"]["command"] == health
        assert (probe["periodSeconds"], probe["timeoutSeconds"], probe["failureThreshold"]) == (
            10, 5, 3,
        )  # fmt: skip
    assert container["livenessProbe"]["initialDelaySeconds"] == 20  # start-period
    assert pod["terminationGracePeriodSeconds"] == int(compose["stop_grace_period"][:-1])
    # The data read-only at the compose service's target; the keys from a Secret, 0400.
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    target = compose["volumes"][0].rsplit(":", 2)[1]
    assert mounts["data"]["mountPath"] == target and mounts["data"]["readOnly"] is True
    assert volumes["data"]["persistentVolumeClaim"]["readOnly"] is True
    assert volumes["keys-secret"]["secret"]["defaultMode"] == 0o400 == 256
    assert mounts["keys"]["readOnly"] is True
    # Copied 0600 by an init container (group-readable secret keys are refused), in memory.
    (init,) = pod["initContainers"]
    assert init["command"][:3] == ["install", "-m", "0600"]
    assert init["command"][-1] == f"{mounts['keys']['mountPath']}/"
    assert volumes["keys"]["emptyDir"]["medium"] == "Memory"
    assert {env["H5FEED_KEY"], env["H5FEED_SERVER_KEY"]} <= {
        f"{mounts['keys']['mountPath']}/{name}" for name in ("producer.key_secret", "trainer.key")
    }
    assert pod["securityContext"]["runAsUser"] == pod["securityContext"]["fsGroup"] == 10001
    # Resource requests, and the metrics port where Prometheus's annotations say.
    assert {"cpu", "memory"} <= set(container["resources"]["requests"])
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    (port,) = container["ports"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(port["containerPort"])
    assert env["H5FEED_METRICS_PORT"] == f"0.0.0.0:{port['containerPort']}"
    assert annotations["prometheus.io/path"] == "/metrics"


AUTOSCALER = ROOT / "deploy" / "kubernetes" / "producer-autoscaler.yaml"
ADAPTER_VALUES = ROOT / "deploy" / "kubernetes" / "prometheus-adapter" / "values.yaml"


def test_the_autoscaler_owns_the_deployments_count_on_the_trainers_gauge() -> None:
    """The HorizontalPodAutoscaler scales the producers' Deployment to exactly the replicas the
    trainer's gauge names (External metric, AverageValue 1); the Deployment states no count of
    its own (an apply would reset the autoscaler's); scale-down waits out a window; the
    adapter serves the metric under the name the trainer exports."""
    from h5feed.consumer.telemetry.metrics import PRODUCER_GAUGES

    (deployment,) = documents(DEPLOYMENT)
    (autoscaler,) = documents(AUTOSCALER)
    assert "replicas" not in deployment["spec"]
    spec = autoscaler["spec"]
    target = spec["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
    (metric,) = spec["metrics"]
    gauge = next(name for key, name, _ in PRODUCER_GAUGES if key == "replicas_needed")
    assert metric["type"] == "External"
    assert metric["external"]["metric"]["name"] == gauge
    assert metric["external"]["target"] == {"type": "AverageValue", "averageValue": "1"}
    assert 1 <= spec["minReplicas"] <= spec["maxReplicas"]
    assert spec["behavior"]["scaleDown"]["stabilizationWindowSeconds"] >= 60
    (rule,) = yaml.safe_load(ADAPTER_VALUES.read_text())["rules"]["external"]
    assert rule["name"]["as"] == gauge and gauge in rule["seriesQuery"]
    assert rule["metricsQuery"].startswith(f"max({gauge}{{")


FLEET = ROOT / "deploy" / "kubernetes" / "fleet.yaml"


def test_the_fleets_headless_service_answers_with_its_ready_pods_at_the_front_port() -> None:
    """deploy/kubernetes/fleet.yaml: a trainer resolves the Service's name to every Ready
    replica (headless), at the port each replica's front listens on."""
    deployment, service = documents(FLEET)
    assert (deployment["kind"], service["kind"]) == ("Deployment", "Service")
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is False
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    container = _container(deployment)
    env = {e["name"]: e["value"] for e in container["env"]}
    listen_port = int(env["H5FEED_LISTEN"].rsplit(":", 1)[1])
    (front,) = [p for p in container["ports"] if p["name"] == "front"]
    assert front["containerPort"] == listen_port
    (port,) = service["spec"]["ports"]
    assert (port["port"], port["targetPort"]) == (listen_port, "front")
    assert "H5FEED_CONNECT" not in env and env["H5FEED_INSECURE"] == ""
    assert env["H5FEED_KEY"] == "/keys/fleet.key_secret"
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert env["H5FEED_TRAINER_KEYS"] in mounts
    assert container["readinessProbe"]["exec"]["command"][:2] == ["h5feed", "health"]
