"""`dagster dev` that stops on Ctrl-C and SIGTERM however it was started (`make ui` runs it).

A shell that starts a command in the background without job control (`make ui &`, a CI step, many
process supervisors) starts it with SIGINT ignored. Python then installs no KeyboardInterrupt
handler, and `dagster dev` gives SIGTERM the SIGINT disposition, so it ignored both and never shut
its webserver and daemon down. Restoring Python's handler first makes both stop it cleanly.
"""

import signal
import sys

signal.signal(signal.SIGINT, signal.default_int_handler)

from dagster._cli import main  # noqa: E402 - after the handler, as `dagster dev` copies it at start

if __name__ == "__main__":
    sys.argv[0] = "dagster"
    sys.exit(main())
