"""The router's nginx configuration as the nginx image renders it for Kubernetes: the template
deploy/nginx/nginx.conf, the environment deploy/k8s/router.yaml gives the container (with the
kubelet's `$(VAR)` expansion), and the image's own rendering step (envsubst limited to the names
that are set, as its /docker-entrypoint.d/20-envsubst-on-templates.sh runs it). `Cluster` and
the router tests run exactly this text; only the listening address, the nameserver (the image
takes it from /etc/resolv.conf) and the replicas' port (free ports on loopback) are the test's.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

DEPLOY = Path(__file__).parents[2] / "deploy"
TEMPLATE = DEPLOY / "nginx" / "nginx.conf"
MANIFEST = DEPLOY / "k8s" / "router.yaml"
LISTEN = "listen 8080;"
# The names `router_environment` gives: a replica is `<id><suffix>`, any replica `<any>`.
NAMESPACE = "mcp"
_KUBELET_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def router_environment(namespace: str = NAMESPACE) -> dict[str, str]:
    """The router container's environment in `namespace`, as the kubelet sets it."""
    import yaml  # a dev dependency, as are the tests that call this

    deployment = next(d for d in yaml.safe_load_all(MANIFEST.read_text()) if d["kind"] == "Deployment")
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    environ: dict[str, str] = {}
    for variable in container["env"]:
        if "valueFrom" in variable:
            assert variable["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace", variable
            environ[variable["name"]] = namespace
        else:
            environ[variable["name"]] = _KUBELET_REFERENCE.sub(
                lambda match: environ.get(match.group(1), match.group(0)), str(variable["value"])
            )
    return environ


def render(environ: Mapping[str, str], template: str | None = None) -> str:
    """`template` (the router's by default) with the `${NAME}`s set in `environ` replaced."""
    envsubst = shutil.which("envsubst")
    if envsubst is None:
        raise RuntimeError("envsubst is not installed (Debian: gettext-base)")
    names = " ".join("${" + name + "}" for name in environ)
    done = subprocess.run(  # noqa: S603 - the system's envsubst, our template
        [envsubst, names],
        input=TEMPLATE.read_text() if template is None else template,
        env=dict(environ),
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
    )
    return done.stdout


def router_conf(listen: str, nameserver: str, replica_port: int, namespace: str = NAMESPACE) -> str:
    """The configuration the router runs in `namespace`, listening on `listen` (host:port),
    resolving with `nameserver` (host:port) and reaching the replicas on `replica_port`."""
    environ = router_environment(namespace)
    environ.update(NGINX_LOCAL_RESOLVERS=nameserver, MCPUC_ROUTER_REPLICA_PORT=str(replica_port))
    conf = render(environ)
    assert conf.count(LISTEN) == 1, f"deploy/nginx/nginx.conf must hold {LISTEN!r} once"
    return conf.replace(LISTEN, f"listen {listen};")


def replica_name(replica_id: str, namespace: str = NAMESPACE) -> str:
    """The DNS name the router gives replica `replica_id`."""
    return replica_id + router_environment(namespace)["MCPUC_ROUTER_REPLICA_SUFFIX"]


def any_replica_name(namespace: str = NAMESPACE) -> str:
    return router_environment(namespace)["MCPUC_ROUTER_ANY_REPLICA"]
