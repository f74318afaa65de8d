"""The code interpreter: model-written code runs in a Jupyter kernel, never in this process.

Importing this package loads no Jupyter machinery; ``jupyter_client`` is imported when the
first kernel starts (``pip install 'chatfmt[jupyter]'``).
"""

from .jupyter import JupyterInterpreter
from .pool import KernelPool
from .results import ExecutionResult, strip_ansi
from .sessions import InterpreterSessions

__all__ = [
    "ExecutionResult",
    "InterpreterSessions",
    "JupyterInterpreter",
    "KernelPool",
    "strip_ansi",
]
