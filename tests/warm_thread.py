"""A module that starts a thread when imported, as some libraries do: tests/test_warm.py preloads it
in a warm start server, which must then refuse to fork."""

import threading
import time

threading.Thread(target=time.sleep, args=(600,), name="started-at-import", daemon=True).start()
