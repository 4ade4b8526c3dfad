"""The deploy kit's files as the tests read them: paths, replica names, the fsync policy, and the
compose file and Kubernetes manifests parsed (tests/project/test_deploy_kit.py without binaries,
tests/integration/test_deploy_kit.py with them)."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
NGINX_CONF = DEPLOY / "nginx" / "nginx.conf"
REPLICAS = ("mcp-1", "mcp-2")
# One fsync policy everywhere: the one docs/redis.md recommends (compose, k8s and deploy.md agree).
FSYNC_POLICY = "always"


def yaml_documents(yaml: ModuleType, path: Path) -> list[Any]:
    return list(yaml.safe_load_all(path.read_text()))


def k8s_objects(yaml: ModuleType) -> dict[tuple[str, str], dict[str, Any]]:
    """Every Kubernetes object under deploy/k8s, by (kind, name)."""
    objects: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml_documents(yaml, path):
            key = (doc["kind"], doc["metadata"]["name"])
            assert key not in objects, f"{path.name}: {key} defined twice"
            objects[key] = doc
    return objects


def compose_file(yaml: ModuleType) -> dict[str, Any]:
    compose: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return compose


def redis_maxmemory(command: str) -> tuple[float, str]:
    """The --maxmemory (MB) and --maxmemory-policy a redis-server command line sets."""
    match = re.search(r"--maxmemory (\d+)mb --maxmemory-policy (\S+)", command)
    assert match, command
    return float(match.group(1)), match.group(2)
