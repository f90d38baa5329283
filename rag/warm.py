"""Warm start (opt-in: config key ``warm_start``, default false): one server process imports
torch, transformers, faiss and MLflow once, and every ``rag`` command of a local Snakemake run is
forked from it instead of importing them again.

A job's start-up is mostly imports (4-7 s on a 2-core machine: torch, transformers' BART and BERT,
MLflow and its SQL store); the default DAG starts some 70 processes that need them. With warm start the
``rag`` command a rule runs is a thin client: it connects to the server's Unix socket and hands
over its command line, environment, working directory, umask and its stdin/stdout/stderr file
descriptors (``SCM_RIGHTS``); the server forks a child that takes those descriptors as its own
0, 1 and 2 and runs :func:`rag.cli.main` on the command line, as a fresh process would. The
client relays SIGINT/SIGTERM/SIGHUP to the child, and exits with the child's exit status (128 +
the signal number when a signal ended it). When the client dies (snakemake killed it), the
server terminates its child. Outputs are identical to in-process runs: nothing but imports
happens in the server before it forks (torch's thread pools, RNGs and CUDA are untouched, so
each child sets its own threads as a fresh process does), and numpy's global RNG is reseeded in
the child as a new process would seed it.

What makes a fork safe, and what a forked job does not get from its own environment:

- The server forks only while it runs one thread (``/proc/self/task``): a thread's locks and
  state would be copied into the child half-way. Some libraries start threads when imported
  (OpenBLAS's pool with numpy, a jemalloc background thread with pyarrow under MLflow: four
  threads after the preload otherwise), so the server imports them with
  :data:`SINGLE_THREADED_ENV` in its own environment. When it runs more than one thread anyway
  it refuses every command, and the client says so in one line and runs the command itself.
- Thread pools are sized when a library is loaded, from the server's environment: each job
  sets torch's threads (and ``rag index`` FAISS's) from ``RAG_THREADS`` as in its own process;
  numpy's BLAS and FAISS's searches inside train/evaluate jobs keep one thread in a forked job
  whatever the rule's ``threads`` (the same as a job of the default ``threads: 1``; their
  results do not depend on it).
- What a library reads once at import (huggingface_hub's offline flag and cache folders,
  transformers' verbosity, ``PYTHONHASHSEED``, ``PYTHONPATH``, ...) is the server's: a command
  whose value of any :data:`IMPORT_TIME_ENV` variable differs from the server's is refused (in
  one line naming the variables) and runs in its own process. ``tempfile``'s folder is looked
  up again in each child (Snakemake gives each job its ``TMPDIR``).
- A job's resource record (``rag --record``, :mod:`rag.resources`) is measured in the child that
  did the work; what a thin client's process could measure (Snakemake's ``benchmark:``, which no
  rule uses) would be the client's.

The Snakefile starts the server in ``onstart`` (config key ``warm_start``; only for a local,
non-conda run: cluster jobs and conda environments run their own interpreter) and stops it in
``onsuccess``/``onerror``; it also exits by itself when its parent (snakemake) is gone and no
child runs. The client refuses a server of another interpreter or another ``rag`` package
(it then runs the command itself and says so on stderr), and a command under ``torchrun``
(``WORLD_SIZE`` set) always runs in its own process. Code edited while a DAG runs is picked up
by the next run, not by jobs of the running one (they fork from the imported code).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys
import time

from rag import REPRODUCIBLE_ENV

ENV = "RAG_WARM_SOCKET"
DIR_PREFIX = "ragrepro-warm-"  # the socket's folder in the temp folder: ragrepro-warm-<snakemake's pid>-<random>
READY = "serving on"  # the server's log line once its imports are done and it takes requests
ENTRY = "rag.cli:main"  # what a child runs on the client's arguments
# the server's own environment while it imports: thread pools of one, no allocator background thread
SINGLE_THREADED_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                       "JE_ARROW_MALLOC_CONF": "background_thread:false"}
# variables the interpreter or a preloaded library reads once, at start or import: names, and prefixes ending in _
# (MKL and OpenMP read rag.REPRODUCIBLE_ENV's variables when they load)
IMPORT_TIME_ENV = ("HF_", "HUGGINGFACE_", "TRANSFORMERS_", "TOKENIZERS_", "TORCH_", "PYTORCH_", "MLFLOW_",
                   "PYTHONPATH", "PYTHONHASHSEED", "PYTHONWARNINGS", "LD_PRELOAD", "LD_LIBRARY_PATH", *REPRODUCIBLE_ENV)
# what the rag commands import: the expensive part of every start-up
PRELOAD = (
    "numpy",
    "torch",
    "transformers",
    "transformers.models.bart.modeling_bart",
    "transformers.models.bert.modeling_bert",
    "transformers.models.auto.modeling_auto",
    "transformers.models.auto.tokenization_auto",
    "tokenizers",
    "faiss",
    "mlflow",
    "mlflow.tracking",
    "mlflow.store.tracking.sqlalchemy_store",
    "tqdm.auto",
    "rag.cli",
    "rag.stages.fine_tuning",
    "rag.stages.evaluation",
    "rag.stages.experiments",
    "rag.training",
    "rag.models.rag",
    "rag.models.generator",
    "rag.retrieval.encoders",
    "rag.tracking",
    "rag.metrics",
)
FORKED = False  # True in a child the server forked to run a command (rag.resources records it)
_HEADER = struct.Struct("!I")
RELAYED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def identity() -> dict:
    """What client and server must share: the interpreter and the rag package they run."""
    import rag

    return {"python": os.path.realpath(sys.executable), "rag": os.path.dirname(os.path.realpath(rag.__file__))}


def import_time_env(env) -> dict[str, str]:
    """The variables of ``env`` that :data:`IMPORT_TIME_ENV` names."""
    return {k: v for k, v in env.items()
            if any(k.startswith(n) if n.endswith("_") else k == n for n in IMPORT_TIME_ENV)}


def native_threads() -> int:
    """This process' threads: the kernel's count (Linux), else the Python threads."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        import threading

        return threading.active_count()


