"""attnscope-server on loopback for the client's tests, and the paths they read.

Environment (CTest sets the server and the default shared folder from the build; by hand they
default to the checkout's layout): ATTNSCOPE_SERVER, the server binary (default:
build/server/attnscope-server of this checkout); ATTNSCOPE_SHARED_DIR, the shared fixtures, for
stories260K (default: ATTNSCOPE_DEFAULT_SHARED_DIR, else the checkout's ../shared).
"""
import os
import re
import subprocess
import tempfile
import time

SOURCE_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SERVER = os.environ.get("ATTNSCOPE_SERVER",
                        os.path.join(SOURCE_DIR, "build", "server", "attnscope-server"))
SHARED_DIR = (os.environ.get("ATTNSCOPE_SHARED_DIR")
              or os.environ.get("ATTNSCOPE_DEFAULT_SHARED_DIR")
              or os.path.join(SOURCE_DIR, "..", "shared"))
DEFAULT_MODEL = os.path.join(SOURCE_DIR, "checkpoints", "default")
TRANSLATION_MODEL = os.path.join(SOURCE_DIR, "checkpoints", "translation")
STORIES_MODEL = os.path.join(SHARED_DIR, "models", "stories260K")

_LISTENING = re.compile(r"attnscope-server listening on (\S+)")


class Server:
    """attnscope-server serving `models` ({name: folder}) on 127.0.0.1, port 0, without HTTP or
    metrics, with `flags` added. Started by the constructor; stop() ends it."""

    def __init__(self, models, flags=(), startup_seconds=120):
        self._log = tempfile.TemporaryFile(mode="w+")
        self._out = tempfile.TemporaryFile(mode="w+")
        argv = [SERVER, "--listen=127.0.0.1:0", "--http_listen=", "--metrics_port=0",
                *(f"--model={name}={folder}" for name, folder in models.items()), *flags]
        self.process = subprocess.Popen(argv, stdout=self._out, stderr=self._log,
                                        stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + startup_seconds
        while True:
            self._out.seek(0)
            match = _LISTENING.search(self._out.read())
            if match:
                self.address = match.group(1)
                return
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{' '.join(argv)}: expected 'attnscope-server listening on' "
                                   f"within {startup_seconds} s, got exit status "
                                   f"{self.process.returncode}\n{self.log()}")
            time.sleep(0.05)

    def log(self):
        """The server's stderr so far."""
        self._log.seek(0)
        return self._log.read()

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._out.close()
        self._log.close()
