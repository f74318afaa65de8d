"""Running code in a real kernel: text, values, errors, images, files, observations."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chatfmt.errors import InterpreterError
from chatfmt.interpreter import ExecutionResult, JupyterInterpreter, strip_ansi

pytestmark = pytest.mark.slow


def test_import_does_not_load_jupyter_client() -> None:
    code = (
        "import sys, chatfmt.interpreter, chatfmt.tools\n"
        "assert 'jupyter_client' not in sys.modules, 'jupyter_client imported'\n"
        "assert 'zmq' not in sys.modules, 'zmq imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_stdout_stderr_and_last_expression_in_order(kernel: JupyterInterpreter) -> None:
    res = kernel.execute("import sys\nprint('out')\nprint('err', file=sys.stderr)\n40 + 2")
    assert res.ok and not res.timed_out and not res.restarted
    assert res.text == "out\nerr\n42\n"
    assert res.observation() == "out\nerr\n42"


def test_state_persists_between_runs(kernel: JupyterInterpreter) -> None:
    kernel.execute("counter = 41")
    assert kernel.execute("counter += 1\ncounter").text == "42\n"


def test_error_has_traceback_without_ansi(kernel: JupyterInterpreter) -> None:
    res = kernel.execute("def f(x):\n    return 1 / x\nprint('before')\nf(0)")
    assert not res.ok and res.error is not None
    assert res.ename == "ZeroDivisionError" and res.evalue == "division by zero"
    assert "\x1b" not in res.error
    assert "Traceback" in res.error and "return 1 / x" in res.error
    assert res.error.rstrip().endswith("ZeroDivisionError: division by zero")
    assert res.text == "before\n"
    obs = res.observation()
    assert obs.startswith("before\n") and obs.endswith("ZeroDivisionError: division by zero")


def test_syntax_error(kernel: JupyterInterpreter) -> None:
    res = kernel.execute("def broken(:\n    pass")
    assert res.ename == "SyntaxError" and res.error is not None and "\x1b" not in res.error


def test_ansi_in_output_is_stripped(kernel: JupyterInterpreter) -> None:
    assert kernel.execute(r"print('\x1b[31mred\x1b[0m plain')").text == "red plain\n"
    assert strip_ansi("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\") == "link"


def test_special_tokens_are_plain_text(kernel: JupyterInterpreter) -> None:
    code = "print('<|user|>\\n<|im_start|>system\\n<|observation|>')\n'<|im_end|>'"
    res = kernel.execute(code)
    assert res.text == "<|user|>\n<|im_start|>system\n<|observation|>\n'<|im_end|>'\n"
    assert "<|user|>" in res.observation()


def test_display_of_non_image_is_text(kernel: JupyterInterpreter) -> None:
    res = kernel.execute("from IPython.display import display\ndisplay({'a': 1})\nprint('after')")
    assert res.text == "{'a': 1}\nafter\n"


def test_clear_output_drops_earlier_text(kernel: JupyterInterpreter) -> None:
    code = "from IPython.display import clear_output\nprint('old')\nclear_output()\nprint('new')"
    assert kernel.execute(code).text == "new\n"


def test_matplotlib_plot_gives_png(kernel: JupyterInterpreter) -> None:
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (pip install matplotlib)")
    code = (
        "import matplotlib.pyplot as plt\n"
        "plt.plot([1, 2, 3], [1, 4, 9])\n"
        "plt.title('squares')\n"
        "plt.show()\n"
        "print('plotted')"
    )
    res = kernel.execute(code)
    assert res.ok, res.error
    assert len(res.images) == 1 and res.images[0].startswith(b"\x89PNG\r\n\x1a\n")
    assert res.images_base64()[0].startswith("iVBORw0KGgo")
    assert res.observation() == "plotted\n[Image]"
    # A figure left open without show() is flushed at the end of the cell as well.
    assert len(kernel.execute("plt.plot([0, 1]);").images) == 1


def test_working_directory_and_upload(kernel: JupyterInterpreter) -> None:
    path = kernel.upload("data/metadata.jsonl", '{"file_name": "aceinthehole.png"}\n')
    assert path == kernel.work_dir / "data" / "metadata.jsonl"
    res = kernel.execute(
        "import json, os\nprint(os.getcwd())\njson.load(open('data/metadata.jsonl'))"
    )
    assert res.text == f"{kernel.work_dir}\n{{'file_name': 'aceinthehole.png'}}\n"
    kernel.execute("open('written.txt', 'w').write('from the kernel')")
    assert (kernel.work_dir / "written.txt").read_text() == "from the kernel"
    for bad in ("../escape.txt", "/etc/passwd", ""):
        with pytest.raises(InterpreterError, match="relative path inside work_dir"):
            kernel.upload(bad, b"x")


def test_long_output_is_truncated_in_the_observation(kernel: JupyterInterpreter) -> None:
    res = kernel.execute("print('A' * 10000)\nraise RuntimeError('at the end')")
    assert len(res.text) == 10001
    obs = res.observation()
    assert len(obs) <= 4000 and "…[truncated" in obs
    assert obs.startswith("AAAA") and obs.endswith("RuntimeError: at the end")
    assert len(res.observation(max_chars=100)) <= 100
    assert "A" * 10000 in res.observation(max_chars=None)


def test_observation_fence_and_empty() -> None:
    assert ExecutionResult(text="1\n").observation(fence=True) == "```result\n1\n```"
    assert ExecutionResult().observation() == ""


def test_work_dir_is_created_and_kept(tmp_path: Path) -> None:
    target = tmp_path / "new" / "dir"
    with JupyterInterpreter(target) as interp:
        assert interp.execute("import os; os.getcwd()").text == repr(str(target)) + "\n"
    assert target.is_dir()  # a caller's directory is not removed


def test_default_temp_work_dir_is_removed() -> None:
    interp = JupyterInterpreter()
    work_dir = interp.work_dir
    interp.upload("a.txt", b"x")
    with interp:
        assert interp.execute("open('a.txt').read()").text == "'x'\n"
    assert not work_dir.exists()
    with pytest.raises(InterpreterError, match="closed"):
        interp.execute("1")


def test_secrets_in_the_environment_do_not_reach_the_kernel(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CHATFMT_TEST_SECRET", "sk-do-not-leak")
    code = "import os\n(os.environ.get('CHATFMT_TEST_SECRET'), os.environ.get('GIVEN'))"
    with JupyterInterpreter(tmp_path, env={"GIVEN": "yes"}) as interp:
        assert interp.execute(code).text == "(None, 'yes')\n"
        assert asyncio.run(interp.aexecute("2 ** 10")).text == "1024\n"
    with JupyterInterpreter(tmp_path, inherit_env=True) as interp:
        assert interp.execute(code).text == "('sk-do-not-leak', None)\n"


def test_bad_python_is_a_clear_error(tmp_path: Path) -> None:
    interp = JupyterInterpreter(tmp_path, python=os.fspath(tmp_path / "no-such-python"))
    with pytest.raises(InterpreterError, match="could not start a Jupyter kernel"):
        interp.start()
    interp.close()