def _send(sock: socket.socket, message: dict, fds: list[int] | None = None) -> None:
    data = json.dumps(message).encode()
    payload = _HEADER.pack(len(data)) + data
    sent = socket.send_fds(sock, [payload], fds) if fds else 0  # the descriptors ride on the first bytes
    if sent < len(payload):  # nothing more to send: the server may have answered and closed already
        sock.sendall(payload[sent:])


def _recv_exact(sock: socket.socket, n: int, first: bytes = b"") -> bytes:
    data = first
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError("connection closed")
        data += chunk
    return data


def _recv(sock: socket.socket, with_fds: int = 0) -> tuple[dict, list[int]]:
    fds: list[int] = []
    if with_fds:
        first, fds, _, _ = socket.recv_fds(sock, 65536, with_fds)
        if not first:
            raise EOFError("connection closed")
    else:
        first = b""
    head = _recv_exact(sock, _HEADER.size, first[: _HEADER.size])
    (length,) = _HEADER.unpack(head)
    body = _recv_exact(sock, length, first[_HEADER.size :])
    return json.loads(body), fds


# --- client -------------------------------------------------------------------------------------


def run_remote(argv: list[str], path: str) -> int | None:
    """Run ``rag argv`` in a child of the warm server at ``path``; its exit status, or None when
    the server cannot take it (the reason is printed on stderr; the caller then runs it itself)."""
    if os.environ.get("WORLD_SIZE"):  # torchrun: the launcher watches and signals its own workers
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        _send(sock, {"argv0": sys.argv[0], "argv": list(argv), "env": dict(os.environ), "cwd": os.getcwd(),
                     "umask": _umask(), **identity()}, _stdio())
        reply, _ = _recv(sock)
    except (OSError, EOFError) as exc:
        print(f"rag: warm start server {path} not reachable ({exc}); running this command in its own process",
              file=sys.stderr)
        sock.close()
        return None
    if "refused" in reply:
        print(f"rag: warm start server {path} refused this command ({reply['refused']}); running it in its own process",
              file=sys.stderr)
        sock.close()
        return None
    pid = int(reply["pid"])

    def relay(signum, _frame):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for sig in RELAYED:
        signal.signal(sig, relay)
    try:  # a relayed signal does not interrupt the wait (PEP 475): the child's status ends it
        done, _ = _recv(sock)
        return int(done["exit"])
    except (OSError, EOFError) as exc:
        print(f"rag: warm start server {path} went away before the command ended ({exc})", file=sys.stderr)
        return 1
    finally:
        sock.close()


