#!/usr/bin/env python3
"""Health probe for the chatfmt container: ``chatfmt-probe ready`` or ``chatfmt-probe live``.

``ready``: GET /health answered 200, so the engine can serve (exit 0); anything else exits 1.
``live``: the server answered GET /health at all, 200 or 503 (exit 0). A 503 means the engine
is not ready, which restarting chatfmt would not fix; only a server that does not answer
(refused, timed out) is not alive. The port is $CHATFMT_PORT, 8000 by default.
"""

import os
import sys
import urllib.error
import urllib.request


def main() -> int:
    mode = sys.argv[1] if len(sys.argv) > 1 else "ready"
    if mode not in ("ready", "live"):
        print("usage: chatfmt-probe ready|live", file=sys.stderr)
        return 2
    url = f"http://127.0.0.1:{os.environ.get('CHATFMT_PORT', '8000')}/health"
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return 0 if resp.status == 200 else 1
    except urllib.error.HTTPError as exc:
        return 0 if mode == "live" and exc.code == 503 else 1
    except (OSError, ValueError):
        return 1


if __name__ == "__main__":
    sys.exit(main())
