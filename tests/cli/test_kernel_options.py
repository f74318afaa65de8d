"""The code interpreter's options of ``chatfmt chat`` / ``serve``: the sandbox they ask for,
their errors, and ``--file``."""

from __future__ import annotations

from pathlib import Path

import pytest

from chatfmt.cli.kernel import give_files, kernel_kwargs
from chatfmt.cli.main import build_parser
from chatfmt.errors import InterpreterError
from chatfmt.interpreter.sandbox import bwrap_problem


def parse(*argv: str):  # type: ignore[no-untyped-def]
    return build_parser().parse_args(["chat", "--model", "m.gguf", *argv])


def test_defaults_are_a_sandbox_with_limits() -> None:
    kwargs = kernel_kwargs(parse())
    box = kwargs["sandbox"]
    assert box.isolate == (bwrap_problem() is None)
    assert box.limits.memory_mb == 2048 and not box.network
    assert kwargs["python"] is None and kwargs["timeout"] == 60.0


def test_off_network_memory_and_python() -> None:
    kwargs = kernel_kwargs(
        parse("--sandbox", "off", "--kernel-memory-mb", "512", "--kernel-python", "python3")
    )
    assert (
        not kwargs["sandbox"].isolate and "sandbox OFF (turned off)" in kwargs["sandbox"].describe()
    )
    assert kwargs["sandbox"].limits.memory_mb == 512
    assert Path(kwargs["python"]).name.startswith("python3")


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--kernel-memory-mb", "0"], "--kernel-memory-mb must be positive"),
        (["--kernel-timeout", "-1"], "--kernel-timeout must be positive"),
        (["--kernel-python", "/no/such/python"], "--kernel-python '/no/such/python' is not"),
    ],
)
def test_bad_options_name_the_flag(argv: list[str], needle: str) -> None:
    with pytest.raises(InterpreterError, match=needle):
        kernel_kwargs(parse(*argv))


@pytest.mark.slow  # a real kernel
def test_file_goes_into_the_working_directory_and_the_system_prompt(tmp_path: Path) -> None:
    pytest.importorskip("ipykernel", reason="needs the jupyter extra")
    pytest.importorskip("pandas", reason="needs the data extra (chatfmt[data])")
    from chatfmt.interpreter import JupyterInterpreter

    data = tmp_path / "sales.csv"
    data.write_text("month,total\njan,3\nfeb,5\n")
    with JupyterInterpreter(tmp_path / "work") as k:
        system = give_files(k, [str(data)], "Be brief.")
        assert system is not None and system.startswith("Be brief.\n\nUploaded file: ")
        assert system.endswith(" (read it with Python, e.g. pandas.read_csv)")
        path = system.split("Uploaded file: ", 1)[1].split(" (", 1)[0]
        assert (
            k.execute(f"import pandas as pd\nint(pd.read_csv({path!r}).total.sum())").text == "8\n"
        )
        with pytest.raises(InterpreterError, match=r"--file .*no-such"):
            give_files(k, [str(tmp_path / "no-such.csv")], None)
        assert give_files(k, [], None) is None
