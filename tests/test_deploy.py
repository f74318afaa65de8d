"""The deployment files (deploy/) and their guide (docs/deploy.md) say only what is true.

Offline checks: the Kubernetes manifests' kinds, API versions and required fields, and that
their parts point at each other (selectors, Service ports, the Secret's keys); probes on
/health and a non-root container; Compose services naming defined volumes, networks, secrets
and services; every `chatfmt serve` flag the deployments pass and the guide mentions exists;
every metric the guide names is one /metrics exports. (The JSON-schema checks the guide
mentions need packages the suite does not install.)
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml", reason="pyyaml reads the deployment files")

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
GUIDE = ROOT / "docs" / "deploy.md"
METRICS = ROOT / "src" / "chatfmt" / "server" / "metrics.py"

#: apiVersion of each kind the manifests use (the stable versions).
API_VERSIONS = {
    "Deployment": "apps/v1",
    "Service": "v1",
    "Secret": "v1",
    "Ingress": "networking.k8s.io/v1",
    "HorizontalPodAutoscaler": "autoscaling/v2",
    "PodDisruptionBudget": "policy/v1",
    "Kustomization": "kustomize.config.k8s.io/v1beta1",
}

#: Flags the guide names that belong to other programs, and whose they are.
OTHER_FLAGS = {
    "--enable-prefix-caching": "vllm serve",
    # The CPU recipe's vLLM flags: the ones the slow tier starts vLLM with (checked below).
    "--served-model-name": "vllm",
    "--max-model-len": "vllm",
    "--dtype": "vllm",
    "--enable-prompt-tokens-details": "vllm",
    "--enforce-eager": "vllm",
    "--index-url": "pip",
    "--strict": "kubernetes-validate",
    "--builtin-schema": "check-jsonschema",
}


# ==== Helpers ====


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError(f"{parser.prog} has no subcommands")


def _parsers() -> dict[str, argparse.ArgumentParser]:
    from chatfmt.cli.main import build_parser

    commands = _subparsers(build_parser())
    found = {"serve": commands["serve"]}
    for name, sub in _subparsers(commands["store"]).items():
        found[f"store {name}"] = sub
    return found


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    return {s for s in parser._option_string_actions if s.startswith("--")}


SERVE_FLAGS = _flags(_parsers()["serve"])


def _load(path: Path) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]
    assert docs, f"{path} holds no document"
    return docs


def _manifests() -> dict[str, dict[str, Any]]:
    """kind -> the one manifest of that kind under deploy/k8s/."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(K8S.glob("*.yaml")):
        for doc in _load(path):
            kind = doc.get("kind")
            assert kind not in out, f"two manifests of kind {kind}"
            out[kind] = doc
    return out


def _serve_args(args: list[str]) -> list[str]:
    """The flags in an argument list (``--flag=value`` or ``--flag value``), checked to exist."""
    flags = [a.split("=", 1)[0] for a in args if a.startswith("--")]
    unknown = [f for f in flags if f not in SERVE_FLAGS]
    assert not unknown, f"not chatfmt serve flags: {unknown}"
    return flags


def _deployment_container() -> dict[str, Any]:
    (container,) = _manifests()["Deployment"]["spec"]["template"]["spec"]["containers"]
    return container


def _probe_paths(probe: dict[str, Any]) -> str:
    """What a probe asks: the httpGet path, or the exec command (which must say /health)."""
    if "httpGet" in probe:
        return str(probe["httpGet"]["path"])
    command = probe["exec"]["command"]
    if command[:1] == ["chatfmt-probe"]:  # deploy/probe.py: GET /health
        assert "/health" in (DEPLOY / "probe.py").read_text(encoding="utf-8")
        return "/health"
    return " ".join(command)


# ==== Kubernetes ====


def test_manifests_have_kinds_versions_and_names() -> None:
    manifests = _manifests()
    assert set(manifests) == set(API_VERSIONS)
    for kind, doc in manifests.items():
        assert doc["apiVersion"] == API_VERSIONS[kind], kind
        if kind != "Kustomization":
            assert doc["metadata"]["name"], kind
    listed = manifests["Kustomization"]["resources"]
    assert all((K8S / name).is_file() for name in listed)
    # The example Secret holds placeholders: it is created by hand, never applied with -k.
    assert "secret.example.yaml" not in listed
    applied = {d["kind"] for name in listed for d in _load(K8S / name)}
    assert applied == set(API_VERSIONS) - {"Kustomization", "Secret"}