def _stdio() -> list[int]:
    """Descriptors 0, 1, 2 (one of /dev/null for any that is closed, as a child process would see)."""
    fds = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
            fds.append(fd)
        except OSError:
            fds.append(os.open(os.devnull, os.O_RDWR))
    return fds


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# --- server -------------------------------------------------------------------------------------


def _log(message: str) -> None:
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} warm start: {message}", file=sys.stderr, flush=True)


def preload(modules=PRELOAD) -> None:
    import importlib

    start = time.time()
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # a job that needs it imports it itself and fails there, with its own error
            _log(f"could not preload {name}: {type(exc).__name__}: {exc}")
    _log(f"preloaded {len(modules)} modules in {time.time() - start:.1f}s")


def _entry(spec: str):
    """``module:function``, imported."""
    import importlib

    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def _die_with_parent(server: int) -> None:
    """Linux: SIGTERM this process when the server (pid ``server``) dies (PR_SET_PDEATHSIG), so a
    server killed outright leaves no job running whose client has already reported it failed."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != server:  # it died before the request above was in place
        os._exit(128 + signal.SIGTERM)


def _child(request: dict, fds: list[int], inherited: list, entry: str) -> None:
    """In the forked child: close the server's sockets (``inherited``), become the requested
    command, run ``entry`` (module:function, :func:`rag.cli.main`) on its arguments, exit as the
    interpreter would (non-daemon threads joined, atexit handlers run, stdio flushed). Never
    returns."""
    global FORKED
    code = 1
    FORKED = True
    try:
        from rag import warm as imported  # the server may run as __main__ (python -m rag.warm): mark the module commands read

        imported.FORKED = True
        for obj in inherited:
            obj.close()
        _die_with_parent(request["server_pid"])
        for sig in RELAYED + (signal.SIGCHLD,):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        os.chdir(request["cwd"])
        os.umask(int(request["umask"]))
        os.environ.clear()
        os.environ.update(request["env"])
        import tempfile

        tempfile.tempdir = None  # looked up again from this job's TMPDIR
        sys.argv = [request["argv0"], *request["argv"]]
        if "numpy" in sys.modules:  # a new process seeds numpy's global RNG from the OS; Python's random reseeds at fork
            sys.modules["numpy"].random.seed()
        main = _entry(entry)
        try:
            result = main(request["argv"])
        except SystemExit as exc:  # as the interpreter reads sys.exit's argument
            result = exc.code
            if result is not None and not isinstance(result, int):
                print(result, file=sys.stderr)
                result = 1
        code = 0 if result is None else int(result)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            import atexit
            import threading

            threading._shutdown()
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code & 0xFF)


def serve(path: str, *, modules=PRELOAD, parent: int | None = None, idle_exit: float = 3600.0,
          entry: str = ENTRY) -> None:
    """Listen on ``path``, preload ``modules``, then fork one child per request, which runs
    ``entry`` on the request's arguments, until SIGTERM, or until ``parent`` (a pid) is gone and
    no child runs, or ``idle_exit`` seconds pass with no child and no request."""
    import selectors

    if os.path.exists(path):
        os.unlink(path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    os.chmod(path, 0o600)
    server.listen(128)  # clients that come during the preload wait in the backlog
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    signal.signal(signal.SIGINT, lambda *_: stopping.append(True))
    read_at_import = import_time_env(os.environ)
    os.environ.update(SINGLE_THREADED_ENV)  # before the imports: libraries size their thread pools then
    preload(modules)
    threads = native_threads()
    if threads > 1:
        _log(f"{threads} threads after the preload: no command will be forked, each runs in its own process")
    mine = identity()
    sel = selectors.DefaultSelector()
    sel.register(server, selectors.EVENT_READ)
    children: dict[int, socket.socket] = {}  # pid -> the client's connection
    last = time.time()
    _log(f"{READY} {path}")
    try:
        while not stopping:
            for key, _ in sel.select(timeout=0.05):
                if key.fileobj is server:
                    conn, _ = server.accept()
                    _accept(conn, mine, read_at_import, sel, children, [server, sel], entry)
                else:  # a client's connection became readable: it closed (died) while its child runs
                    pid = key.data
                    sel.unregister(key.fileobj)
                    _log(f"client of pid {pid} went away: terminating it")
                    _kill(pid)
                last = time.time()
            _reap(sel, children)
            if children:
                last = time.time()
            elif parent is not None and os.getppid() != parent:
                _log("snakemake is gone: exiting")
                break
            elif time.time() - last > idle_exit:
                _log(f"idle for {idle_exit:.0f}s: exiting")
                break
    finally:
        for pid in list(children):
            _kill(pid)
        deadline = time.time() + 10
        while children and time.time() < deadline:
            _reap(sel, children)
            time.sleep(0.05)
        server.close()
        if os.path.exists(path):
            os.unlink(path)
        folder = os.path.dirname(os.path.abspath(path))
        if os.path.basename(folder).startswith(DIR_PREFIX):  # the folder WarmStart made for it: leave nothing
            try:
                os.rmdir(folder)
            except OSError:
                pass
        _log("stopped")


def _refusal(request: dict, fds: list[int], mine: dict, read_at_import: dict) -> str | None:
    """Why the server must not fork for ``request``; None when it may."""
    theirs = {key: request.get(key) for key in mine}
    if theirs != mine:
        return "; ".join(f"{key}: server {mine[key]}, client {theirs[key]}" for key in mine if theirs[key] != mine[key])
    if len(fds) != 3:
        return f"{len(fds)} file descriptors instead of 3"
    threads = native_threads()
    if threads > 1:
        return f"the server runs {threads} threads, and a fork copies a threaded process' locks half-way"
    job = import_time_env(request.get("env") or {})
    differ = sorted(k for k in set(job) | set(read_at_import) if job.get(k) != read_at_import.get(k))
    if differ:
        return (f"{', '.join(differ)} {'differs' if len(differ) == 1 else 'differ'} from the server's, read when it "
                "imported its libraries")
    return None


def _accept(conn: socket.socket, mine: dict, read_at_import: dict, sel, children: dict, own: list, entry: str) -> None:
    import selectors

    conn.settimeout(10)  # a client sends its request as soon as it connects: a silent one must not block the others
    try:
        request, fds = _recv(conn, with_fds=3)
    except (OSError, EOFError, ValueError) as exc:
        _log(f"bad request: {exc}")
        conn.close()
        return
    conn.settimeout(None)
    try:
        why = _refusal(request, fds, mine, read_at_import)
        if why is not None:
            _log(f"refused rag {' '.join(request.get('argv', [])[:1])}: {why}")
            try:
                _send(conn, {"refused": why})
            except OSError:  # the client is gone already
                pass
            conn.close()
            return
        sys.stdout.flush()
        sys.stderr.flush()
        request["server_pid"] = os.getpid()
        pid = os.fork()
        if pid == 0:
            _child(request, fds, [conn, *own, *children.values()], entry)
        try:
            _send(conn, {"pid": pid})
        except OSError:  # the client is already gone: the selector sees its connection closed and ends the child
            pass
        children[pid] = conn
        sel.register(conn, selectors.EVENT_READ, pid)
        _log(f"pid {pid}: rag {' '.join(request['argv'][:1])}")
    finally:
        for fd in fds:
            os.close(fd)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass


def _reap(sel, children: dict) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is None:
            continue
        code = os.waitstatus_to_exitcode(status)
        code = 128 - code if code < 0 else code  # killed by signal n: 128 + n, as a shell reports it
        try:
            sel.unregister(conn)
        except (KeyError, ValueError):
            pass
        try:
            _send(conn, {"exit": code})
        except OSError:
            pass
        conn.close()


# --- the Snakefile's side -----------------------------------------------------------------------


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_folders(tmp: str | None = None, min_age: float = 60.0) -> list[str]:
    """Remove this user's socket folders (``ragrepro-warm-<pid>-*`` in the temp folder) whose
    Snakemake process (``<pid>``) is gone; the server removes its own when it stops, so these are
    what a server killed outright left. A folder of the older name (no pid) is removed when it is
    empty and ``min_age`` seconds old (not one a server is about to bind in). Returns their paths."""
    import re
    import shutil
    import tempfile

    tmp = tmp or tempfile.gettempdir()
    removed = []
    try:
        names = os.listdir(tmp)
    except OSError:
        return removed
    for name in names:
        if not name.startswith(DIR_PREFIX):
            continue
        path = os.path.join(tmp, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not os.path.isdir(path) or os.path.islink(path) or st.st_uid != os.getuid():
            continue
        m = re.match(rf"{re.escape(DIR_PREFIX)}(\d+)-", name)
        if m:
            stale = not _pid_alive(int(m.group(1)))
        else:
            stale = not os.listdir(path) and time.time() - st.st_mtime > min_age
        if stale:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed



class WarmStart:
    """The server of one Snakemake run: :meth:`start` in ``onstart``, :meth:`stop` in
    ``onsuccess``/``onerror``. ``reason`` says why it is off, when it is."""

    def __init__(self, enabled: bool, log_path: str, *, local: bool = True, deployment: list[str] = (),
                 preload: tuple[str, ...] | None = None):
        self.log_path = log_path
        self.preload = preload  # None: PRELOAD
        self.reason = ("config key 'warm_start' is false" if not enabled else
                       "jobs run on a cluster executor" if not local else
                       f"jobs run in {'/'.join(deployment)} environments" if deployment else None)
        self.proc = None
        self.dir = None
        self._log_start = 0  # where this server's lines begin in the (appended) log

    def start(self) -> None:
        if self.reason is not None or self.proc is not None:
            return
        import subprocess
        import tempfile

        remove_stale_folders()
        self.dir = tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{os.getpid()}-")
        path = os.path.join(self.dir, "sock")
        os.makedirs(os.path.dirname(os.path.abspath(self.log_path)), exist_ok=True)
        with open(self.log_path, "a") as log:
            self._log_start = log.tell()
            extra = [] if self.preload is None else ["--preload", *self.preload]
            self.proc = subprocess.Popen([sys.executable, "-m", "rag.warm", "serve", "--socket", path,
                                          "--parent", str(os.getpid()), *extra],
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        os.environ[ENV] = path  # the jobs snakemake starts inherit it

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Block until the started server takes requests (jobs need not: theirs wait in the
        socket's backlog); RuntimeError when it exits first or ``timeout`` seconds pass."""
        deadline = time.time() + timeout
        while True:
            with open(self.log_path) as log:
                log.seek(self._log_start)
                text = log.read()
            if READY in text:
                return
            if self.proc.poll() is not None or time.time() > deadline:
                state = "exited" if self.proc.poll() is not None else f"not ready after {timeout:.0f}s"
                raise RuntimeError(f"the warm start server {state}: {text[-2000:]}")
            time.sleep(0.05)

    def stop(self) -> None:
        os.environ.pop(ENV, None)
        if self.proc is None:
            return
        import shutil
        import subprocess

        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)


def _main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m rag.warm", description="the warm start server (see rag/warm.py)")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--socket", required=True)
    s.add_argument("--parent", type=int, help="exit when this process is gone and no child runs")
    s.add_argument("--idle-exit", type=float, default=3600.0)
    s.add_argument("--preload", nargs="*", metavar="MODULE", help="import these up front (default: rag.warm.PRELOAD)")
    s.add_argument("--entry", default=ENTRY, help="module:function each child runs on the client's arguments")
    args = parser.parse_args(argv)
    serve(args.socket, modules=PRELOAD if args.preload is None else tuple(args.preload), parent=args.parent,
          idle_exit=args.idle_exit, entry=args.entry)
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
