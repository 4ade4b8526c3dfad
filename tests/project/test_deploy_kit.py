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
import importlib.util
import json
import re
import secrets
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

import pytest

from mock_providers.testing.router import (
    LISTEN,
    router_environment,
)
from service.mcp.sdk.session_limits import SESSION_MEMORY_KIB
from service.settings import DEFAULT_METRICS_PORT, SettingsError, load_settings
from tests.support.deploy_kit import (
    DEPLOY,
    FSYNC_POLICY,
    K8S,
    NGINX_CONF,
    REPLICAS,
    ROOT,
    compose_file,
    k8s_objects,
    redis_maxmemory,
    yaml_documents,
)
from token_store import KeyRing

DOCKERFILE = DEPLOY / "Dockerfile"
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


# ---- helpers ------------------------------------------------------------------------------------


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
        docs = yaml_documents(yaml, path)
        assert docs and all(isinstance(d, dict) for d in docs), path
        if path.parent == K8S:
            for doc in docs:
                assert {"apiVersion", "kind", "metadata"} <= set(doc), path
                # Namespace-agnostic: applied with `kubectl -n`.
                assert "namespace" not in doc["metadata"], f"{path.name}: {doc['metadata']['name']}"


def test_compose_replicas_share_one_configuration_and_differ_only_in_replica_id(yaml: ModuleType) -> None:
    services = compose_file(yaml)["services"]
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
    services = compose_file(yaml)["services"]
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
    objects = k8s_objects(yaml)
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
    # The rest with the environment form: the same settings (tests/unit/service/test_settings.py).
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
    objects = k8s_objects(yaml)
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
    objects = k8s_objects(yaml)
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
    resources = k8s_objects(yaml)[("StatefulSet", "mcp")]["spec"]["template"]["spec"]["containers"][0][
        "resources"
    ]
    at_rest, limit = _mebibytes(resources["requests"]["memory"]), _mebibytes(resources["limits"]["memory"])
    sessions = load_settings({}).max_sessions_per_replica * SESSION_MEMORY_KIB / 1024
    assert at_rest + sessions <= 0.85 * limit, (at_rest, sessions, limit)  # room for requests in flight
    assert (
        f"{load_settings({}).max_sessions_per_replica} \N{MULTIPLICATION SIGN} {SESSION_MEMORY_KIB} KiB"
        in (ROOT / "docs" / "operations.md").read_text()
    )


def test_k8s_services_front_doors_and_redis(yaml: ModuleType) -> None:
    objects = k8s_objects(yaml)
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


def test_every_redis_the_kit_runs_answers_oom_before_its_memory_limit(yaml: ModuleType) -> None:
    """docs/redis.md, "Memory and eviction": noeviction, and maxmemory well under the container's
    limit (the AOF rewrite's fork and the buffers need the rest), so a full Redis answers -OOM
    instead of being killed."""
    redis = k8s_objects(yaml)[("StatefulSet", "redis")]["spec"]["template"]["spec"]["containers"][0]
    compose = compose_file(yaml)["services"]["redis"]
    for command, limit in (
        (redis["args"][0], _mebibytes(redis["resources"]["limits"]["memory"])),
        (" ".join(compose["command"]), float(compose["mem_limit"].removesuffix("m"))),
    ):
        maxmemory, policy = redis_maxmemory(command)
        assert policy == "noeviction"
        assert maxmemory <= 0.7 * limit, (maxmemory, limit)


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
    references = [image for obj in k8s_objects(yaml).values() for image in _images(obj)]
    assert len(references) >= 3  # mcp, redis, the router
    for service in compose_file(yaml)["services"].values():
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
        "proxy_request_buffering on;",
        "client_body_timeout 10s;",
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
    compose = compose_file(yaml)["services"]["nginx"]["environment"]
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
    objects = k8s_objects(yaml)
    template = objects[("ConfigMap", "mcp-router-template")]["data"]["nginx.conf.template"]
    assert template == NGINX_CONF.read_text()
    pod = objects[("Deployment", "mcp-router")]["spec"]["template"]["spec"]
    mounts = {m["mountPath"]: m["name"] for m in pod["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes[mounts["/etc/nginx/templates"]]["configMap"]["name"] == "mcp-router-template"
    assert "emptyDir" in volumes[mounts["/etc/nginx"]]  # the rendered file, pid, temporary files
    nginx = compose_file(yaml)["services"]["nginx"]
    assert "./nginx/nginx.conf:/etc/nginx/templates/nginx.conf.template:ro" in nginx["volumes"]


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