def test_deployment_probes_security_and_resources() -> None:
    deployment = _manifests()["Deployment"]
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()
    pod = spec["template"]["spec"]
    container = _deployment_container()
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert _probe_paths(container[probe]) == "/health", probe
    # Non-root, as the image's user (deploy/Dockerfile: uid 10001).
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001
    own = container["securityContext"]
    assert own["allowPrivilegeEscalation"] is False
    assert own["capabilities"]["drop"] == ["ALL"]
    assert "cpu" in container["resources"]["requests"]  # the HPA's utilisation needs it
    # Draining: the grace period outlasts preStop's pause plus --drain-timeout.
    args = container["args"]
    drain = float(next(a.split("=", 1)[1] for a in args if a.startswith("--drain-timeout=")))
    pause = float(container["lifecycle"]["preStop"]["exec"]["command"][1])
    assert pod["terminationGracePeriodSeconds"] > drain + pause


def test_deployment_args_are_serve_flags_with_a_key() -> None:
    container = _deployment_container()
    flags = _serve_args(container["args"])
    assert "--host" in flags and ("--api-key-file" in flags or "--api-key" in flags)
    # $(VAR) in args must name a variable the container defines.
    env = {e["name"] for e in container["env"]}
    for arg in container["args"]:
        for name in re.findall(r"\$\(([A-Z_][A-Z0-9_]*)\)", arg):
            assert name in env, name
    # The key file is mounted where --api-key-file reads it.
    key_file = next(a.split("=", 1)[1] for a in container["args"] if "--api-key-file=" in a)
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert str(Path(key_file).parent) in mounts


def test_deployment_reads_only_keys_the_secret_has() -> None:
    manifests = _manifests()
    secret = manifests["Secret"]
    keys = set(secret["stringData"])
    pod = manifests["Deployment"]["spec"]["template"]["spec"]
    used = {
        e["valueFrom"]["secretKeyRef"]["key"]
        for e in _deployment_container()["env"]
        if e.get("valueFrom", {}).get("secretKeyRef", {}).get("name") == secret["metadata"]["name"]
    }
    for volume in pod["volumes"]:
        if "secret" in volume:
            assert volume["secret"]["secretName"] == secret["metadata"]["name"]
            used |= {item["key"] for item in volume["secret"].get("items", [])}
    assert used and used <= keys


