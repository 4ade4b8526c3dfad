"""The deploy kit (deploy/, docs/deploy.md): everything that can be checked without a Docker engine
or a Kubernetes cluster.

- YAML: every file under deploy/ parses; compose and the Kubernetes manifests agree with each other,
  with nginx.conf and with the settings the server validates. These tests need PyYAML and skip,
  saying so, when it is not installed.
- The example configurations (mcp.env.example, configmap + secret.example) are complete: with their
  secrets filled in they pass `Settings.require_safe_to_serve()`, and as shipped (empty or
  REPLACE_ME) they fail.
- The Dockerfile: multi-stage slim base, non-root USER, HEALTHCHECK on /healthz, no curl.
- nginx: `nginx -t` on deploy/nginx/nginx.conf and on the Ingress snippet, and a live check of the
  session routing, Host pass-through, unbuffered SSE and the body cap against stub backends. These
  skip without an nginx binary, and fail instead when CI is set (tests/needs.py).
"""

from __future__ import annotations

import base64
import contextlib
import importlib.util
import json
import re
import secrets
import socket
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path, PurePosixPath
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from mock_providers.testing.dns import DnsServer
from mock_providers.testing.router import (
    LISTEN,
    any_replica_name,
    render,
    replica_name,
    router_conf,
    router_environment,
)
from mock_providers.testing.servers import free_port
from service.request_id import REQUEST_ID_SHAPE
from service.request_limits import MAX_REQUEST_HEAD_BYTES
from service.session_limits import SESSION_MEMORY_KIB
from service.settings import DEFAULT_METRICS_PORT, SettingsError, load_settings
from tests.needs import need_binary
from token_store import KeyRing

SPREAD = 30  # requests that show both replicas get some (the router picks one at random)
ROOT = Path(__file__).parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
NGINX_CONF = DEPLOY / "nginx" / "nginx.conf"
DOCKERFILE = DEPLOY / "Dockerfile"
REPLICAS = ("mcp-1", "mcp-2")
# The mock providers as compose runs them (checked against compose.yaml below).
COMPOSE_MCP_PUBLIC_URL = "http://localhost:8080"
COMPOSE_PROVIDERS_URL = "http://mock-providers:8001"
REQUIRED_ENV = (
    "MCPUC_PUBLIC_URL",
    "MCPUC_AUTH_ISSUER",
    "MCPUC_LOGIN_CLIENT_ID",
    "MCPUC_LOGIN_CLIENT_SECRET",
    "MCPUC_SESSION_SECRET",
    "MCPUC_ENCRYPTION_KEYS",
    "MCPUC_REQUEST_STATE_KEYS",
)
SECRET_ENV = (
    "MCPUC_LOGIN_CLIENT_SECRET",
    "MCPUC_SESSION_SECRET",
    "MCPUC_ENCRYPTION_KEYS",
    "MCPUC_REQUEST_STATE_KEYS",
)


# One fsync policy everywhere: the one docs/redis.md recommends (compose, k8s and deploy.md agree).
FSYNC_POLICY = "always"


# ---- helpers ------------------------------------------------------------------------------------
@pytest.fixture
def yaml() -> ModuleType:
    return pytest.importorskip(
        "yaml",
        reason="PyYAML is not installed: the YAML files under deploy/ are not checked (pip install pyyaml)",
    )


def _docs(yaml: ModuleType, path: Path) -> list[Any]:
    return list(yaml.safe_load_all(path.read_text()))


def _k8s(yaml: ModuleType) -> dict[tuple[str, str], dict[str, Any]]:
    """Every Kubernetes object under deploy/k8s, by (kind, name)."""
    objects: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted(K8S.glob("*.yaml")):
        for doc in _docs(yaml, path):
            key = (doc["kind"], doc["metadata"]["name"])
            assert key not in objects, f"{path.name}: {key} defined twice"
            objects[key] = doc
    return objects


def _compose(yaml: ModuleType) -> dict[str, Any]:
    compose: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return compose


def _env_file(path: Path) -> dict[str, str]:
    values: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        assert sep, f"{path.name}: not NAME=value: {line!r}"
        assert name not in values, f"{path.name}: {name} set twice"
        values[name] = value
    return values


def _key() -> str:
    return base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode()


def _generated_secrets() -> dict[str, str]:
    return {
        "MCPUC_SESSION_SECRET": secrets.token_urlsafe(48),
        "MCPUC_ENCRYPTION_KEYS": f"k2025a:{_key()}",
        "MCPUC_REQUEST_STATE_KEYS": _key(),
        "MCPUC_LOGIN_CLIENT_SECRET": secrets.token_urlsafe(32),
    }


# ---- YAML ---------------------------------------------------------------------------------------
def test_every_yaml_file_under_deploy_parses(yaml: ModuleType) -> None:
    files = sorted([*DEPLOY.rglob("*.yaml"), *DEPLOY.rglob("*.yml")])
    assert {p.relative_to(DEPLOY).as_posix() for p in files} >= {
        "compose.yaml",
        "k8s/configmap.yaml",
        "k8s/ingress.yaml",
        "k8s/redis.yaml",
        "k8s/secret.example.yaml",
        "k8s/service.yaml",
        "k8s/statefulset.yaml",
    }
    for path in files:
        docs = _docs(yaml, path)
        assert docs and all(isinstance(d, dict) for d in docs), path
        if path.parent == K8S:
            for doc in docs:
                assert {"apiVersion", "kind", "metadata"} <= set(doc), path
                # Namespace-agnostic: applied with `kubectl -n`.
                assert "namespace" not in doc["metadata"], f"{path.name}: {doc['metadata']['name']}"