def test_service_ingress_hpa_and_pdb_point_at_the_deployment() -> None:
    m = _manifests()
    deployment = m["Deployment"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    container = _deployment_container()
    port_names = {p["name"] for p in container["ports"]}
    service = m["Service"]
    assert service["spec"]["selector"].items() <= labels.items()
    for port in service["spec"]["ports"]:
        assert port["targetPort"] in port_names
    for rule in m["Ingress"]["spec"]["rules"]:
        for path in rule["http"]["paths"]:
            backend = path["backend"]["service"]
            assert backend["name"] == service["metadata"]["name"]
            assert backend["port"]["name"] in {p["name"] for p in service["spec"]["ports"]}
    annotations = m["Ingress"]["metadata"]["annotations"]
    assert annotations["nginx.ingress.kubernetes.io/affinity"] == "cookie"
    target = m["HorizontalPodAutoscaler"]["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
    assert m["HorizontalPodAutoscaler"]["spec"]["minReplicas"] >= 2
    pdb = m["PodDisruptionBudget"]["spec"]
    assert pdb["selector"]["matchLabels"].items() <= labels.items()


# ==== Compose, the image and the proxy ====


def test_compose_names_only_what_it_defines() -> None:
    (compose,) = _load(DEPLOY / "compose.yaml")
    services = compose["services"]
    volumes, networks = set(compose["volumes"]), set(compose["networks"])
    secrets = set(compose["secrets"])
    for name, service in services.items():
        assert "image" in service or "build" in service, name
        for mount in service.get("volumes", []):
            source = mount.split(":", 1)[0]
            if not source.startswith((".", "/")):
                assert source in volumes, (name, source)
            else:
                assert (DEPLOY / source).exists() or source.startswith("./secrets"), source
        assert set(service.get("networks", [])) <= networks, name
        assert set(service.get("secrets", [])) <= secrets, name
        assert set(service.get("depends_on", [])) <= set(services), name
    for secret in compose["secrets"].values():
        assert secret["file"].startswith("./secrets/")  # ignored by deploy/.gitignore
    build = services["chatfmt-a"]["build"]
    assert (DEPLOY / build["context"] / build["dockerfile"]).is_file()


def test_compose_replicas_run_serve_with_a_key_on_postgres() -> None:
    (compose,) = _load(DEPLOY / "compose.yaml")
    replicas = [s for name, s in compose["services"].items() if name.startswith("chatfmt-")]
    assert len(replicas) == 2
    for service in replicas:
        command = service["command"]
        flags = _serve_args(command)
        assert {"--host", "--api-key-file", "--store", "--engine", "--engine-url"} <= set(flags)
        assert {"--tokenizer", "--dialect"} <= set(flags)  # a remote engine's vocabulary
        store = next(a for a in command if a.startswith("--store="))
        assert store.startswith("--store=postgresql://")
        assert ":" not in store.split("://", 1)[1].split("@", 1)[0]  # no password in the URL
        key_file = next(a.split("=", 1)[1] for a in command if a.startswith("--api-key-file="))
        assert key_file == "/run/secrets/chatfmt-api-keys"
        assert "chatfmt-api-keys" in service["secrets"]
        # Docker's stop grace outlasts the drain.
        drain = float(next(a.split("=", 1)[1] for a in command if "--drain-timeout=" in a))
        assert int(service["stop_grace_period"].rstrip("s")) > drain
        assert "ports" not in service  # reached through the proxy only
    gpu = compose["services"]["vllm"]["deploy"]["resources"]["reservations"]["devices"][0]
    assert gpu["capabilities"] == ["gpu"]


def test_caddy_proxies_the_replicas_with_health_checks_and_affinity() -> None:
    (compose,) = _load(DEPLOY / "compose.yaml")
    caddyfile = (DEPLOY / "Caddyfile").read_text(encoding="utf-8")
    upstreams = re.search(r"reverse_proxy ([^{]+)\{", caddyfile)
    assert upstreams is not None
    for upstream in upstreams.group(1).split():
        host, port = upstream.split(":")
        assert host in compose["services"]
        assert f"--port={port}" in compose["services"][host]["command"]
    assert re.search(r"^\s*health_uri /health$", caddyfile, re.M)
    assert re.search(r"^\s*lb_policy cookie ", caddyfile, re.M)


def test_dockerfile_installs_real_extras_and_runs_as_non_root() -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    section = pyproject.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    extras = set(re.findall(r"^([a-z][a-z0-9-]*) = \[", section, re.M))
    wanted = re.search(r"^ARG EXTRAS=(\S+)$", dockerfile, re.M)
    assert wanted is not None
    assert set(wanted.group(1).split(",")) <= extras
    assert {"server", "postgres", "tiktoken", "hf", "cli"} <= set(wanted.group(1).split(","))
    (user,) = re.findall(r"^USER (\S+)$", dockerfile, re.M)
    assert user.split(":")[0] not in ("0", "root")
    for line in re.findall(r"^COPY (.+)$", dockerfile, re.M):
        sources = [w for w in line.split() if not w.startswith("--")][:-1]
        assert sources and all((ROOT / s).exists() for s in sources), line
    cmd = re.search(r"^CMD (\[.*\])$", dockerfile, re.M)
    assert cmd is not None
    args = yaml.safe_load(cmd.group(1))
    assert "--api-key-file" in _serve_args(args) and "0.0.0.0" in args
    assert "exec chatfmt serve" in (DEPLOY / "entrypoint.sh").read_text(encoding="utf-8")


# ==== The guide ====


def test_guide_flags_exist() -> None:
    text = GUIDE.read_text(encoding="utf-8")
    known = set().union(*(_flags(p) for p in _parsers().values()))
    mentioned = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", text))
    assert "--store-max-age-days" in mentioned and "--api-key" in mentioned
    unknown = sorted(mentioned - known - set(OTHER_FLAGS))
    assert not unknown, f"docs/deploy.md names flags chatfmt does not have: {unknown}"
    # The vLLM recipe is the one the slow tier runs: each vLLM flag it names is passed there.
    tested = (ROOT / "tests/engines/vllm_real.py").read_text(encoding="utf-8")
    for flag, program in OTHER_FLAGS.items():
        if program == "vllm":
            assert flag in mentioned and f'"{flag}"' in tested, flag


def test_guide_metrics_exist() -> None:
    text = GUIDE.read_text(encoding="utf-8")
    source = METRICS.read_text(encoding="utf-8")
    defined = set(re.findall(r'"(chatfmt_[a-z_]+)"', source))
    labels = {"chatfmt_requests": {"route", "status"}, "chatfmt_responses_continued": {"prompt"}}
    assert all(name in defined for name in labels)
    named = set(re.findall(r"\bchatfmt_[a-z_]+", text))
    assert len(named) >= 10
    for name in named:
        base = re.sub(r"_(total|bucket|sum|count|created)$", "", name)
        assert base in defined, f"docs/deploy.md names {name}, which /metrics does not export"
    # Labels used in PromQL selectors exist on their metric.
    for name, selector in re.findall(r"\b(chatfmt_[a-z_]+)\{([^}]*)\}", text):
        base = re.sub(r"_(total|bucket|sum|count|created)$", "", name)
        for label in re.findall(r"([a-z_]+)\s*[=!]~?", selector):
            assert label in labels.get(base, set()) | {"le"}, (name, label)


def test_guide_links_exist() -> None:
    text = GUIDE.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if not target.startswith("http"):
            assert (GUIDE.parent / target).exists(), target