def test_compose_replicas_share_one_configuration_and_differ_only_in_replica_id(yaml: ModuleType) -> None:
    services = _compose(yaml)["services"]
    assert set(services) == {"redis", "mock-providers", *REPLICAS, "nginx"}
    replicas = [services[name] for name in REPLICAS]
    for name, service in zip(REPLICAS, replicas, strict=True):
        assert service["command"] == ["serve"]
        assert service["env_file"] == "mcp.env"
        assert service["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}
        assert (DEPLOY / service["build"]["context"] / service["build"]["dockerfile"]).resolve() == DOCKERFILE
        env = service["environment"]
        assert env["MCPUC_REPLICA_ID"] == name
        assert env["MCPUC_STORE_URL"] == "redis://redis:6379/0"
        assert env["MCPUC_ALLOW_PLAINTEXT_REDIS"] == "true"  # the evaluation Redis, on its own network
        assert env["MCPUC_HOST"] == "0.0.0.0"  # noqa: S104  # inside the container
        assert str(env["MCPUC_PORT"]) == "8000"
        assert str(env["MCPUC_METRICS_PORT"]) == str(DEFAULT_METRICS_PORT)
        assert service["depends_on"]["redis"]["condition"] == "service_healthy"
        assert "ports" not in service  # reached through nginx only
        [config_mount] = service["volumes"]
        source, target, mode = config_mount.split(":")
        assert (DEPLOY / source).is_file() and target == env["MCPUC_CONFIG_FILE"] and mode == "ro"
    ids = [s["environment"]["MCPUC_REPLICA_ID"] for s in replicas]
    assert len(set(ids)) == len(ids)
    # Apart from the replica id, the two replicas are the same service.
    stripped = [{**s, "environment": {**s["environment"], "MCPUC_REPLICA_ID": None}} for s in replicas]
    assert stripped[0] == stripped[1]
    assert (DEPLOY / "mcp.env.example").is_file()


def test_compose_nginx_redis_and_mock_providers(yaml: ModuleType) -> None:
    services = _compose(yaml)["services"]
    nginx = services["nginx"]
    assert nginx["image"].startswith("nginx:1.27")
    assert "./nginx/nginx.conf:/etc/nginx/templates/nginx.conf.template:ro" in nginx["volumes"]
    assert (DEPLOY / "nginx" / "nginx.conf").is_file()
    assert [p.rsplit(":", 2)[-2:] for p in nginx["ports"]] == [["8080", "8080"]]
    assert set(nginx["depends_on"]) >= set(REPLICAS)

    redis = services["redis"]
    assert redis["image"].startswith("redis:7")
    command = " ".join(redis["command"])
    assert redis["entrypoint"] == ["sh", "-c"] and command.startswith("umask 077 && exec ")
    assert "--appendonly yes" in command and f"--appendfsync {FSYNC_POLICY}" in command
    assert "redis-cli" in redis["healthcheck"]["test"] and "ping" in redis["healthcheck"]["test"]
    assert any(v.endswith(":/data") for v in redis["volumes"])
    assert "ports" not in redis

    mock = services["mock-providers"]
    # The replicas run the production image; only the mock providers need the dev target.
    assert mock["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile", "target": "dev"}
    assert mock["image"] != services["mcp-1"]["image"]
    args = mock["command"]
    assert args[0] == "mock-providers"
    options = dict(zip(args[1::2], args[2::2], strict=True))
    assert options["--mcp-public-url"] == COMPOSE_MCP_PUBLIC_URL
    assert options["--public-url"] == COMPOSE_PROVIDERS_URL
    assert options["--port"] == "8001"
    assert any(v.endswith(":" + options["--data-dir"]) for v in mock["volumes"])
    # The image's HEALTHCHECK probes the MCP server's port: mock-providers needs its own.
    assert "8001" in " ".join(mock["healthcheck"]["test"])

    # Every replica is routed by the nginx map, and what the replicas are told matches the mocks.
    conf = NGINX_CONF.read_text()
    [pattern] = re.findall(r'"~\^\(\?<replica>([^)]*)\)\\\."', conf)
    for replica in REPLICAS:
        assert re.fullmatch(pattern, replica), replica
        assert services[replica]["networks"]["default"]["aliases"] == [
            nginx["environment"]["MCPUC_ROUTER_ANY_REPLICA"]
        ]
    example = _env_file(DEPLOY / "mcp.env.example")
    assert example["MCPUC_PUBLIC_URL"] == COMPOSE_MCP_PUBLIC_URL
    assert example["MCPUC_AUTH_ISSUER"] == COMPOSE_PROVIDERS_URL


# ---- example configurations -----------------------------------------------------------------------
def test_mcp_env_example_is_complete_and_fails_closed_until_filled() -> None:
    example = _env_file(DEPLOY / "mcp.env.example")
    assert set(REQUIRED_ENV) <= set(example)
    assert "MCPUC_PROVIDER_MOCKHUB_CLIENT_SECRET" in example
    for name in (*SECRET_ENV, "MCPUC_PROVIDER_MOCKHUB_CLIENT_SECRET"):
        assert example[name] == "", f"{name} must be empty in the example"
    config = DEPLOY / "compose.config.toml"
    compose_env = {  # what compose.yaml adds (checked above)
        "MCPUC_CONFIG_FILE": str(config),
        "MCPUC_STORE_URL": "redis://redis:6379/0",
        "MCPUC_ALLOW_PLAINTEXT_REDIS": "true",
        "MCPUC_HOST": "0.0.0.0",  # noqa: S104
        "MCPUC_PORT": "8000",
    }
    with pytest.raises(SettingsError):
        load_settings({**example, **compose_env}).require_safe_to_serve()
    for replica in REPLICAS:
        environ = {
            **example,
            **_generated_secrets(),
            "MCPUC_PROVIDER_MOCKHUB_CLIENT_SECRET": "s3cret",
            **compose_env,
            "MCPUC_REPLICA_ID": replica,
        }
        settings = load_settings(environ).require_safe_to_serve()
        assert settings.providers["mockhub"].client_secret == "s3cret"
        assert settings.port == 8000


def test_compose_config_and_env_match_what_mock_providers_writes(tmp_path: Path) -> None:
    from mock_providers.demo import build_dev_setup, write_serve_env

    setup = build_dev_setup(COMPOSE_MCP_PUBLIC_URL, COMPOSE_PROVIDERS_URL, tmp_path)
    serve_env = _env_file(write_serve_env(setup))
    example = _env_file(DEPLOY / "mcp.env.example")
    # deploy/mcp.env is a copy of serve.env; MCPUC_CONFIG_FILE is then set by compose.yaml.
    assert set(serve_env) - {"MCPUC_CONFIG_FILE"} <= set(example)
    for name in ("MCPUC_PUBLIC_URL", "MCPUC_AUTH_ISSUER", "MCPUC_LOGIN_CLIENT_ID"):
        assert serve_env[name] == example[name], name
    secret = {"MCPUC_PROVIDER_MOCKHUB_CLIENT_SECRET": "from-the-environment"}
    ours = load_settings(secret, DEPLOY / "compose.config.toml").providers
    theirs = load_settings(secret, Path(serve_env["MCPUC_CONFIG_FILE"])).providers
    assert ours == theirs
    # And the replicas' full configuration, as compose assembles it, is valid.
    environ = {**serve_env, "MCPUC_CONFIG_FILE": str(DEPLOY / "compose.config.toml")}
    compose_env = {"MCPUC_STORE_URL": "redis://redis:6379/0", "MCPUC_ALLOW_PLAINTEXT_REDIS": "true"}
    settings = load_settings({**environ, **compose_env}).require_safe_to_serve()
    assert settings.providers["mockhub"].client_secret == setup.settings.providers["mockhub"].client_secret


def test_k8s_configmap_and_secret_make_a_valid_configuration(yaml: ModuleType, tmp_path: Path) -> None:
    objects = _k8s(yaml)
    env = dict(objects[("ConfigMap", "mcp-env")]["data"])
    secret = objects[("Secret", "mcp-secrets")]["stringData"]
    assert set(REQUIRED_ENV) <= set(env) | set(secret)
    assert set(SECRET_ENV) <= set(secret), "secrets belong in the Secret"
    assert not set(SECRET_ENV) & set(env)
    config_file = tmp_path / "config.toml"
    config_file.write_text(objects[("ConfigMap", "mcp-config-file")]["data"]["config.toml"])
    assert env["MCPUC_CONFIG_FILE"] == "/etc/mcp-url-connect/config.toml"
    # The pod gets every key of the Secret as a file, named by MCPUC_<NAME>_FILE, and no secret in
    # its environment (CIS 5.4.1). Here the files are written where the volume would be.
    pod = objects[("StatefulSet", "mcp")]["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert not [s for s in container["envFrom"] if "secretRef" in s]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    [volume] = [v for v in pod["volumes"] if "secret" in v]
    assert volume["secret"]["secretName"] == "mcp-secrets" and volume["secret"]["defaultMode"] == 0o440
    assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsGroup"]  # the pod reads them
    mounted = PurePosixPath(mounts[volume["name"]])
    files = {e["name"]: e["value"] for e in container["env"] if e["name"].endswith("_FILE")}
    assert set(files) == {name + "_FILE" for name in secret}, "one MCPUC_<NAME>_FILE per key of the Secret"
    for name, value in secret.items():
        assert files[name + "_FILE"] == str(mounted / name)
        (tmp_path / name).write_text(value)
    pod_files = {name + "_FILE": str(tmp_path / name) for name in secret}
    # MCPUC_REPLICA_ID is the pod name: StatefulSet "mcp", ordinal 0. require_safe_to_serve() checks its form.
    environ = {**env, **pod_files, "MCPUC_CONFIG_FILE": str(config_file), "MCPUC_REPLICA_ID": "mcp-0"}
    with pytest.raises(SettingsError):  # a placeholder never runs
        load_settings(environ).require_safe_to_serve()
    # The rest with the environment form: the same settings (tests/unit/test_settings.py).
    environ = {**env, **secret, "MCPUC_CONFIG_FILE": str(config_file), "MCPUC_REPLICA_ID": "mcp-0"}
    with pytest.raises(SettingsError):  # a placeholder never runs
        load_settings(environ).require_safe_to_serve()
    filled = {
        **environ,
        **_generated_secrets(),
        **{k: "s3cret" for k, v in secret.items() if v == "REPLACE_ME" and k not in SECRET_ENV},
    }
    settings = load_settings(filled).require_safe_to_serve()
    assert settings.public_url.startswith("https://")
    KeyRing.parse(settings.encryption_keys)
    # Each server key left as shipped stops the server: require_safe_to_serve(), or the key ring at start.
    for name in ("MCPUC_SESSION_SECRET", "MCPUC_ENCRYPTION_KEYS", "MCPUC_REQUEST_STATE_KEYS"):
        with pytest.raises(ValueError):  # SettingsError is a ValueError
            left = load_settings({**filled, name: secret[name]}).require_safe_to_serve()
            KeyRing.parse(left.encryption_keys)
    for name, provider in settings.providers.items():
        assert provider.client_secret == "s3cret", (
            f"no MCPUC_PROVIDER_{name.upper()}_CLIENT_SECRET in the Secret"
        )


def test_k8s_statefulset_probes_identity_and_hardening(yaml: ModuleType) -> None:
    objects = _k8s(yaml)
    sts = objects[("StatefulSet", "mcp")]
    spec = sts["spec"]
    assert spec["replicas"] >= 2
    assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    headless = objects[("Service", spec["serviceName"])]
    assert headless["spec"]["clusterIP"] == "None"
    pod = spec["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001
    [container] = pod["containers"]
    assert container["args"] == ["serve"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    named_ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for probe in ("livenessProbe", "readinessProbe"):
        port = container[probe]["httpGet"]["port"]
        assert named_ports.get(port, port) == 8000
    # Prometheus scrapes the pods' own metrics port (the settings' default), which no Service has.
    annotations = spec["template"]["metadata"]["annotations"]
    assert named_ports["metrics"] == int(annotations["prometheus.io/port"]) == DEFAULT_METRICS_PORT
    assert str(objects[("ConfigMap", "mcp-env")]["data"]["MCPUC_PORT"]) == "8000"
    replica_id = next(e for e in container["env"] if e["name"] == "MCPUC_REPLICA_ID")
    assert replica_id["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]  # noqa: S108
    assert set(mounts.values()) <= set(volumes)
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    # Everything the pod references exists.
    for source in container["envFrom"]:
        if "configMapRef" in source:
            assert ("ConfigMap", source["configMapRef"]["name"]) in objects
        else:
            assert ("Secret", source["secretRef"]["name"]) in objects
    for volume in volumes.values():
        if "configMap" in volume:
            assert ("ConfigMap", volume["configMap"]["name"]) in objects


def test_k8s_network_policy_admits_only_the_router_and_the_scraper(yaml: ModuleType) -> None:
    """CIS Kubernetes Benchmark 5.3.2: a NetworkPolicy selects the MCP pods. Their http port takes
    traffic from the router's pods only; their metrics port from the monitoring namespace only."""
    objects = _k8s(yaml)
    pod_labels = objects[("StatefulSet", "mcp")]["spec"]["template"]["metadata"]["labels"]
    router_labels = objects[("Deployment", "mcp-router")]["spec"]["template"]["metadata"]["labels"]
    policies = [o for (kind, _), o in objects.items() if kind == "NetworkPolicy"]
    selecting = [p for p in policies if p["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()]
    [policy] = selecting
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    named_ports = {
        p["name"]: p["containerPort"]
        for p in objects[("StatefulSet", "mcp")]["spec"]["template"]["spec"]["containers"][0]["ports"]
    }
    admitted = {}
    for rule in policy["spec"]["ingress"]:
        [source] = rule["from"]
        [port] = rule["ports"]
        admitted[port["port"]] = source
    assert set(admitted) == {named_ports["http"], named_ports["metrics"]}
    router = admitted[named_ports["http"]]
    assert (
        set(router) == {"podSelector"}
        and router["podSelector"]["matchLabels"].items() <= router_labels.items()
    )
    assert router["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "router"
    scraper = admitted[named_ports["metrics"]]
    assert scraper == {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}


def _mebibytes(quantity: str) -> float:
    number, unit = re.fullmatch(r"(\d+)(Mi|Gi)", quantity).groups()  # type: ignore[union-attr]
    return int(number) * (1024 if unit == "Gi" else 1)


def test_default_session_caps_fit_the_pod_memory_limit(yaml: ModuleType) -> None:
    """docs/operations.md, "Memory": the pod's memory request covers the process at rest, and a
    replica full of sessions, each holding the most a session may, fits under its limit."""
    resources = _k8s(yaml)[("StatefulSet", "mcp")]["spec"]["template"]["spec"]["containers"][0]["resources"]
    at_rest, limit = _mebibytes(resources["requests"]["memory"]), _mebibytes(resources["limits"]["memory"])
    sessions = load_settings({}).max_sessions_per_replica * SESSION_MEMORY_KIB / 1024
    assert at_rest + sessions <= 0.85 * limit, (at_rest, sessions, limit)  # room for requests in flight
    assert (
        f"{load_settings({}).max_sessions_per_replica} \N{MULTIPLICATION SIGN} {SESSION_MEMORY_KIB} KiB"
        in (ROOT / "docs" / "operations.md").read_text()
    )


def test_k8s_services_front_doors_and_redis(yaml: ModuleType) -> None:
    objects = _k8s(yaml)
    pod_labels = objects[("StatefulSet", "mcp")]["spec"]["template"]["metadata"]["labels"]
    services = {name for kind, name in objects if kind == "Service"}
    assert services == {"mcp-headless", "mcp-router", "redis"}  # nothing else reaches the pods
    headless = objects[("Service", "mcp-headless")]["spec"]
    assert headless["selector"].items() <= pod_labels.items()
    assert headless["clusterIP"] == "None" and headless["publishNotReadyAddresses"] is False
    assert [p["port"] for p in headless["ports"]] == [8000]
    environment = router_environment("NAMESPACE")
    assert environment["MCPUC_ROUTER_ANY_REPLICA"] == "mcp-headless.NAMESPACE.svc.cluster.local"
    assert environment["MCPUC_ROUTER_REPLICA_SUFFIX"] == ".mcp-headless.NAMESPACE.svc.cluster.local"
    assert environment["MCPUC_ROUTER_REPLICA_PORT"] == "8000"

    router = objects[("Service", "mcp-router")]["spec"]
    router_pod = objects[("Deployment", "mcp-router")]["spec"]["template"]
    assert router["selector"].items() <= router_pod["metadata"]["labels"].items()
    [router_port] = router["ports"]
    host = urlsplit(objects[("ConfigMap", "mcp-env")]["data"]["MCPUC_PUBLIC_URL"]).hostname
    # The front doors all lead to the router, and need no controller annotation.
    route = objects[("HTTPRoute", "mcp")]
    assert route["spec"]["hostnames"] == [host]
    [rule] = route["spec"]["rules"]
    assert rule["backendRefs"] == [{"name": "mcp-router", "port": router_port["port"]}]
    ingress = objects[("Ingress", "mcp")]
    assert "annotations" not in ingress["metadata"]
    [ingress_rule] = ingress["spec"]["rules"]
    assert ingress_rule["host"] == host
    backend = ingress_rule["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": "mcp-router", "port": {"name": router_port["name"]}}

    redis = objects[("StatefulSet", "redis")]["spec"]
    container = redis["template"]["spec"]["containers"][0]
    assert container["command"] == ["sh", "-c"]
    [args] = container["args"]
    assert args.startswith("umask 077 && exec redis-server ")
    assert "--appendonly yes" in args and f"--appendfsync {FSYNC_POLICY}" in args
    assert redis["replicas"] == 1 and redis["volumeClaimTemplates"]
    secret = objects[("Secret", "mcp-secrets")]["stringData"]
    assert urlsplit(secret["MCPUC_STORE_URL"]).hostname == "redis"
    assert ("Service", "redis") in objects


def _maxmemory(command: str) -> tuple[float, str]:
    match = re.search(r"--maxmemory (\d+)mb --maxmemory-policy (\S+)", command)
    assert match, command
    return float(match.group(1)), match.group(2)


def test_every_redis_the_kit_runs_answers_oom_before_its_memory_limit(yaml: ModuleType) -> None:
    """docs/redis.md, "Memory and eviction": noeviction, and maxmemory well under the container's
    limit (the AOF rewrite's fork and the buffers need the rest), so a full Redis answers -OOM
    instead of being killed."""
    redis = _k8s(yaml)[("StatefulSet", "redis")]["spec"]["template"]["spec"]["containers"][0]
    compose = _compose(yaml)["services"]["redis"]
    for command, limit in (
        (redis["args"][0], _mebibytes(redis["resources"]["limits"]["memory"])),
        (" ".join(compose["command"]), float(compose["mem_limit"].removesuffix("m"))),
    ):
        maxmemory, policy = _maxmemory(command)
        assert policy == "noeviction"
        assert maxmemory <= 0.7 * limit, (maxmemory, limit)


def test_redis_started_as_the_kit_runs_it_answers_oom_when_full(yaml: ModuleType, tmp_path: Path) -> None:
    redis_server = need_binary("redis-server")
    _, policy = _maxmemory(
        _k8s(yaml)[("StatefulSet", "redis")]["spec"]["template"]["spec"]["containers"][0]["args"][0]
    )
    port = free_port()
    process = subprocess.Popen(  # the kit's policy, a limit small enough to reach here
        [
            *(redis_server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", str(tmp_path)),
            *("--maxmemory", "2mb", "--maxmemory-policy", policy),
        ],
        stdout=subprocess.DEVNULL,
    )
    try:
        import redis as redis_client

        client = redis_client.Redis(host="127.0.0.1", port=port, socket_timeout=5)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis_client.ConnectionError:
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.05)
        with pytest.raises(redis_client.exceptions.OutOfMemoryError):  # -OOM
            for i in range(1000):
                client.set(f"k{i}", b"x" * 16384)
        assert client.get("k0") == b"x" * 16384  # nothing was evicted
        client.close()
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_k8s_manifests_pass_kubernetes_validate_strict_for_the_two_newest_minors() -> None:
    """Every manifest against the API schemas of the two newest Kubernetes minors that
    kubernetes-validate knows, rejecting unknown fields (--strict). The HTTPRoute is a Gateway API
    resource, which it has no schema for: checked in test_k8s_services_front_doors_and_redis."""
    utils = pytest.importorskip("kubernetes_validate.utils", reason="kubernetes-validate is not installed")
    minors = sorted(
        {utils.major_minor(v) for v in utils.all_versions()}, key=lambda v: [int(p) for p in v.split(".")]
    )
    newest = minors[-2:]
    assert len(newest) == 2
    files = sorted(str(path) for path in K8S.glob("*.yaml"))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "kubernetes_validate",
            "--strict",
            "--quiet",
            *(f"-k{v}.0" for v in newest),
            *files,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    unvalidated = [line for line in done.stdout.splitlines() if line.startswith("WARN")]
    assert len(unvalidated) == len(newest) and all("kind HTTPRoute" in line for line in unvalidated), (
        done.stdout
    )


PINNED = re.compile(r"[^@\s]+@sha256:[0-9a-f]{64}")


def _images(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "image" and isinstance(value, str):
                yield value
            else:
                yield from _images(value)
    elif isinstance(node, list):
        for item in node:
            yield from _images(item)


def test_every_image_and_the_buildkit_frontend_is_pinned_by_digest(yaml: ModuleType) -> None:
    """A tag moves; a digest names one image (docs/deploy.md, "Pinned images", has the update
    command). Compose's own builds (`build:`) are named by a local tag."""
    references = [image for obj in _k8s(yaml).values() for image in _images(obj)]
    assert len(references) >= 3  # mcp, redis, the router
    for service in _compose(yaml)["services"].values():
        if "build" not in service:
            references.append(service["image"])
    instructions = _dockerfile_instructions()
    args = dict(rest.split("=", 1) for kw, rest in instructions if kw == "ARG" and "=" in rest)
    references.append(args["PYTHON_IMAGE"])
    stages = {rest.split()[-1] for kw, rest in instructions if kw == "FROM" and " AS " in rest}
    for keyword, rest in instructions:
        base = rest.split()[0]
        if keyword == "FROM" and base != "${PYTHON_IMAGE}" and base not in stages:
            references.append(base)
    [syntax] = [line for line in DOCKERFILE.read_text().splitlines() if line.startswith("# syntax=")]
    references.append(syntax.removeprefix("# syntax="))
    unpinned = [reference for reference in references if not PINNED.fullmatch(reference)]
    assert not unpinned, unpinned


# ---- Dockerfile ---------------------------------------------------------------------------------------
def _dockerfile_instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    instructions = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            instructions.append((keyword.upper(), rest.strip()))
    return instructions


def test_dockerfile_is_multi_stage_slim_non_root_with_a_healthcheck() -> None:
    text = DOCKERFILE.read_text()
    assert "curl" not in text.lower()
    instructions = _dockerfile_instructions()
    args = dict(rest.split("=", 1) for kw, rest in instructions if kw == "ARG" and "=" in rest)
    stages = [
        rest.split()[0].replace("${PYTHON_IMAGE}", args.get("PYTHON_IMAGE", ""))
        for kw, rest in instructions
        if kw == "FROM"
    ]
    stage_names = {rest.split()[-1] for kw, rest in instructions if kw == "FROM" and " AS " in rest}
    assert len(stages) >= 2
    assert all(s.startswith("python:3.11-slim@sha256:") or s in stage_names for s in stages), stages
    # The production image is the default target: the last stage, built on `base`.
    last_from = max(i for i, (kw, _) in enumerate(instructions) if kw == "FROM")
    assert instructions[last_from] == ("FROM", "base AS runtime")
    base_from = instructions.index(("FROM", "${PYTHON_IMAGE} AS base"))
    final = instructions[base_from:]
    final_text = " ".join(rest for _, rest in final)
    assert "apt-get" not in final_text and "gcc" not in final_text  # no build tools in the image
    assert "--no-index" in final_text and "from=build" in final_text
    user = [rest for kw, rest in final if kw == "USER"][-1]
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) != 0, "a numeric non-root uid (runAsNonRoot can only check numbers)"
    [healthcheck] = [rest for kw, rest in final if kw == "HEALTHCHECK"]
    command = json.loads(healthcheck[healthcheck.index("CMD") + 3 :])
    assert command[:2] == ["python", "-c"] and "/healthz" in command[2] and "127.0.0.1" in command[2]
    compile(command[2], "HEALTHCHECK", "exec")
    assert ("ENTRYPOINT", '["mcp-url-connect"]') in final
    assert ("CMD", '["serve"]') in final
    assert ("EXPOSE", "8000") in final
    env = " ".join(rest for kw, rest in final if kw == "ENV")
    assert "PYTHONDONTWRITEBYTECODE=1" in env and "PYTHONUNBUFFERED=1" in env


def test_dockerfile_installs_the_hashed_lock_and_ships_no_dev_as_in_production() -> None:
    """docs/supply-chain.md: exact versions with hashes; the dev AS logs anyone in, so the
    production image must not contain it (the compose stack builds the `dev` target for it)."""
    instructions = _dockerfile_instructions()
    runs = [rest for kw, rest in instructions if kw == "RUN"]
    assert any("--require-hashes" in r and "-r requirements.lock" in r and "download" in r for r in runs)
    assert any("--no-deps" in r and "wheel" in r for r in runs), "the project itself adds no dependency"
    assert ("COPY", "requirements.lock ./") in instructions
    last_from = max(i for i, (kw, _) in enumerate(instructions) if kw == "FROM")
    production = " ".join(rest for _, rest in instructions[last_from:])
    assert "rm -r" in production and "! python -c 'import mock_providers'" in production
    dev = instructions.index(("FROM", "base AS dev"))
    assert dev < last_from and not [kw for kw, _ in instructions[dev + 1 : last_from] if kw == "RUN"]


def test_redis_started_as_documented_writes_private_files(tmp_path: Path) -> None:
    """The command compose and k8s run (umask 077, AOF, fsync always) against a real redis-server:
    every file it writes is readable by its owner only."""
    redis_server = need_binary("redis-server")
    port = free_port()
    data = tmp_path / "data"
    data.mkdir()
    command = (
        f"umask 077 && exec {redis_server} --port {port} --bind 127.0.0.1 --save '' "
        f"--appendonly yes --appendfsync {FSYNC_POLICY} --dir {data}"
    )
    process = subprocess.Popen(["sh", "-c", command], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
                    conn.sendall(b"SET k v\r\n")
                    assert conn.recv(16) == b"+OK\r\n"
                break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.05)
    finally:
        process.terminate()
        process.wait(timeout=10)
    written = [p for p in data.rglob("*") if p.is_file()]
    assert written, "the AOF was written"
    for path in written:
        assert path.stat().st_mode & 0o077 == 0, f"{path.name} is {oct(path.stat().st_mode)}"


def test_one_fsync_policy_across_docs_compose_and_k8s() -> None:
    redis_doc = (ROOT / "docs" / "redis.md").read_text()
    recommendation = redis_doc[redis_doc.index("**Recommendation:**") :].split("\n\n")[0]
    assert f"appendfsync {FSYNC_POLICY}" in recommendation.split(".")[0]
    deploy_doc = (ROOT / "docs" / "deploy.md").read_text()
    assert "everysec" not in deploy_doc.replace("what `everysec` would cost", "")
    for path in (DEPLOY / "compose.yaml", DEPLOY / "k8s" / "redis.yaml", ROOT / "docs" / "deploy.md"):
        assert f"appendfsync {FSYNC_POLICY}" in path.read_text(), path.name


def test_dockerfile_copies_only_what_exists_and_is_not_ignored() -> None:
    copied = []
    for keyword, rest in _dockerfile_instructions():
        if keyword == "COPY" and not rest.startswith("--from"):
            copied += rest.split()[:-1]
    assert "pyproject.toml" in copied and "README.md" in copied and "requirements.lock" in copied
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = {p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert packages <= set(copied), "the image must contain every package pyproject.toml builds"
    ignored = {
        line.strip().rstrip("/")
        for line in (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    for path in copied:
        assert (ROOT / path).exists(), path
        assert path not in ignored, path
    assert "deploy/mcp.env" in ignored and ".venv" in ignored


# ---- nginx: the router ----------------------------------------------------------------------------------
# Variables the router's container sets itself; the template uses the others (and the image's
# NGINX_LOCAL_RESOLVERS).
ROUTER_ENTRYPOINT_ENV = {"POD_NAMESPACE", "NGINX_ENTRYPOINT_LOCAL_RESOLVERS", "NGINX_ENVSUBST_OUTPUT_DIR"}
REPLICA_ADDRESSES = {"mcp-1": "127.0.0.2", "mcp-2": "127.0.0.3"}


def test_nginx_conf_keeps_the_streaming_settings_and_names_only_variables_that_are_set(
    yaml: ModuleType,
) -> None:
    conf = NGINX_CONF.read_text()
    assert conf.count(LISTEN) == 1
    directives = [line.split("#")[0].strip() for line in conf.splitlines()]
    assert not [d for d in directives if d.startswith("user ")], "no user directive"
    for needed in (
        "pid nginx.pid;",
        "error_log stderr notice;",
        "error_log stderr crit;",
        "client_max_body_size 1m;",
        "proxy_request_buffering off;",
        "proxy_buffering off;",
        "proxy_http_version 1.1;",
        "proxy_set_header Host $http_host;",
        "proxy_pass http://$mcp_upstream:${MCPUC_ROUTER_REPLICA_PORT};",
        "proxy_pass http://$mcp_any:${MCPUC_ROUTER_REPLICA_PORT};",
        "map $http_mcp_session_id $mcp_replica {",
        "resolver ${NGINX_LOCAL_RESOLVERS} valid=2s;",
    ):
        assert needed in directives, needed
    for directive in ("client_body_temp_path", "proxy_temp_path", "fastcgi_temp_path", "uwsgi_temp_path"):
        [line] = [d for d in directives if d.startswith(directive + " ")]
        assert not line.split()[1].startswith("/"), f"{directive} must be relative to the prefix"
    # envsubst replaces `$NAME` as well as `${NAME}`: nginx's own variables are lower case, and
    # every upper-case name is one that Kubernetes and compose both set.
    names = set(re.findall(r"\$\{?([A-Z_][A-Z0-9_]*)", conf))
    k8s = set(router_environment()) - ROUTER_ENTRYPOINT_ENV
    assert names == k8s | {"NGINX_LOCAL_RESOLVERS"}
    compose = _compose(yaml)["services"]["nginx"]["environment"]
    assert set(compose) - ROUTER_ENTRYPOINT_ENV == k8s
    for environment in (compose, router_environment()):
        assert environment["NGINX_ENTRYPOINT_LOCAL_RESOLVERS"] == "1"
        assert environment["NGINX_ENVSUBST_OUTPUT_DIR"] == "/etc/nginx"


def test_the_router_configmap_is_the_template_compose_mounts(yaml: ModuleType) -> None:
    """One file: compose mounts deploy/nginx/nginx.conf, Kubernetes mounts its copy."""
    spec = importlib.util.spec_from_file_location(
        "router_configmap", ROOT / "scripts" / "router_configmap.py"
    )
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert (K8S / "router-config.yaml").read_text() == script.render(NGINX_CONF.read_text()), (
        "run scripts/router_configmap.py"
    )
    objects = _k8s(yaml)
    template = objects[("ConfigMap", "mcp-router-template")]["data"]["nginx.conf.template"]
    assert template == NGINX_CONF.read_text()
    pod = objects[("Deployment", "mcp-router")]["spec"]["template"]["spec"]
    mounts = {m["mountPath"]: m["name"] for m in pod["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes[mounts["/etc/nginx/templates"]]["configMap"]["name"] == "mcp-router-template"
    assert "emptyDir" in volumes[mounts["/etc/nginx"]]  # the rendered file, pid, temporary files
    nginx = _compose(yaml)["services"]["nginx"]
    assert "./nginx/nginx.conf:/etc/nginx/templates/nginx.conf.template:ro" in nginx["volumes"]


def _nginx_test(nginx: str, prefix: Path) -> None:
    result = subprocess.run(
        [nginx, "-t", "-p", str(prefix), "-c", str(prefix / "nginx.conf"), "-e", "stderr"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_nginx_accepts_the_conf_as_rendered_for_kubernetes_and_compose(
    yaml: ModuleType, tmp_path: Path
) -> None:
    nginx = need_binary("nginx")
    need_binary("envsubst")
    (tmp_path / "k8s").mkdir()
    (tmp_path / "k8s" / "nginx.conf").write_text(router_conf("127.0.0.1:8080", "127.0.0.1:53", 8000))
    _nginx_test(nginx, tmp_path / "k8s")
    compose = {**_compose(yaml)["services"]["nginx"]["environment"], "NGINX_LOCAL_RESOLVERS": "127.0.0.11"}
    (tmp_path / "compose").mkdir()
    (tmp_path / "compose" / "nginx.conf").write_text(render(compose))
    _nginx_test(nginx, tmp_path / "compose")


class StubReplica:
    """An HTTP server standing in for one replica at `address`:`port`: says who and where it is
    and what Host it got; streams SSE on /mcp/stream; drops the connection, unanswered, on
    /drop and the OAuth callbacks."""

    def __init__(self, name: str, address: str = "127.0.0.1", port: int = 0) -> None:
        self.name = name
        self.address = address
        self.seen: list[dict[str, Any]] = []
        self.release = threading.Event()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._answer(b"")

            def do_POST(self) -> None:
                self._answer(self.rfile.read(int(self.headers.get("Content-Length", "0"))))

            def _answer(self, body: bytes) -> None:
                stub.seen.append(
                    {
                        "path": self.path,
                        "host": self.headers.get("Host"),
                        "session": self.headers.get("Mcp-Session-Id"),
                        "forwarded_for": self.headers.get("X-Forwarded-For"),
                        "request_id": self.headers.get("X-Request-ID"),
                        "length": str(len(body)),
                        "fields": [name.lower() for name in self.headers],
                    }
                )
                if self.path.startswith(("/drop", "/callback/", "/login/callback")):
                    self.close_connection = True
                    return
                if self.path == "/mcp/stream":
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.wfile.write(b"data: first\n\n")
                    self.wfile.flush()
                    stub.release.wait(30)  # the test reads "first" while the stream is still open
                    self.wfile.write(b"data: second\n\n")
                    self.close_connection = True
                    return
                answer = json.dumps(
                    {"replica": stub.name, "address": stub.address, "host": self.headers.get("Host")}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        self.server = ThreadingHTTPServer((address, port), Handler)
        self.server.daemon_threads = True
        self.port: int = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@dataclass
class Router:
    """The router's nginx, as rendered for Kubernetes, in front of stub replicas that a DNS
    server of the test's own publishes under the headless Service's names."""

    base: str
    dns: DnsServer
    replica_port: int
    log: Path
    stubs: dict[str, StubReplica] = field(default_factory=dict)

    def publish(self) -> None:
        self.dns.set(any_replica_name(), [stub.address for stub in self.stubs.values()])
        for name, stub in self.stubs.items():
            self.dns.set(replica_name(name), [stub.address])

    def move(self, name: str, address: str) -> None:
        """A rollout: replica `name` recreated at `address`, and its new address published."""
        self.stubs[name].stop()
        self.stubs[name] = StubReplica(name, address, self.replica_port)
        self.publish()

    def log_text(self) -> str:
        time.sleep(0.2)  # nginx writes its log lines after answering
        return self.log.read_text()


def _start_router(tmp_path: Path, publish: bool = True) -> Iterator[Router]:
    nginx = need_binary("nginx")
    need_binary("envsubst")
    port = free_port()
    router = Router(f"http://127.0.0.1:{port}", DnsServer(), free_port(), tmp_path / "nginx.log")
    router.stubs = {name: StubReplica(name, a, router.replica_port) for name, a in REPLICA_ADDRESSES.items()}
    if publish:
        router.publish()
    prefix = tmp_path / "nginx"
    prefix.mkdir()
    (prefix / "nginx.conf").write_text(
        router_conf(f"127.0.0.1:{port}", router.dns.address, router.replica_port)
    )
    log = router.log.open("w")
    process = subprocess.Popen(
        [nginx, "-p", str(prefix), "-c", str(prefix / "nginx.conf"), "-e", "stderr", "-g", "daemon off;"],
        stdout=log,
        stderr=log,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                assert process.poll() is None, router.log.read_text()
                assert time.monotonic() < deadline, "nginx did not start"
                time.sleep(0.05)
        yield router
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()
        for stub in router.stubs.values():
            stub.stop()
        router.dns.close()


@pytest.fixture
def router(tmp_path: Path) -> Iterator[Router]:
    yield from _start_router(tmp_path)


@pytest.fixture
def proxied(router: Router) -> tuple[str, dict[str, StubReplica]]:
    return router.base, router.stubs


def test_nginx_routes_sessions_passes_host_streams_and_caps_bodies(
    proxied: tuple[str, dict[str, StubReplica]],
) -> None:
    base, stubs = proxied
    public_host = "mcp.example.test:8080"
    with httpx.Client(base_url=base, timeout=5, headers={"Host": public_host}) as client:
        # No session id (initialize, 2026-07-28, browsers): both replicas get requests. The router
        # takes the replicas in the random order its resolver returns them: 30 requests all on one
        # replica would be a 1 in 500 million event.
        answered = {client.post("/mcp", content=b"{}").json()["replica"] for _ in range(SPREAD)}
        assert answered == set(REPLICAS)
        assert {client.get("/connections").json()["replica"] for _ in range(SPREAD)} == set(REPLICAS)
        # A session id goes to the replica named by its prefix, every time.
        for replica in REPLICAS:
            for _ in range(4):
                answer = client.post("/mcp", content=b"{}", headers={"Mcp-Session-Id": f"{replica}.abc123"})
                assert answer.json() == {
                    "replica": replica,
                    "address": REPLICA_ADDRESSES[replica],
                    "host": public_host,
                }
        # A replica that does not exist (scaled away): its name does not resolve, the session is
        # gone. Any other prefix reaches one of ours (which answers 404 for the session).
        stale = client.post("/mcp", headers={"Mcp-Session-Id": "mcp-10.x"})
        assert stale.status_code == 404 and stale.json()["error"]["message"] == "Session not found"
        assert client.post("/mcp", headers={"Mcp-Session-Id": "evil.example.com.x"}).status_code == 200
        # Bodies over 1 MiB never reach a replica.
        before = sum(len(s.seen) for s in stubs.values())
        assert client.post("/mcp", content=b"x" * (2 * 1024 * 1024)).status_code == 413
        assert sum(len(s.seen) for s in stubs.values()) == before
        assert client.post("/mcp", content=b"x" * 1024).status_code == 200
    assert {r["forwarded_for"] for s in stubs.values() for r in s.seen} == {"127.0.0.1"}

    # SSE: the first event arrives while the replica still holds the stream open (no buffering).
    stream_headers = {"Host": public_host, "Mcp-Session-Id": "mcp-2.abc", "Accept-Encoding": "gzip"}
    with (
        httpx.Client(base_url=base, timeout=httpx.Timeout(5, read=3)) as client,
        client.stream("GET", "/mcp/stream", headers=stream_headers) as response,
    ):
        assert response.headers["content-type"].startswith("text/event-stream")
        assert "content-encoding" not in response.headers
        lines = response.iter_lines()
        assert next(lines) == "data: first"
        assert not stubs["mcp-2"].release.is_set()
        stubs["mcp-2"].release.set()
        assert "data: second" in list(lines)
    assert stubs["mcp-2"].seen[-1]["path"] == "/mcp/stream"


def _nginx_version(nginx: str) -> tuple[int, ...]:
    banner = subprocess.run([nginx, "-v"], capture_output=True, text=True, timeout=10, check=True).stderr
    match = re.search(r"nginx/(\d+)\.(\d+)", banner)
    assert match, banner
    return tuple(int(part) for part in match.groups())


REPEATABLE_BY_MISTAKE = {  # field: two values a client (or an attacker) might send
    "MCP-Protocol-Version": ("2025-11-25", "2026-07-28"),
    "Mcp-Session-Id": ("mcp-1.aaa", "mcp-2.bbb"),
    "Mcp-Method": ("tools/call", "initialize"),
    "Last-Event-ID": ("1", "2"),
}


def test_nginx_never_passes_a_repeated_single_valued_field(
    proxied: tuple[str, dict[str, StubReplica]],
) -> None:
    """RFC 9110 §5.3: a repeated MCP header field is refused with 400 (nginx 1.23 and later, which
    joins the lines in $http_*), and no replica ever receives two lines of one (nginx 1.22 keeps
    the first). A repeated Authorization is refused by nginx itself."""
    base, stubs = proxied
    refuses = _nginx_version(need_binary("nginx")) >= (1, 23)
    with httpx.Client(base_url=base, timeout=5) as client:
        twice = client.post(
            "/mcp", content=b"{}", headers=[("Authorization", "Bearer a"), ("Authorization", "Bearer b")]
        )
        assert twice.status_code == 400
        for field, values in REPEATABLE_BY_MISTAKE.items():
            for pair in (values, values[::-1]):
                before = sum(len(s.seen) for s in stubs.values())
                answer = client.post("/mcp", content=b"{}", headers=[(field, v) for v in pair])
                if refuses:
                    assert answer.status_code == 400, field
                    assert answer.json()["error"]["code"] == -32600
                    assert sum(len(s.seen) for s in stubs.values()) == before
                else:
                    assert answer.status_code == 200, field
        # Control: one line of each passes.
        single = [(field, values[0]) for field, values in REPEATABLE_BY_MISTAKE.items()]
        assert client.post("/mcp", content=b"{}", headers=single).status_code == 200
    for stub in stubs.values():
        for request in stub.seen:
            fields = request["fields"]
            assert isinstance(fields, list)
            repeated = {f for f in fields if fields.count(f) > 1}
            assert not repeated & ({f.lower() for f in REPEATABLE_BY_MISTAKE} | {"authorization"}), request


def test_nginx_answers_404_for_a_session_whose_replica_is_gone(
    proxied: tuple[str, dict[str, StubReplica]], tmp_path: Path
) -> None:
    """2025-11-25 basic/transports "Session Management": a request for a terminated session gets
    404, and the client starts a new one. A killed replica's sessions are terminated."""
    base, stubs = proxied
    stubs["mcp-1"].stop()
    with httpx.Client(base_url=base, timeout=5) as client:
        gone = client.post("/mcp", content=b"{}", headers={"Mcp-Session-Id": "mcp-1.abc123"})
        assert gone.status_code == 404
        assert gone.headers["content-type"].startswith("application/json")
        assert gone.json() == {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": -32600, "message": "Session not found"},
        }
        # Without a session id (initialize, 2026-07-28, browsers) the live replica answers,
        # every time: the stopped one is skipped, not reported.
        for _ in range(6):
            assert client.post("/mcp", content=b"{}").json()["replica"] == "mcp-2"
            assert client.get("/connections").json()["replica"] == "mcp-2"
        # The live replica's sessions are unaffected.
        kept = client.post("/mcp", content=b"{}", headers={"Mcp-Session-Id": "mcp-2.abc123"})
        assert kept.json()["replica"] == "mcp-2"


def test_nginx_passes_one_request_id_and_keeps_metrics_private(
    proxied: tuple[str, dict[str, StubReplica]],
) -> None:
    base, stubs = proxied
    with httpx.Client(base_url=base, timeout=5) as client:
        client.get("/connections", headers={"X-Request-ID": "edge-42"})
        client.get("/connections")
        assert client.get("/metrics").status_code == 404
    seen = [r for s in stubs.values() for r in s.seen]
    assert [r["request_id"] for r in seen if r["request_id"] == "edge-42"] == ["edge-42"]
    [generated] = [r["request_id"] for r in seen if r["request_id"] != "edge-42"]
    assert generated is not None and re.fullmatch(r"[0-9a-f]{32}", generated)
    assert not [r for r in seen if r["path"].startswith("/metrics")]


FORGED_REQUEST_IDS = (
    'x" 200 0 0.001 upstream=forged',  # a fake end of the log line
    "a" * 129,  # too long
    "id with spaces",
    "\u00e9t\u00e9",  # not ASCII
)


def test_nginx_accepts_a_request_id_only_in_the_replicas_shape(router: Router) -> None:
    """The caller's X-Request-ID reaches nginx's log line and the replica only in the shape the
    replicas accept (service/request_id.py: REQUEST_ID_SHAPE); anything else is replaced by a
    fresh id, the same in nginx's line and at the replica."""
    conf = NGINX_CONF.read_text()
    [pattern] = re.findall(r'^\s*"~\^(.*)\$"\s+\$http_x_request_id;$', conf, re.MULTILINE)
    assert pattern == REQUEST_ID_SHAPE.pattern
    with httpx.Client(base_url=router.base, timeout=5) as client:
        for forged in FORGED_REQUEST_IDS:
            answer = client.get("/connections", headers={"X-Request-ID": forged.encode()})
            assert answer.status_code == 200
        client.get("/connections", headers={"X-Request-ID": "edge-42.a:b_c"})
    seen = [r["request_id"] for s in router.stubs.values() for r in s.seen]
    assert "edge-42.a:b_c" in seen
    fresh = [i for i in seen if i != "edge-42.a:b_c"]
    assert len(fresh) == len(FORGED_REQUEST_IDS) and all(re.fullmatch(r"[0-9a-f]{32}", i) for i in fresh)
    log = router.log_text()
    logged = re.findall(r"request_id=(\S*)$", log, re.MULTILINE)
    assert sorted(logged) == sorted(seen)  # the same id in nginx's line as at the replica
    assert "forged" not in log and "with spaces" not in log


def test_nginx_never_retries_an_oauth_callback_on_another_replica(router: Router) -> None:
    """The callbacks' state is single-use (RFC 6749 §10.12; RFC 9700 §4.7.1): a replica that
    failed after receiving a callback may have taken it, so nginx never sends it to a second
    replica. Other routes are retried (the control)."""
    with httpx.Client(base_url=router.base, timeout=5) as client:
        for path in ("/callback/mockhub?code=c&state=s", "/login/callback?code=c&state=s"):
            before = sum(len(s.seen) for s in router.stubs.values())
            assert client.get(path).status_code == 502
            assert sum(len(s.seen) for s in router.stubs.values()) == before + 1, path
        before = sum(len(s.seen) for s in router.stubs.values())
        assert client.get("/drop").status_code == 502
        assert sum(len(s.seen) for s in router.stubs.values()) == before + 2  # retried once
        # The replicas still serve everything else.
        assert client.get("/connections").status_code == 200


def test_nginx_limits_each_client_and_serves_the_others(router: Router) -> None:
    """Per client address: past 100 connections at once, or bursts past 200 requests (100 a
    second), 429; another client is served meanwhile."""
    other = httpx.HTTPTransport(local_address="127.0.0.5")
    stream = {"Mcp-Session-Id": "mcp-1.abc"}
    limits = httpx.Limits(max_connections=None)
    with (
        httpx.Client(base_url=router.base, timeout=httpx.Timeout(5, read=3), limits=limits) as client,
        contextlib.ExitStack() as streams,
    ):
        opened = [
            streams.enter_context(client.stream("GET", "/mcp/stream", headers=stream)) for _ in range(100)
        ]
        assert {response.status_code for response in opened} == {200}
        assert client.get("/healthz").status_code == 429  # the 101st connection (101 requests: no burst)
        with httpx.Client(base_url=router.base, timeout=5, transport=other) as neighbour:
            assert neighbour.get("/healthz").status_code == 200
        router.stubs["mcp-1"].release.set()
    with httpx.Client(base_url=router.base, timeout=5) as client:
        statuses = [client.get("/healthz").status_code for _ in range(600)]
    assert 429 in statuses
    with httpx.Client(base_url=router.base, timeout=5, transport=other) as client:
        assert client.get("/healthz").status_code == 200


def test_nginx_refuses_request_heads_the_replicas_would(router: Router) -> None:
    """RFC 9110 §5.4 (a server may refuse a head too large to process): nginx's limit is under
    the replicas' own (service/request_limits.py: MAX_REQUEST_HEAD_BYTES), so what nginx passes a
    replica accepts."""
    with httpx.Client(base_url=router.base, timeout=5) as client:
        fits = {f"X-Fill-{i}": "f" * 5000 for i in range(2)}
        assert client.get("/connections", headers=fits).status_code == 200
        assert sum(len(k) + len(v) + 4 for k, v in fits.items()) < MAX_REQUEST_HEAD_BYTES
        line = client.get("/connections", headers={"X-Fill": "f" * 7000})
        assert line.status_code == 400
        too_many = {f"X-Fill-{i}": "f" * 5000 for i in range(4)}
        assert client.get("/connections", headers=too_many).status_code == 400
        assert client.get("/connections").status_code == 200
    served = [r for s in router.stubs.values() for r in s.seen if r["path"] == "/connections"]
    assert len(served) == 2


def test_the_router_finds_replicas_in_dns_at_request_time(tmp_path: Path) -> None:
    """The router starts with no replica ready (none in DNS), serves them once they are
    published, and follows a replica recreated at a new address (a rollout)."""
    started = _start_router(tmp_path, publish=False)
    router = next(started)
    session = {"Mcp-Session-Id": "mcp-1.abc"}
    try:
        with httpx.Client(base_url=router.base, timeout=5) as client:
            gone = client.post("/mcp", content=b"{}", headers=session)
            assert gone.status_code == 404 and gone.json()["error"]["message"] == "Session not found"
            assert client.get("/connections").status_code == 502
            router.publish()
            assert _eventually(lambda: _address(client, session) == "127.0.0.2")
            router.move("mcp-1", "127.0.0.4")
            assert _eventually(lambda: _address(client, session) == "127.0.0.4")
            # The other replica's sessions never noticed.
            assert _address(client, {"Mcp-Session-Id": "mcp-2.abc"}) == "127.0.0.3"
            addresses = {client.get("/connections").json()["address"] for _ in range(SPREAD)}
            assert addresses == {"127.0.0.3", "127.0.0.4"}
    finally:
        started.close()


def _address(client: httpx.Client, headers: dict[str, str]) -> str | None:
    answer = client.post("/mcp", content=b"{}", headers=headers)
    return str(answer.json()["address"]) if answer.status_code == 200 else None


def _eventually(check: Callable[[], bool], seconds: float = 10.0) -> bool:
    """Poll `check` until it holds: the router's cached DNS answers expire after `valid=2s`."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def test_nginx_error_log_quotes_no_codes_states_or_links(router: Router) -> None:
    """Replicas down or not in DNS: the failures show in the access log (502 from the upstream),
    and no log line carries a code, a state or a connect link, on any path."""
    router.stubs["mcp-1"].stop()
    router.stubs["mcp-2"].stop()
    router.dns.remove(replica_name("mcp-2"))  # a replica whose name no longer resolves
    with httpx.Client(base_url=router.base, timeout=5) as client:
        for path in (
            "/callback/mockhub?code=SECRETCODE1&state=SECRETSTATE1&iss=x",
            "/login/callback?code=SECRETCODE2&state=SECRETSTATE2",
            "/connect?elicitationId=SECRETLINK3",
            "/login?next=%2Fconnect%3FelicitationId%3DSECRETLINK4",
            "/connections?elicitationId=SECRETLINK5",
        ):
            assert client.get(path).status_code == 502
        for replica in REPLICAS:
            gone = client.get("/mcp?state=SECRETSTATE6", headers={"Mcp-Session-Id": f"{replica}.x"})
            assert gone.status_code == 404
        # No replica and no session id: a plain 502, not a made-up "session not found".
        assert client.post("/mcp", content=b"{}").status_code == 502
    log = router.log_text()
    assert log.count("upstream_status=502") >= 7  # the control: every failure is logged
    for secret in ("SECRETCODE", "SECRETSTATE", "SECRETLINK"):
        assert secret not in log


def test_docs_deploy_walks_through_each_part() -> None:
    text = (ROOT / "docs" / "deploy.md").read_text()
    for needed in (
        "docker build -f deploy/Dockerfile",
        "docker compose -f deploy/compose.yaml up",
        "/login/callback",
        "/callback/<name>",
        "mcp-url-connect keys rotate",
        "redis.md",
        "MCPUC_REPLICA_ID",
        "/readyz",
        "kubectl create secret tls mcp-tls",  # the Secret ingress.yaml names
        "--target dev",
    ):
        assert needed in text, needed
    for path in re.findall(r"`(deploy/[\w./-]+)`", text):
        assert (ROOT / path).exists() or path == "deploy/k8s/secret.yaml" or path == "deploy/mcp.env", path
